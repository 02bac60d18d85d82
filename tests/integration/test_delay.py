"""on_exceed: delay (gcra, token_bucket): a request over the limit that would be admitted
within max_delay waits for its turn, then goes upstream (nginx's burst/delay); beyond it,
429. The wait never exceeds max_delay, the waiting requests are bounded per worker
(http.max_delayed; per key by the limit itself: max_delay x rate), a client that goes
away while it waits is never forwarded, and every delayed request is logged with its
wait and counted (outcome delayed). On the memory store, Redis, Sentinel and a Cluster.

The requests of a test come together (threads released at once) against a limit of one
every 500 ms: what each gets does not depend on a few ms of scheduling. Over HTTP/1.1,
HTTP/2 on TLS and cleartext HTTP/2 (protocols.py): a stream waits its turn as a request
does, and a client that resets it or closes its connection is gone as one that closes."""
import json
import threading
import time

import pytest

from conftest import SANITIZED, Thread, get, join_all, read_response, record, wait_for
from protocols import over_stores_and_protocols
from stores import KINDS, store_gateway
from test_admin import admin_get, with_admin
from test_metrics import decisions, scrape, value

OVER_EVERY_PROTOCOL = True
# Connections wait at a barrier before their requests go together: on a busy machine (an
# HTTP/2 client's TLS handshake among them) longer than the tests' default header_timeout.
PATIENT = {"header_timeout": "30s", "idle_timeout": "30s"}


def patient(**more):
    return dict(PATIENT, **more)


def route(algorithm="gcra", max_delay="2s"):
    return f"""  - name: api
    match: {{ path_prefix: / }}
    upstream: api
    limits:
      - name: paced
        algorithm: {algorithm}
        key: header:X-Client
        rate: 2/s
        burst: 1
        on_exceed: delay
        max_delay: {max_delay}
"""


def together(g, n, client="c", took=None):
    """n requests of one client on n connections, sent at once; their statuses (and in
    `took`, a list, how long each took from its send to its answer, in ms)."""
    ready, go, out, times = threading.Barrier(n), threading.Event(), [None] * n, [None] * n

    def one(i):
        with g.connect(15) as s:
            ready.wait(10)
            go.wait(10)
            t = time.monotonic()
            s.sendall(get("/echo", extra=f"X-Client: {client}\r\n"))
            out[i] = read_response(s).status
            times[i] = (time.monotonic() - t) * 1000

    threads = [Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    go.set()
    join_all(threads, 30)
    if took is not None:
        took.extend(times)
    return out


def delays(g):
    return sorted(json.loads(line)["delay_ms"] for line in g.access_log.read_text().splitlines()
                  if json.loads(line)["target"] == "/echo")


@over_stores_and_protocols(KINDS)
@pytest.mark.parametrize("algorithm", ["gcra", "token_bucket"])
def test_requests_over_the_limit_wait_their_turn_within_max_delay(kind, algorithm, request, gateway_factory):
    if kind in ("sentinel", "cluster") and algorithm == "token_bucket":
        pytest.skip("one algorithm through Sentinel and the Cluster: the delay path is the same")
    g = store_gateway(kind, request, gateway_factory, routes=route(algorithm), access_log="file", log_format="json", http=PATIENT,
                      workers=2)
    # One at once, four waiting 0.5, 1, 1.5 and 2 s (max_delay), the other three refused.
    took = []
    statuses = together(g, 8, took=took)
    assert sorted(statuses) == [200] * 5 + [429] * 3, statuses
    wait_for("the access log", lambda: len(delays(g)) == 8, 5)
    waited = [d for d in delays(g) if d > 0]
    assert len(waited) == 4 and max(waited) <= 2000, delays(g)
    # What the clients waited, measured by them: each admitted request's answer came no
    # sooner than its planned turn (the longest waits matched to the longest plans), and
    # no later than max_delay allows, with a margin far above the machine's speed.
    admitted = sorted(t for t, st in zip(took, statuses) if st == 200)
    for actual, planned in zip(admitted[1:], sorted(waited)):
        assert planned - 5 <= actual <= planned + 2000, (admitted, sorted(waited))
    record(f"{kind}/{algorithm}: planned waits {sorted(waited)} ms, measured {[round(t) for t in admitted]} ms")
    series, _ = scrape(g) if hasattr(g, "admin_port") else ({}, "")
    if series:
        assert value(series, "floodgate_ratelimit_decisions_total", route="api", limit="paced", outcome="delayed") == 4


def test_the_waiting_requests_are_bounded_per_worker(gateway_factory):
    g = gateway_factory(routes=route(), http=patient(max_delayed=2), workers=1)
    statuses = together(g, 6)
    # One at once, two waiting (the worker's bound), the rest refused.
    assert sorted(statuses) == [200] * 3 + [429] * 3, statuses


def test_a_client_that_goes_away_while_it_waits_is_never_forwarded(gateway_factory, upstream):
    g = gateway_factory(routes=route(max_delay="5s"), workers=1, http=PATIENT)
    assert together(g, 1) == [200]
    upstream.reset()
    s = g.connect(10)
    s.sendall(get("/echo", extra="X-Client: c\r\n"))  # its turn is 500 ms away
    s.close()
    with g.connect(10) as s2:
        s2.sendall(get("/echo", extra="X-Client: other\r\n"))
        r = read_response(s2)
    assert r.status == 200
    wait_for("the other request counted", lambda: upstream.stats()["requests"] == 1, 5)
    time.sleep(1.0)  # (what is tested: the left client's turn, 500 ms away, passes without a send)
    assert upstream.stats()["requests"] == 1, upstream.stats()


def test_check_refuses_delay_where_it_cannot_be():
    import subprocess
    import tempfile
    from pathlib import Path

    from conftest import BIN
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "f.yaml"
        for limit, want in [("algorithm: fixed_window\n        limit: 3\n        window: 1s\n        on_exceed: delay\n"
                             "        max_delay: 1s\n", "on_exceed: delay is for gcra and token_bucket"),
                            ("algorithm: gcra\n        rate: 1/s\n        on_exceed: delay\n", "needs max_delay"),
                            ("algorithm: gcra\n        rate: 1/s\n        on_exceed: delay\n        max_delay: 2m\n",
                             "max_delay is at most 1m"),
                            ("algorithm: gcra\n        rate: 1/s\n        max_delay: 1s\n", "read with on_exceed")]:
            cfg.write_text('upstreams:\n  api:\n    address: "127.0.0.1:9000"\nroutes:\n  - name: r\n'
                           "    match: { path_prefix: / }\n    upstream: api\n    limits:\n      - name: l\n        "
                           + limit)
            r = subprocess.run([BIN, "--check", "--config", str(cfg)], capture_output=True, text=True)
            assert r.returncode == 1 and want in r.stderr, (limit, r.stderr)


@pytest.mark.skipif(SANITIZED, reason="the sanitizer's allocator keeps freed memory in quarantine")
def test_a_flood_of_waiting_requests_stays_bounded(gateway_factory):
    # 30 keys, 3 requests each, all at once, against one every 5 s (max_delay 5 s): per key
    # one goes at once and one may wait (max_delay x rate); the worker holds 20 waiting
    # (http.max_delayed); the rest are refused at once, and memory stays small.
    g = gateway_factory(routes=route(max_delay="5s").replace("rate: 2/s", "rate: 12/m"), http=patient(max_delayed=20),
                        workers=1)
    ready, go, out = threading.Barrier(90), threading.Event(), []

    def one(i):
        with g.connect(20) as s:
            ready.wait(20)
            go.wait(20)
            s.sendall(get("/echo", extra=f"X-Client: k{i % 30}\r\n"))
            out.append(read_response(s).status)

    threads = [Thread(target=one, args=(i,)) for i in range(90)]
    for t in threads:
        t.start()
    go.set()
    join_all(threads, 60)
    assert (out.count(200), out.count(429)) == (50, 40), {s: out.count(s) for s in set(out)}
    assert g.peak_rss_kib() < 100 * 1024, g.peak_rss_kib()


def waiting_gateway(gateway_factory, upstream, rate="30/m", max_delay="5s", **kw):
    """One worker, one request per `rate` per client, an admin port, a JSON access log;
    the client `c`'s first request made, so that its next waits its turn."""
    routes = route(max_delay=max_delay).replace("rate: 2/s", f"rate: {rate}")
    kw.setdefault("http", PATIENT)
    g = with_admin(lambda extra: gateway_factory(routes=routes, workers=1, extra=extra, access_log="file",
                                                 log_format="json", **kw))
    # (no later than the first request's decision: the next one's turn is `rate` after it)
    g.first_sent = time.monotonic()
    assert together(g, 1) == [200]
    upstream.reset()
    return g


def start_waiting(g, client="c"):
    """A request of `client` sent in a thread, returned once the gateway has decided it
    waits (counted as delayed); the thread keeps its status and how long it took."""
    before = decisions(g, "api", "paced")["delayed"]
    got = {}

    def one():
        with g.connect(15) as s:
            t = time.monotonic()
            s.sendall(get("/echo", extra=f"X-Client: {client}\r\n"))
            got["status"] = read_response(s).status
            got["took_ms"] = (time.monotonic() - t) * 1000
            got["after_first_ms"] = (time.monotonic() - g.first_sent) * 1000

    t = Thread(target=one)
    t.start()
    wait_for("the request waiting its turn", lambda: decisions(g, "api", "paced")["delayed"] == before + 1, 5)
    return t, got


def test_a_request_waiting_its_turn_is_served_through_a_drain(gateway_factory, upstream):
    g = waiting_gateway(gateway_factory, upstream)
    t, got = start_waiting(g)
    assert g.stop() == 0  # SIGTERM: the drain lets the waiting request finish
    t.join(15)
    # (answered no sooner than its turn: 2 s after the first decision, itself after first_sent)
    assert got["status"] == 200 and got["after_first_ms"] >= 2000 - 50, got
    assert upstream.stats()["requests"] == 1


def test_a_request_waiting_its_turn_is_served_through_a_reload(gateway_factory, upstream):
    g = waiting_gateway(gateway_factory, upstream)
    t, got = start_waiting(g)
    # A new config (another route name and limit) while it waits: it goes on under its own.
    g.config.write_text(g.config.read_text().replace("rate: 30/m", "rate: 60/m"))
    assert admin_get(g, "/reload", method="POST").status == 200
    t.join(15)
    # (answered no sooner than its turn: 2 s after the first decision, itself after first_sent)
    assert got["status"] == 200 and got["after_first_ms"] >= 2000 - 50, got
    assert upstream.stats()["requests"] == 1


def test_a_client_gone_while_it_waits_frees_its_place(gateway_factory, upstream):
    # One place to wait in (http.max_delayed: 1), turns 10 s apart: a client that leaves
    # gives its place back at once, so another client over its limit is let wait for its
    # turn instead of being refused, long before the first one's turn would have come.
    g = waiting_gateway(gateway_factory, upstream, rate="6/m", max_delay="15s", http=patient(max_delayed=1))

    def wait_in_line(client):
        s = g.connect(10)
        before = decisions(g, "api", "paced")["delayed"]
        s.sendall(get("/echo", extra=f"X-Client: {client}\r\n"))
        wait_for(f"{client} waiting its turn", lambda: decisions(g, "api", "paced")["delayed"] == before + 1, 5)
        return s

    wait_in_line("c").close()
    # The gateway saw it go (logged 499 at once, its turn being 10 s away).
    wait_for("the leaving client logged", lambda: any(json.loads(line)["status"] == 499
                                                     for line in g.access_log.read_text().splitlines()), 5)
    assert together(g, 1, client="d") == [200]
    # d's next waits (counted delayed; refused, it would not be): the place was given back.
    wait_in_line("d").close()
    assert upstream.stats()["requests"] == 1, upstream.stats()
