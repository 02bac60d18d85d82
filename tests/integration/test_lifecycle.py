"""Command line, startup, SIGTERM drain."""
import signal
import socket
import subprocess
import threading
import time

from conftest import BIN, Reader, get, is_closed, read_response


def test_version_and_help():
    out = subprocess.run([BIN, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("floodgate ")
    out = subprocess.run([BIN, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--check" in out.stdout and "--config" in out.stdout


def test_check_reports_every_error_with_position(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("listen: \"127.0.0.1:80\"\nlistn: 1\nupstreams:\n  api:\n    address: nowhere\n"
                   "routes:\n  - name: r\n    match: {path: /x}\n    upstream: apx\n")
    out = subprocess.run([BIN, "--check", "--config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert f"{cfg}:2:1: unknown key 'listn' (did you mean 'listen'?)" in lines
    assert f"{cfg}:5:14: invalid upstream address 'nowhere' (want host:port)" in lines
    assert f"{cfg}:9:15: unknown upstream 'apx' (did you mean 'api'?)" in lines


def test_check_accepts_shipped_config():
    from conftest import ROOT
    out = subprocess.run([BIN, "--check", "--config", str(ROOT / "config" / "floodgate.yaml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_bad_config_does_not_start(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("routes: 3\n")
    out = subprocess.run([BIN, "--config", str(cfg)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and f"{cfg}:1:" in out.stderr


def test_sigterm_drains_in_flight_requests(gateway):
    # An in-flight slow request completes; idle keep-alive connections are closed;
    # new connections are refused; the process exits 0.
    idle = gateway.connect()
    idle.sendall(get("/echo"))
    assert read_response(idle).status == 200
    result = {}

    def slow():
        with gateway.connect() as s:
            s.sendall(get("/slow?ms=1500"))
            result["r"] = read_response(s)

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.5)
    gateway.proc.send_signal(signal.SIGTERM)
    assert is_closed(idle, timeout=3)
    t.join(10)
    assert result["r"].status == 200 and result["r"].body == b"slow"
    assert result["r"].header("connection") == "close"
    assert gateway.proc.wait(10) == 0
    try:
        socket.create_connection(("127.0.0.1", gateway.port), timeout=1).close()
        refused = False
    except OSError:
        refused = True
    assert refused


def test_drain_is_bounded(gateway_factory):
    g = gateway_factory(http={"drain_timeout": "1s"})
    with g.connect() as s:
        s.sendall(get("/slow?ms=1800"))
        time.sleep(0.3)
        start = time.monotonic()
        g.proc.send_signal(signal.SIGTERM)
        assert g.proc.wait(10) == 0
        assert time.monotonic() - start < 1.7
