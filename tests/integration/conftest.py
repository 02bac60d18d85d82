"""Fixtures for integration tests: the real floodgate binary, a real upstream process."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from protocols import PROTOCOLS, H2Conn, listener_config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BIN = os.environ.get("FLOODGATE_BIN", str(ROOT / "build" / "src" / "floodgate"))
# The same gateway linked with the C library's malloc instead of jemalloc: for a test
# that preloads libfaketime, which cannot start alongside jemalloc (both intercept
# early clock reads). Falls back to BIN (a build without jemalloc).
BIN_SYSTEM_MALLOC = os.environ.get("FLOODGATE_SYSTEM_MALLOC_BIN", BIN)
SANITIZED = os.environ.get("FG_SANITIZED") == "1"


def pytest_configure(config):
    # An exception that ends a helper thread fails the test it happened in (without
    # this it is a warning, and the assertions after it may pass on what the thread
    # never did). Threads started through Thread below also raise it again on join().
    config.addinivalue_line("filterwarnings", "error::pytest.PytestUnhandledThreadExceptionWarning")


# Measured values a passing run should show too (ratios, retries, times): record()
# prints a line (in the test's captured output, shown with a failure or -s) and keeps it
# for the summary at the end of the run.
RECORDED = []


def pytest_generate_tests(metafunc):
    """A test of a module with OVER_EVERY_PROTOCOL runs over each protocol (protocols.py)
    unless it says which itself."""
    if not getattr(metafunc.module, "OVER_EVERY_PROTOCOL", False) or "protocol" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if "protocol" in (names.split(",") if isinstance(names, str) else names):
            return
    metafunc.parametrize("protocol", PROTOCOLS, indirect=True)


def record(line):
    print(line)
    RECORDED.append(line)


def pytest_terminal_summary(terminalreporter):
    if RECORDED:
        terminalreporter.section("measured")
        for line in RECORDED:
            terminalreporter.write_line(line)


class Thread(threading.Thread):
    """A helper thread whose exception (an assertion included) is raised again by join()
    in the test's own thread, and whose join(timeout) raises if it is still running."""

    def __init__(self, target, args=(), kwargs=None, name=None):
        super().__init__(target=target, args=args, kwargs=kwargs or {}, name=name, daemon=True)
        self.error = None

    def run(self):
        try:
            super().run()
        except BaseException as e:  # noqa: B902 - handed to join()
            self.error = e

    def join(self, timeout=None):
        super().join(timeout)
        if self.is_alive():
            raise TimeoutError(f"thread {self.name} still running after {timeout}s")
        if self.error is not None:
            raise self.error


def join_all(threads, timeout=None):
    """Joins every thread (each within `timeout`), then raises the first one's exception."""
    errors = []
    for t in threads:
        try:
            t.join(timeout)
        except BaseException as e:  # noqa: B902
            errors.append(e)
    if errors:
        raise errors[0]


def run_threads(target, args_list, timeout=None):
    """Runs target(*args) in a Thread for each args, at once; joins them all (raising the
    first exception any of them ended with)."""
    threads = [Thread(target=target, args=args) for args in args_list]
    for t in threads:
        t.start()
    join_all(threads, timeout)


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
    def __init__(self, tls=None):
        """tls: (cert, key) or (cert, key, client_ca): the origin speaks TLS (upstream.py)."""
        env = dict(os.environ)
        if tls:
            env["UPSTREAM_TLS_CERT"], env["UPSTREAM_TLS_KEY"] = str(tls[0]), str(tls[1])
            if len(tls) > 2:
                env["UPSTREAM_TLS_CLIENT_CA"] = str(tls[2])
        self.proc = subprocess.Popen([sys.executable, str(HERE / "upstream.py")], stdout=subprocess.PIPE, text=True,
                                     env=env)
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
# redis_extra for a gateway whose Redis is down, wrong or unreachable on purpose: the
# proxy port opens at once instead of after redis.startup_wait (default 5 s).
STARTUP_NOW = "  startup_wait: 0s\n"


class Gateway:
    def __init__(self, tmp_path, upstream_address, http=None, extra="", routes=None, workers=1,
                 upstream_opts=None, access_log="off", log_format="text", trusted="10.0.0.0/8", store="memory",
                 redis=None, prefix=None, env=None, redis_extra="", binary=BIN, client_ip_extra="", configmap=False,
                 redis_timeout="200ms", upstreams=None, protocol="http1"):
        """upstreams: the whole upstreams section (its lines, each indented 2 or more) in
        place of the one upstream `api` at upstream_address with upstream_opts. protocol:
        what request() and connect() speak (protocols.py)."""
        self.protocol = protocol
        listener = listener_config(protocol, tmp_path)
        h = dict(DEFAULT_HTTP)
        h.update(http or {})
        http_yaml = "\n".join(f"  {k}: {v}" for k, v in h.items())
        up = {"address": f'"{upstream_address}"', "connect_timeout": "1s", "response_timeout": "2s", "max_idle": 16}
        up.update(upstream_opts or {})
        up_yaml = "\n".join(f"    {k}: {v}" for k, v in up.items())
        upstreams = upstreams if upstreams is not None else f"  api:\n{up_yaml}\n"
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
  level: ${{FG_TEST_LOG_LEVEL:-info}}
  access_log: {self.access_log or access_log}
  format: {log_format}
store: {store}
redis:
  addresses: ["{redis or '127.0.0.1:6379'}"]
  timeout: {redis_timeout}
  key_prefix: "{prefix or 'fgtest:'}"
{redis_extra}client_ip:
  trusted_proxies: ["{trusted}"]
{client_ip_extra}http:
{http_yaml}
upstreams:
{upstreams}routes:
{routes}
{listener}{extra}
"""
        full_env = dict(os.environ, **(env or {}))
        # free_port() frees the port before the gateway binds it, and the other test
        # files run in parallel: if someone took it meanwhile, start again on another.
        for _ in range(3):
            self.port = free_port()
            self.tls_port = free_port() if protocol == "h2" else None
            self.config.write_text(template.replace("__PORT__", str(self.port)).replace("__TLS_PORT__",
                                                                                      str(self.tls_port)))
            self.stderr_path = tmp_path / "floodgate.stderr"
            self.stderr = open(self.stderr_path, "w+")
            self.proc = subprocess.Popen([binary, "--config", str(self.config)], stdout=self.stderr,
                                         stderr=self.stderr, env=full_env)
            if self._listening():
                if protocol == "h2":
                    wait_for("the TLS listener", lambda: "listening for TLS" in self.log_text(), 10)
                return
            self.stderr.close()
        raise RuntimeError("floodgate found no free port:\n" + self.stderr_path.read_text(errors="replace"))

    def _listening(self, deadline_s=30.0):
        """True once this process logs that it listens (the port answering is not
        enough: it may be another's); False if it could not bind the port. (A gateway
        on Redis opens its port once its store is ready, or after redis.startup_wait: a
        test whose Redis is down on purpose sets startup_wait: 0s, see STARTUP_NOW.)"""
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
        self.proc.kill()  # (no test will stop it)
        self.proc.wait()
        raise TimeoutError(f"floodgate not listening after {deadline_s}s:\n{self.log_text()[-3000:]}")

    def connect(self, timeout=10):
        if self.protocol != "http1":
            tls = self.protocol == "h2"
            return H2Conn(self.tls_port if tls else self.port, tls=tls, timeout=timeout)
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def request(self, raw, timeout=10):
        with self.connect(timeout) as s:
            s.sendall(raw)
            return read_response(s)

    def rss_kib(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

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
def protocol(request):
    """What the test's requests go over (protocols.py): HTTP/1.1 unless the test or its
    module is parametrized over the protocols."""
    return getattr(request, "param", "http1")


@pytest.fixture
def gateway_factory(tmp_path, upstream, protocol):
    made, tries = [], [0]

    def make(**kw):
        kw.setdefault("upstream_address", upstream.address)
        kw.setdefault("protocol", protocol)
        # (a folder per try: one that failed to start, retried by its caller, keeps its own)
        sub = tmp_path / f"g{tries[0]}"
        tries[0] += 1
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
    if isinstance(sock, H2Conn):  # (an HTTP/2 stream's answer: no interim ones to skip)
        return sock.response(Response, head_request)
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


def run_one_route_gateway(tmp_path, listen_port, upstream_address, workers=1, extra=""):
    """Runs the binary to its exit (10 s at most) with one route to `upstream_address`,
    for a start that is to fail; the CompletedProcess."""
    cfg = tmp_path / "one-route.yaml"
    cfg.write_text(f"""listen: "127.0.0.1:{listen_port}"
workers: {workers}
log:
  access_log: "off"
{extra}upstreams:
  api:
    address: "{upstream_address}"
routes:
  - name: all
    match:
      path_prefix: /
    upstream: api
""")
    return subprocess.run([BIN, "--config", str(cfg)], capture_output=True, text=True, timeout=10)


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
        self.proc = self._spawn()
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

    def _spawn(self):
        return subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(self.dir), *self.extra],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

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


def wait_until(predicate, timeout=3.0):
    """Polls predicate() every 50 ms for up to `timeout` s: whether it came true."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def keys_without_ttl(port, pattern="fgtest:*", auth=()):
    """The keys matching `pattern` on the server at `port` that have no TTL: one redis-cli
    for the scan and one for all the PTTLs (READONLY first, so that a cluster replica
    answers for its own keys)."""
    keys = [k for k in subprocess.run(["redis-cli", "-p", str(port), *auth, "--scan", "--pattern", pattern],
                                      capture_output=True, text=True, timeout=30).stdout.splitlines() if k]
    if not keys:
        return []
    script = "READONLY\n" + "".join(f"PTTL {k}\n" for k in keys)
    out = subprocess.run(["redis-cli", "-p", str(port), *auth], input=script, capture_output=True, text=True,
                         timeout=60).stdout.split("\n")
    # (READONLY answers an error off a cluster: either way one line)
    ttls = [line for line in out[1:] if line.strip()]
    assert len(ttls) == len(keys), out[:3]
    return [k for k, ttl in zip(keys, ttls) if int(ttl) == -1]


class Load:
    """Keep-alive clients sending GET /limited until stopped, statuses counted. Each
    request is a new client (X-Client: PREFIX-THREAD-N), or the next of `names`."""

    def __init__(self, g, threads=4, prefix="load", names=None):
        self.g, self.prefix, self.names = g, prefix, names
        self.stopped, self.statuses, self.lock = threading.Event(), [], threading.Lock()
        self.threads = [Thread(target=self.run, args=(i,)) for i in range(threads)]
        for t in self.threads:
            t.start()

    def run(self, i):
        with self.g.connect(timeout=30) as s:
            n = 0
            while not self.stopped.is_set():
                n += 1
                name = self.names[(n * 4 + i) % len(self.names)] if self.names else f"{self.prefix}-{i}-{n}"
                s.sendall(get("/limited", extra=f"X-Client: {name}\r\n"))
                st = read_response(s).status
                with self.lock:
                    self.statuses.append(st)

    def stop(self):
        """The statuses; raises what ended a client early (a read that failed, say)."""
        self.stopped.set()
        join_all(self.threads, 60)
        return self.statuses


def allowed_through_a_move(statuses, probes, before, now):
    """Checks a Load's `statuses` through a move of the store's master, on a route that
    allows on a store error: every request answered 200, and each one (and the `probes`
    sent beside the load) counted, between the decision counts `before` and `now` (as
    test_metrics.decisions gives them), as allowed or as a store error allowed; none let
    through uncounted, none denied. Returns {outcome: how far its count moved}."""
    assert statuses and set(statuses) <= {200}, {s: statuses.count(s) for s in set(statuses)}
    moved = {k: now[k] - before[k] for k in now}
    assert moved["allowed"] + moved["store_error_allowed"] == len(statuses) + probes, (moved, len(statuses), probes)
    assert moved["denied"] == 0, moved
    return moved


def per_client_route(extra="", path_prefix="/", window="1m"):
    """Route `r` on every path under `path_prefix`, limited to 5 a `window` per X-Client
    header (the client client_statuses names); `extra`: more keys of the route, each line
    indented 4."""
    return f"""  - name: r
    match:
      path_prefix: {path_prefix}
    upstream: api
{extra}    limits:
      - name: per-client
        algorithm: fixed_window
        key: "header:X-Client"
        limit: 5
        window: {window}
"""


def client_statuses(g, name, n, path="/limited", header="X-Client"):
    """The statuses of `n` requests as client `name` (in `header`) over one connection."""
    out = []
    with g.connect() as s:
        for _ in range(n):
            s.sendall(get(path, extra=f"{header}: {name}\r\n"))
            out.append(read_response(s).status)
    return out


def wait_for(what, check, deadline_s):
    """Polls check() until it returns something true (returned), or raises TimeoutError
    naming `what` and the last value check() gave."""
    end = time.monotonic() + deadline_s
    last = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > end:
            raise TimeoutError(f"{what}: not after {deadline_s}s (last: {last!r})")
        time.sleep(0.05)


def _kill(server):
    if server.proc.poll() is None:
        server.proc.kill()
    server.proc.wait()


class SyncingRedisServer(RedisServer):
    """A RedisServer whose replicas sync at once: Redis 7 waits repl-diskless-sync-delay
    (5 s) before streaming a snapshot, in case more replicas come."""

    def _spawn(self):
        return subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(self.dir), "--repl-diskless-sync-delay", "0",
                                 *self.extra],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @property
    def alive(self):
        return self.proc.poll() is None


class ClusterNode(SyncingRedisServer):
    """A redis-server with --cluster-enabled, its bus on a free port of its own
    (cluster-port, Redis 7) rather than port + 10000, which may be taken or past 65535."""

    def __init__(self, tmp_path, node_timeout_ms, password=None):
        self.node_timeout_ms, self.password = node_timeout_ms, password
        super().__init__(tmp_path, auth=["-a", password, "--no-auth-warning"] if password else ())

    def start(self):
        self.bus_port = free_port()
        self.extra = ["--cluster-enabled", "yes", "--cluster-config-file", str(self.dir / "nodes.conf"),
                      "--cluster-port", str(self.bus_port), "--cluster-node-timeout", str(self.node_timeout_ms),
                      # Redis 7 leaves a replica out of CLUSTER SLOTS and SHARDS ("health: loading")
                      # while its replication offset is 0: on an empty cluster, until the
                      # master's first replication PING (every 10 s by default).
                      "--repl-ping-replica-period", "1"]
        if self.password:  # clients and the replicas' own connections to their masters
            self.extra += ["--requirepass", self.password, "--masterauth", self.password]
        return super().start()


class ClusterNodeInfo:
    """One line of CLUSTER NODES: id, port, role ("master" or "replica"), master_id (a
    replica's), slots [(first, last)], flags (myself, fail, pfail, ...)."""

    def __init__(self, line):
        f = line.split()
        self.id = f[0]
        # ip:port@cport[,hostname]
        self.host, rest = f[1].rsplit(":", 1)
        self.port = int(rest.split("@")[0])
        self.flags = set(f[2].split(","))
        self.role = "master" if "master" in self.flags else "replica"
        self.master_id = None if f[3] == "-" else f[3]
        self.connected = f[7] == "connected"
        self.slots = []
        for s in f[8:]:
            if s.startswith("["):  # [slot->-id] / [slot-<-id]: a migration in progress
                continue
            first, _, last = s.partition("-")
            self.slots.append((int(first), int(last or first)))

    @property
    def failed(self):
        return bool(self.flags & {"fail", "fail?", "noaddr"})

    @property
    def slot_count(self):
        return sum(last - first + 1 for first, last in self.slots)

    def __repr__(self):
        return f"<{self.role} {self.port} {self.id[:8]} slots={self.slot_count}{' failed' if self.failed else ''}>"


class RedisCluster:
    """A real Redis Cluster on loopback: `masters` masters with `replicas` replicas each,
    made by redis-cli --cluster create; ready when every node agrees on who serves what.
    Stops every process it started on stop(), and when its start fails."""

    def __init__(self, tmp_path, masters=3, replicas=1, node_timeout_ms=2000, password=None):
        started = time.monotonic()
        self.servers = []
        self.node_timeout_ms = node_timeout_ms
        self.auth = ["-a", password, "--no-auth-warning"] if password else []
        try:
            for i in range(masters * (1 + replicas)):
                d = tmp_path / f"node{i}"
                d.mkdir(parents=True)
                self.servers.append(ClusterNode(d, node_timeout_ms, password))
            out = subprocess.run(["redis-cli", *self.auth, "--cluster", "create", *(s.address for s in self.servers),
                                  "--cluster-replicas", str(replicas), "--cluster-yes"],
                                 capture_output=True, text=True, timeout=60)
            if out.returncode != 0 or "All 16384 slots covered" not in out.stdout:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{out.stdout}\n{out.stderr}")
            self.wait_settled(masters=masters, replicas=masters * replicas)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def server(self, port):
        return next(s for s in self.servers if s.port == port)

    def live(self):
        return [s for s in self.servers if s.alive]

    def cli(self, port, *args):
        """redis-cli -p PORT ARGS... (no -c: a MOVED comes back as the answer)."""
        out = subprocess.run(["redis-cli", "-p", str(port), *self.auth, *map(str, args)], capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip()

    def nodes(self, port=None):
        """The cluster as one node (`port`, or the first live one) sees it: CLUSTER NODES."""
        port = port or self.live()[0].port
        return [ClusterNodeInfo(line) for line in self.cli(port, "cluster", "nodes").splitlines() if line.strip()]

    def masters(self, port=None):
        """The live masters serving slots, by port."""
        return sorted((n for n in self.nodes(port) if n.role == "master" and not n.failed and n.slots),
                      key=lambda n: n.port)

    def replicas_of(self, master_port):
        nodes = self.nodes()
        master = next(n for n in nodes if n.port == master_port)
        return [n for n in nodes if n.master_id == master.id and not n.failed]

    def _view(self, port):
        """(state ok and no replica loading, {master id: slots}, live replica count) as `port` sees it."""
        info = self.cli(port, "cluster", "info")
        loading = self.cli(port, "cluster", "shards").splitlines().count("loading")
        nodes = [n for n in self.nodes(port) if not n.failed]
        masters = {n.id: tuple(sorted(n.slots)) for n in nodes if n.role == "master" and n.slots}
        replicas = [n for n in nodes if n.role == "replica" and n.master_id in masters]
        return "cluster_state:ok" in info and loading == 0, masters, len(replicas)

    def wait_settled(self, masters=None, replicas=None, deadline_s=30):
        """Until every live node says cluster_state:ok, lists every replica in CLUSTER SLOTS
        (none "loading" in CLUSTER SHARDS) and all see the same masters with the same slots
        (and, when given, that many masters and live replicas)."""
        def settled():
            views = [self._view(s.port) for s in self.live()]
            if not all(v[0] for v in views) or any(v[1] != views[0][1] for v in views):
                return False
            if masters is not None and len(views[0][1]) != masters:
                return False
            if replicas is not None and any(v[2] != replicas for v in views):
                return False
            return views[0]
        return wait_for("cluster settled", settled, deadline_s)

    def kill_master(self, port=None, wait=True, deadline_s=30):
        """Kills a master (`port`, or the lowest-port one) and, with `wait`, waits until one of
        its replicas is promoted and the cluster is ok again. Returns (killed, promoted) ports
        (promoted is None without `wait`)."""
        port = port or self.masters()[0].port
        replicas = self.replicas_of(port)
        _kill(self.server(port))
        if not wait:
            return port, None
        candidates = {r.port for r in replicas}

        def promoted():
            for p in candidates:
                me = next((n for n in self.nodes(p) if "myself" in n.flags), None)
                if me and me.role == "master" and me.slots:
                    return p
            return None
        new = wait_for(f"a replica of {port} promoted", promoted, deadline_s)
        self.wait_settled(deadline_s=deadline_s)
        return port, new

    def reshard(self, from_port, to_port, slots, deadline_s=120):
        """Moves `slots` slots (and their keys) from one master to another with redis-cli
        --cluster reshard, then waits until every node agrees on the new map."""
        ids = {n.port: n.id for n in self.nodes()}
        out = subprocess.run(["redis-cli", *self.auth, "--cluster", "reshard", self.live()[0].address,
                              "--cluster-from", ids[from_port], "--cluster-to", ids[to_port],
                              "--cluster-slots", str(slots), "--cluster-yes"],
                             capture_output=True, text=True, timeout=deadline_s)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster reshard failed:\n{out.stdout[-2000:]}\n{out.stderr}")
        self.wait_settled(deadline_s=deadline_s)

    def stop(self):
        for s in self.servers:
            _kill(s)


def _until_stopped(servers):
    """A fixture's body: yields `servers` (a RedisCluster, a RedisSentinel), then stops them
    however the test ended."""
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    """One cluster for a module's tests that leave its nodes and slots as they found them."""
    yield from _until_stopped(RedisCluster(tmp_path_factory.mktemp("cluster")))


@pytest.fixture
def redis_cluster(tmp_path):
    yield from _until_stopped(RedisCluster(tmp_path / "cluster"))


class SentinelProcess(SyncingRedisServer):
    """One redis-sentinel on a free port, its config file its own (Sentinel rewrites it)."""

    def __init__(self, tmp_path, master_port, quorum, down_after_ms, failover_timeout_ms):
        self.monitor = (master_port, quorum, down_after_ms, failover_timeout_ms)
        super().__init__(tmp_path)

    def _spawn(self):
        master_port, quorum, down_after_ms, failover_timeout_ms = self.monitor
        conf = self.dir / "sentinel.conf"
        conf.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
                        f"sentinel monitor mymaster 127.0.0.1 {master_port} {quorum}\n"
                        f"sentinel down-after-milliseconds mymaster {down_after_ms}\n"
                        f"sentinel failover-timeout mymaster {failover_timeout_ms}\n"
                        "sentinel parallel-syncs mymaster 1\n")
        return subprocess.Popen(["redis-sentinel", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class RedisSentinel:
    """A real Sentinel deployment on loopback: one master, one replica (--replicaof), three
    redis-sentinel monitoring them as `mymaster`; ready when every sentinel knows the
    master, the replica and the other sentinels (so that a killed master can reach quorum).
    Stops every process it started on stop(), and when its start fails."""

    name = "mymaster"

    def __init__(self, tmp_path, sentinels=3, down_after_ms=1000, failover_timeout_ms=3000, master_front=None):
        """master_front(address): something with a .port that forwards to the master (a
        FaultProxy): the sentinels then monitor, and name, that port."""
        if not shutil.which("redis-sentinel"):
            raise RuntimeError("redis-sentinel is not installed (Debian's redis-sentinel: scripts/deps.sh test)")
        started = time.monotonic()
        self.servers, self.sentinels = [], []
        try:
            for role in ("master", "replica"):
                d = tmp_path / role
                d.mkdir(parents=True)
                extra = () if role == "master" else ("--replicaof", "127.0.0.1", str(self.servers[0].port))
                self.servers.append(SyncingRedisServer(d, extra=extra))
            wait_for("replica in sync", lambda: "master_link_status:up" in
                        self.servers[1].cli("info", "replication"), 15)
            self.monitored = master_front(self.servers[0].address).port if master_front else self.servers[0].port
            for i in range(sentinels):
                d = tmp_path / f"sentinel{i}"
                d.mkdir(parents=True)
                self.sentinels.append(SentinelProcess(d, self.monitored, sentinels // 2 + 1, down_after_ms,
                                                      failover_timeout_ms))
            for s in self.sentinels:
                wait_for(f"sentinel {s.port} ready", lambda s=s: self._knows_all(s), 15)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def _knows_all(self, sentinel):
        master = sentinel.cli("sentinel", "get-master-addr-by-name", self.name).split()
        replicas = sentinel.cli("sentinel", "replicas", self.name)
        others = sentinel.cli("sentinel", "sentinels", self.name)
        return (master == ["127.0.0.1", str(self.monitored)] and
                f"127.0.0.1\nport\n{self.servers[1].port}" in replicas and
                others.count("\nrunid\n") == len(self.sentinels) - 1)

    def server(self, port):
        return next(s for s in self.servers if s.port == port)

    def master_address(self):
        """(host, port) of the master as a live sentinel answers SENTINEL get-master-addr-by-name."""
        for s in self.sentinels:
            if s.proc.poll() is None:
                out = s.cli("sentinel", "get-master-addr-by-name", self.name).split()
                if len(out) == 2:
                    return out[0], int(out[1])
        raise RuntimeError("no sentinel answered")

    def failover(self):
        """SENTINEL FAILOVER: promote the replica now (no agreement needed); returns at once."""
        out = self.sentinels[0].cli("sentinel", "failover", self.name)
        if out != "OK":
            raise RuntimeError(f"SENTINEL FAILOVER: {out}")

    def kill_master(self):
        """Kills the current master's process; returns its port."""
        _, port = self.master_address()
        _kill(self.server(port))
        return port

    def wait_master(self, port, deadline_s=10):
        """Until the sentinels name `port` the master and it says so itself (ROLE)."""
        def moved():
            return (self.master_address()[1] == port and
                    self.server(port).cli("role").splitlines()[:1] == ["master"])
        return wait_for(f"master at {port}", moved, deadline_s)

    def stop(self):
        # Sentinels first: none reconfigures a server while they go.
        for s in self.sentinels + self.servers:
            _kill(s)


@pytest.fixture
def redis_sentinel(tmp_path):
    yield from _until_stopped(RedisSentinel(tmp_path / "sentinel"))


@pytest.fixture(scope="module")
def shared_sentinel(tmp_path_factory):
    """One Sentinel set for a module's tests that use it only as a store (no failover, no
    process stopped): a set takes 2.5 s to start (sentinels find each other by their
    hello messages), and stores.py's tests run on it a dozen times a file."""
    yield from _until_stopped(RedisSentinel(tmp_path_factory.mktemp("sentinel")))


def local_ports(pid, peer_port):
    """The local ports of process `pid`'s TCP connections to port `peer_port` (its fds'
    inodes in /proc/net/tcp*). By the port at both ends: an ephemeral port is shared by
    connections of several processes to different destinations, so a port alone may be
    another process's (a sentinel's link through the same proxy, say)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[9] in inodes and int(f[2].rsplit(":", 1)[1], 16) == peer_port:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports
