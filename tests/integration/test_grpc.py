"""gRPC through the gateway: HTTP/2 upstreams (upstreams.<name>.protocol: h2), every
stream shape, trailers, deadlines and cancellations end to end, and limits answered as
gRPC statuses. Real parts: Debian's python3-grpcio as the server (grpc_origin.py, a
process of its own) and as the client, over prior-knowledge h2c and over TLS (ALPN h2)
to the gateway."""
import json
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from conftest import SANITIZED, record, wait_for
from h2client import H2
from protocols import make_certificate
from test_tracing import TRACEPARENT, Collector, exporting

HERE = Path(__file__).resolve().parent
CLEARTEXT = "http2:\n  cleartext: true\n"


class Origin:
    """grpc_origin.py in a process of its own."""

    def __init__(self, name="origin", tls=None, port=0, max_streams=0):
        args = [sys.executable, str(HERE / "grpc_origin.py"), "--name", name, "--port", str(port),
                "--max-streams", str(max_streams)]
        if tls:
            args += ["--tls", str(tls[0]), str(tls[1])]
        self.name = name
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"grpc_origin did not start: {line!r} {self.proc.stderr.read()}")
        self.port = int(line)
        self.address = f"127.0.0.1:{self.port}"

    def stats(self):
        with grpc.insecure_channel(self.address) as ch:
            return json.loads(ch.unary_unary("/test.Echo/Stats")(b"", timeout=5))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def origins():
    made = []

    def make(**kw):
        o = Origin(**kw)
        made.append(o)
        return o

    yield make
    for o in made:
        o.stop()


def grpc_gateway(gateway_factory, servers, routes=None, extra="", upstream_extra="", client_tls=False, **kw):
    """A gateway whose upstream `api` is `servers` (gRPC origins) over h2c, its plain
    listener serving h2c (and a TLS listener when client_tls)."""
    items = "\n".join(f'      - "{s}"' for s in servers)
    upstreams = (f"  api:\n    protocol: h2\n    servers:\n{items}\n    connect_timeout: 1s\n"
                 f"    response_timeout: 5s\n{upstream_extra}")
    return gateway_factory(upstreams=upstreams, routes=routes, extra=CLEARTEXT + extra,
                           protocol="h2" if client_tls else "http1", **kw)


def channel(g, tls=False):
    if not tls:
        return grpc.insecure_channel(f"127.0.0.1:{g.port}")
    cert, _ = make_certificate(g.config.parent)
    creds = grpc.ssl_channel_credentials(root_certificates=Path(cert).read_bytes())
    return grpc.secure_channel(f"localhost:{g.tls_port}", creds)


def method(ch, kind, name):
    return getattr(ch, kind)(f"/test.Echo/{name}")


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
def test_every_stream_shape_goes_through(gateway_factory, origins, tls):
    o = origins()
    g = grpc_gateway(gateway_factory, [o.address], client_tls=tls)
    with channel(g, tls) as ch:
        # unary, with its trailers
        reply, call = method(ch, "unary_unary", "Unary").with_call(b"hello", timeout=10)
        assert reply == b"hello"
        assert ("x-trailer", "origin") in call.trailing_metadata()
        assert call.code() == grpc.StatusCode.OK
        # a 1,000-message server stream
        got = list(method(ch, "unary_stream", "ServerStream")(b"1000", timeout=30))
        assert len(got) == 1000 and got[0].startswith(b"0.") and got[-1].startswith(b"999")
        # a client stream
        parts = [bytes([65 + i % 26]) * 1000 for i in range(200)]
        assert method(ch, "stream_unary", "ClientStream")(iter(parts), timeout=30) == b"".join(parts)
        # bidirectional ping-pong: each message answered before the next is sent
        outbox, inbox = [], []
        ready = threading.Semaphore(0)

        def requests():
            for i in range(50):
                msg = f"ping {i}".encode()
                outbox.append(msg)
                yield msg
                assert ready.acquire(timeout=10), f"no answer to ping {i}"

        for r in method(ch, "stream_stream", "Bidi")(requests(), timeout=30):
            inbox.append(r)
            ready.release()
        assert inbox == outbox


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
def test_status_details_and_trailers_come_through_intact(gateway_factory, origins, tls):
    o = origins()
    g = grpc_gateway(gateway_factory, [o.address], client_tls=tls)
    with channel(g, tls) as ch:
        with pytest.raises(grpc.RpcError) as e:
            method(ch, "unary_unary", "Fail")(b"x", timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == "bad thing"
        assert ("x-trailer", "failed") in e.value.trailing_metadata()


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
def test_a_deadline_that_expires_and_a_cancelled_call_cancel_the_upstream_stream(gateway_factory, origins, tls):
    o = origins()
    g = grpc_gateway(gateway_factory, [o.address], client_tls=tls)
    with channel(g, tls) as ch:
        hang = method(ch, "unary_unary", "Hang")
        with pytest.raises(grpc.RpcError) as e:
            hang(b"", timeout=0.5)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_for("the upstream call cancelled by the deadline", lambda: o.stats()["cancelled"] == 1, 10)
        f = hang.future(b"", timeout=30)
        wait_for("the call begun upstream", lambda: o.stats()["calls"] == 2, 10)
        f.cancel()
        wait_for("the upstream call cancelled with the client's", lambda: o.stats()["cancelled"] == 2, 10)
        # the connection to the server serves on
        assert method(ch, "unary_unary", "Unary")(b"after", timeout=10) == b"after"


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
def test_a_denied_call_is_resource_exhausted_per_client_by_metadata(gateway_factory, origins, tls):
    o = origins()
    routes = """  - name: rpc
    match:
      path_prefix: /test.Echo/
    upstream: api
    limits:
      - name: per-client
        algorithm: fixed_window
        key: header:x-client
        limit: 2
        window: 1h
"""
    g = grpc_gateway(gateway_factory, [o.address], routes=routes, client_tls=tls)
    with channel(g, tls) as ch:
        unary = method(ch, "unary_unary", "Unary")
        for _ in range(2):
            assert unary(b"a", metadata=(("x-client", "alice"),), timeout=10) == b"a"
        with pytest.raises(grpc.RpcError) as e:
            unary(b"a", metadata=(("x-client", "alice"),), timeout=10)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        md = dict(e.value.trailing_metadata() or ()) | dict(e.value.initial_metadata() or ())
        assert any(k.startswith("ratelimit") for k in md), md  # the rate headers kept as metadata
        assert unary(b"b", metadata=(("x-client", "bob"),), timeout=10) == b"b"


def test_the_denial_status_is_configurable(gateway_factory, origins):
    o = origins()
    routes = """  - name: rpc
    match:
      path_prefix: /
    upstream: api
    response:
      grpc_status: 14
    limits:
      - name: one
        algorithm: fixed_window
        key: global
        limit: 1
        window: 1h
"""
    g = grpc_gateway(gateway_factory, [o.address], routes=routes)
    with channel(g) as ch:
        unary = method(ch, "unary_unary", "Unary")
        assert unary(b"a", timeout=10) == b"a"
        with pytest.raises(grpc.RpcError) as e:
            unary(b"a", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
def test_an_upstream_killed_mid_stream_is_unavailable_and_the_next_call_goes_on(gateway_factory, origins, tls):
    a, b = origins(name="a"), origins(name="b")
    g = grpc_gateway(gateway_factory, [a.address, b.address], client_tls=tls)
    with channel(g, tls) as ch:
        stream = method(ch, "unary_stream", "ServerStream")(b"100000:64", timeout=60)
        assert next(stream).startswith(b"0")
        victim, other = (a, b) if a.stats()["streams"] == 1 else (b, a)
        victim.stop()
        with pytest.raises(grpc.RpcError) as e:
            for _ in stream:
                pass
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
        for _ in range(4):
            reply, call = method(ch, "unary_unary", "Unary").with_call(b"next", timeout=10)
            assert reply == b"next"
            assert ("x-trailer", other.name) in call.trailing_metadata()


def test_a_server_stopped_with_sigterm_costs_no_call_and_the_shares_are_exact(gateway_factory, origins):
    a, b = origins(name="a"), origins(name="b")
    g = grpc_gateway(gateway_factory, [a.address, b.address])
    with channel(g) as ch:
        unary = method(ch, "unary_unary", "Unary")
        # round robin over two servers: exactly half each
        for i in range(100):
            assert unary(b"%d" % i, timeout=10) == b"%d" % i
        assert (a.stats()["unary"], b.stats()["unary"]) == (50, 50)
        # calls in flight from several threads while `a` stops gracefully (GOAWAY)
        failures, done = [], [0]
        stop = threading.Event()

        def load():
            while not stop.is_set():
                try:
                    assert unary(b"x", timeout=10) == b"x"
                    done[0] += 1
                except grpc.RpcError as e:
                    failures.append(e.code())

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        wait_for("calls under way", lambda: done[0] >= 50, 10)
        a.proc.send_signal(signal.SIGTERM)
        a.proc.wait(15)
        before = done[0]
        wait_for("calls after the stop", lambda: done[0] >= before + 100, 20)
        stop.set()
        for t in threads:
            t.join(15)
        # grpc-core's server answers CANCELLED to a call that arrives between its shutdown
        # and its GOAWAY reaching the gateway, before the gateway can tell that the server
        # is going away (proxying.md, gRPC): at most those few; nothing else fails.
        record(f"SIGTERM under load: {done[0]} calls, {len(failures)} answered CANCELLED by the server shutting down")
        assert set(failures) <= {grpc.StatusCode.CANCELLED}, failures[:3]
        assert len(failures) <= 4, failures


def grpc_frame(payload):
    return struct.pack(">BI", 0, len(payload)) + payload


def test_a_slow_reader_of_a_server_stream_pauses_the_upstream_not_the_gateways_memory(gateway_factory, origins):
    """16 MiB of messages offered, a client that opens no window: the gateway holds its
    windows' worth (the upstream stream's 64 KiB, the client's), the origin is paused."""
    o = origins()
    g = grpc_gateway(gateway_factory, [o.address])
    rss0 = g.rss_kib()
    c = H2(g.port, auto_ack=False)
    c.conn.update_settings({4: 65535})  # (INITIAL_WINDOW_SIZE: the default, never opened again)
    sid = c.request("/test.Echo/ServerStream", method="POST",
                    headers=[("content-type", "application/grpc"), ("te", "trailers")],
                    body=grpc_frame(b"4096:4096"))
    r = c.responses[sid]
    assert c.pump(lambda: len(r.body) >= 60_000, 10), "the stream's first window never came"
    # the origin hands messages on until the windows between it and the client are full
    sent = wait_for_steady(lambda: o.stats()["sent"], 3)
    growth = g.rss_kib() - rss0
    record(f"slow reader: the origin paused after {sent} of 4096 messages of 4 KiB; gateway RSS +{growth} KiB")
    assert sent < 1024, f"{sent} messages of 4 KiB left the origin for a client that read 64 KiB"
    assert growth < (64 if SANITIZED else 8) * 1024, growth
    c.close()


def wait_for_steady(read, seconds):
    """read()'s value once it has not changed for `seconds` (within 30 s)."""
    end, last, since = time.monotonic() + 30, read(), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.2)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return last
    raise AssertionError(f"still moving after 30 s: {last}")


def test_the_gateway_ends_a_call_at_its_grpc_timeout_and_cancels_it_upstream(gateway_factory, origins):
    """A client that sends grpc-timeout but never cancels (not a gRPC library): the
    gateway ends the call DEADLINE_EXCEEDED and resets the upstream stream."""
    o = origins()
    g = grpc_gateway(gateway_factory, [o.address])
    with H2(g.port) as c:
        t0 = time.monotonic()
        sid = c.request("/test.Echo/Hang", method="POST", body=grpc_frame(b""),
                        headers=[("content-type", "application/grpc"), ("te", "trailers"), ("grpc-timeout", "300m")])
        r = c.wait(sid, 15)
        took = time.monotonic() - t0
        fields = dict(r.headers or ()) | dict(r.trailers or ())
        assert fields.get("grpc-status") == "4", (r.headers, r.trailers, r.reset)
        assert took >= 0.3, took
    wait_for("the upstream call cancelled", lambda: o.stats()["cancelled"] == 1, 10)


def test_the_access_log_says_each_calls_grpc_status(gateway_factory, origins):
    o = origins()
    routes = """  - name: rpc
    match:
      path_prefix: /
    upstream: api
    limits:
      - name: two
        algorithm: fixed_window
        key: global
        limit: 2
        window: 1h
"""
    g = gateway_factory(upstreams=f"  api:\n    protocol: h2\n    address: \"{o.address}\"\n", routes=routes,
                        extra=CLEARTEXT, access_log="file", log_format="json")
    with channel(g) as ch:
        assert method(ch, "unary_unary", "Unary")(b"a", timeout=10) == b"a"
        with pytest.raises(grpc.RpcError):
            method(ch, "unary_unary", "Fail")(b"a", timeout=10)
        with pytest.raises(grpc.RpcError):
            method(ch, "unary_unary", "Unary")(b"a", timeout=10)
    wait_for("three access-log lines", lambda: len(g.access_log.read_text().splitlines()) >= 3, 5)
    lines = [json.loads(x) for x in g.access_log.read_text().splitlines()]
    assert [(x["status"], x["grpc_status"]) for x in lines] == [(200, 0), (200, 3), (429, 8)]


def test_grpc_health_checks_take_a_server_out_and_bring_it_back(gateway_factory, origins):
    a, b = origins(name="a"), origins(name="b")
    health = ("    health:\n      path: /grpc.health.v1.Health/Check\n      interval: 1s\n"
              "      timeout: 1s\n      rise: 1\n      fall: 1\n")
    g = grpc_gateway(gateway_factory, [a.address, b.address], upstream_extra=health)
    wait_for("both servers checked", lambda: a.stats()["checks"] >= 1 and b.stats()["checks"] >= 1, 10)
    with channel(g) as ch, grpc.insecure_channel(a.address) as direct:
        unary = method(ch, "unary_unary", "Unary")
        method(direct, "unary_unary", "SetHealth")(b"not serving", timeout=5)
        checks = a.stats()["checks"]
        wait_for("a's next checks", lambda: a.stats()["checks"] >= checks + 2, 10)
        before = a.stats()["unary"]
        for _ in range(20):
            assert unary(b"x", timeout=10) == b"x"
        assert a.stats()["unary"] == before, "a NOT_SERVING server got calls"
        method(direct, "unary_unary", "SetHealth")(b"serving", timeout=5)
        checks = a.stats()["checks"]
        wait_for("a's next checks", lambda: a.stats()["checks"] >= checks + 2, 10)
        for _ in range(20):
            assert unary(b"x", timeout=10) == b"x"
        assert a.stats()["unary"] == before + 10


@pytest.mark.parametrize("shape", ["Unary", "ServerStream"], ids=["trailers-only", "after-messages"])
def test_eject_counts_a_calls_grpc_status_as_the_http_status_it_maps_to(gateway_factory, origins, shape):
    """eject.statuses: [503] against a server that answers UNAVAILABLE (14, which maps to
    503), in a trailers-only answer or in trailers after two messages: its three failures
    in a row eject it, and every call after goes to the other server. The metrics count
    each call by its grpc-status."""
    from test_admin import admin_get, with_admin
    from test_metrics import scrape, value
    a, b = origins(name="a"), origins(name="b")
    with grpc.insecure_channel(b.address) as direct:
        method(direct, "unary_unary", "SetFailing")(b"unavailable", timeout=5)
    eject = "    eject:\n      failures: 3\n      statuses: [503]\n      base_time: 60s\n"
    g = with_admin(lambda extra: grpc_gateway(gateway_factory, [a.address, b.address], extra=extra,
                                              upstream_extra=eject))
    codes = []
    with channel(g) as ch:
        for _ in range(20):
            try:
                if shape == "Unary":
                    method(ch, "unary_unary", "Unary")(b"x", timeout=10)
                else:
                    list(method(ch, "unary_stream", "ServerStream")(b"3", timeout=10))
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
    assert codes.count(grpc.StatusCode.UNAVAILABLE) == 3 and codes.count(grpc.StatusCode.OK) == 17, codes
    servers = {s["address"]: s for s in json.loads(admin_get(g, "/upstreams").body)["upstreams"][0]["servers"]}
    assert servers[b.address]["state"] == "ejected" and servers[b.address]["ejections"] == 1, servers
    assert servers[a.address]["failures"] == 0 and servers[a.address]["state"] == "up", servers
    series, _ = scrape(g)
    route = "all"
    assert value(series, "floodgate_grpc_responses_total", route=route, grpc_status="14") == 3, series
    assert value(series, "floodgate_grpc_responses_total", route=route, grpc_status="0") == 17, series


def test_an_http1_client_reaches_an_h2_upstream_and_upstreams_names_the_protocol(gateway_factory, origins):
    """HTTP/1.1 in front, HTTP/2 behind: the request goes up as a stream (its body with
    it), the answer comes down chunked (its trailers, which HTTP/1.1 would carry in a
    trailer section, are dropped)."""
    from test_admin import admin_get, with_admin
    o = origins()
    g = with_admin(lambda extra: grpc_gateway(gateway_factory, [o.address], extra=extra))
    body = grpc_frame(b"over http/1.1")
    raw = (b"POST /test.Echo/Unary HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/grpc\r\nTE: trailers\r\n"
           b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    r = g.request(raw)
    assert r.status == 200, (r.status, r.body)
    assert r.body == body, r.body
    ups = json.loads(admin_get(g, "/upstreams").body)
    assert [u["protocol"] for u in ups["upstreams"]] == ["h2"], ups


def test_an_h2_upstream_over_tls_by_alpn(gateway_factory, origins, tmp_path):
    cert, key = make_certificate(tmp_path)
    o = origins(tls=(cert, key))
    upstreams = (f"  api:\n    protocol: h2\n    address: \"{o.address}\"\n"
                 f"    tls:\n      ca: \"{cert}\"\n      server_name: localhost\n")
    g = gateway_factory(upstreams=upstreams, extra=CLEARTEXT)
    with channel(g) as ch:
        reply, call = method(ch, "unary_unary", "Unary").with_call(b"over tls", timeout=10)
        assert reply == b"over tls" and ("x-trailer", "origin") in call.trailing_metadata()
        got = list(method(ch, "unary_stream", "ServerStream")(b"100", timeout=30))
        assert len(got) == 100


def test_a_store_failure_under_deny_is_unavailable(gateway_factory, origins):
    """Redis unreachable, on_store_error: deny: a gRPC call gets 14 (UNAVAILABLE), not
    the denial's RESOURCE_EXHAUSTED (a client may retry it elsewhere)."""
    from conftest import STARTUP_NOW, free_port
    o = origins()
    routes = """  - name: rpc
    match:
      path_prefix: /
    upstream: api
    on_store_error: deny
    limits:
      - name: per-client
        algorithm: fixed_window
        key: header:x-client
        limit: 100
        window: 1m
"""
    g = gateway_factory(upstreams=f"  api:\n    protocol: h2\n    address: \"{o.address}\"\n", routes=routes,
                        extra=CLEARTEXT, store="redis", redis=f"127.0.0.1:{free_port()}", redis_extra=STARTUP_NOW)
    with channel(g) as ch:
        with pytest.raises(grpc.RpcError) as e:
            method(ch, "unary_unary", "Unary")(b"x", metadata=(("x-client", "a"),), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
    assert o.stats()["unary"] == 0


def test_a_bidirectional_flood_both_ways_at_once_comes_through_intact(gateway_factory, origins):
    """The client sends without waiting for answers while the server answers each as it
    comes: the request body goes up while the response comes down, each message whole."""
    o = origins()
    g = grpc_gateway(gateway_factory, [o.address])
    outbox = [bytes([i % 251]) * 4096 + b"%d" % i for i in range(500)]
    with channel(g) as ch:
        inbox = list(method(ch, "stream_stream", "Bidi")(iter(outbox), timeout=60))
    assert len(inbox) == len(outbox)
    assert inbox == outbox, next(i for i, (a, b) in enumerate(zip(inbox, outbox)) if a != b)


def test_a_client_gone_quiet_ends_its_call_and_counts_against_no_server(gateway_factory, origins):
    """A client stream that sends one message and then nothing: stream_idle_timeout ends
    it, on the client's account (the server is not charged a failure)."""
    from test_admin import admin_get, with_admin
    o = origins()
    g = with_admin(lambda extra: grpc_gateway(gateway_factory, [o.address], extra=extra,
                                              upstream_extra="    stream_idle_timeout: 1s\n"))
    release = threading.Event()

    def one_then_quiet():
        yield b"first"
        release.wait(20)

    with channel(g) as ch:
        f = method(ch, "stream_unary", "ClientStream").future(one_then_quiet(), timeout=30)
        with pytest.raises(grpc.RpcError) as e:
            f.result(timeout=20)
        release.set()
        assert e.value.code() != grpc.StatusCode.OK
    ups = json.loads(admin_get(g, "/upstreams").body)
    servers = ups["upstreams"][0]["servers"]
    assert [s["failures"] for s in servers] == [0], servers


def test_a_server_gone_silent_is_offered_no_more_calls(gateway_factory):
    """A server that takes connections and never answers (a hung process): the call's
    head times out (UNAVAILABLE), and the connection, silent throughout, is not given
    the next call: a new one is made."""
    import socket
    accepted, conns = [], []
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    stop = threading.Event()

    def accept():
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = lsock.accept()
            except OSError:
                continue
            accepted.append(1)
            conns.append(c)  # (held open, read by nobody: a black hole)

    t = threading.Thread(target=accept)
    t.start()
    try:
        address = f"127.0.0.1:{lsock.getsockname()[1]}"
        g = gateway_factory(upstreams=f"  api:\n    protocol: h2\n    address: \"{address}\"\n"
                                      "    response_timeout: 500ms\n    retries: 0\n", extra=CLEARTEXT)
        with channel(g) as ch:
            for n in (1, 2):
                with pytest.raises(grpc.RpcError) as e:
                    method(ch, "unary_unary", "Unary")(b"x", timeout=10)
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE
                assert len(accepted) == n, f"call {n}: {len(accepted)} connections"
        assert "silent for a whole call's timeout" in g.log_text()
    finally:
        stop.set()
        t.join(5)
        for c in conns:
            c.close()
        lsock.close()


def test_a_connection_full_at_the_servers_max_streams_makes_another(gateway_factory, origins):
    """A server that takes 2 streams per connection and 6 calls at once: all 6 run
    upstream together, on the connections the gateway adds as each fills."""
    o = origins(max_streams=2)
    g = grpc_gateway(gateway_factory, [o.address])
    with channel(g) as ch:
        hang = method(ch, "unary_unary", "Hang")
        calls = [hang.future(b"", timeout=30) for _ in range(6)]
        wait_for("6 calls under way upstream at once", lambda: o.stats()["calls"] == 6, 15)
        for c in calls:
            c.cancel()
        wait_for("every call cancelled upstream", lambda: o.stats()["cancelled"] == 6, 15)


def test_a_calls_spans_name_the_try_the_grpc_server_was_told_of(gateway_factory, origins):
    # tracing.export to an HTTP/2 upstream: the try's span id goes in the HEADERS the
    # server gets (the traceparent's parent), as over HTTP/1.1 (test_tracing.py).
    o = origins()
    collector = Collector()
    try:
        g = grpc_gateway(gateway_factory, [o.address], extra=exporting(collector.where()))
        with channel(g) as ch:
            seen = dict(json.loads(method(ch, "unary_unary", "Metadata")(b"", timeout=10)))
        m = TRACEPARENT.match(seen.get("traceparent", ""))
        assert m and m.group(3) == "01", seen
        (span,) = wait_for("the call's span", lambda: collector.requests_spans(), 10)
        assert span["traceId"] == m.group(1) and span["name"] == "POST all", span
        assert span["attrs"]["rpc.grpc.status_code"] == "0" and span["attrs"]["network.protocol.version"] == "2"
        (attempt,) = collector.children(span)
        assert attempt["spanId"] == m.group(2), (attempt, seen)
        assert attempt["attrs"]["server.address"] == o.address and attempt["attrs"]["http.response.status_code"] == "200"
    finally:
        collector.stop()
