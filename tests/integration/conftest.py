"""Fixtures for integration tests: the real floodgate binary, a real upstream process."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BIN = os.environ.get("FLOODGATE_BIN", str(ROOT / "build" / "src" / "floodgate"))
# The same gateway linked with the C library's malloc instead of jemalloc: for a test
# that preloads libfaketime, which cannot start alongside jemalloc (both intercept
# early clock reads). Falls back to BIN (a build without jemalloc).
BIN_SYSTEM_MALLOC = os.environ.get("FLOODGATE_SYSTEM_MALLOC_BIN", BIN)
SANITIZED = os.environ.get("FG_SANITIZED") == "1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, deadline_s=15.0, proc=None):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"port {port} not listening after {deadline_s}s")


class Upstream:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, str(HERE / "upstream.py")], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        assert line and line[0] == "PORT", line
        self.port, self.control = int(line[1]), int(line[2])
        self.address = f"127.0.0.1:{self.port}"

    def _control(self, path):
        with socket.create_connection(("127.0.0.1", self.control), timeout=5) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n".encode())
            r = read_response(s)
            return json.loads(r.body)

    def stats(self):
        return self._control("/__stats")

    def reset(self):
        self._control("/__reset")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def upstream():
    u = Upstream()
    yield u
    u.stop()


DEFAULT_HTTP = {"header_timeout": "2s", "idle_timeout": "5s"}


class Gateway:
    def __init__(self, tmp_path, upstream_address, http=None, extra="", routes=None, workers=1,
                 upstream_opts=None, access_log="off", log_format="text", trusted="10.0.0.0/8", store="memory",
                 redis=None, prefix=None, env=None, redis_extra="", binary=BIN, client_ip_extra="", configmap=False):
        h = dict(DEFAULT_HTTP)
        h.update(http or {})
        http_yaml = "\n".join(f"  {k}: {v}" for k, v in h.items())
        up = {"address": f'"{upstream_address}"', "connect_timeout": "1s", "response_timeout": "2s", "max_idle": 16}
        up.update(upstream_opts or {})
        up_yaml = "\n".join(f"    {k}: {v}" for k, v in up.items())
        routes = routes or """  - name: all
    match:
      path_prefix: /
    upstream: api
"""
        self.access_log = tmp_path / "access.log" if access_log == "file" else None
        self.config = tmp_path / "floodgate.yaml"
        if configmap:
            # As kubelet lays out a ConfigMap volume: floodgate.yaml -> ..data/floodgate.yaml,
            # ..data -> ..v1 (the file is written through the links).
            (tmp_path / "..v1").mkdir()
            os.symlink("..v1", tmp_path / "..data")
            os.symlink("..data/floodgate.yaml", self.config)
        template = f"""listen: "127.0.0.1:__PORT__"
workers: {workers}
log:
  level: info
  access_log: {self.access_log or access_log}
  format: {log_format}
store: {store}
redis:
  addresses: ["{redis or '127.0.0.1:6379'}"]
  timeout: 200ms
  key_prefix: "{prefix or 'fgtest:'}"
{redis_extra}client_ip:
  trusted_proxies: ["{trusted}"]
{client_ip_extra}http:
{http_yaml}
upstreams:
  api:
{up_yaml}
routes:
{routes}
{extra}
"""
        full_env = dict(os.environ, **(env or {}))
        # free_port() frees the port before the gateway binds it, and the other test
        # files run in parallel: if someone took it meanwhile, start again on another.
        for _ in range(3):
            self.port = free_port()
            self.config.write_text(template.replace("__PORT__", str(self.port)))
            self.stderr_path = tmp_path / "floodgate.stderr"
            self.stderr = open(self.stderr_path, "w+")
            self.proc = subprocess.Popen([binary, "--config", str(self.config)], stdout=self.stderr,
                                         stderr=self.stderr, env=full_env)
            if self._listening():
                return
            self.stderr.close()
        raise RuntimeError("floodgate found no free port:\n" + self.stderr_path.read_text(errors="replace"))

    def _listening(self, deadline_s=15.0):
        """True once this process logs that it listens (the port answering is not
        enough: it may be another's); False if it could not bind the port."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            text = self.log_text()
            if "floodgate listening on" in text:
                return True
            if self.proc.poll() is not None:
                if "cannot listen" in text:
                    return False
                raise RuntimeError(f"floodgate exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.02)
        raise TimeoutError(f"floodgate not listening after {deadline_s}s")

    def connect(self, timeout=10):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def request(self, raw, timeout=10):
        with self.connect(timeout) as s:
            s.sendall(raw)
            return read_response(s)

    def peak_rss_kib(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")

    def log_text(self):
        # Through a file of its own: seeking self.stderr would move the offset the
        # gateway writes at (the two share it).
        return self.stderr_path.read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode


@pytest.fixture
def gateway_factory(tmp_path, upstream):
    made = []

    def make(**kw):
        kw.setdefault("upstream_address", upstream.address)
        sub = tmp_path / f"g{len(made)}"
        sub.mkdir()
        g = Gateway(sub, **kw)
        made.append(g)
        return g

    yield make
    for g in made:
        if getattr(g, "killed", False):
            continue
        code = g.stop()
        # Sanitizer reports end up on stderr and make the exit code non-zero.
        assert code == 0, g.log_text()


@pytest.fixture
def gateway(gateway_factory):
    return gateway_factory()


class Response:
    def __init__(self, status, reason, headers, body, version, complete=True):
        self.status, self.reason, self.headers, self.body, self.version = status, reason, headers, body, version
        self.complete = complete

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def header_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self):
        return json.loads(self.body)


class Reader:
    """Buffered reader over a socket that keeps unread bytes between responses."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self.fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


_readers = {}


def read_response(sock, head_request=False, reader=None, skip_informational=True):
    r = reader or _readers.setdefault(id(sock), Reader(sock))
    if r.sock is not sock:
        r = _readers[id(sock)] = Reader(sock)
    while True:
        status_line = r.line().decode("latin-1")
        version, code, *reason = status_line.split(" ", 2)
        headers = []
        while True:
            h = r.line()
            if not h:
                break
            k, v = h.decode("latin-1").split(":", 1)
            headers.append((k.strip(), v.strip()))
        resp = Response(int(code), reason[0] if reason else "", headers, b"", version)
        if not (skip_informational and 100 <= resp.status < 200 and resp.status != 101):
            break
    if head_request or resp.status < 200 or resp.status in (204, 304):
        return resp
    te = resp.header("transfer-encoding")
    cl = resp.header("content-length")
    try:
        if te and te.lower() == "chunked":
            parts = []
            while True:
                size = int(r.line().split(b";")[0], 16)
                if size == 0:
                    while r.line():
                        pass
                    break
                parts.append(r.exact(size))
                r.exact(2)
            resp.body = b"".join(parts)
        elif cl is not None:
            resp.body = r.exact(int(cl))
        else:
            while True:
                try:
                    r.fill()
                except EOFError:
                    break
            resp.body, r.buf = r.buf, b""
    except (EOFError, ConnectionResetError):
        resp.body, resp.complete = r.buf, False
        r.buf = b""
    return resp


def is_closed(sock, timeout=3.0):
    """True when the peer closed the connection (EOF or reset) within timeout."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def get(path, host="example.com", extra=""):
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


class RedisServer:
    """A real redis-server on a free port, for one test."""

    def __init__(self, tmp_path, extra=(), auth=()):
        self.dir = tmp_path
        self.extra = list(extra)
        self.auth = list(auth)
        # free_port() frees the port before redis-server binds it, and the other test
        # files run in parallel: if someone took it meanwhile, start again on another.
        for _ in range(3):
            self.port = free_port()
            if self.start():
                return
        raise RuntimeError("redis-server found no free port")

    def start(self):
        """Starts redis-server on self.port: True once it answers as this process
        (the port answering is not enough: it may be another's), False if it exited."""
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(self.dir), *self.extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(self.port, proc=self.proc)
        except RuntimeError:
            return False
        end = time.monotonic() + 10
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return False
            try:
                info = subprocess.run(["redis-cli", "-p", str(self.port), *self.auth, "info", "server"],
                                      capture_output=True, text=True, timeout=1).stdout
            except subprocess.TimeoutExpired:  # another program's port
                info = ""
            if f"process_id:{self.proc.pid}" in info:
                return True
            time.sleep(0.02)
        raise TimeoutError(f"redis-server on port {self.port} never answered as process {self.proc.pid}")

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def cli(self, *args):
        out = subprocess.run(["redis-cli", "-p", str(self.port), *self.auth, *args], capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip()

    def raw(self, *args):
        """One command over a plain socket, for binary values: a bulk string's bytes (None if nil)."""
        parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        cmd = f"*{len(parts)}\r\n".encode() + b"".join(f"${len(a)}\r\n".encode() + a + b"\r\n" for a in parts)
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(cmd)
            f = s.makefile("rb")
            head = f.readline()
            assert head[:1] == b"$", head
            n = int(head[1:])
            return None if n < 0 else f.read(n + 2)[:-2]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def keys(self, pattern="*"):
        out = self.cli("--scan", "--pattern", pattern)
        return [k for k in out.splitlines() if k]

    def command_calls(self, name):
        for line in self.cli("info", "commandstats").splitlines():
            if line.startswith(f"cmdstat_{name}:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0


@pytest.fixture
def redis_server(tmp_path):
    d = tmp_path / "redis"
    d.mkdir()
    r = RedisServer(d)
    yield r
    # Whatever the test did, no key floodgate wrote may be left without a TTL.
    if r.proc.poll() is None:
        for k in r.keys("fgtest:*"):
            assert int(r.cli("pttl", k)) != -1, k
    r.stop()
