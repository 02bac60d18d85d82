"""HTTP/2 to clients (http2:): ALPN h2 on the TLS listener, prior knowledge on the plain
one (http2.cleartext), each stream one request through the routes and limits as HTTP/1.1
requests go (Host from :authority, cookies joined, a body without a length sent
chunked, both bodies streamed), flow control that stalls only the stream whose client
reads nothing, and every bound a hostile client meets (streams at once, the decoded
head's size, CONTINUATION, rapid resets, resets the gateway is made to send, frames
that serve no request, idle and silent connections), each ending the offender's
connection with GOAWAY while another connection is answered. Real clients: curl,
nghttp and h2load (Debian's nghttp2-client), python3-h2."""
import json
import os
import shutil
import socket
import subprocess
import time

import pytest
from hyperframe.frame import (ContinuationFrame, DataFrame, HeadersFrame, PingFrame, PriorityFrame,
                              RstStreamFrame, SettingsFrame, WindowUpdateFrame)

from conftest import SANITIZED, record, wait_for
from h2client import H2, RawH2, goaway_of
from test_admin import with_admin
from test_metrics import scrape, value
from test_tls import make_cert, tls_section

CLEARTEXT = "http2:\n  cleartext: true\n"
ENHANCE_YOUR_CALM, NO_ERROR, PROTOCOL_ERROR, REFUSED_STREAM = 0xB, 0x0, 0x1, 0x7


def start(gateway_factory, extra="", http2=CLEARTEXT, **kw):
    return gateway_factory(extra=http2 + extra, **kw)


def echo(r):
    assert r.status == 200, (r.status, r.body[:200])
    return json.loads(r.body)


def upstream_header(body, name):
    return [v for k, v in body["headers"] if k.lower() == name]


# What a test's abuse may add to the gateway's peak RSS (the sanitizer's allocator keeps
# freed memory in quarantine: more room there).
RSS_GROWTH_KIB = (256 if SANITIZED else 48) * 1024


def new_sockets(g, before):
    """The gateway's sockets that were not among `before` (fd_names)."""
    return {n for n in fd_names(g) - before if n.startswith("socket:")}


def sockets_given_back(g, before, deadline_s=10):
    """At most one new socket (the upstream's pooled connection) within the deadline;
    else which sockets stayed, with their TCP states (/proc/net/tcp)."""
    end = time.monotonic() + deadline_s
    while len(new_sockets(g, before)) > 1 and time.monotonic() < end:
        time.sleep(0.05)
    left = new_sockets(g, before)
    if len(left) > 1:
        inodes = {n[len("socket:["):-1] for n in left}
        rows = [line for f in ("/proc/net/tcp", "/proc/net/tcp6") for line in open(f).read().splitlines()[1:]
                if line.split()[9] in inodes]
        raise AssertionError(f"sockets not given back: {sorted(left)}\n" + "\n".join(rows) + "\n" + g.log_text()[-2000:])


def fd_names(g):
    """What the gateway's descriptors are (socket:[inode], anon_inode:..., paths): a
    descriptor the process opens for itself meanwhile (a watch, a timer) is told from a
    connection's."""
    out = set()
    for fd in os.listdir(f"/proc/{g.proc.pid}/fd"):
        try:
            out.add(os.readlink(f"/proc/{g.proc.pid}/fd/{fd}"))
        except OSError:
            pass
    return out


def still_served(g):
    """Another connection is answered meanwhile."""
    with H2(g.port) as c:
        assert c.get("/other").status == 200


def test_prior_knowledge_curl_nghttp_and_what_a_stream_carries_upstream(gateway_factory, tmp_path):
    g = start(gateway_factory, access_log="file")
    out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-w", "\\n%{http_version}",
                          "-H", "Cookie: a=1", "-H", "Cookie: b=2", f"http://127.0.0.1:{g.port}/x?y=1"],
                         capture_output=True, check=True, timeout=10).stdout.decode()
    body, version = out.rsplit("\n", 1)
    assert version == "2"
    seen = json.loads(body)
    assert seen["target"] == "/x?y=1" and seen["version"] == "HTTP/1.1"
    # :authority is the Host; the cookie fields are one (RFC 9113 §8.2.3); the client's
    # scheme is the listener's.
    assert upstream_header(seen, "host") == [f"127.0.0.1:{g.port}"]
    assert upstream_header(seen, "cookie") == ["a=1; b=2"]
    assert upstream_header(seen, "x-forwarded-proto") == ["http"]
    # A body without a length goes up chunked, whole; one with a length as it is.
    with H2(g.port) as c:
        blob = os.urandom(300_000)
        r = c.wait(c.request("/upload", method="POST", body=blob))
        assert r.status == 200 and json.loads(r.body)["length"] == len(blob)
        r = c.wait(c.request("/echo", method="POST", body=b"x" * 5000, headers=[("content-length", "5000")]))
        assert echo(r)["body_length"] == 5000 and upstream_header(echo(r), "content-length") == ["5000"]
        assert upstream_header(echo(c.get("/e", method="POST", body=b"abc")), "transfer-encoding") == ["chunked"]
        # A large answer streams down through the windows; connection-specific fields of
        # the upstream's never reach the client.
        r = c.get("/download?bytes=3000000")
        assert r.status == 200 and len(r.body) == 3_000_000
        r = c.get("/echo")
        assert r.header("x-upstream") == "yes" and r.header("connection") is None and r.header("keep-alive") is None
        assert r.header("x-hop") is None
        # A HEAD answer and a 204 end with their heads (and are not reset); a chunked
        # upstream answer arrives whole.
        for path, method, status in (("/download?bytes=100", "HEAD", 200), ("/status?code=204", "GET", 204),
                                     ("/download?bytes=0", "GET", 200)):
            r = c.get(path, method=method)
            assert (r.status, r.body, r.ended, r.reset) == (status, b"", True, None), path
        assert c.get("/chunked?n=4&size=1000").body == b"".join(bytes([97 + i]) * 1000 for i in range(4))
    if shutil.which("nghttp"):
        out = subprocess.run(["nghttp", "-n", "-s", f"http://127.0.0.1:{g.port}/a", f"http://127.0.0.1:{g.port}/b"],
                             capture_output=True, timeout=10)
        assert out.returncode == 0, out.stderr
    wait_for("the access log", lambda: "HTTP/2" in g.access_log.read_text(), 5)
    assert '"GET /x?y=1"' in g.access_log.read_text()


def test_cleartext_is_off_by_default_and_h2c_upgrade_stays_http11(gateway_factory):
    g = gateway_factory()
    with RawH2(g.port) as raw:
        frames = raw.read(lambda f: False, timeout=3)
        assert raw.closed and not frames  # (an HTTP/1.1 answer to "PRI *": no frame parses)
        assert raw.buf.startswith(b"HTTP/1.1 4"), raw.buf[:40]
    g2 = start(gateway_factory)
    with g2.connect() as s:
        s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                  b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
        head = s.recv(65536)
        assert head.startswith(b"HTTP/1.1 200"), head[:40]
        assert b"h2c" not in head.split(b"\r\n\r\n")[1]


def test_tls_alpn_h2_and_the_switch_that_turns_it_off(gateway_factory, tmp_path):
    cert = make_cert(tmp_path, "localhost", "localhost")
    from conftest import free_port
    port = free_port()
    g = gateway_factory(extra=tls_section(port, [cert]), http={"header_timeout": "2s", "idle_timeout": "5s"})
    wait_for("the TLS listener", lambda: "listening for TLS" in g.log_text(), 10)
    out = subprocess.run(["curl", "-sk", "--http2", "-w", "\\n%{http_version}", f"https://localhost:{port}/t",
                          "--resolve", f"localhost:{port}:127.0.0.1"], capture_output=True, check=True, timeout=10)
    body, version = out.stdout.decode().rsplit("\n", 1)
    assert version == "2" and upstream_header(json.loads(body), "x-forwarded-proto") == ["https"]
    with H2(port, tls=True) as c:
        assert [c.get(f"/{i}").status for i in range(5)] == [200] * 5
    port2 = free_port()
    g2 = gateway_factory(extra=tls_section(port2, [cert]) + "http2:\n  tls: false\n")
    wait_for("the TLS listener", lambda: "listening for TLS" in g2.log_text(), 10)
    out = subprocess.run(["curl", "-sk", "--http2", "-o", "/dev/null", "-w", "%{http_version}",
                          f"https://localhost:{port2}/t", "--resolve", f"localhost:{port2}:127.0.0.1"],
                         capture_output=True, check=True, timeout=10)
    assert out.stdout == b"1.1"


LIMITED = """  - name: limited
    match:
      path_prefix: /limited
    upstream: api
    limits:
      - name: per-cookie
        algorithm: fixed_window
        key: cookie:user
        limit: 3
        window: 60s
  - name: all
    match:
      path_prefix: /
    upstream: api
"""


def test_every_stream_is_charged_and_a_reset_is_not_refunded(gateway_factory):
    g = start(gateway_factory, routes=LIMITED)
    with H2(g.port) as c:
        # Three streams at once on one connection: the cookie is read once joined.
        sids = [c.request("/limited", headers=[("cookie", "x=1"), ("cookie", "user=ann")]) for _ in range(3)]
        assert [c.wait(s).status for s in sids] == [200] * 3
        r = c.get("/limited", headers=[("cookie", "user=ann")])
        assert r.status == 429 and r.header("ratelimit") is not None and r.header("retry-after") is not None
        # bob: one stream reset at once by the client still takes its place.
        sid = c.request("/limited", headers=[("cookie", "user=bob")])
        c.conn.reset_stream(sid)
        c.flush()
        statuses = [c.get("/limited", headers=[("cookie", "user=bob")]).status for _ in range(3)]
        assert statuses == [200, 200, 429], statuses


def test_a_stream_whose_client_reads_nothing_stalls_only_itself(gateway_factory):
    g = start(gateway_factory, http={"header_timeout": "2s", "idle_timeout": "2s"})
    base = g.peak_rss_kib()
    with H2(g.port, auto_ack=False) as c:
        stalled = c.request("/download?bytes=20000000")
        # Its window (64 KiB) fills; the connection's is opened again by the client.
        c.pump(lambda: len(c.responses[stalled].body) >= 65535, 10)
        for i in range(5):
            r = c.get(f"/echo?{i}")
            assert r.status == 200
        assert len(c.responses[stalled].body) <= 65535
        # Its client never reads: the stream is reset at http.idle_timeout, the connection stays.
        r = c.wait(stalled, 10)
        assert r.reset is not None and not r.ended
        assert c.get("/after").status == 200
    # The gateway read at most a window's worth ahead of this client from upstream (its
    # memory never held the 20 MB).
    assert g.peak_rss_kib() - base < RSS_GROWTH_KIB


def test_streams_beyond_the_concurrent_bound_are_refused(gateway_factory):
    g = start(gateway_factory, http2="http2:\n  cleartext: true\n  max_concurrent_streams: 4\n")
    with RawH2(g.port) as raw:
        raw.read(lambda f: any(x.type == 0x4 and "ACK" not in x.flags for x in f))  # its SETTINGS
        data = b"".join(HeadersFrame(sid, raw.headers_block("/slow?ms=1500"), flags=["END_HEADERS", "END_STREAM"]).serialize()
                        for sid in range(1, 20, 2))
        raw.send(data)
        frames = raw.read(lambda f: sum(1 for x in f if x.type == 0x1) >= 4 and sum(1 for x in f if x.type == 0x3) >= 6)
        answered = {x.stream_id for x in frames if x.type == 0x1}
        refused = {x.stream_id for x in frames if x.type == 0x3}
        assert len(answered) == 4 and len(refused) == 6, frames
        assert all(x.error_code in (REFUSED_STREAM, PROTOCOL_ERROR) for x in frames if x.type == 0x3)
        still_served(g)


def test_a_head_past_max_header_bytes_is_431_and_an_hpack_bomb_is_reset(gateway_factory):
    g = start(gateway_factory, http={"header_timeout": "2s", "idle_timeout": "5s", "max_header_bytes": 4096})
    with H2(g.port) as c:
        assert c.remote_settings.get(6) == 4096 or c.pump(lambda: 6 in c.remote_settings, 5)
        r = c.get("/big", headers=[("x-big", "a" * 6000)])
        assert r.status == 431
        assert c.get("/fine").status == 200
    with RawH2(g.port) as raw:
        # One 3,000-byte field in the dynamic table, then a block naming it 500 times:
        # 1.5 MB decoded from a few hundred bytes.
        first = raw.encoder.encode([(":method", "GET"), (":scheme", "http"), (":authority", "x"), (":path", "/a"),
                                    ("x-bomb", "b" * 3000)])
        raw.send(HeadersFrame(1, first, flags=["END_HEADERS", "END_STREAM"]).serialize())
        bomb = raw.encoder.encode([(":method", "GET"), (":scheme", "http"), (":authority", "x"), (":path", "/b")]
                                  + [("x-bomb", "b" * 3000)] * 500)
        assert len(bomb) < 1000
        raw.send(HeadersFrame(3, bomb, flags=["END_HEADERS", "END_STREAM"]).serialize())
        frames = raw.read(lambda f: any(x.type == 0x3 and x.stream_id == 3 for x in f), 10)
        assert any(x.type == 0x3 and x.stream_id == 3 for x in frames), frames
        still_served(g)


def flood_frames(raw, kind, n):
    if kind == "ping":
        return b"".join(PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize() for i in range(n))
    if kind == "settings":
        return SettingsFrame(0, settings={4: 65535}).serialize() * n
    if kind == "priority":
        return b"".join(PriorityFrame(2 * i + 1, depends_on=0, stream_weight=16).serialize() for i in range(n))
    if kind == "window_update":
        return WindowUpdateFrame(0, window_increment=1).serialize() * n
    if kind == "empty_data":
        head = HeadersFrame(1, raw.headers_block("/slow?ms=3000", "POST"), flags=["END_HEADERS"]).serialize()
        return head + DataFrame(1, b"").serialize() * n
    if kind == "rapid_reset":
        return b"".join(HeadersFrame(2 * i + 1, raw.headers_block(f"/r{i}"), flags=["END_HEADERS"]).serialize()
                        + RstStreamFrame(2 * i + 1, error_code=0x8).serialize() for i in range(n))
    if kind == "made_you_reset":
        # A connection-specific field is a stream error (RFC 9113 §8.2.2): the gateway
        # resets each such stream itself, and counts what it is made to reset.
        return b"".join(HeadersFrame(2 * i + 1, raw.headers_block(f"/m{i}", extra=[("connection", "close")]),
                                     flags=["END_HEADERS", "END_STREAM"]).serialize() for i in range(n))
    if kind == "continuation":
        head = HeadersFrame(1, raw.headers_block("/c"), flags=[]).serialize()
        return head + b"".join(ContinuationFrame(1, raw.encoder.encode([(f"x-c{i}", "v")])).serialize() for i in range(n))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["ping", "settings", "priority", "window_update", "empty_data", "rapid_reset",
                                  "made_you_reset", "continuation"])
def test_a_flood_ends_its_connection_with_goaway_and_others_are_served(gateway_factory, upstream, kind):
    g = start(gateway_factory)
    still_served(g)  # (what the first connection opens for good, the upstream's pooled one among it, is counted)
    before, base = fd_names(g), g.peak_rss_kib()
    with RawH2(g.port) as raw:
        raw.send(flood_frames(raw, kind, 3000 if kind != "continuation" else 100))
        frames = raw.read(lambda f: goaway_of(f) is not None, 15)
        goaway = goaway_of(frames)
        assert goaway is not None, (kind, [type(f).__name__ for f in frames][-10:])
        assert goaway.error_code in (ENHANCE_YOUR_CALM, PROTOCOL_ERROR, 0x2), goaway.error_code
        print(kind, "GOAWAY", goaway.error_code, "after", len(frames), "frames")
        raw.read(lambda f: False, 5)
        assert raw.closed
    still_served(g)
    sockets_given_back(g, before)
    assert g.peak_rss_kib() - base < RSS_GROWTH_KIB
    if kind == "made_you_reset":
        assert goaway.error_code == ENHANCE_YOUR_CALM
        assert sum(1 for f in frames if f.type == 0x3 and f.error_code == PROTOCOL_ERROR) >= 100
    if kind == "rapid_reset":
        # Each reset stream was still charged: no request reached the upstream for most.
        assert upstream.stats()["requests"] < 1000


def test_silent_and_idle_connections_are_closed_with_goaway(gateway_factory):
    g = start(gateway_factory, http={"header_timeout": "1s", "idle_timeout": "2s"})
    t0 = time.monotonic()
    with RawH2(g.port) as raw:  # the preface, then nothing
        frames = raw.read(lambda f: False, 6)
        assert raw.closed and goaway_of(frames) is not None
        assert time.monotonic() - t0 < 5
    with RawH2(g.port) as raw:  # a head never finished (no CONTINUATION comes)
        raw.send(HeadersFrame(1, raw.headers_block("/h"), flags=["END_STREAM"]).serialize())
        raw.read(lambda f: False, 6)
        assert raw.closed
    with H2(g.port) as c:  # a request, then idle past http.idle_timeout
        assert c.get("/x").status == 200
        t1 = time.monotonic()
        c.pump(lambda: c.closed, 8)
        assert c.closed and c.goaway is not None and c.goaway[0] == NO_ERROR
        assert 1.5 < time.monotonic() - t1 < 6


def test_drain_sends_goaway_and_the_streams_in_flight_finish(gateway_factory, upstream):
    g = start(gateway_factory)
    with RawH2(g.port) as raw:
        raw.send(HeadersFrame(1, raw.headers_block("/slow?ms=1500"), flags=["END_HEADERS", "END_STREAM"]).serialize())
        wait_for("the stream at the upstream", lambda: upstream.stats()["slow_in_flight"] == 1, 5)
        g.proc.send_signal(15)
        # The answer, GOAWAY (before it or after), then the connection's end.
        frames = raw.read(lambda f: False, 10)
        assert raw.closed
        goaway = goaway_of(frames)
        assert goaway is not None and goaway.error_code == NO_ERROR and goaway.last_stream_id >= 1
        data = b"".join(x.data for x in frames if x.type == 0x0 and x.stream_id == 1)
        assert data == b"slow" and any(x.type == 0x1 and x.stream_id == 1 for x in frames)
    assert g.proc.wait(15) == 0


@pytest.mark.skipif(SANITIZED, reason="the sanitizer's allocator keeps freed memory in quarantine")
def test_memory_per_stream_in_flight_is_bounded(gateway_factory, upstream):
    """400 streams (4 connections of 100) all waiting on the upstream, each with its
    exchange and its own upstream connection: what they add to the gateway's RSS, per
    stream, is recorded and bounded; and each is answered."""
    g = start(gateway_factory, upstream_opts={"response_timeout": "30s", "max_idle": 512})
    conns, per = 4, 100
    with H2(g.port) as warm:
        assert warm.get("/echo").status == 200
    upstream.reset()
    base, before = g.rss_kib(), fd_names(g)
    clients = [H2(g.port) for _ in range(conns)]
    try:
        sids = [[c.request("/slow?ms=30000") for _ in range(per)] for c in clients]
        wait_for("every stream at the upstream", lambda: upstream.stats()["slow_in_flight"] == conns * per, 20)
        grown = g.rss_kib() - base
        record(f"HTTP/2: {conns * per} streams in flight, each with its upstream connection: "
               f"{grown / (conns * per):.1f} KiB of RSS a stream")
        assert grown / (conns * per) < 32, f"{grown} KiB for {conns * per} streams"
    finally:
        for c in clients:
            c.close()
    # The clients gone, their streams' upstream connections are closed (an answer half
    # read is never pooled).
    sockets_given_back(g, before, 20)


def test_h2load_many_streams_and_the_metrics(gateway_factory):
    if not shutil.which("h2load"):
        pytest.skip("h2load not installed")
    g = with_admin(lambda extra: start(gateway_factory, extra=extra))
    n = 2000 if not SANITIZED else 400
    out = subprocess.run(["h2load", "-n", str(n), "-c", "8", "-m", "10", f"http://127.0.0.1:{g.port}/x"],
                         capture_output=True, timeout=120).stdout.decode()
    assert f"{n} succeeded" in out, out
    series, _ = scrape(g)
    assert value(series, "floodgate_http2_streams_total") >= n
    wait_for("h2load's connections gone", lambda: value(scrape(g)[0], "floodgate_http2_connections") == 0, 10)


def test_a_reload_keeps_the_connection_and_announces_changed_settings(gateway_factory):
    g = start(gateway_factory, http2="http2:\n  cleartext: true\n  max_concurrent_streams: 5\n")
    with H2(g.port) as c:
        assert c.get("/a").status == 200
        assert c.remote_settings.get(3) == 5
        g.config.write_text(g.config.read_text().replace("max_concurrent_streams: 5", "max_concurrent_streams: 7"))
        g.proc.send_signal(1)  # SIGHUP
        end = time.monotonic() + 10
        while c.remote_settings.get(3) != 7 and time.monotonic() < end:
            assert c.get("/b").status == 200  # (the connection stays, and is read)
        assert c.remote_settings.get(3) == 7


def test_a_client_that_half_closes_is_let_go_at_once(gateway_factory):
    g = start(gateway_factory, http={"header_timeout": "2s", "idle_timeout": "30s"})
    still_served(g)
    before = fd_names(g)
    with RawH2(g.port) as raw:
        # A large answer held by the client's window, then the client's end of the stream.
        raw.send(HeadersFrame(1, raw.headers_block("/download?bytes=5000000"), flags=["END_HEADERS", "END_STREAM"]).serialize())
        raw.read(lambda f: any(x.type == 0x0 for x in f), 5)
        raw.sock.shutdown(socket.SHUT_WR)
        t0 = time.monotonic()
        raw.read(lambda f: False, 10)
        assert raw.closed and time.monotonic() - t0 < 5  # (not at http.idle_timeout)
    sockets_given_back(g, before)
    still_served(g)
