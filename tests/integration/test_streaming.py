"""Bodies of any size pass through in bounded memory."""
import hashlib
import os
import socket
import time

import pytest

from conftest import SANITIZED, Reader, get, read_response, wait_until

# Under ASan the shadow memory makes RSS meaningless and copies slow: smaller bodies there.
SIZE = (64 << 20) if SANITIZED else (1 << 30)
RSS_LIMIT_KIB = 64 * 1024


def upload(g, target, size):
    """POSTs `size` random bytes to upstream.py's /upload: its response, and the sum of
    every 4096th byte that /upload answers with when the body arrived whole."""
    block = os.urandom(1 << 20)
    with g.connect(timeout=120) as s:
        s.sendall(f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())
        expected_sum = 0
        for _ in range(size // len(block)):
            s.sendall(block)
            expected_sum = (expected_sum + sum(block[::4096])) & 0xFFFFFFFF
        return read_response(s), expected_sum


def test_large_upload_streams_in_bounded_memory(gateway):
    r, expected_sum = upload(gateway, "/upload", SIZE)
    assert r.status == 200
    assert r.json() == {"length": SIZE, "sum": expected_sum}
    if not SANITIZED:
        assert gateway.peak_rss_kib() < RSS_LIMIT_KIB, gateway.peak_rss_kib()


def test_large_chunked_upload(gateway):
    size = SIZE // 8
    piece = b"q" * 65536
    with gateway.connect(timeout=120) as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        for _ in range(size // len(piece)):
            s.sendall(chunk)
        s.sendall(b"0\r\n\r\n")
        r = read_response(s)
    assert r.status == 200 and r.json()["length"] == size


def test_large_download_streams_in_bounded_memory(gateway):
    with gateway.connect(timeout=120) as s:
        s.sendall(get(f"/download?bytes={SIZE}"))
        rd = Reader(s)
        # read the head, then count the body without keeping it
        status = rd.line()
        assert b" 200 " in status
        length = None
        while True:
            h = rd.line()
            if not h:
                break
            k, v = h.decode().split(":", 1)
            if k.lower() == "content-length":
                length = int(v)
        assert length == SIZE
        got = len(rd.buf)
        rd.buf = b""
        digest = hashlib.sha1()
        while got < SIZE:
            data = s.recv(1 << 20)
            assert data, "connection closed early"
            got += len(data)
        assert got == SIZE
    if not SANITIZED:
        assert gateway.peak_rss_kib() < RSS_LIMIT_KIB, gateway.peak_rss_kib()


def test_download_content_is_intact(gateway):
    r = gateway.request(get("/download?bytes=300000"))
    block = bytes(range(256)) * 256
    expected = (block * 5)[:300000]
    assert r.status == 200 and r.body == expected


def test_a_client_that_reads_slowly_but_steadily_gets_the_whole_body(gateway_factory):
    # A client reading about 600 KB/s, far less than the gateway could send, with
    # idle_timeout at 3 s, a sixth of the ~19 s the body takes. Once the kernel's send
    # buffer is full, a write waits for the client: its deadline is renewed as the client
    # takes the bytes, so it is never cut (it was, at idle_timeout: a write waited for a
    # third of a send buffer grown to 4 MiB to drain, and the last ~32 KiB never came).
    # The gateway holds at most 128 KiB unsent (TCP_NOTSENT_LOWAT), so a reader this slow
    # keeps its writes moving. (At this pace TCP's window reopens in steps: a write may
    # wait ~0.25 s for progress on an idle machine; 1 s was once passed by a loaded one.)
    g = gateway_factory(http={"idle_timeout": "3s"})
    n = 12 << 20
    with g.connect(timeout=30) as s:
        s.sendall(get(f"/download?bytes={n}"))
        rd = Reader(s)
        assert b" 200 " in rd.line()
        while rd.line():
            pass
        body = bytearray(rd.buf)
        while len(body) < n:
            data = s.recv(min(32768, n - len(body)))
            assert data, f"connection closed after {len(body)} of {n} body bytes"
            body += data
            time.sleep(0.05)  # (the client's pace, not a wait for the gateway)
    block = bytes(range(256)) * 256
    assert bytes(body) == (block * (n // len(block) + 1))[:n]


def test_an_upstream_that_reads_an_upload_slowly_but_steadily_gets_it_whole(gateway_factory):
    # The same on the upstream side: an upstream reading about 600 KB/s, response_timeout
    # at 3 s (each piece's write), a sixth of the ~19 s the upload takes. The gateway
    # holds at most 128 KiB of the upload unsent on the upstream's socket, so each piece
    # goes as soon as the upstream has taken some. (A 32 KiB piece's write took up to
    # ~0.22 s on an idle machine, TCP's window reopening in steps at this pace; with 1 s,
    # a loaded run of the test command once answered 504.)
    g = gateway_factory(upstream_opts={"response_timeout": "3s"})
    n = 12 << 20
    r, expected_sum = upload(g, "/upload?pace_ms=50", n)
    assert r.status == 200, (r.status, r.body[:200])
    assert r.json() == {"length": n, "sum": expected_sum}


def test_a_client_that_stops_reading_is_let_go_and_the_upstream_with_it(gateway_factory, upstream):
    # A client that asks for a large body and reads none of it: once the buffers between
    # are full, the gateway's write waits; at idle_timeout it gives up on the client
    # and closes the upstream connection that was feeding it.
    g = gateway_factory(http={"idle_timeout": "1s"})
    upstream.reset()
    with g.connect(timeout=30) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(get(f"/download?bytes={SIZE}"))
        assert wait_until(lambda: upstream.stats()["closed"] >= 1, timeout=20), upstream.stats()
        # Others are served meanwhile.
        assert g.request(get("/download?bytes=10")).status == 200
        # What was buffered, then the end: never the whole body.
        got = 0
        while True:
            try:
                data = s.recv(1 << 20)
            except ConnectionResetError:
                break
            if not data:
                break
            got += len(data)
        assert got < SIZE
