"""floodgate --health-check URL: the image's HEALTHCHECK, against a real gateway's admin port."""
import socket
import subprocess
import time

import pytest

from conftest import BIN, STARTUP_NOW, Gateway, free_port

# The check's own deadline (src/admin/health_check_client.hpp: --health-check gives up after 3 s). An answer
# is told apart from a timeout by what the check prints; the seconds it took are only
# checked against this, with room for a slow start of the process.
CHECK_TIMEOUT_S = 3.0


def health_check(url, timeout=10):
    start = time.monotonic()
    p = subprocess.run([BIN, "--health-check", url], capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - start


def start_with_admin(tmp_path, upstream, admin_more="", **kw):
    """A gateway with admin.listen on a free port (another one if it was taken meanwhile)."""
    for i in range(3):
        port = free_port()
        sub = tmp_path / f"g{i}"
        sub.mkdir()
        try:
            g = Gateway(sub, upstream.address, extra=f'admin:\n  listen: "127.0.0.1:{port}"\n{admin_more}', **kw)
        except RuntimeError:
            continue
        g.admin_port = port
        return g
    raise RuntimeError("no free admin port")


@pytest.fixture
def admin_gateway(tmp_path, upstream):
    g = start_with_admin(tmp_path, upstream)
    yield g
    assert g.stop() == 0, g.log_text()


def test_ready_gateway_exits_0(admin_gateway):
    for path in ("/readyz", "/healthz"):
        p, took = health_check(f"http://127.0.0.1:{admin_gateway.admin_port}{path}")
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith(f"http://127.0.0.1:{admin_gateway.admin_port}{path}: 200 OK"), p.stdout
        assert p.stderr == ""
        assert took < CHECK_TIMEOUT_S + 5, took  # (answered: the output says so)


def test_404_path_exits_1_saying_so(admin_gateway):
    url = f"http://127.0.0.1:{admin_gateway.admin_port}/nope"
    p, took = health_check(url)
    assert p.returncode == 1
    assert p.stderr.startswith(f"floodgate: {url}: unhealthy: 404 Not Found"), p.stderr
    assert p.stderr.count("\n") == 1
    assert took < CHECK_TIMEOUT_S + 5, took  # (answered: the output says so)


def test_not_ready_exits_1_with_the_reason(tmp_path, upstream):
    # Redis on a port nobody listens on, and the store required for readiness: /readyz
    # answers 503 and says why.
    g = start_with_admin(tmp_path, upstream, admin_more="  ready_requires_store: true\n", store="redis",
                         redis=f"127.0.0.1:{free_port()}", redis_extra=STARTUP_NOW)
    try:
        p, _ = health_check(f"http://127.0.0.1:{g.admin_port}/readyz")
        assert p.returncode == 1, (p.stdout, p.stderr)
        assert "unhealthy: 503 Service Unavailable: {" in p.stderr, p.stderr
        assert "redis unreachable on 1 of 1 workers" in p.stderr, p.stderr
        assert p.stderr.count("\n") == 1
    finally:
        assert g.stop() == 0, g.log_text()


def test_closed_port_exits_1_at_once():
    port = free_port()
    p, took = health_check(f"http://127.0.0.1:{port}/readyz")
    assert p.returncode == 1
    assert f"unhealthy: cannot connect to 127.0.0.1:{port}" in p.stderr, p.stderr
    assert took < CHECK_TIMEOUT_S, took  # refused, not timed out


def test_silent_server_exits_1_after_the_timeout():
    # Listens (the kernel completes the handshake) and never answers.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        p, took = health_check(f"http://127.0.0.1:{s.getsockname()[1]}/readyz")
    assert p.returncode == 1
    assert "unhealthy:" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert "no answer within 3000 ms" in p.stderr, p.stderr
    assert CHECK_TIMEOUT_S <= took < CHECK_TIMEOUT_S + 5, took


@pytest.mark.parametrize("url", ["https://127.0.0.1:9901/readyz", "127.0.0.1:9901/readyz", "http:///x"])
def test_unsupported_url_exits_1(url):
    p, took = health_check(url)
    assert p.returncode == 1
    assert p.stderr.startswith(f"floodgate: --health-check {url}: "), p.stderr
    assert took < CHECK_TIMEOUT_S, took  # refused before any connection
