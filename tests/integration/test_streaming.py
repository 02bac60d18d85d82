"""Bodies of any size pass through in bounded memory."""
import hashlib
import os

import pytest

from conftest import SANITIZED, Reader, get, read_response

# Under ASan the shadow memory makes RSS meaningless and copies slow: smaller bodies there.
SIZE = (64 << 20) if SANITIZED else (1 << 30)
RSS_LIMIT_KIB = 64 * 1024


def test_large_upload_streams_in_bounded_memory(gateway):
    block = os.urandom(1 << 20)
    with gateway.connect(timeout=120) as s:
        s.sendall(f"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {SIZE}\r\n\r\n".encode())
        expected_sum = 0
        for _ in range(SIZE // len(block)):
            s.sendall(block)
            expected_sum = (expected_sum + sum(block[::4096])) & 0xFFFFFFFF
        r = read_response(s)
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
