"""Who may read and who may change the admin listener: /healthz, /readyz and /metrics are
open; /config, /limits and POST /reload need admin.token (bearer) on a listener other
machines reach, and a header a web page cannot send on a loopback one; a Host that is not
the listener's is refused (DNS rebinding); the probes answer through a flood of idle
connections; /limits has a call budget."""
import socket
import subprocess
import time

import pytest

from conftest import BIN, Thread, free_port, per_client_route, read_response, wait_until
from test_admin import ADMIN_POST_HEADER

TOKEN = "f1oodgate-test-token-0123456789abcdef"
LIMITED = per_client_route()


def start_admin(gateway_factory, listen_host, more="", routes=None):
    for _ in range(3):
        port = free_port()
        extra = f'admin:\n  listen: "{listen_host}:{port}"\n{more}'
        try:
            g = gateway_factory(extra=extra, routes=routes)
        except RuntimeError:  # the admin port was taken meanwhile
            continue
        g.admin_port = port
        return g
    raise RuntimeError("no free admin port")


def call(g, method, path, headers="", host="127.0.0.1", source=None, timeout=5):
    s = socket.socket()
    s.settimeout(timeout)
    if source:
        s.bind((source, 0))
    s.connect(("127.0.0.1", g.admin_port))
    with s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n".encode())
        return read_response(s)


BEARER = f"Authorization: Bearer {TOKEN}\r\n"
PRIVILEGED = [("GET", "/config"), ("GET", "/upstreams"), ("GET", "/limits?route=r&header.X-Client=a"),
              ("POST", "/limits/reset?route=r&header.X-Client=a"),
              ("POST", "/limits/grant?route=r&header.X-Client=a&amount=5"), ("POST", "/reload")]


@pytest.fixture
def wide(gateway_factory):
    """A gateway whose admin listens on every address, with a token."""
    return start_admin(gateway_factory, "0.0.0.0", f'  token: "{TOKEN}"\n', routes=LIMITED)


@pytest.mark.parametrize("method,path", PRIVILEGED)
def test_each_privileged_endpoint_needs_the_token(wide, method, path):
    g = wide
    none = call(g, method, path)
    assert none.status == 401, (none.status, none.body)
    assert none.header("www-authenticate").startswith("Bearer"), none.headers
    assert TOKEN not in none.body.decode()
    for wrong in ("Bearer nope", f"Bearer {TOKEN}x", f"Basic {TOKEN}", f"Bearer {TOKEN[:-1]}"):
        r = call(g, method, path, f"Authorization: {wrong}\r\n")
        assert r.status == 401, (wrong, r.status)
    # the header that stands in for a token on loopback is no token
    assert call(g, method, path, ADMIN_POST_HEADER).status == 401
    ok = call(g, method, path, BEARER)
    assert ok.status == 200, (ok.status, ok.body)
    assert TOKEN not in ok.body.decode()


def test_the_probes_and_metrics_need_no_token(wide):
    for path in ("/healthz", "/readyz", "/metrics"):
        r = call(wide, "GET", path)
        assert r.status == 200, (path, r.status, r.body)


def test_a_host_that_is_not_the_listeners_is_refused(wide):
    g = wide
    # a DNS rebinding page: its own name in Host, even with the token it cannot have
    for path in ("/metrics", "/config"):
        r = call(g, "GET", path, BEARER, host="evil.example:9901")
        assert r.status == 403, (path, r.status)
        assert b"admin.hosts" in r.body
    # addresses and localhost are the listener's; the probes answer any Host
    for host in ("127.0.0.1", f"127.0.0.1:{g.admin_port}", "localhost", "[::1]:9901", "10.1.2.3"):
        assert call(g, "GET", "/metrics", host=host).status == 200, host
    assert call(g, "GET", "/healthz", host="evil.example").status == 200
    assert call(g, "GET", "/readyz", host="evil.example").status == 200


def test_configured_names_are_accepted(gateway_factory):
    g = start_admin(gateway_factory, "127.0.0.1", "  hosts: [gw.internal]\n")
    assert call(g, "GET", "/config", host="GW.Internal:9901").status == 200
    assert call(g, "GET", "/config", host="gw.internal.evil").status == 403


def test_a_web_page_cannot_reload_a_loopback_admin(gateway_factory):
    g = start_admin(gateway_factory, "127.0.0.1")
    # a form's body-less POST: no custom header
    r = call(g, "POST", "/reload")
    assert r.status == 403, (r.status, r.body)
    assert b"X-Floodgate-Admin" in r.body
    # a page's fetch() with the header would need a preflight; it also sends Origin
    r = call(g, "POST", "/reload", ADMIN_POST_HEADER + "Origin: http://evil.example\r\n")
    assert r.status == 403, (r.status, r.body)
    assert call(g, "GET", "/config", "Origin: http://evil.example\r\n").status == 403
    ok = call(g, "POST", "/reload", ADMIN_POST_HEADER)
    assert ok.status == 200, (ok.status, ok.body)
    assert call(g, "GET", "/config").status == 200


def test_a_reachable_admin_without_a_token_does_not_start(tmp_path):
    cfg = tmp_path / "floodgate.yaml"
    cfg.write_text('listen: "127.0.0.1:0"\nadmin:\n  listen: "0.0.0.0:9901"\n'
                   'upstreams:\n  api:\n    address: "127.0.0.1:9"\n'
                   'routes:\n  - name: all\n    match:\n      path_prefix: /\n    upstream: api\n')
    for args in (["--check", "--config", str(cfg)], ["--config", str(cfg)]):
        out = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=30)
        text = out.stdout + out.stderr
        assert out.returncode != 0, text
        assert f"{cfg}:3:" in text and "set admin.token" in text, text


def hold_idle(source, port, n, stop, held, reconnect=True):
    """Holds `n` idle connections from `source` to the admin port, reconnecting each one
    the gateway closes (with `reconnect`), until stop is set; counts the connections it
    made."""
    socks = []
    while not stop.is_set():
        if reconnect or held[0] < n:
            socks = [s for s in socks if not is_dead(s)]
        while len(socks) < n and not stop.is_set() and (reconnect or held[0] < n):
            s = socket.socket()
            s.setblocking(True)
            s.bind((source, 0))
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                s.close()
                break
            s.setblocking(False)
            socks.append(s)
            held[0] += 1
        time.sleep(0.01)
    for s in socks:
        s.close()


def is_dead(s):
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


@pytest.mark.parametrize("flood_from,reconnect", [("127.0.0.2", True), ("127.0.0.1", False)])
def test_probes_answer_through_a_flood_of_idle_connections(gateway_factory, flood_from, reconnect):
    """100 idle sockets held on the admin port: from another address than the probes',
    reconnected as fast as the gateway closes them (the per-peer cap keeps that address
    to 16, the others' room is theirs); and from the probes' own address, held (each
    probe takes the place of the longest idle). Every probe answers. (From the probes'
    own address and reconnecting in a tight loop, a flood can get a probe closed in the
    moment before its request arrives: a cap per address cannot tell the two apart.)"""
    import threading
    g = start_admin(gateway_factory, "127.0.0.1")
    stop, held = threading.Event(), [0]
    flood = Thread(target=hold_idle, args=(flood_from, g.admin_port, 100, stop, held, reconnect))
    flood.start()
    try:
        assert wait_until(lambda: held[0] >= 100, 10), held[0]
        statuses, slowest = [], 0.0
        for _ in range(50):
            started = time.monotonic()
            statuses.append(call(g, "GET", "/healthz", timeout=5).status)
            statuses.append(call(g, "GET", "/readyz", timeout=5).status)
            slowest = max(slowest, time.monotonic() - started)
        print(f"flood from {flood_from}: {held[0]} connections made; slowest pair of probes {slowest:.3f}s")
        assert statuses == [200] * 100, statuses
        assert g.proc.poll() is None
    finally:
        stop.set()
        flood.join(10)


def test_limits_has_a_call_budget(gateway_factory):
    """Per peer 2 a minute (a burst of 2, then one more every 30 s: nothing refills during
    the test, however slow the machine), 100 a second in all."""
    g = start_admin(gateway_factory, "127.0.0.1", "  limits_rate: 100/s\n  limits_rate_per_peer: 2/m\n",
                    routes=LIMITED)
    path = "/limits?route=r&header.X-Client=a"
    responses = [call(g, "GET", path) for _ in range(10)]
    statuses = [r.status for r in responses]
    assert statuses == [200] * 2 + [429] * 8, statuses
    assert all(r.header("retry-after") for r in responses[2:]), [r.headers for r in responses[2:]]
    # another peer's budget is its own
    assert call(g, "GET", path, source="127.0.0.2").status == 200
    # the open endpoints are not counted against it
    assert call(g, "GET", "/healthz").status == 200
