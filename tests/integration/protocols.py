"""The protocol a test's requests go over: HTTP/1.1 as written, HTTP/2 on the TLS listener
(ALPN h2) or cleartext HTTP/2 on the plain one (prior knowledge).

A test module that runs over all three sets `OVER_EVERY_PROTOCOL = True` (conftest.py's
pytest_generate_tests parametrizes its tests' `protocol`): its gateway_factory then makes
gateways that listen for the protocol, and `g.request(raw)` and `g.connect()` carry the
HTTP/1.1 request bytes the test wrote as an HTTP/2 stream each (the request line and Host
become pseudo-header fields, a chunked body its plain bytes, the fields HTTP/2 forbids
are left out), answered as a conftest Response. A test about HTTP/1.1 itself (its
framing, a partial head, the connection it closes) is marked `http1_only`; a test over
the stores takes `over_stores_and_protocols(KINDS)`."""
import subprocess
from pathlib import Path

import h2.exceptions
import pytest

from h2client import H2

PROTOCOLS = ("http1", "h2", "h2c")

# A test of an OVER_EVERY_PROTOCOL module that HTTP/2 cannot carry as written.
http1_only = pytest.mark.parametrize("protocol", ["http1"], indirect=True)


def over_stores_and_protocols(kinds):
    """A test's (kind, protocol) pairs: every store over HTTP/1.1, and each HTTP/2 over the
    memory store (answered at once) and one Redis (answered later, the stream waiting):
    the store and the protocol meet only there, so not every pair is run."""
    pairs = [(k, "http1") for k in kinds] + [(k, p) for p in PROTOCOLS[1:] for k in kinds if k in ("memory", "redis")]
    return pytest.mark.parametrize("kind,protocol", pairs, indirect=["protocol"])

# Request fields HTTP/2 forbids (RFC 9113 §8.2.2): the gateway refuses a stream with one.
CONNECTION_SPECIFIC = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}


def make_certificate(directory):
    """A self-signed ECDSA P-256 certificate for localhost: (cert, key) paths."""
    cert, key = Path(directory) / "h2.pem", Path(directory) / "h2.key"
    if not cert.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    return cert, key


def listener_config(protocol, directory):
    """The YAML a gateway needs to serve `protocol` to the tests' clients, with
    __TLS_PORT__ where the TLS listener's port goes ("" for HTTP/1.1)."""
    if protocol == "h2":
        cert, key = make_certificate(directory)
        return (f'tls:\n  listen: "127.0.0.1:__TLS_PORT__"\n  certificates:\n'
                f'    - {{ cert: "{cert}", key: "{key}" }}\n')
    if protocol == "h2c":
        return "http2:\n  cleartext: true\n"
    return ""


def parse_request(raw):
    """HTTP/1.1 request bytes as HTTP/2 would carry them: (method, target, fields, body)
    with fields lower-cased, Host as :authority, a chunked body decoded."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    fields, authority, chunked = [], None, False
    for line in lines[1:]:
        name, value = line.split(":", 1)
        name, value = name.strip().lower(), value.strip()
        if name == "host":
            authority = value
        elif name == "transfer-encoding":
            chunked = value.lower() == "chunked"
        elif name == "te":
            if value.lower() == "trailers":
                fields.append((name, value))
        elif name not in CONNECTION_SPECIFIC:
            fields.append((name, value))
    if chunked:
        body = dechunk(body)
    return method, target, authority or "localhost", fields, body


def last_chunk_in(data):
    return data == b"0\r\n\r\n" or data.endswith(b"\r\n0\r\n\r\n")


def dechunk(data):
    """The data of the whole chunks in `data` (up to its end or the last chunk)."""
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2:]
    return out


class H2Conn(H2):
    """One HTTP/2 connection that a test uses as it would a socket: sendall(request bytes)
    opens a stream, read_response() (conftest's, through response()) waits for the oldest
    stream not yet read."""

    def __init__(self, port, tls, timeout=10):
        super().__init__(port, tls=tls, timeout=timeout)
        self.unread = []
        self.open = None  # (stream, bytes of the body still to come or None if chunked)

    def sendall(self, raw):
        if self.open:
            return self.send_more(raw)
        method, target, authority, fields, body = parse_request(raw)
        chunked = any(line.lower().replace(b" ", b"") == b"transfer-encoding:chunked"
                      for line in raw.partition(b"\r\n\r\n")[0].split(b"\r\n"))
        length = next((int(v) for k, v in fields if k == "content-length"), None)
        # A head whose body is still to come (behind Expect: 100-continue, or chunks the
        # test sends next) leaves its stream open: the test sends the rest, or not.
        whole = last_chunk_in(raw.partition(b"\r\n\r\n")[2]) if chunked else len(body) >= (length or 0)
        sid = self.request(target, method=method, headers=fields, authority=authority,
                           body=body if body or not whole else None, end=whole)
        self.unread.append(sid)
        if not whole:
            self.open = (sid, None if chunked else length - len(body))

    def send_more(self, raw):
        """The next bytes of the open stream's body (chunks of a chunked one, decoded)."""
        sid, left = self.open
        if left is None:
            data, end = dechunk(raw), last_chunk_in(raw)
        else:
            data, end = raw, len(raw) >= left
            self.open = (sid, left - len(raw))
        if end:
            self.open = None
        try:
            self.send_body(sid, data, end)
        except h2.exceptions.StreamClosedError:
            raise BrokenPipeError(f"stream {sid} ended by the gateway")

    def settimeout(self, seconds):
        self.sock.settimeout(seconds)

    def response(self, response_class, head_request=False, timeout=10):
        r = self.wait(self.unread.pop(0), timeout)
        fields = [(k, v) for k, v in r.headers if not k.startswith(":")]
        complete = r.ended and r.reset is None
        return response_class(r.status, "", fields, b"" if head_request else r.body, "HTTP/2", complete)
