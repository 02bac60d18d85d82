"""Failures are answers, never hangs; ambiguous requests are never forwarded."""
import socket
import time

import pytest

from conftest import Reader, free_port, get, is_closed, read_response


def test_malformed_request_is_400_and_close(gateway):
    with gateway.connect() as s:
        s.sendall(b"GARBAGE\r\n\r\n")
        r = read_response(s)
        assert r.status == 400
        assert is_closed(s)


def test_header_timeout_is_408(gateway):
    with gateway.connect() as s:
        s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n")
        start = time.monotonic()
        r = read_response(s)
        took = time.monotonic() - start
        assert r.status == 408
        # after header_timeout (2 s), not at once, and not only at the idle timeout (5 s)
        assert 1.5 <= took < 10, f"408 after {took:.2f}s"


def test_large_header_is_431(gateway_factory):
    g = gateway_factory(http={"max_header_bytes": 2048})
    r = g.request(get("/echo", extra="X-Big: " + "a" * 4000 + "\r\n"))
    assert r.status == 431
    assert g.request(get("/echo", extra="X-Small: " + "a" * 500 + "\r\n")).status == 200


def test_heads_past_64_kib_are_read_to_max_header_bytes_and_refused_past_it(gateway_factory):
    """The session's read buffer grows to http.max_header_bytes: a head past 64 KiB used
    to fill it, and each read after that asked for no bytes and completed at once, a
    worker spinning on the connection for good (no 431, no 408, even after the client
    left). One field over 64 KiB (more than Beast's fields hold) is a 431 too."""
    g = gateway_factory(http={"max_header_bytes": 1048576})
    # 200 KB of fields, each under the 64 KiB that one field may hold.
    big = "".join(f"X-Big-{i}: " + "a" * 50_000 + "\r\n" for i in range(4))
    r = g.request(get("/echo", extra=big))
    assert r.status == 200
    fields = {name.lower(): value for name, value in r.json()["headers"]}
    assert all(len(fields[f"x-big-{i}"]) == 50_000 for i in range(4))
    # One field past it: 431, not a closed connection.
    assert g.request(get("/echo", extra="X-One: " + "a" * 70_000 + "\r\n")).status == 431
    with g.connect() as s:
        s.sendall(get("/echo", extra="X-Huge: " + "a" * 1_100_000 + "\r\n"))
        assert read_response(s).status == 431
    assert g.request(get("/echo")).status == 200


def test_body_over_limit_is_413(gateway_factory, upstream):
    g = gateway_factory(http={"max_body_bytes": 1000})
    upstream.reset()
    r = g.request(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + b"a" * 5000)
    assert r.status == 413
    assert upstream.stats()["bytes"] == 0
    # chunked: detected while streaming
    with g.connect() as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        s.sendall((b"200\r\n" + b"b" * 512 + b"\r\n") * 4 + b"0\r\n\r\n")
        assert read_response(s).status == 413
    assert upstream.stats()["requests"] == 0
    ok = g.request(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"a" * 1000)
    assert ok.status == 200 and ok.json()["length"] == 1000


def test_chunked_body_crossing_the_limit_never_reaches_upstream_whole(gateway_factory, upstream):
    """The piece that crosses max_body_bytes arrives with the last chunk (after a first
    piece of 32 KiB went upstream): upstream never gets the last chunk, so it never sees
    a complete request, and the client gets 413."""
    g = gateway_factory(http={"max_body_bytes": 40000})
    upstream.reset()
    with g.connect() as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  + b"c350\r\n" + b"z" * 50000 + b"\r\n0\r\n\r\n")
        assert read_response(s).status == 413
    assert upstream.stats()["requests"] == 0


def test_upstream_refused_is_502(gateway_factory):
    # Refused: answered at once, not after the connect timeout (20 s here).
    dead = free_port()
    g = gateway_factory(upstream_address=f"127.0.0.1:{dead}", upstream_opts={"connect_timeout": "20s"})
    start = time.monotonic()
    r = g.request(get("/echo"), timeout=30)
    took = time.monotonic() - start
    assert r.status == 502
    assert took < 10, f"502 after {took:.2f}s"


def test_upstream_unreachable_is_answered_within_connect_timeout(gateway_factory):
    # A listener whose accept queue is full: SYNs are dropped, connect hangs.
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(0)
    fillers = []
    try:
        for _ in range(8):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(blocker.getsockname())
            fillers.append(f)
        g = gateway_factory(upstream_address=f"127.0.0.1:{blocker.getsockname()[1]}",
                            upstream_opts={"connect_timeout": "500ms", "response_timeout": "20s"})
        start = time.monotonic()
        r = g.request(get("/echo"), timeout=30)
        took = time.monotonic() - start
        assert r.status in (502, 504), r.status
        # at the connect timeout, long before the response timeout (20 s here) fired
        assert took < 10, f"{r.status} after {took:.2f}s"
    finally:
        for f in fillers:
            f.close()
        blocker.close()


def test_upstream_silent_is_504(gateway_factory):
    # At the response timeout (500 ms), not when the upstream answers (after 20 s).
    g = gateway_factory(upstream_opts={"response_timeout": "500ms"})
    start = time.monotonic()
    r = g.request(get("/slow?ms=20000"), timeout=30)
    took = time.monotonic() - start
    assert r.status == 504
    assert 0.5 <= took < 10, f"504 after {took:.2f}s"


def test_upstream_closing_mid_response_closes_client(gateway):
    with gateway.connect() as s:
        s.sendall(get("/close-mid"))
        r = read_response(s)
        assert r.status == 200
        assert not r.complete and len(r.body) < 1000


AMBIGUOUS = [
    ("cl+te", b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("te+cl", b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n"),
    ("two-cl", b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
    ("cl-list", b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!"),
    ("te-gzip", b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
    ("te-identity", b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n"),
    ("te-twice", b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("te-space", b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n"),
    ("te-xchunked", b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"),
    ("te-http10", b"POST /upload HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("bad-chunk-size", b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"),
    ("chunk-size-overflow", b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff1\r\nx\r\n0\r\n\r\n"),
    ("negative-cl", b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"),
    ("bare-lf", b"GET /echo HTTP/1.1\nHost: x\n\n"),
    ("bare-lf-mixed", b"GET /echo HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n"),
    ("bare-cr", b"GET /echo HTTP/1.1\r\nHost: x\rX-A: b\r\n\r\n"),
    ("obs-fold", b"GET /echo HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\n\r\n"),
    ("obs-fold-te", b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n"),
    ("nul-in-header", b"GET /echo HTTP/1.1\r\nHost: x\r\nX-A: b\x00c\r\n\r\n"),
    ("nul-in-target", b"GET /ec\x00ho HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("no-host", b"GET /echo HTTP/1.1\r\n\r\n"),
    ("two-hosts", b"GET /echo HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
    ("space-in-target", b"GET /ec ho HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("bad-version", b"GET /echo HTTP/2.0\r\nHost: x\r\n\r\n"),
    ("leading-space", b" GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"),
]


@pytest.mark.parametrize("name,raw", AMBIGUOUS, ids=[a[0] for a in AMBIGUOUS])
def test_ambiguous_framing_is_rejected_and_never_forwarded(gateway, upstream, name, raw):
    upstream.reset()
    with gateway.connect() as s:
        s.sendall(raw)
        r = read_response(s)
        assert 400 <= r.status < 500 or r.status == 505, (name, r.status)
        assert is_closed(s)
    st = upstream.stats()
    assert st["bytes"] == 0 and st["requests"] == 0, (name, st)


def test_smuggled_second_request_is_not_forwarded(gateway, upstream):
    # A CL.TE smuggling attempt: if both were honoured, the tail would become a second request.
    upstream.reset()
    raw = (b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"0\r\n\r\nGET /echo?smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
    with gateway.connect() as s:
        s.sendall(raw)
        assert read_response(s).status == 400
        assert is_closed(s)
    assert upstream.stats()["requests"] == 0
