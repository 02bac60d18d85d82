"""Distributed rate limiting against a real redis-server started by the test."""
import os
import signal
import threading
import time

import pytest

from conftest import BIN_SYSTEM_MALLOC, SANITIZED, STARTUP_NOW, Reader, Thread, get, join_all, read_response, \
    run_threads, wait_until

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def route(limits, path="/limited", on_error="allow"):
    return f"""  - name: r
    match:
      path_prefix: {path}
    upstream: api
    on_store_error: {on_error}
    limits:
{limits}
  - name: rest
    match:
      path_prefix: /
    upstream: api
"""


def limit(algo, **kw):
    lines = [f"      - name: {kw.pop('name', 'l')}", f"        algorithm: {algo}"]
    for k, v in kw.items():
        lines.append(f"        {k}: {v}")
    return "\n".join(lines) + "\n"


def hammer(gateways, total, threads=8, path="/limited", extra=""):
    """Sends `total` requests spread over the gateways from concurrent keep-alive clients."""
    statuses = []
    lock = threading.Lock()
    per = total // threads

    def worker(n):
        g = gateways[n % len(gateways)]
        s = g.connect()
        rd = Reader(s)
        mine = []
        for _ in range(per):
            s.sendall(get(path, extra=extra))
            mine.append(read_response(s, reader=rd).status)
        s.close()
        with lock:
            statuses.extend(mine)

    run_threads(worker, [(i,) for i in range(threads)])
    return statuses


ALGOS = {
    "fixed_window": limit("fixed_window", key="global", limit=100, window="1m"),
    "sliding_log": limit("sliding_log", key="global", limit=100, window="1m"),
    "token_bucket": limit("token_bucket", key="global", rate="1/m", burst=100),
    "gcra": limit("gcra", key="global", rate="1/m", burst=100),
}


@pytest.mark.parametrize("algo", list(ALGOS))
def test_three_gateways_admit_exactly_the_limit(gateway_factory, redis_server, algo):
    gws = [gateway_factory(routes=route(ALGOS[algo]), store="redis", redis=redis_server.address, workers=2)
           for _ in range(3)]
    statuses = hammer(gws, 640)
    assert len(statuses) == 640
    assert statuses.count(200) == 100, (algo, statuses.count(200))
    assert statuses.count(429) == 540


def test_sliding_window_and_exact_behaviour_through_redis(gateway_factory, redis_server):
    limits = (limit("sliding_window", name="sw", key="header:X-K", limit=5, window="1m"))
    g = gateway_factory(routes=route(limits), store="redis", redis=redis_server.address)
    codes = [g.request(get("/limited", extra="X-K: a\r\n")).status for _ in range(7)]
    assert codes == [200] * 5 + [429] * 2
    r = g.request(get("/limited", extra="X-K: b\r\n"))
    assert r.status == 200 and r.header("ratelimit").startswith('"sw";r=4;')
    keys = redis_server.keys("fgtest:*")
    assert sorted(keys) == ["fgtest:{r:sw:a}", "fgtest:{r:sw:b}"]


def test_token_bucket_refills_over_time(gateway_factory, redis_server):
    g = gateway_factory(routes=route(limit("token_bucket", key="global", rate="2/s", burst=2)),
                        store="redis", redis=redis_server.address, workers=1)
    codes = [g.request(get("/limited")).status for _ in range(3)]
    assert codes == [200, 200, 429]
    time.sleep(0.6)  # (what is tested: one token back after 500 ms)
    assert g.request(get("/limited")).status == 200


def test_fixed_window_edge(gateway_factory, redis_server):
    g = gateway_factory(routes=route(limit("fixed_window", key="global", limit=2, window="1s")),
                        store="redis", redis=redis_server.address, workers=1)
    assert [g.request(get("/limited")).status for _ in range(3)] == [200, 200, 429]
    time.sleep(1.1)  # (what is tested: the key expired with its window; the local deny cache too)
    assert [g.request(get("/limited")).status for _ in range(3)] == [200, 200, 429]


@pytest.mark.skipif(SANITIZED, reason="libfaketime cannot be preloaded ahead of the ASan runtime")
def test_clock_skew_does_not_matter(gateway_factory, redis_server):
    # One gateway runs an hour ahead: time comes from Redis, so they share the limit exactly.
    lim = limit("sliding_log", key="global", limit=50, window="1m")
    normal = gateway_factory(routes=route(lim), store="redis", redis=redis_server.address)
    # libfaketime preloaded into the gateway itself (the faketime wrapper would fork),
    # the build with the C library's malloc (libfaketime cannot start alongside jemalloc).
    skewed = gateway_factory(routes=route(lim), store="redis", redis=redis_server.address, binary=BIN_SYSTEM_MALLOC,
                             env={"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": "+1h", "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    # The skew took effect: the skewed gateway's log lines carry its clock's time, an
    # hour ahead of ours (the normal one's, ours).
    skew = {name: logged_at(g) - time.time() for name, g in (("normal", normal), ("skewed", skewed))}
    assert 3000 < skew["skewed"] < 4200 and abs(skew["normal"]) < 600, skew
    statuses = hammer([normal, skewed], 160, threads=4)
    assert statuses.count(200) == 50, {s: statuses.count(s) for s in set(statuses)}
    # Both tell a denied client the same wait, within the window (a reset reckoned on
    # the skewed clock would be an hour off).
    for g in (normal, skewed):
        r = g.request(get("/limited"))
        assert r.status == 429 and 1 <= int(r.header("retry-after")) <= 60, (r.status, r.headers)


def logged_at(g):
    """The time (Unix seconds) a gateway's "listening" log line says it was written."""
    import datetime
    line = next(l for l in g.log_text().splitlines() if "floodgate listening on" in l)
    return datetime.datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def test_concurrency_never_exceeds_and_dead_gateway_leases_are_reclaimed(gateway_factory, redis_server, upstream):
    lim = limit("concurrency", key="global", limit=3, window="2s")
    gws = [gateway_factory(routes=route(lim, path="/slow"), store="redis", redis=redis_server.address)
           for _ in range(3)]
    results = []
    lock = threading.Lock()

    def call(i):
        # (long enough that the 9 overlap on any machine, shorter than a lease's 2 s)
        r = gws[i % 3].request(get("/slow?ms=1500"))
        with lock:
            results.append(r.status)

    run_threads(call, [(i,) for i in range(9)])
    assert 1 <= results.count(200) <= 3, results
    assert results.count(429) == 9 - results.count(200), results
    key = "fgtest:{r:l:*}"
    # leases were released: all three slots free again
    assert wait_until(lambda: redis_server.cli("zcard", key) == "0", 5), redis_server.cli("zrange", key, "0", "-1")
    # a gateway killed while holding a lease: the lease expires after its lifetime
    victim = gws[0]
    s = victim.connect()
    s.sendall(get("/slow?ms=5000"))
    assert wait_until(lambda: redis_server.cli("zcard", key) == "1", 5), redis_server.cli("zcard", key)
    victim.proc.kill()
    victim.proc.wait()
    victim.killed = True
    s.close()
    # Its lease ends at its score (Redis' time when it was last taken or renewed, plus
    # the 2 s lifetime): no longer counted once Redis' clock is past it.
    held = redis_server.cli("zrange", key, "0", "0", "withscores").splitlines()
    ends = int(float(held[1])) if len(held) == 2 else 0  # (or already gone with its key)

    def redis_ms():
        sec, usec = redis_server.cli("time").split()
        return int(sec) * 1000 + int(usec) // 1000
    assert wait_until(lambda: redis_ms() > ends + 50, 5), (redis_ms(), ends)
    results.clear()
    run_threads(call, [(i,) for i in (1, 2, 4)])
    assert results == [200, 200, 200]
    # and it is gone (reclaimed by the next call, or expired with its key), theirs released
    assert wait_until(lambda: redis_server.cli("zcard", key) == "0", 5), redis_server.cli("zrange", key, "0", "-1")


def test_flood_costs_redis_one_call_per_retry_period(gateway_factory, redis_server):
    g = gateway_factory(routes=route(limit("fixed_window", key="ip", limit=5, window="10s")),
                        store="redis", redis=redis_server.address, workers=2)
    first = hammer([g], 40, threads=4)
    assert first.count(200) == 5
    # Every worker has now seen a denial with its retry time: the flood costs Redis
    # nothing more until then (at most one call per worker per retry period).
    before = redis_server.command_calls("evalsha")
    statuses = hammer([g], 800, threads=4)
    assert statuses.count(429) == 800
    calls = redis_server.command_calls("evalsha") - before
    assert calls <= 2, calls


def test_script_flush_is_recovered(gateway_factory, redis_server):
    g = gateway_factory(routes=route(limit("fixed_window", key="header:X-K", limit=100, window="1m")),
                        store="redis", redis=redis_server.address)
    assert g.request(get("/limited", extra="X-K: a\r\n")).header("ratelimit").startswith('"l";r=99;')
    redis_server.cli("script", "flush")
    r = g.request(get("/limited", extra="X-K: a\r\n"))
    assert r.status == 200 and r.header("ratelimit").startswith('"l";r=98;')
    assert redis_server.command_calls("eval") >= 1  # NOSCRIPT answered by EVAL


def test_redis_down_follows_on_store_error_and_recovers(gateway_factory, redis_server):
    lim = limit("fixed_window", key="header:X-K", limit=100, window="1m")
    deny = gateway_factory(routes=route(lim, on_error="deny"), store="redis", redis=redis_server.address)
    from test_admin import with_admin
    from test_metrics import decisions
    allow = with_admin(lambda extra: gateway_factory(routes=route(lim, on_error="allow"), store="redis",
                                                     redis=redis_server.address, extra=extra))
    local = gateway_factory(routes=route(limit("fixed_window", key="header:X-K", limit=2, window="1m"),
                                         on_error="local", path="/local"), store="redis", redis=redis_server.address)
    assert deny.request(get("/limited", extra="X-K: a\r\n")).status == 200
    redis_server.stop()
    for _ in range(30):
        r = deny.request(get("/limited", extra="X-K: a\r\n"))
        assert r.status == 503 and r.header("retry-after") == "1"
    # allowed by its policy, as a counted store error (not decided by a store it lost)
    before = decisions(allow, "r", "l")
    assert allow.request(get("/limited", extra="X-K: a\r\n")).status == 200
    after = decisions(allow, "r", "l")
    assert after["store_error_allowed"] - before["store_error_allowed"] == 1, (before, after)
    assert after["allowed"] == before["allowed"], (before, after)
    codes = [local.request(get("/local", extra="X-K: z\r\n")).status for _ in range(3)]
    assert codes == [200, 200, 429]  # the memory store enforces the limit on this instance
    assert redis_server.start()  # same port, after stop()
    end = time.monotonic() + 10
    while time.monotonic() < end:
        if deny.request(get("/limited", extra="X-K: b\r\n")).status == 200:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("no recovery after Redis came back")
    deny.stop()
    # Logged per cause every few seconds, never per request: 30 and more failed
    # requests, a line or two (the connection's loss, then calls refused meanwhile).
    lines = deny.log_text().count("rate-limit store error on route r")
    assert 1 <= lines <= 3, deny.log_text()


def test_acl_user_password_and_database(gateway_factory, tmp_path):
    from conftest import RedisServer
    d = tmp_path / "acl"
    d.mkdir()
    r = RedisServer(d, extra=["--user", "gate", "on", ">s3cret", "~fgtest:*", "+@all", "--user", "default", "off"],
                    auth=["--user", "gate", "--pass", "s3cret", "--no-auth-warning"])
    try:
        lim = limit("fixed_window", key="global", limit=2, window="1m")
        os.environ["FG_TEST_REDIS_PASSWORD"] = "s3cret"
        g = gateway_factory(routes=route(lim, on_error="deny"), store="redis", redis=r.address,
                            redis_extra='  username: gate\n  password: "${FG_TEST_REDIS_PASSWORD}"\n  database: 3\n')
        assert [g.request(get("/limited")).status for _ in range(3)] == [200, 200, 429]
        assert r.cli("-n", "3", "exists", "fgtest:{r:l:*}") == "1"
        assert r.cli("-n", "0", "exists", "fgtest:{r:l:*}") == "0"
        # a wrong password: every call fails, the route's policy (deny) answers
        bad = gateway_factory(routes=route(lim, on_error="deny"), store="redis", redis=r.address,
                              redis_extra="  username: gate\n  password: wrong\n" + STARTUP_NOW)
        # (refused by Redis, not merely not connected yet)
        assert wait_until(lambda: "AUTH failed: WRONGPASS" in bad.log_text(), 10), bad.log_text()
        assert bad.request(get("/limited")).status == 503
    finally:
        r.stop()


def test_script_flush_and_restart_during_load(gateway_factory, redis_server):
    lim = limit("fixed_window", key="header:X-K", limit=1000000, window="1h")
    g = gateway_factory(routes=route(lim, on_error="deny"), store="redis", redis=redis_server.address, workers=2)
    seen = []
    stop = threading.Event()
    lock = threading.Lock()

    def load(n):
        s = g.connect(timeout=5)
        rd = Reader(s)
        while not stop.is_set():
            s.sendall(get("/limited", extra=f"X-K: k{n}\r\n"))
            r = read_response(s, reader=rd)
            with lock:
                seen.append((time.monotonic(), r.status))
        s.close()

    def answered_since(at):
        with lock:
            return [st for t, st in seen if t >= at]

    ts = [Thread(target=load, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    try:
        assert wait_until(lambda: len(answered_since(0)) >= 20, 10)
        redis_server.cli("script", "flush")
        flushed_at = time.monotonic()
        # (served after the flush: each worker's connection met NOSCRIPT and loaded it again)
        assert wait_until(lambda: answered_since(flushed_at).count(200) >= 20, 10), answered_since(flushed_at)[-20:]
        stopping_at = time.monotonic()
        redis_server.stop()
        down_at = time.monotonic()
        # While it is down, on_store_error: deny answers.
        assert wait_until(lambda: 503 in answered_since(down_at), 10), answered_since(down_at)[-20:]
        assert redis_server.start()  # same port, after stop()
        up_at = time.monotonic()
        # ... and the gateway recovers by itself: 20 in a row served since.
        assert wait_until(lambda: answered_since(up_at)[-20:] == [200] * 20, 15), answered_since(up_at)[-20:]
    finally:
        stop.set()
        join_all(ts, 10)
    statuses = {s for _, s in seen}
    # every request was answered: 200 while Redis served, 503 (on_store_error: deny) while it was down
    assert statuses <= {200, 503}, statuses
    assert 503 not in answered_since(0)[:20] and 503 not in [st for t, st in seen if flushed_at <= t < stopping_at], \
        "a 503 while Redis served"


def test_requests_resumed_together_reach_their_own_connections(gateway_factory, redis_server):
    """Requests answered by one Redis call resume together and their upstream writes
    go out in one submission (upstream/send_batch): each request, head and body, must
    reach the upstream whole and on its own connection. 16 clients send POSTs with
    bodies of their own bytes and sizes (up to 200 KB: past the first write) at once."""
    g = gateway_factory(routes=route(limit("fixed_window", key="global", limit=100000, window="1m"), path="/upload"),
                        store="redis", redis=redis_server.address)
    problems = []
    lock = threading.Lock()

    def client(n):
        s = g.connect()
        rd = Reader(s)
        for k in range(6):
            size = (n * 7919 + k * 104729) % 200_000 + 1
            fill = (n * 6 + k) % 251 + 1
            body = bytes([fill]) * size
            s.sendall(f"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode() + body)
            r = read_response(s, reader=rd)
            want = {"length": size, "sum": fill * ((size + 4095) // 4096)}
            if r.status != 200 or r.json() != want:
                with lock:
                    problems.append((n, k, r.status, r.body[:200], want))
        s.close()

    run_threads(client, [(i,) for i in range(16)])
    assert not problems, problems[:3]
    # They went through Redis in shared calls: fewer calls than requests.
    assert redis_server.command_calls("evalsha") < 96
