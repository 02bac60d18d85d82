"""HTTP/2 clients for the tests: `H2`, a well-behaved one on Debian's python3-h2 (streams,
bodies, flow control as the test chooses), and `RawH2`, which writes frames as given
(hyperframe and hpack, both under python3-h2) for the abuse a real client never sends."""
import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
from hyperframe.frame import Frame, SettingsFrame

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def open_socket(port, tls=False, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        s = ctx.wrap_socket(s, server_hostname="localhost")
        assert s.selected_alpn_protocol() == "h2", s.selected_alpn_protocol()
    return s


class Response:
    def __init__(self):
        self.headers, self.body, self.trailers = [], b"", []
        self.ended, self.reset = False, None

    @property
    def status(self):
        return int(self.header(":status") or 0)

    def header(self, name):
        return next((v for k, v in self.headers if k == name), None)


class Closing:
    """A client whose socket closes as its `with` block ends."""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


class H2(Closing):
    """A client connection. `auto_ack`: the windows of a stream are opened again as its
    data arrives (else the test opens them, or not)."""

    def __init__(self, port, tls=False, timeout=10, settings=None, auto_ack=True):
        self.sock = open_socket(port, tls, timeout)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                           validate_outbound_headers=False, normalize_outbound_headers=False,
                                           validate_inbound_headers=False)
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.auto_ack = auto_ack
        self.responses = {}
        self.goaway = None  # (error code, last stream id)
        self.closed = False
        self.remote_settings = {}

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path, method="GET", headers=(), body=None, end=True, authority="localhost"):
        sid = self.conn.get_next_available_stream_id()
        hs = [(":method", method), (":scheme", "http"), (":authority", authority), (":path", path), *headers]
        self.conn.send_headers(sid, hs, end_stream=body is None and end)
        self.responses[sid] = Response()
        if body is not None:
            self.send_body(sid, body, end)
        self.flush()
        return sid

    def send_body(self, sid, body, end=True):
        """Sends as the windows allow, reading meanwhile."""
        view = memoryview(body)
        r = self.responses.get(sid)
        reset = lambda: r is not None and r.reset is not None  # noqa: E731
        while view:
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size, len(view))
            if room <= 0:
                self.pump(lambda: self.conn.local_flow_control_window(sid) > 0 or self.closed or reset(), 10)
                if reset():  # (the gateway is done with it: no window will open)
                    raise h2.exceptions.StreamClosedError(sid)
                assert not self.closed
                continue
            self.conn.send_data(sid, bytes(view[:room]))
            view = view[room:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def pump(self, until, timeout=10):
        """Reads and handles events until until() holds (True) or the time is up (False)."""
        end = time.monotonic() + timeout
        while not until():
            if self.closed:
                return until()
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(min(left, 0.5))
            try:
                data = self.sock.recv(65536)
            except (socket.timeout, TimeoutError):
                continue
            except (ConnectionResetError, ssl.SSLError, OSError):
                data = b""
            if not data:
                self.closed = True
                continue
            for e in self.conn.receive_data(data):
                self.event(e)
            self.flush()
        return True

    def event(self, e):
        r = self.responses.get(getattr(e, "stream_id", None))
        if isinstance(e, h2.events.ResponseReceived):
            r.headers = list(e.headers)
        elif isinstance(e, h2.events.TrailersReceived):
            r.trailers = list(e.headers)
        elif isinstance(e, h2.events.DataReceived):
            r.body += e.data
            if self.auto_ack:
                self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            else:
                self.conn.increment_flow_control_window(e.flow_controlled_length)  # (the connection's only)
        elif isinstance(e, h2.events.StreamEnded):
            r.ended = True
        elif isinstance(e, h2.events.StreamReset):
            if r:
                r.reset = e.error_code
        elif isinstance(e, h2.events.ConnectionTerminated):
            self.goaway = (e.error_code, e.last_stream_id)
            if e.error_code == 0:
                # A graceful GOAWAY (a drain): the streams up to its last id still finish,
                # whose frames python-h2 would refuse from a connection it deems closed.
                self.conn.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
        elif isinstance(e, h2.events.RemoteSettingsChanged):
            self.remote_settings.update({k: v.new_value for k, v in e.changed_settings.items()})

    def wait(self, sid, timeout=10):
        r = self.responses[sid]
        assert self.pump(lambda: r.ended or r.reset is not None, timeout), f"stream {sid}: no answer in {timeout}s"
        return r

    def get(self, path, **kw):
        return self.wait(self.request(path, **kw))



class RawH2(Closing):
    """Frames written as given. read() returns the frames the gateway sent, parsed."""

    def __init__(self, port, tls=False, timeout=10, preface=True):
        self.sock = open_socket(port, tls, timeout)
        self.encoder = hpack.Encoder()
        self.buf = b""
        self.closed = False
        if preface:
            self.send(PREFACE + SettingsFrame(0).serialize())

    def send(self, data):
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            self.closed = True
            return False

    def headers_block(self, path="/", method="GET", extra=()):
        return self.encoder.encode([(":method", method), (":scheme", "http"), (":authority", "localhost"),
                                    (":path", path), *extra])

    def read(self, until, timeout=10):
        """Frames until until(frames) holds or the connection ends; the frames read."""
        frames = []
        end = time.monotonic() + timeout
        while not until(frames) and not self.closed and time.monotonic() < end:
            while len(self.buf) >= 9:
                frame, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
                if len(self.buf) < 9 + length:
                    break
                frame.parse_body(memoryview(self.buf[9:9 + length]))
                self.buf = self.buf[9 + length:]
                frames.append(frame)
            if until(frames):
                break
            self.sock.settimeout(max(0.01, min(0.5, end - time.monotonic())))
            try:
                data = self.sock.recv(65536)
            except (socket.timeout, TimeoutError):
                continue
            except OSError:
                data = b""
            if not data:
                self.closed = True
            self.buf += data
        return frames



def goaway_of(frames):
    return next((f for f in frames if f.type == 0x7), None)
