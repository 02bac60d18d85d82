"""Plans: a limit's numbers chosen per consumer at request time, from a plan name the
request carries or from the consumer's API key looked up in a file of SHA-256 digests
(reloaded on its own when it changes; the unknown refused 401/403 on request), exact on
the memory store, Redis, Sentinel and a 3-master Cluster; the plan in force in
RateLimit-Policy, the 429's problem details, /limits, the access log and the metrics.
Over HTTP/1.1, HTTP/2 on TLS and cleartext HTTP/2 (protocols.py)."""
import hashlib
import json
import random
import threading

import pytest

from conftest import Reader, Thread, get, join_all, read_response, wait_for
from protocols import over_stores_and_protocols
from stores import KINDS, store_gateway
from test_admin import admin_get, with_admin
from test_metrics import scrape, value

OVER_EVERY_PROTOCOL = True


def route(limits, response=""):
    return f"""  - name: api
    match: {{ path_prefix: /api }}
    upstream: api
{response}    limits:
{limits}
  - name: rest
    match: {{ path_prefix: / }}
    upstream: api
"""


BY_HEADER = """      - name: per-key
        algorithm: fixed_window
        key: header:X-Api-Key
        limit: 3
        window: 1h
        plans:
          from: header:X-Plan
          gold: { limit: 5 }
          partner: unlimited
"""

RATE_PLANS = """      - name: per-key
        algorithm: gcra
        key: header:X-Api-Key
        rate: 1/h
        burst: 2
        plans:
          from: header:X-Plan
          gold: { rate: 1/h, burst: 6 }
"""


def statuses(g, key, n, plan=None, path="/api"):
    extra = f"X-Api-Key: {key}\r\n" + (f"X-Plan: {plan}\r\n" if plan else "")
    return [g.request(get(path, extra=extra)).status for _ in range(n)]


@over_stores_and_protocols(KINDS)
def test_two_plans_on_one_route_admit_exactly_their_numbers(kind, request, gateway_factory):
    g = store_gateway(kind, request, gateway_factory, routes=route(BY_HEADER), workers=2)
    assert statuses(g, "a", 7, "gold") == [200] * 5 + [429] * 2
    assert statuses(g, "b", 5) == [200] * 3 + [429] * 2
    assert statuses(g, "c", 4, "platinum") == [200] * 3 + [429]  # an unknown plan: the default
    assert statuses(g, "d", 20, "partner") == [200] * 20  # unlimited: never counted
    r = g.request(get("/api", extra="X-Api-Key: a\r\nX-Plan: gold\r\n"))
    assert r.status == 429
    assert r.header("ratelimit-policy") == '"per-key";q=5;w=3600;plan="gold"'
    assert r.header("content-type") == "application/problem+json"
    body = json.loads(r.body)
    assert body["type"] == "https://iana.org/assignments/http-problem-types#quota-exceeded"
    assert body["violated-policies"] == ["per-key"] and body["limit"] == "per-key" and body["plan"] == "gold"
    assert body["status"] == 429 and 1 <= body["retry_after"] <= 3600 and body["retry_after"] == int(r.header("retry-after"))
    r = g.request(get("/api", extra="X-Api-Key: d\r\nX-Plan: partner\r\n"))
    assert r.status == 200 and r.header("ratelimit-policy") is None
    # A consumer moved to another plan keeps its counter: b has used 3 of gold's 5.
    assert statuses(g, "b", 3, "gold") == [200, 200, 429]


@over_stores_and_protocols(["memory", "redis", "cluster"])
def test_rate_plans_admit_their_bursts(kind, request, gateway_factory):
    g = store_gateway(kind, request, gateway_factory, routes=route(RATE_PLANS), workers=2)
    assert statuses(g, "a", 8, "gold") == [200] * 6 + [429] * 2
    assert statuses(g, "b", 4) == [200] * 2 + [429] * 2


def consumers_file(path, pairs):
    path.write_text("# sha256(key) plan\n" + "".join(f"{hashlib.sha256(k.encode()).hexdigest()} {p}\n"
                                                        for k, p in pairs))


def by_consumers(path, unknown="reject"):
    return f"""      - name: per-key
        algorithm: fixed_window
        key: header:X-Api-Key
        limit: 3
        window: 1h
        plans:
          consumers: "{path}"
          unknown: {unknown}
          gold: {{ limit: 5 }}
          partner: unlimited
"""


@over_stores_and_protocols(["memory", "redis"])
def test_a_consumer_file_chooses_the_plan_and_refuses_the_unknown(kind, request, gateway_factory, tmp_path):
    f = tmp_path / "consumers.txt"
    consumers_file(f, [("key-gold", "gold"), ("key-free", "default"), ("key-partner", "partner")])
    g = store_gateway(kind, request, gateway_factory, routes=route(by_consumers(f)))
    assert statuses(g, "key-gold", 6) == [200] * 5 + [429]
    assert statuses(g, "key-free", 4) == [200] * 3 + [429]
    assert statuses(g, "key-partner", 10) == [200] * 10
    r = g.request(get("/api", extra="X-Api-Key: key-stranger\r\n"))
    assert r.status == 403 and json.loads(r.body)["status"] == 403, r.body
    r = g.request(get("/api"))
    assert r.status == 401 and r.header("www-authenticate"), r.headers
    assert g.request(get("/elsewhere")).status == 200  # other routes are not gated
    # The file is read again when it changes: the stranger becomes gold, free partner.
    consumers_file(f, [("key-gold", "gold"), ("key-free", "partner"), ("key-stranger", "gold")])
    wait_for("the new consumers", lambda: g.request(get("/api", extra="X-Api-Key: key-stranger\r\n")).status == 200, 15)
    assert statuses(g, "key-free", 5) == [200] * 5
    # A bad file keeps the old one, said in the log.
    f.write_text("not a digest gold\n")
    wait_for("the bad file refused", lambda: "want a key's SHA-256" in g.log_text(), 15)
    assert statuses(g, "key-free", 2) == [200] * 2
    assert g.request(get("/api", extra="X-Api-Key: key-stranger\r\n")).status == 200


@over_stores_and_protocols(["memory", "redis"])
def test_guessing_keys_counts_against_the_routes_other_limits(kind, request, gateway_factory, tmp_path):
    """A request its plans refuse (401/403) is still counted by the route's other limits:
    guessing API keys from one address meets that address' limit, then gets 429s."""
    f = tmp_path / "consumers.txt"
    consumers_file(f, [("key-gold", "gold")])
    per_ip = """      - name: per-ip
        algorithm: fixed_window
        key: ip
        limit: 4
        window: 1h
"""
    g = store_gateway(kind, request, gateway_factory, routes=route(per_ip + by_consumers(f)))
    got = [g.request(get("/api", extra=f"X-Api-Key: guess-{i}\r\n")).status for i in range(6)]
    assert got == [403] * 4 + [429] * 2, got
    # A known key from that address meets the same limit.
    assert statuses(g, "key-gold", 1) == [429]


def test_the_plan_is_visible_in_limits_the_access_log_and_the_metrics(gateway_factory, tmp_path):
    g = with_admin(lambda extra: gateway_factory(routes=route(BY_HEADER), extra=extra, access_log="file",
                                                 log_format="json"))
    assert statuses(g, "a", 6, "gold") == [200] * 5 + [429]
    assert statuses(g, "b", 1) == [200]
    r = admin_get(g, "/limits?route=api&header.X-Api-Key=a&header.X-Plan=gold")
    assert r.status == 200, r.body
    limit = json.loads(r.body)["limits"][0]
    assert limit["plan"] == "gold" and limit["quota"] == 5, limit
    r = admin_get(g, "/limits?route=api&header.X-Api-Key=a&header.X-Plan=partner")
    limit = json.loads(r.body)["limits"][0]
    assert limit["plan"] == "partner" and limit["unlimited"] is True, limit
    series, _ = scrape(g)
    assert value(series, "floodgate_ratelimit_decisions_total", route="api", limit="per-key", plan="gold",
                 outcome="allowed") == 5
    assert value(series, "floodgate_ratelimit_decisions_total", route="api", limit="per-key", plan="gold",
                 outcome="denied") == 1
    assert value(series, "floodgate_ratelimit_decisions_total", route="api", limit="per-key", plan="default",
                 outcome="allowed") == 1
    g.stop()
    lines = [json.loads(x) for x in g.access_log.read_text().splitlines()]
    assert [x["plan"] for x in lines if x["target"] == "/api"][:6] == ["gold"] * 6


def test_check_reads_the_consumer_file(tmp_path):
    import subprocess

    from conftest import BIN
    f = tmp_path / "consumers.txt"
    consumers_file(f, [("k", "platinum")])
    cfg = tmp_path / "floodgate.yaml"
    cfg.write_text('upstreams:\n  api:\n    address: "127.0.0.1:9000"\nroutes:\n' + route(by_consumers(f)))
    r = subprocess.run([BIN, "--check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 1 and f"{f}:2: plan 'platinum' is not a plan of limit per-key (route api)" in r.stderr, r.stderr
    consumers_file(f, [("k", "gold")])
    r = subprocess.run([BIN, "--check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_consumer_file_reloaded_under_load_loses_no_request(gateway_factory, tmp_path):
    # 100,000 consumers; four clients keep asking while the file is rewritten and read
    # again: every request is answered, and answered 200 (all partner: unlimited).
    f = tmp_path / "consumers.txt"
    consumers_file(f, [(f"k{i}", "partner") for i in range(100_000)])
    g = store_gateway("memory", None, gateway_factory, routes=route(by_consumers(f)), workers=2)
    stop, statuses = threading.Event(), []

    def client(seed):
        rnd = random.Random(seed)
        with g.connect(timeout=10) as s:
            rd = Reader(s)
            while not stop.is_set():
                s.sendall(get("/api", extra=f"X-Api-Key: k{rnd.randrange(100_000)}\r\n"))
                statuses.append(read_response(s, reader=rd).status)

    threads = [Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    wait_for("requests under way", lambda: len(statuses) > 200, 10)
    consumers_file(f, [(f"k{i}", "partner") for i in range(100_000)] + [("k-new", "gold")])
    wait_for("the file read again", lambda: g.log_text().count("consumers.txt: 100001 consumer(s)") == 1, 20)
    before = len(statuses)
    wait_for("requests after the reload", lambda: len(statuses) > before + 200, 10)
    stop.set()
    join_all(threads, 10)
    assert set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}
    assert g.request(get("/api", extra="X-Api-Key: k-new\r\n")).status == 200
