"""Live limit inspection: GET /limits on the admin listener, for the memory store and
Redis and every algorithm. What it shows is checked against what the next real request
gets (its RateLimit header, its 429 and Retry-After), and calling it any number of times
consumes nothing and, on Redis, writes nothing (no key created, no value or expiry changed)."""
import itertools
import socket
import time
import urllib.parse

import pytest

from conftest import Gateway, RedisServer, Upstream, free_port, get, read_response, wait_until

QUOTA = 5
# One route per algorithm (matched by host), one limit "l" of quota 5 keyed on the client
# address; windows and rates slow enough that nothing comes back during a test.
ALGOS = {
    "fixed_window": "limit: 5\n        window: 1h",
    "sliding_log": "limit: 5\n        window: 1h",
    "sliding_window": "limit: 5\n        window: 1h",
    "token_bucket": "rate: 5/h\n        burst: 5",
    "gcra": "rate: 5/h\n        burst: 5",
    "concurrency": "limit: 5\n        window: 1m",
}
WINDOWED = [a for a in ALGOS if a != "concurrency"]


def route(name, limits):
    return f"""  - name: {name}
    match:
      host: {name}.test
      path_prefix: /
    upstream: api
    limits:
{limits}"""


def limit(name, algo, key="ip", extra=""):
    body = ALGOS[algo]
    return f"""      - name: {name}
        algorithm: {algo}
        key: {key}
        {body}
{extra}"""


ROUTES = "".join(route(a, limit("l", a)) for a in ALGOS) + route(
    "ids",
    limit("by-key", "fixed_window", '"header:X-Api-Key"')
    + limit("by-query", "sliding_log", '"query:api_key"')
    + limit("by-cookie", "token_bucket", '"cookie:sid"', "        on_missing_key: skip\n")) + route(
    "multi",
    limit("tight", "fixed_window").replace("limit: 5", "limit: 2")
    + limit("loose", "sliding_log").replace("limit: 5", "limit: 10")
    + limit("shadowed", "gcra", extra="        shadow: true\n").replace("burst: 5", "burst: 1")) + """  - name: rest
    match:
      path_prefix: /
    upstream: api
"""

_ips = itertools.count(1)


def fresh_ip():
    """A client address no other test used (the gateway believes X-Forwarded-For from 127.0.0.1)."""
    n = next(_ips)
    return f"203.0.{n // 250}.{n % 250 + 1}"


# /limits is bounded (admin.limits_rate, 20/s, and limits_rate_per_peer, 5/s, by
# default): these tests ask it hundreds of times a second, from one address.
LIMITS_BUDGET = "  limits_rate: 100000/s\n  limits_rate_per_peer: 100000/s\n"


def start_gateway(tmp, upstream, store, redis=None, workers=2, **kw):
    for _ in range(3):
        port = free_port()
        try:
            g = Gateway(tmp, upstream.address, routes=ROUTES, workers=workers, trusted="127.0.0.1/32", store=store,
                        redis=redis, extra=f'admin:\n  listen: "127.0.0.1:{port}"\n{LIMITS_BUDGET}',
                        client_ip_extra="  ipv6_prefix: 64\n", **kw)
        except RuntimeError:  # the admin port was taken meanwhile
            continue
        g.admin_port = port
        return g
    raise RuntimeError("no free admin port")


class Env:
    def __init__(self, store, gateway, redis):
        self.store, self.g, self.redis = store, gateway, redis

    def send(self, host, ip, path="/echo", extra=""):
        xff = f"X-Forwarded-For: {ip}\r\n" if ip else ""
        return self.g.request(get(path, host=f"{host}.test", extra=xff + extra))

    def admin(self, target, method="GET"):
        with socket.create_connection(("127.0.0.1", self.g.admin_port), timeout=5) as s:
            # (a POST to a loopback admin without admin.token carries X-Floodgate-Admin)
            extra = "X-Floodgate-Admin: 1\r\n" if method == "POST" else ""
            s.sendall(f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Connection: close\r\n\r\n".encode())
            return read_response(s)

    def inspect(self, **params):
        """GET /limits with `params` (header_X=... for header.X), the answer's JSON."""
        r = self.admin("/limits?" + query(**params))
        assert r.status == 200, (r.status, r.body)
        assert r.header("content-type") == "application/json"
        return r.json()


def query(**params):
    pairs = []
    for k, v in params.items():
        for prefix in ("header", "query", "cookie"):
            if k.startswith(prefix + "_"):
                k = prefix + "." + k[len(prefix) + 1:].replace("_", "-" if prefix == "header" else "_")
        pairs.append(f"{k}={urllib.parse.quote(v, safe='')}")
    return "&".join(pairs)


@pytest.fixture(scope="module", params=["memory", "redis"])
def env(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    u = Upstream()
    r = None
    if request.param == "redis":
        (d / "redis").mkdir()
        r = RedisServer(d / "redis")
    # (a held /slow request outlasts every step of a test: under the response timeout)
    g = start_gateway(d, u, request.param, redis=r.address if r else None, upstream_opts={"response_timeout": "20s"})
    yield Env(request.param, g, r)
    code = g.stop()
    u.stop()
    if r:
        r.stop()
    assert code == 0, g.log_text()


def rate_remaining(resp, name="l"):
    """r= of limit `name` in the RateLimit header."""
    for item in resp.header("ratelimit").split(", "):
        if item.startswith(f'"{name}";'):
            return int(item.split(";r=")[1].split(";")[0])
    raise AssertionError(resp.header("ratelimit"))


def one(answer, name="l"):
    return next(l for l in answer["limits"] if l["name"] == name)


@pytest.mark.parametrize("algo", WINDOWED)
def test_remaining_after_n_requests_is_what_the_next_request_gets(env, algo):
    ip = fresh_ip()
    fresh = one(env.inspect(route=algo, ip=ip))
    assert (fresh["remaining"], fresh["quota"], fresh["next"]) == (QUOTA, QUOTA, "allowed")
    for n in range(1, 4):
        assert env.send(algo, ip).status == 200
        a = env.inspect(route=algo, ip=ip)
        l = one(a)
        assert a["next_request"] == "allowed" and a["store"] == env.store
        assert (l["remaining"], l["next"], l["would_deny"], l["consumes"]) == (QUOTA - n, "allowed", False, True)
        assert l["key"] == f"fgtest:{{{algo}:l:{ip}}}"
        assert l["algorithm"] == algo and l["shadow"] is False and l["cost"] == 1
    r = env.send(algo, ip)
    assert r.status == 200 and rate_remaining(r) == l["remaining"] - 1
    # and the reset it gave, in whole seconds as the header's t= (a second may pass between)
    t = int(r.header("ratelimit").split(";t=")[1])
    assert abs(t - -(-l["reset_ms"] // 1000)) <= 1


def redis_state(redis):
    """Every key with its value (DUMP) and absolute expiry (PEXPIRETIME), and the key count."""
    keys = sorted(redis.keys())
    return int(redis.cli("dbsize")), {k: (redis.raw("DUMP", k), redis.cli("pexpiretime", k)) for k in keys}


@pytest.mark.parametrize("algo", list(ALGOS))
def test_inspecting_50_times_consumes_and_writes_nothing(env, algo):
    ip = fresh_ip()
    for _ in range(2):
        assert env.send(algo, ip).status == 200
    if algo == "concurrency":  # the leases go back just after the responses
        deadline = time.monotonic() + 5
        while one(env.inspect(route=algo, ip=ip))["in_use"] and time.monotonic() < deadline:
            time.sleep(0.01)
    before = redis_state(env.redis) if env.redis else None
    if env.redis and algo != "concurrency":
        assert before[1][f"fgtest:{{{algo}:l:{ip}}}"][0] is not None
    answers = [env.inspect(route=algo, ip=ip) for _ in range(50)]
    # unknown clients too: nothing is created for them
    for _ in range(50):
        assert one(env.inspect(route=algo, ip=fresh_ip()))["remaining"] == QUOTA
    expected = QUOTA if algo == "concurrency" else QUOTA - 2  # leases end with their responses
    assert {one(a)["remaining"] for a in answers} == {expected}
    if env.redis:
        assert redis_state(env.redis) == before
    r = env.send(algo, ip)
    assert r.status == 200 and rate_remaining(r) == expected - 1


@pytest.mark.parametrize("algo", WINDOWED)
def test_a_denied_client_shows_would_deny_with_the_retry_after_it_gets(env, algo):
    ip = fresh_ip()
    for _ in range(QUOTA):
        assert env.send(algo, ip).status == 200
    a = env.inspect(route=algo, ip=ip)
    l = one(a)
    assert a["next_request"] == "denied"
    assert (l["remaining"], l["next"], l["would_deny"], l["consumes"]) == (0, "denied", True, False)
    r = env.send(algo, ip)
    assert r.status == 429
    retry_after = int(r.header("retry-after"))
    # asked a moment before the request: the same seconds, or one more
    assert retry_after <= a["retry_after_s"] <= retry_after + 1
    assert retry_after <= -(-l["retry_after_ms"] // 1000) <= retry_after + 1
    # and the denial consumed nothing: still denied, still 0 left
    assert one(env.inspect(route=algo, ip=ip))["remaining"] == 0


def test_concurrency_shows_the_leases_in_use(env):
    ip = fresh_ip()
    in_use = lambda: one(env.inspect(route="concurrency", ip=ip))["in_use"]  # noqa: E731
    held = []
    for _ in range(3):
        s = env.g.connect()
        s.sendall(get("/slow?ms=8000", host="concurrency.test", extra=f"X-Forwarded-For: {ip}\r\n"))
        held.append(s)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            l = one(env.inspect(route="concurrency", ip=ip))
            if l["in_use"] == 3:
                break
            time.sleep(0.02)
        assert (l["in_use"], l["remaining"], l["quota"], l["next"]) == (3, 2, QUOTA, "allowed")
        # the next real request takes a fourth lease: one left after it
        r = env.send("concurrency", ip)
        assert r.status == 200 and rate_remaining(r) == 1
        # Its lease goes back just after its response is written (awaited): three held.
        assert wait_until(lambda: in_use() == 3, 10), in_use()
        for _ in range(2):
            s = env.g.connect()
            s.sendall(get("/slow?ms=8000", host="concurrency.test", extra=f"X-Forwarded-For: {ip}\r\n"))
            held.append(s)
        assert wait_until(lambda: in_use() == 5, 10), in_use()
        a = env.inspect(route="concurrency", ip=ip)
        assert a["next_request"] == "denied" and one(a)["would_deny"] and one(a)["remaining"] == 0
        assert env.send("concurrency", ip).status == 429
    finally:
        for s in held:
            read_response(s)
            s.close()
    # A lease goes back just after its response is written, so after the client has it:
    # awaited, well within the leases' 1-minute lifetime (released, not expired).
    assert wait_until(lambda: in_use() == 0, 10), in_use()


def test_one_denying_limit_consumes_nothing_from_the_others_and_shadow_never_denies(env):
    ip = fresh_ip()
    assert env.send("multi", ip).status == 200
    a = env.inspect(route="multi", ip=ip)
    assert a["next_request"] == "allowed"
    # the shadow limit (burst 1) would deny, and does not
    assert (one(a, "shadowed")["next"], one(a, "shadowed")["would_deny"]) == ("shadow_denied", True)
    assert env.send("multi", ip).status == 200
    a = env.inspect(route="multi", ip=ip)
    assert a["next_request"] == "denied" and a["retry_after_s"] > 0
    tight, loose = one(a, "tight"), one(a, "loose")
    assert (tight["next"], tight["remaining"]) == ("denied", 0)
    assert (loose["next"], loose["remaining"], loose["consumes"]) == ("allowed", 8, False)
    assert env.send("multi", ip).status == 429
    assert one(env.inspect(route="multi", ip=ip), "loose")["remaining"] == 8


def test_header_query_and_cookie_identities(env):
    tag = fresh_ip().replace(".", "-")
    key, q, sid = f"K+{tag}", f"a b{tag}", f"s%{tag}"
    extra = f"X-Api-Key: {key}\r\nCookie: other=1; sid={urllib.parse.quote(sid)}\r\n"
    for _ in range(2):
        assert env.send("ids", None, path=f"/echo?x=1&api_key={urllib.parse.quote_plus(q)}", extra=extra).status == 200
    # header names in any case; every value as the gateway reads it (percent-encoded here)
    a = env.inspect(route="ids", **{"header.x-api-key": key, "query.api_key": q, "cookie.sid": sid})
    assert [one(a, n)["remaining"] for n in ("by-key", "by-query", "by-cookie")] == [3, 3, 3]
    assert "unused_parameters" not in a
    # another key: its own count; no cookie: that limit is skipped, as the gateway skips it
    a = env.inspect(route="ids", **{"header.X-API-KEY": key + "x", "query.api_key": q})
    assert one(a, "by-key")["remaining"] == QUOTA and one(a, "by-query")["remaining"] == 3
    assert one(a, "by-cookie")["skipped"] is True and one(a, "by-cookie")["missing"] == ["cookie:sid"]
    # no header at all: the anonymous key that every request without one shares
    a = env.inspect(route="ids", **{"query.api_key": "zzz", "header.X-Unused": "1", "ip": "1.2.3.4"})
    anon = one(a, "by-key")
    assert anon["anonymous"] is True and anon["missing"] == ["header:X-Api-Key"] and anon["key"].endswith(":%anon}")
    assert sorted(a["unused_parameters"]) == ["header.X-Unused", "ip"]


def test_ip_is_keyed_as_the_gateway_keys_it(env):
    # IPv6 by its /64 (client_ip.ipv6_prefix), IPv4-mapped IPv6 as IPv4
    assert env.send("fixed_window", "2001:db8:0:77::5").status == 200
    assert one(env.inspect(route="fixed_window", ip="2001:db8:0:77::9"))["remaining"] == QUOTA - 1
    ip = fresh_ip()
    assert env.send("fixed_window", ip).status == 200
    assert one(env.inspect(route="fixed_window", ip=f"::ffff:{ip}"))["remaining"] == QUOTA - 1


@pytest.mark.parametrize("target, status, says", [
    ("/limits", 400, "route"),
    ("/limits?ip=1.2.3.4", 400, "route"),
    ("/limits?route=nope&ip=1.2.3.4", 404, "nope"),
    ("/limits?route=fixed_window", 400, "ip"),
    ("/limits?route=fixed_window&ip=not-an-address", 400, "not-an-address"),
    ("/limits?route=fixed_window&ip=1.2.3.4&nonsense=1", 400, "nonsense"),
    ("/limits?route=fixed_window&ip=1.2.3.4&ip=1.2.3.5", 400, "twice"),
    ("/limits?route=fixed_window&ip=1.2.3.4" + "".join(f"&header.h{i}=1" for i in range(16)), 400, "too many"),
    ("/limits?route=fixed_window&ip=1.2.3.4&header.h=" + "a" * 2100, 414, "too long"),
])
def test_bad_questions(env, target, status, says):
    r = env.admin(target)
    assert r.status == status and r.header("content-type") == "application/json"
    assert says in r.json()["error"]


def test_limits_takes_get_and_head_only(env):
    r = env.admin("/limits?route=ids", method="POST")
    assert r.status == 405 and r.header("allow") == "GET, HEAD"
    assert env.admin("/limits?route=rest").json() == {"route": "rest", "store": env.store,
                                                      "next_request": "allowed", "limits": []}


REDIS_TIMEOUT_S = 10


def test_redis_stopped_is_503_at_once(tmp_path):
    """With Redis gone, /limits answers 503 at once: it sees the store gone, it does not
    wait for its call to time out (redis.timeout is 10 s here: at once is well before)."""
    u = Upstream()
    (tmp_path / "redis").mkdir()
    r = RedisServer(tmp_path / "redis")
    g = start_gateway(tmp_path, u, "redis", redis=r.address, workers=1, redis_timeout=f"{REDIS_TIMEOUT_S}s")
    try:
        env = Env("redis", g, r)
        assert one(env.inspect(route="gcra", ip="1.2.3.4"))["remaining"] == QUOTA
        r.stop()
        for _ in range(3):
            started = time.monotonic()
            with socket.create_connection(("127.0.0.1", g.admin_port), timeout=3 * REDIS_TIMEOUT_S) as s:
                s.sendall(b"GET /limits?route=gcra&ip=1.2.3.4 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Connection: close\r\n\r\n")
                resp = read_response(s)
            took = time.monotonic() - started
            assert resp.status == 503, (resp.status, resp.body, f"{took:.3f}s")
            assert took < REDIS_TIMEOUT_S / 2, f"503 after {took:.3f}s: waited for the store's timeout?"
            body = resp.json()
            assert body["error"] == "store unreachable" and body["store"] == "redis" and body["reason"]
        # the other admin paths go on
        assert env.admin("/healthz").status == 200
    finally:
        assert g.stop() == 0, g.log_text()
        u.stop()
        r.stop()
