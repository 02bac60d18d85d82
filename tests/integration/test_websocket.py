"""WebSocket upgrade is tunnelled both ways after the upstream's 101."""
import base64
import hashlib
import os
import struct

from conftest import Reader, read_response


def ws_frame(payload, opcode=1):
    mask = os.urandom(4)
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(rd):
    b0, b1 = rd.exact(2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack(">H", rd.exact(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", rd.exact(8))[0]
    return b0 & 0x0F, rd.exact(n)


def ws_echo(s):
    """A WebSocket handshake for /ws on the connected socket `s` (plain or TLS), then frames
    of several sizes echoed back, then a close."""
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    rd = Reader(s)
    r = read_response(s, reader=rd)
    assert r.status == 101
    assert r.header("upgrade").lower() == "websocket"
    expected = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
    assert r.header("sec-websocket-accept") == expected.decode()
    for msg in (b"hello", b"x" * 300, os.urandom(70000)):
        s.sendall(ws_frame(msg, opcode=2))
        op, payload = read_frame(rd)
        assert op == 2 and payload == msg
    s.sendall(ws_frame(b"", opcode=8))
    op, _ = read_frame(rd)
    assert op == 8


def test_websocket_echo_through_tunnel(gateway):
    with gateway.connect() as s:
        ws_echo(s)


def test_access_log_line_carries_the_tunnel_bytes(gateway_factory):
    g = gateway_factory(access_log="file")
    key = base64.b64encode(os.urandom(16)).decode()
    with g.connect() as s:
        s.sendall(f"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        rd = Reader(s)
        assert read_response(s, reader=rd).status == 101
        s.sendall(ws_frame(os.urandom(70000), opcode=2))
        op, payload = read_frame(rd)
        assert op == 2 and len(payload) == 70000
        s.sendall(ws_frame(b"", opcode=8))
        read_frame(rd)
    g.stop()
    line = next(x for x in g.access_log.read_text().splitlines() if '"GET /ws"' in x)
    fields = line.split()
    status_at = fields.index('/ws"') + 1
    bytes_in, bytes_out = int(fields[status_at + 1]), int(fields[status_at + 2])
    assert fields[status_at] == "101"
    assert bytes_in > 70000 and bytes_out > 70000, line
