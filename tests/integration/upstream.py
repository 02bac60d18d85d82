#!/usr/bin/env python3
"""A real HTTP/1.1 origin for floodgate's integration tests (a separate process).

Endpoints (any method):
  /echo             JSON: method, target, headers, body length, connection number
  /download?bytes=N N bytes, Content-Length framing, streamed
  /chunked?n=K&size=S  K chunks of S bytes, chunked framing
  /upload           reads the body (Content-Length or chunked), answers its length and sum
  /slow?ms=N        waits N ms before answering
  /close-mid        promises 1000 bytes, sends 100, closes
  /close-delimited  HTTP/1.1 response with neither length nor chunking, ends by closing
                    (over TLS with a close_notify)
  /close-truncated  the same, but over TLS without a close_notify (cut short)
  /ws               WebSocket handshake, then echoes every frame back
  /status?code=N    answers status N
  /interim?n=N      N interim answers (103 Early Hints), then 200
  /te?v=V[|V2]      a response with Transfer-Encoding: V (a field per value), chunked when
                    the last coding is chunked, else ended by the close
  /early-413        answers 413 at once, before the body, and closes with it unread
  /cost?n=N&ms=M    answers 200 with X-Cost: N (after M ms, 0 by default)
  /close-after?ms=N answers, then closes the idle connection after N ms
  /drop-next        answers, then closes the connection when the next request on it has
                    arrived, without answering it (counted as "dropped"): an origin whose
                    keep-alive ran out as the request came
  /late-extra?ms=N  answers, then after N ms sends a whole second response nobody asked
                    for on the idle connection (counted as "late_sent"), and goes on
  /upgrade-any      with an Upgrade header: 101 with that Upgrade value (as Tomcat does
                    for h2c), then a raw tunnel echoing every byte back; without: as /echo
  /force-101        always 101 with Upgrade: h2c, then a raw tunnel echoing every byte back
  /__check          the status /__health set (200 at first), counted as a health check,
                    not as a request
Control, on a second port so it is never counted: GET /__stats -> {"connections",
"requests", "bytes", "closed", "health_checks", "late_sent", "dropped", "slow_in_flight",
"slow_in_flight_max"} (closed: connections ended, by either side; slow_in_flight: /slow
requests being answered, and the most at once since the last reset); GET /__reset; GET /__health?code=N (what /__check answers from now on).
Prints "PORT <main> <control>" on stdout once listening.

TLS (the environment): UPSTREAM_TLS_CERT and UPSTREAM_TLS_KEY make the main port speak
TLS with that certificate; UPSTREAM_TLS_CLIENT_CA also asks for a client certificate
signed by that CA (refused without one). /__stats then also counts "tls_handshakes",
"tls_resumed" (sessions resumed) and keeps the last "tls_client" subject.
"""
import base64
import hashlib
import json
import os
import socket
import ssl
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

lock = threading.Lock()
stats = {"connections": 0, "requests": 0, "bytes": 0, "closed": 0, "health_checks": 0, "tls_handshakes": 0,
         "tls_resumed": 0, "tls_client": "", "late_sent": 0, "dropped": 0, "slow_in_flight": 0,
         "slow_in_flight_max": 0}
health = {"code": 200}


class Conn:
    def __init__(self, sock, number):
        self.sock = sock
        self.buf = b""
        self.number = number
        self.control = False
        self.drop_next = False

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        if not self.control:
            with lock:
                stats["bytes"] += len(data)
        self.buf += data

    def read_line(self):
        while b"\r\n" not in self.buf:
            if len(self.buf) > 65536:
                raise ValueError("line too long")
            self.fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read_exact(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def body_pieces(self, headers):
        te = headers.get("transfer-encoding", "").lower()
        if te == "chunked":
            while True:
                size = int(self.read_line().split(b";")[0], 16)
                if size == 0:
                    while self.read_line():
                        pass
                    return
                yield self.read_exact(size)
                self.read_exact(2)
        else:
            left = int(headers.get("content-length", "0"))
            while left > 0:
                if not self.buf:
                    self.fill()
                piece, self.buf = self.buf[:left], self.buf[left:]
                left -= len(piece)
                yield piece


def respond(sock, status, body=b"", headers=(), reason="OK"):
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\n"
    for k, v in headers:
        head += f"{k}: {v}\r\n"
    sock.sendall(head.encode() + b"\r\n" + body)


def ws_echo(conn):
    while True:
        b0, b1 = conn.read_exact(2)
        length = b1 & 0x7F
        if length == 126:
            length = int.from_bytes(conn.read_exact(2), "big")
        elif length == 127:
            length = int.from_bytes(conn.read_exact(8), "big")
        mask = conn.read_exact(4) if b1 & 0x80 else b"\0\0\0\0"
        payload = bytes(c ^ mask[i % 4] for i, c in enumerate(conn.read_exact(length)))
        opcode = b0 & 0x0F
        out = bytes([0x80 | opcode])
        if len(payload) < 126:
            out += bytes([len(payload)])
        elif len(payload) < 65536:
            out += bytes([126]) + len(payload).to_bytes(2, "big")
        else:
            out += bytes([127]) + len(payload).to_bytes(8, "big")
        conn.sock.sendall(out + payload)
        if opcode == 8:
            return


def raw_echo(conn):
    if conn.buf:
        conn.sock.sendall(conn.buf)
        conn.buf = b""
    while True:
        data = conn.sock.recv(65536)
        if not data:
            return
        conn.sock.sendall(data)


def switch_protocols(conn, upgrade):
    conn.sock.sendall(f"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: {upgrade}\r\n\r\n"
                      .encode("latin-1"))
    raw_echo(conn)


def handle(conn):
    while True:
        line = conn.read_line()
        if not line:
            continue
        method, target, version = line.decode("latin-1").split(" ")
        headers, raw = {}, []
        while True:
            h = conn.read_line()
            if not h:
                break
            k, v = h.decode("latin-1").split(":", 1)
            raw.append([k, v.strip()])
            headers[k.lower()] = v.strip()
        url = urlsplit(target)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        path = url.path
        if conn.control and path == "/__stats":
            with lock:
                respond(conn.sock, 200, json.dumps(stats).encode())
            continue
        if conn.control and path == "/__reset":
            with lock:
                for k in stats:
                    stats[k] = "" if isinstance(stats[k], str) else 0
            respond(conn.sock, 200, b"{}")
            continue
        if conn.control and path == "/__health":
            with lock:
                health["code"] = int(q.get("code", "200"))
            respond(conn.sock, 200, b"{}")
            continue
        if path == "/__check":
            with lock:
                stats["health_checks"] += 1
                code = health["code"]
            respond(conn.sock, code, b"health")
            if headers.get("connection", "").lower() == "close":
                return
            continue
        if path == "/early-413":
            # answers before reading the body, and closes with it unread (a reset)
            respond(conn.sock, 413, b"too large, said early")
            return
        length, total = 0, 0
        # /upload?pace_ms=N reads the body at 32 KiB per N ms (a slow but steady reader)
        pace = int(q.get("pace_ms", "0")) / 1000
        for piece in conn.body_pieces(headers):
            if path == "/upload":
                # every 4096th byte of the body, whatever the piece boundaries
                total = (total + sum(piece[(-length) % 4096::4096])) & 0xFFFFFFFF
            length += len(piece)
            if pace:
                time.sleep(pace * len(piece) / 32768)
        if conn.drop_next:
            with lock:
                stats["dropped"] += 1
            return
        # Counted once the whole request (head and body) has arrived.
        with lock:
            stats["requests"] += 1
        if path == "/download":
            # together=1: head and a body of at most 64 KiB in one send; pause_ms: the
            # body that long after the head (else as it comes).
            n = int(q.get("bytes", "0"))
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n".encode()
            if method == "HEAD":
                n = 0
            block = bytes(range(256)) * 256
            if q.get("together") == "1" and n <= len(block):
                conn.sock.sendall(head + block[:n])
                n = 0
            else:
                conn.sock.sendall(head)
                time.sleep(int(q.get("pause_ms", "0")) / 1000)
            while n > 0:
                piece = block[: min(n, len(block))]
                conn.sock.sendall(piece)
                n -= len(piece)
        elif path == "/chunked":
            n, size = int(q.get("n", "3")), int(q.get("size", "10"))
            conn.sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n")
            for i in range(n):
                conn.sock.sendall(f"{size:x}\r\n".encode() + bytes([97 + i % 26]) * size + b"\r\n")
            conn.sock.sendall(b"0\r\nX-T: done\r\n\r\n")
        elif path == "/upload":
            respond(conn.sock, 200, json.dumps({"length": length, "sum": total}).encode(),
                    [("Content-Type", "application/json")])
        elif path == "/slow":
            # (in flight at once: a concurrency limit's admissions, seen from here)
            with lock:
                stats["slow_in_flight"] += 1
                stats["slow_in_flight_max"] = max(stats["slow_in_flight_max"], stats["slow_in_flight"])
            try:
                time.sleep(int(q.get("ms", "1000")) / 1000)
            finally:
                with lock:
                    stats["slow_in_flight"] -= 1
            respond(conn.sock, 200, b"slow")
        elif path == "/close-mid":
            conn.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 100)
            return
        elif path == "/bad-chunked":
            # chunk lines ending in a bare LF, then silence (the connection stays open)
            conn.sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n")
            time.sleep(5)
            return
        elif path in ("/close-delimited", "/close-truncated"):
            conn.sock.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"y" * 5000)
            # Over TLS the end is a close_notify, as a server sends one; /close-truncated
            # closes without it (a connection cut short).
            if path == "/close-delimited" and isinstance(conn.sock, ssl.SSLSocket):
                conn.sock = conn.sock.unwrap()
            return
        elif path == "/ws":
            key = headers.get("sec-websocket-key", "")
            accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
            conn.sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                              b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
            ws_echo(conn)
            return
        elif path == "/upgrade-any" and "upgrade" in headers:
            switch_protocols(conn, headers["upgrade"])
            return
        elif path == "/force-101":
            switch_protocols(conn, "h2c")
            return
        elif path == "/close-after":
            # a keep-alive answer, then the connection is closed while idle (a stale pooled connection)
            respond(conn.sock, 200, b"bye")
            time.sleep(int(q.get("ms", "100")) / 1000)
            return
        elif path == "/drop-next":
            respond(conn.sock, 200, b"armed")
            conn.drop_next = True
        elif path == "/late-extra":
            # a keep-alive answer, then, on the idle connection, a response nobody asked
            # for: a pool that reused the connection would hand it to the next request
            respond(conn.sock, 200, b"asked")
            time.sleep(int(q.get("ms", "50")) / 1000)
            conn.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nX-Unasked: yes\r\n\r\nnot asked")
            with lock:
                stats["late_sent"] += 1
        elif path == "/cost":
            # a response that says what it cost (a limit's charge: response_header:X-Cost)
            time.sleep(int(q.get("ms", "0")) / 1000)
            respond(conn.sock, 200, b"costed", [("X-Cost", q.get("n", "1"))])
        elif path == "/te":
            # a response framed by Transfer-Encoding: V (each of several V: a field each),
            # chunked when the last is chunked, else delimited by the close
            values = q.get("v", "chunked").split("|")
            head = "HTTP/1.1 200 OK\r\n" + "".join(f"Transfer-Encoding: {v}\r\n" for v in values) + "\r\n"
            body = b"5\r\ncoded\r\n0\r\n\r\n" if values[-1].split(",")[-1].strip() == "chunked" else b"coded"
            conn.sock.sendall(head.encode() + body)
            return
        elif path == "/interim":
            # N interim answers (103 Early Hints), then the response
            for _ in range(int(q.get("n", "1"))):
                conn.sock.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
            respond(conn.sock, 200, b"after interim")
        elif path == "/status":
            # Sent as written ("000" and "099" reach the gateway so); not a number ("x"):
            # the connection closes without a byte of answer.
            code = q.get("code", "200")
            int(code)
            respond(conn.sock, code, b"status", reason="Whatever")
        else:
            body = json.dumps({"method": method, "target": target, "version": version, "headers": raw,
                               "body_length": length, "connection": conn.number}).encode()
            respond(conn.sock, 200, body, [("Content-Type", "application/json"), ("X-Upstream", "yes"),
                                           ("Connection", "keep-alive, X-Hop"), ("X-Hop", "drop me"),
                                           ("Keep-Alive", "timeout=5")])
        if headers.get("connection", "").lower() == "close":
            return


def tls_context():
    cert, key = os.environ.get("UPSTREAM_TLS_CERT"), os.environ.get("UPSTREAM_TLS_KEY")
    if not cert:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    if os.environ.get("UPSTREAM_TLS_CLIENT_CA"):
        ctx.load_verify_locations(os.environ["UPSTREAM_TLS_CLIENT_CA"])
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


TLS = tls_context()


def serve(sock, number, control=False):
    conn = Conn(sock, number)
    conn.control = control
    try:
        if TLS is not None and not control:
            sock = conn.sock = TLS.wrap_socket(sock, server_side=True)
            subject = dict(x[0] for x in (sock.getpeercert() or {}).get("subject", ()))
            with lock:
                stats["tls_handshakes"] += 1
                stats["tls_resumed"] += 1 if sock.session_reused else 0
                stats["tls_client"] = subject.get("commonName", "")
        handle(conn)
    except (EOFError, ConnectionError, ValueError, OSError):
        pass
    finally:
        try:
            conn.sock.close()
        except OSError:
            pass
        if not control:
            with lock:
                stats["closed"] += 1


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"  # another loopback address (127.0.0.2)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(512)
    ctl = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ctl.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ctl.bind(("127.0.0.1", 0))
    ctl.listen(16)

    def control_loop():
        while True:
            s, _ = ctl.accept()
            threading.Thread(target=serve, args=(s, 0, True), daemon=True).start()

    threading.Thread(target=control_loop, daemon=True).start()
    print(f"PORT {srv.getsockname()[1]} {ctl.getsockname()[1]}", flush=True)
    number = 0
    while True:
        sock, _ = srv.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        number += 1
        with lock:
            stats["connections"] += 1
        threading.Thread(target=serve, args=(sock, number), daemon=True).start()


if __name__ == "__main__":
    main()
