"""floodgate as a service (issue 50): the readiness protocol a Type=notify systemd unit
reads (READY, RELOADING, STOPPING with STATUS lines, sent to the datagram socket
NOTIFY_SOCKET names, here one the test binds), `floodgate --reload` (the unit's
ExecReload: exits 0 when the reload is applied, 1 when refused), and SIGUSR1 opening the
access log file again after logrotate moved it."""
import os
import signal
import socket
import subprocess

import pytest

from conftest import BIN, get, wait_for
from test_admin import with_admin


@pytest.fixture
def notify_socket(tmp_path):
    path = tmp_path / "notify.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path))
    s.settimeout(10)
    yield s, str(path)
    s.close()


def next_message(sock):
    """The next notification, as {assignment: value}."""
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.splitlines() if "=" in line)


def reload_cli(g):
    return subprocess.run([BIN, "--reload", "--config", str(g.config)], capture_output=True, text=True, timeout=70)


def test_the_service_manager_hears_ready_reloading_and_stopping(gateway_factory, notify_socket):
    sock, path = notify_socket
    g = with_admin(lambda extra: gateway_factory(extra=extra, env={"NOTIFY_SOCKET": path}))
    ready = next_message(sock)
    assert ready.get("READY") == "1" and ready["STATUS"].startswith("serving on 127.0.0.1:"), ready
    # SIGHUP: reloading, then ready again, applied.
    g.proc.send_signal(signal.SIGHUP)
    assert next_message(sock).get("RELOADING") == "1"
    again = next_message(sock)
    assert again.get("READY") == "1" and "reloaded" in again["STATUS"], again
    # A broken file: reloading, then ready on the previous configuration, refused.
    good = g.config.read_text()
    g.config.write_text(good.replace("routes:", "routes: [", 1))
    g.proc.send_signal(signal.SIGHUP)
    seen = [next_message(sock) for _ in range(2)]
    while seen[-1].get("READY") != "1":  # (the file watcher may have reloaded it too)
        seen.append(next_message(sock))
    assert seen[0].get("RELOADING") == "1", seen
    assert "refused" in seen[-1]["STATUS"] and "previous configuration" in seen[-1]["STATUS"], seen
    g.config.write_text(good)
    # SIGTERM: stopping, then the process ends.
    g.proc.send_signal(signal.SIGTERM)
    while True:
        m = next_message(sock)
        if m.get("STOPPING") == "1":
            break
    assert m["STATUS"].startswith("draining"), m
    assert g.proc.wait(15) == 0


def test_reload_exits_0_when_applied_and_1_when_refused(gateway_factory):
    g = with_admin(lambda extra: gateway_factory(extra=extra))
    r = reload_cli(g)
    assert r.returncode == 0 and "reloaded" in r.stdout, (r.stdout, r.stderr)
    good = g.config.read_text()
    # A file the loader refuses (a route to no upstream): a failed reload, the error named
    # (read by --reload itself, which needs the file to find the admin listener; the
    # gateway would refuse it the same way), the old configuration serving.
    g.config.write_text(good.replace("routes:", "routes:\n  - name: broken\n    match: { path_prefix: /x }\n"
                                                "    upstream: nowhere\n", 1))
    r = reload_cli(g)
    assert r.returncode == 1 and "nowhere" in r.stderr, (r.stdout, r.stderr)
    assert g.request(get("/")).status == 200
    g.config.write_text(good)
    assert reload_cli(g).returncode == 0


def test_reload_without_an_admin_listener_says_what_to_do(gateway_factory):
    g = gateway_factory()
    r = reload_cli(g)
    assert r.returncode == 1 and "admin.listen" in r.stderr and "SIGHUP" in r.stderr, r.stderr


def test_sigusr1_opens_the_access_log_again_after_logrotate_moved_it(gateway_factory):
    g = gateway_factory(access_log="file")
    assert g.request(get("/before")).status == 200
    wait_for("the first line", lambda: "/before" in g.access_log.read_text(), 5)
    moved = g.access_log.with_name("access.log.1")
    os.rename(g.access_log, moved)
    g.proc.send_signal(signal.SIGUSR1)
    wait_for("the log opened again", lambda: "access log file opened again" in g.log_text(), 5)
    assert g.request(get("/after")).status == 200
    wait_for("the new file's line", lambda: g.access_log.exists() and "/after" in g.access_log.read_text(), 5)
    assert "/before" in moved.read_text() and "/after" not in moved.read_text()
    assert g.proc.poll() is None
