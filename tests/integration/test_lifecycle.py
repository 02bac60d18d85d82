"""Command line, startup, SIGTERM drain."""
import os
import signal
import socket
import subprocess
import time

from conftest import (BIN, Thread, free_port, get, is_closed, read_response, run_one_route_gateway, wait_for_port,
                      wait_until)


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


def test_sigterm_drains_in_flight_requests(gateway_factory, upstream):
    # An in-flight slow request completes; idle keep-alive connections are closed;
    # new connections are refused; the process exits 0.
    # (the upstream's answer may take longer than the 3 s it sleeps: not a 504)
    gateway = gateway_factory(upstream_opts={"response_timeout": "20s"})
    idle = gateway.connect()
    idle.sendall(get("/echo"))
    assert read_response(idle).status == 200
    upstream.reset()
    result = {}

    def slow():
        with gateway.connect(timeout=30) as s:
            s.sendall(get("/slow?ms=3000"))
            result["r"] = read_response(s)

    t = Thread(target=slow)
    t.start()
    # In flight: the upstream has it.
    assert wait_until(lambda: upstream.stats()["requests"] == 1, 5), upstream.stats()
    gateway.proc.send_signal(signal.SIGTERM)
    assert is_closed(idle, timeout=10)
    assert "r" not in result  # (the idle one closed while the slow one was in flight)
    t.join(30)
    assert result["r"].status == 200 and result["r"].body == b"slow"
    assert result["r"].header("connection") == "close"
    assert gateway.proc.wait(10) == 0
    try:
        socket.create_connection(("127.0.0.1", gateway.port), timeout=1).close()
        refused = False
    except OSError:
        refused = True
    assert refused


def test_signals_while_it_exits_change_nothing(gateway_factory):
    # SIGTERM drains; signals sent all the while after it, through the drain and the
    # teardown that follows, must not end the process by their default action: it
    # exits 0. (A SIGTERM after the drain, while it tore down, gave -15 in about one
    # try in five here: ten tries.)
    for _ in range(10):
        gateway = gateway_factory()
        gateway.killed = True  # (stopped here, not by the fixture)
        p = gateway.proc
        p.send_signal(signal.SIGTERM)
        end = time.monotonic() + 30
        while p.poll() is None and time.monotonic() < end:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    break
            time.sleep(0.0005)
        assert p.wait(5) == 0, gateway.log_text()[-2000:]
        assert "drained; exiting" in gateway.log_text()


def test_drain_is_bounded(gateway_factory, upstream):
    # A request in flight for 20 s is given up after drain_timeout (1 s): the process
    # exits long before its answer would have come.
    g = gateway_factory(http={"drain_timeout": "1s"}, upstream_opts={"response_timeout": "60s"})
    upstream.reset()
    with g.connect() as s:
        s.sendall(get("/slow?ms=20000"))
        assert wait_until(lambda: upstream.stats()["requests"] == 1, 5), upstream.stats()
        start = time.monotonic()
        g.proc.send_signal(signal.SIGTERM)
        assert g.proc.wait(15) == 0
        took = time.monotonic() - start
        assert 1.0 <= took < 10, f"exited {took:.2f}s after SIGTERM (drain_timeout 1 s, the answer due in 20 s)"


def test_a_second_gateway_on_the_same_port_fails_to_start(gateway_factory, upstream, tmp_path):
    """Each worker accepts on a listening socket of its own, the workers' sockets one
    SO_REUSEPORT group: a second process on the port must still fail to start, as with
    one socket, and not take a share of the first one's connections."""
    g = gateway_factory(workers=2)
    p = run_one_route_gateway(tmp_path, g.port, upstream.address, workers=2)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert f"cannot listen on 127.0.0.1:{g.port}" in out and "in use" in out.lower(), out
    assert "floodgate listening on" not in out, out
    # The first one serves every connection, on both of its workers' sockets.
    for _ in range(40):
        with g.connect() as s:
            s.sendall(get("/"))
            assert read_response(s).status == 200


def test_started_with_stdin_stdout_and_stderr_closed(tmp_path, upstream):
    """A supervisor that closes 0-2 must not hand their numbers to sockets: the access log
    (stdout) would then write into a client's connection."""
    port = free_port()
    cfg = tmp_path / "closed-std.yaml"
    cfg.write_text(f"""listen: "127.0.0.1:{port}"
workers: 2
log:
  access_log: stdout
upstreams:
  api:
    address: "127.0.0.1:{upstream.port}"
routes:
  - name: all
    match:
      path_prefix: /
    upstream: api
""")
    proc = subprocess.Popen([BIN, "--config", str(cfg)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=lambda: [os.close(fd) for fd in (0, 1, 2)])
    try:
        wait_for_port(port, proc=proc)
        for fd in (0, 1, 2):
            assert os.readlink(f"/proc/{proc.pid}/fd/{fd}") == "/dev/null", fd
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(get("/closed-std"))
                r = read_response(s)
                assert r.status == 200 and b"/closed-std" in r.body
                s.sendall(get("/again"))
                r = read_response(s)
                assert r.status == 200 and b"/again" in r.body
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0
