"""The admin listener (admin.listen): /healthz, /readyz, /config on a port of its own."""
import select
import signal
import socket
import time

import pytest

from conftest import (Gateway, Upstream, free_port, get, is_closed, read_response, record, run_one_route_gateway,
                      wait_until)


def admin_extra(port, more=""):
    """The admin section on `port`, with `more` (indented lines of its own) after it."""
    return f'admin:\n  listen: "127.0.0.1:{port}"\n{more}'


def with_admin(start, more=""):
    """Starts a gateway through start(extra) with an admin port (and `more` admin
    settings); another port if taken."""
    for _ in range(3):
        port = free_port()
        try:
            g = start(admin_extra(port, more))
        except RuntimeError:  # the admin port was taken meanwhile: "cannot listen"
            continue
        g.admin_port = port
        return g
    raise RuntimeError("no free admin port")


def admin_request(g, raw, timeout=5, head=False):
    with socket.create_connection(("127.0.0.1", g.admin_port), timeout=timeout) as s:
        s.sendall(raw)
        return read_response(s, head_request=head)


# admin settings: /readyz fails while the store is unreachable, whatever the routes'
# on_store_error (by default only a route that denies on a store error makes it fail).
READY_REQUIRES_STORE = "  ready_requires_store: true\n"
# The admin answers a Host that is an address (or localhost, or one of admin.hosts) only.
ADMIN_HOST = "127.0.0.1"
# What a POST to a loopback admin without admin.token must carry (a web page cannot).
ADMIN_POST_HEADER = "X-Floodgate-Admin: 1\r\n"


def admin_get(g, path, method="GET", timeout=5):
    extra = ADMIN_POST_HEADER if method == "POST" else ""
    raw = f"{method} {path} HTTP/1.1\r\nHost: {ADMIN_HOST}\r\n{extra}Connection: close\r\n\r\n".encode()
    return admin_request(g, raw, timeout=timeout, head=method == "HEAD")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One upstream and one memory-store gateway with an admin listener, for the stateless checks."""
    u = Upstream()
    d = tmp_path_factory.mktemp("admin")
    n = [0]

    def start(extra):
        n[0] += 1
        sub = d / f"g{n[0]}"
        sub.mkdir()
        return Gateway(sub, u.address, extra=extra, workers=2)

    g = with_admin(start)
    yield g, u
    code = g.stop()
    u.stop()
    assert code == 0, g.log_text()


def test_healthz(shared):
    g, _ = shared
    r = admin_get(g, "/healthz")
    assert r.status == 200
    assert r.header("content-type") == "application/json"
    assert r.json() == {"status": "alive"}


def test_readyz_with_the_memory_store_is_ready(shared):
    g, _ = shared
    r = admin_get(g, "/readyz")
    assert r.status == 200 and r.header("content-type") == "application/json"
    assert r.json() == {"status": "ready"}


def test_config_is_the_effective_configuration(shared):
    g, u = shared
    r = admin_get(g, "/config")
    assert r.status == 200 and r.header("content-type") == "application/json"
    c = r.json()
    assert c["listen"] == f"127.0.0.1:{g.port}"
    assert c["admin"] == {"listen": f"127.0.0.1:{g.admin_port}"}
    assert c["workers"] == 2 and c["store"] == "memory"
    assert c["redis"]["timeout_ms"] == 200 and c["redis"]["key_prefix"] == "fgtest:"
    assert c["http"]["header_timeout_ms"] == 2000 and c["http"]["idle_timeout_ms"] == 5000
    assert c["upstreams"]["api"]["address"] == u.address
    assert [rt["name"] for rt in c["routes"]] == ["all"]
    assert c["routes"][0]["match"] == {"path_prefix": "/"}


def test_head_has_the_get_head_and_no_body(shared):
    g, _ = shared
    body = admin_get(g, "/healthz").body
    with socket.create_connection(("127.0.0.1", g.admin_port), timeout=5) as s:
        # HEAD then GET on one keep-alive connection: no body bytes may sit between them.
        s.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        r = read_response(s, head_request=True)
        assert r.status == 200 and r.header("content-length") == str(len(body))
        s.sendall(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        r2 = read_response(s)
        assert r2.status == 200 and r2.json() == {"status": "ready"}


def test_unknown_path_is_404_json(shared):
    g, _ = shared
    for path in ("/nope", "/healthz/x", "/reloadx", "/metrics/", "/limits/x"):
        r = admin_get(g, path)
        assert r.status == 404, path
        assert r.header("content-type") == "application/json"
        assert "error" in r.json()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS"])
def test_other_methods_are_405_with_allow(shared, method):
    g, _ = shared
    r = admin_get(g, "/readyz", method=method)
    assert r.status == 405
    assert r.header("allow") == "GET, HEAD"


def test_request_bodies_and_big_heads_are_refused(shared):
    g, _ = shared
    r = admin_request(g, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc")
    assert r.status == 413
    r = admin_request(g, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert r.status == 413
    r = admin_request(g, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"x" * 9000 + b"\r\n\r\n")
    assert r.status == 431


def test_the_proxy_port_never_serves_admin(shared):
    g, u = shared
    before = u.stats()["requests"]
    for path in ("/healthz", "/readyz", "/config"):
        r = g.request(get(path))
        assert r.body != b'{"status":"alive"}' and b'"redis"' not in r.body
    # They were proxied paths like any other (the route is path_prefix: /).
    assert u.stats()["requests"] == before + 3


# The admin listener's caps (src/admin/listener.hpp): 16 connections per peer address,
# 128 in all; past a cap the longest-idle connection (the same peer's first) is closed
# to make room, so that a flood of idle sockets cannot keep a probe out.
PER_PEER = 16


def test_admin_connections_are_capped_per_peer_and_a_probe_still_gets_in(shared):
    g, _ = shared
    socks = []
    try:
        for _ in range(40):
            socks.append(socket.create_connection(("127.0.0.1", g.admin_port), timeout=5))
        # Accepted in order, each past the 16th closing the longest idle of this peer:
        # the first 24 are closed, the last 16 stay open (idle, until the 5 s read
        # timeout: checked at once, nothing to read on any of them).
        closed = [i for i, s in enumerate(socks[:-PER_PEER]) if not is_closed(s, 3)]
        assert closed == [], f"still open after 3 s: {closed}"
        readable, _, _ = select.select(socks[-PER_PEER:], [], [], 0.2)
        assert readable == [], [socks.index(s) for s in readable]
        assert g.request(get("/echo")).status == 200
        # A new connection (a probe) is served: it takes the place of the longest idle.
        assert admin_get(g, "/healthz").status == 200
        # The newest of the flood still gets its answer.
        socks[-1].settimeout(5)
        socks[-1].sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(socks[-1]).status == 200
    finally:
        for s in socks:
            s.close()
    # And once they are closed, the admin serves as before.
    assert admin_get(g, "/healthz").status == 200


def test_config_redacts_the_redis_password(gateway_factory, tmp_path):
    from conftest import RedisServer
    d = tmp_path / "acl"
    d.mkdir()
    secret = "s3cret-Pa55-word"
    r = RedisServer(d, extra=["--requirepass", secret], auth=["-a", secret, "--no-auth-warning"])
    try:
        # (/readyz then says whether the store is connected: no route here denies on a store error)
        g = with_admin(lambda extra: gateway_factory(
            store="redis", redis=r.address, extra=extra, redis_extra=f'  password: "{secret}"\n'),
            more=READY_REQUIRES_STORE)
        resp = admin_get(g, "/config")
        assert resp.status == 200
        assert secret.encode() not in resp.body
        c = resp.json()
        assert c["redis"]["password"] == "<redacted>"
        assert c["redis"]["addresses"] == [r.address] and c["store"] == "redis"
        assert wait_status(g, 200, within=10).status == 200  # AUTH with the real password worked
        assert "AUTH failed" not in g.log_text()
    finally:
        r.stop()


def wait_status(g, status, within=2.0):
    """Polls /readyz until it answers `status`; the last answer if it never does."""
    end = time.monotonic() + within
    while True:
        r = admin_get(g, "/readyz")
        if r.status == status or time.monotonic() >= end:
            return r
        time.sleep(0.02)


def test_readyz_follows_the_redis_connection_where_the_store_is_required(gateway_factory, redis_server):
    """admin.ready_requires_store: /readyz goes 503 when Redis goes, naming every worker,
    and 200 again when it is back. Without it (the routes here have no deny policy), the
    same outage leaves the instance ready, with the store's check failing as not required."""
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=redis_server.address, extra=extra, workers=2),
                   more=READY_REQUIRES_STORE)
    lenient = with_admin(lambda extra: gateway_factory(store="redis", redis=redis_server.address, extra=extra))
    r = wait_status(g, 200, within=10)
    assert r.status == 200 and r.json() == {"status": "ready"}, (r.status, r.body)
    assert wait_status(lenient, 200, within=10).status == 200
    redis_server.stop()
    t0 = time.monotonic()
    # Each worker notices on its own: the first 503 may name one of them only.
    want = "redis unreachable on 2 of 2 workers (admin.ready_requires_store)"
    r = wait_status(g, 503, within=10)
    assert r.status == 503, (r.status, r.body)
    while r.json().get("reason") != want and time.monotonic() - t0 < 10:
        time.sleep(0.02)
        r = admin_get(g, "/readyz")
    took = time.monotonic() - t0
    assert r.json() == {"status": "not ready", "reason": want}, (r.body, f"{took:.2f}s after the stop")
    assert r.header("content-type") == "application/json"
    # The lenient one saw the outage too (its check says so), and stays ready.
    def store_check():
        c = admin_get(lenient, "/readyz?verbose").json()
        return next(x for x in c["checks"] if x["name"] == "store"), c
    assert wait_until(lambda: not store_check()[0]["ok"], 10), store_check()
    check, answer = store_check()
    assert answer["status"] == "ready" and check["required"] is False, answer
    assert admin_get(lenient, "/readyz").status == 200
    assert redis_server.start()  # same port, after stop()
    t0 = time.monotonic()
    # (reconnects back off up to 2 s, with jitter; 10 s is a deadline, not the claim)
    r = wait_status(g, 200, within=10)
    assert r.status == 200, (r.body, f"{time.monotonic() - t0:.2f}s after the restart")
    record(f"readyz: not ready on both workers {took:.2f}s after the stop, "
           f"ready {time.monotonic() - t0:.2f}s after the restart")


def test_admin_port_in_use_is_a_clear_error(tmp_path, upstream):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = run_one_route_gateway(tmp_path, free_port(), upstream.address,
                                  extra=f'admin:\n  listen: "127.0.0.1:{port}"\n')
    assert p.returncode != 0
    out = p.stdout + p.stderr
    assert f"cannot listen on admin.listen 127.0.0.1:{port}" in out, out
    assert "in use" in out.lower(), out
    assert "floodgate listening on" not in out, out


def test_admin_closes_when_the_drain_begins(gateway_factory, upstream):
    # (the upstream's answer may take longer than the 4 s it sleeps: it is not a 504)
    g = with_admin(lambda extra: gateway_factory(extra=extra, upstream_opts={"response_timeout": "20s"}))
    idle = socket.create_connection(("127.0.0.1", g.admin_port), timeout=5)
    with g.connect() as slow:
        # An in-flight request keeps the drain going while the admin is checked.
        slow.sendall(get("/slow?ms=4000"))
        end = time.monotonic() + 10
        while upstream.stats()["requests"] == 0:
            assert time.monotonic() < end, "the slow request never reached the upstream"
            time.sleep(0.02)
        g.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert is_closed(idle, 3.5), "the admin connection still open 3.5 s into the drain"
        took = time.monotonic() - t0
        # ... while the drain goes on: the slow answer has not come yet.
        assert select.select([slow], [], [], 0)[0] == [], f"the admin closed {took:.2f}s in, after the drain"
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", g.admin_port), timeout=1).close()
        assert read_response(slow).status == 200  # the proxy drains meanwhile
    idle.close()
