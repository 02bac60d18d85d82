#!/usr/bin/env python3
"""A soak: the sanitizer build (ASan+UBSan) under mixed load for a long time, with faults.

    bench/soak.py [minutes] [binary]       (default 30 minutes, build-asan/src/floodgate)

For the whole run: keep-alive clients and clients on a new connection per request, on a
route limited through Redis (on_store_error: allow), one that denies on a store error and
one with no limit; hostile clients beside them (slow heads, malformed requests, floods
of connections that go idle). Meanwhile: a reload every 10 s (SIGHUP, the file changed
each time), Redis killed and restarted every 2 minutes, the upstream killed every 150 s
and started again 5 s later.

Every answer is checked against the route's policy (200/429 on the limited route; 503
only from the deny route while Redis is down; 502/503/504 only while the upstream is
down; 400 for a malformed request), and every request must be answered (no reset, no
timeout) except those sent to a gateway whose upstream connection was cut mid-request.
The gateway's RSS and open descriptors are taken at a quiet moment (every client paused,
its connections closed) after a 2-minute warm-up and again at the end: both must be
within 10% of their warm-up level. At the end SIGTERM, and no sanitizer report in its
log. Prints the figures, writes them to bench/results/soak-<time>.json; exit 1 on a
failed check."""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import free_port, wait_port

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "3"); self.end_headers(); self.wfile.write(b"ok\n")
    do_POST = do_GET
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def config_text(port, admin, up, redis, generation):
    # `generation` changes a limit a little at each reload: every reload is a real one.
    return f"""listen: "127.0.0.1:{port}"
workers: 2
log:
  level: warn
admin:
  listen: "127.0.0.1:{admin}"
store: redis
redis:
  addresses: ["127.0.0.1:{redis}"]
  timeout: 200ms
  key_prefix: "soak:"
http:
  header_timeout: 2s
  idle_timeout: 5s
upstreams:
  api:
    address: "127.0.0.1:{up}"
    connect_timeout: 500ms
    response_timeout: 2s
routes:
  - name: limited
    match:
      path_prefix: /limited
    upstream: api
    on_store_error: allow
    limits:
      - name: per-client
        algorithm: token_bucket
        key: "header:X-Client"
        rate: {200 + generation % 2}/s
        burst: 50
  - name: deny
    match:
      path_prefix: /deny
    upstream: api
    on_store_error: deny
    limits:
      - name: global
        algorithm: fixed_window
        key: global
        limit: 1000000
        window: 1m
  - name: free
    match:
      path_prefix: /
    upstream: api
"""


class Faults:
    """When Redis and the upstream were down (monotonic intervals), to judge answers."""

    def __init__(self):
        self.lock = threading.Lock()
        self.redis_down, self.upstream_down = [], []

    def begin(self, which):
        """A fault starts now (open-ended until end())."""
        with self.lock:
            getattr(self, which).append((time.monotonic(), None))

    def end(self, which):
        with self.lock:
            intervals = getattr(self, which)
            intervals[-1] = (intervals[-1][0], time.monotonic())

    def near(self, which, t, margin=3.0):
        with self.lock:
            return any(s - margin <= t <= (e if e else float("inf")) + margin for s, e in getattr(self, which))


class Stats:
    def __init__(self):
        self.lock = threading.RLock()
        self.counts = {}
        self.bad = []

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, what):
        with self.lock:
            self.add("unexpected")
            if len(self.bad) < 50:
                self.bad.append(what)


def read_status(sock, reader):
    """Reads one response; returns its status (body read by Content-Length)."""
    while b"\r\n\r\n" not in reader[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("closed before a response")
        reader[0] += chunk
    head, rest = reader[0].split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    length = 0
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("closed mid-body")
        rest += chunk
    reader[0] = rest[length:]
    return status, lines


class Soak:
    def __init__(self, minutes, binary):
        self.minutes, self.binary = minutes, binary
        self.work = Path(tempfile.mkdtemp(prefix="fg-soak-"))
        self.port, self.admin, self.up, self.redis = free_port(), free_port(), free_port(), free_port()
        self.stop = threading.Event()
        self.quiet = threading.Event()  # set: clients pause and close their connections
        self.paused = {}
        self.faults, self.stats = Faults(), Stats()
        self.generation = 0
        self.samples = []

    # ---- processes
    def start_redis(self):
        self.redis_proc = subprocess.Popen(["redis-server", "--port", str(self.redis), "--bind", "127.0.0.1",
                                            "--save", "", "--appendonly", "no", "--dir", str(self.work)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.redis, 20)

    def start_upstream(self):
        self.up_proc = subprocess.Popen([sys.executable, "-c", UPSTREAM, str(self.up)])
        wait_port(self.up, 20)

    def start_gateway(self):
        self.config = self.work / "floodgate.yaml"
        self.config.write_text(config_text(self.port, self.admin, self.up, self.redis, 0))
        self.log = open(self.work / "floodgate.log", "w")
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
        env.setdefault("ASAN_SYMBOLIZER_PATH", "/usr/lib/llvm-16/bin/llvm-symbolizer")  # (clang's sanitizers)
        self.gw = subprocess.Popen([self.binary, "--config", str(self.config)], stdout=self.log, stderr=self.log,
                                   env=env)
        wait_port(self.port, 60)
        wait_port(self.admin, 60)

    # ---- faults
    def faults_loop(self):
        try:
            self._faults()
        except Exception as e:  # noqa: BLE001 - a soak whose faults stopped fails
            self.stats.fail(f"the fault thread died: {e!r}")

    def outage(self, fault, proc, seconds, start, count):
        """Kills `proc` for `seconds`, then `start`s it again; the span is fault `fault`."""
        self.faults.begin(fault)
        proc.kill()
        proc.wait()
        time.sleep(seconds)
        start()
        self.faults.end(fault)
        self.stats.add(count)

    def _faults(self):
        started = time.monotonic()
        next_reload, next_redis, next_up = started + 10, started + 120, started + 150
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_reload:
                self.generation += 1
                tmp = self.work / "floodgate.yaml.new"
                tmp.write_text(config_text(self.port, self.admin, self.up, self.redis, self.generation))
                os.replace(tmp, self.config)
                self.gw.send_signal(signal.SIGHUP)
                self.stats.add("reloads")
                next_reload += 10
            if now >= next_redis:
                self.outage("redis_down", self.redis_proc, 2, self.start_redis, "redis_restarts")
                next_redis += 120
            if now >= next_up:
                self.outage("upstream_down", self.up_proc, 5, self.start_upstream, "upstream_restarts")
                next_up += 150
            time.sleep(0.2)

    # ---- clients
    def pause_point(self, name, sock_holder):
        if self.quiet.is_set():
            for s in sock_holder:
                s.close()
            sock_holder.clear()
            self.paused[name] = True
            while self.quiet.is_set() and not self.stop.is_set():
                time.sleep(0.05)
            self.paused[name] = False

    def judge(self, path, status, t):
        if path.startswith("/limited") and status in (200, 429):
            return True
        if path.startswith("/deny") and (status == 200 or (status == 503 and self.faults.near("redis_down", t))):
            return True
        if path == "/free" and status == 200:
            return True
        return status in (502, 503, 504) and self.faults.near("upstream_down", t)

    def client(self, name, keep_alive):
        rnd = random.Random(name)
        holder = []
        reader = [b""]
        while not self.stop.is_set():
            self.pause_point(name, holder)
            path = rnd.choice(["/limited", "/limited", "/deny", "/free"])
            t = time.monotonic()
            try:
                if not holder:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                    holder.append(s)
                    reader[0] = b""
                s = holder[0]
                conn = "keep-alive" if keep_alive else "close"
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: soak\r\nX-Client: {name}\r\nConnection: {conn}\r\n\r\n".encode())
                status, lines = read_status(s, reader)
                self.stats.add(f"{path} {status}")
                if not self.judge(path, status, t):
                    self.stats.fail(f"{path} -> {status} at {t:.1f}")
                # (the gateway closes after an answer it marks Connection: close, e.g. a 502)
                closing = any(x.lower().replace(" ", "") == "connection:close" for x in lines[1:])
                if not keep_alive or closing:
                    s.close()
                    holder.clear()
            except (OSError, EOFError) as e:
                for x in holder:
                    x.close()
                holder.clear()
                if self.faults.near("upstream_down", t):
                    self.stats.add("cut during an upstream restart")
                else:
                    self.stats.fail(f"{path}: {type(e).__name__} {e} at {t:.1f}")
            if not keep_alive:
                time.sleep(0.002)

    def hostile(self, name):
        rnd = random.Random(name)
        while not self.stop.is_set():
            self.pause_point(name, [])
            kind = rnd.choice(["slow", "malformed", "flood"])
            try:
                if kind == "slow":
                    # A head sent a byte at a time, never finished: closed by header_timeout.
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                    for b in b"GET /free HTTP/1.1\r\nHost: x\r\n":
                        if self.stop.is_set() or self.quiet.is_set():
                            break
                        s.sendall(bytes([b]))
                        time.sleep(0.05)
                    s.close()
                    self.stats.add("hostile slow")
                elif kind == "malformed":
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                    junk = rnd.choice([b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                                       b"GET /\x00 HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1",
                                       b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"])
                    s.sendall(junk)
                    reader = [b""]
                    try:
                        status, _ = read_status(s, reader)
                        if status != 400:
                            self.stats.fail(f"malformed {junk[:20]!r} -> {status}")
                    except EOFError:
                        pass  # (closed without an answer: a TLS ClientHello gets none)
                    s.close()
                    self.stats.add("hostile malformed")
                else:
                    socks = []
                    for _ in range(50):
                        socks.append(socket.create_connection(("127.0.0.1", self.port), timeout=10))
                    time.sleep(0.5)
                    for s in socks:
                        s.close()
                    self.stats.add("hostile flood")
            except OSError as e:
                self.stats.add(f"hostile refused {type(e).__name__}")

    # ---- measures
    def gateway_numbers(self):
        status = Path(f"/proc/{self.gw.pid}/status").read_text()
        rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        fds = len(os.listdir(f"/proc/{self.gw.pid}/fd"))
        return rss, fds

    def quiet_measure(self, names):
        self.quiet.set()
        end = time.monotonic() + 30
        while time.monotonic() < end and not all(self.paused.get(n) for n in names):
            time.sleep(0.05)
        time.sleep(6)  # the gateway's idle connections and upstream pool settle (idle_timeout 5 s)
        rss, fds = self.gateway_numbers()
        self.quiet.clear()
        return rss, fds

    def run(self):
        self.start_redis()
        self.start_upstream()
        self.start_gateway()
        names = [f"ka{i}" for i in range(6)] + [f"new{i}" for i in range(3)] + [f"bad{i}" for i in range(3)]
        threads = [threading.Thread(target=self.client, args=(n, n.startswith("ka")), daemon=True)
                   for n in names if not n.startswith("bad")]
        threads += [threading.Thread(target=self.hostile, args=(n,), daemon=True) for n in names if n.startswith("bad")]
        faults = threading.Thread(target=self.faults_loop, daemon=True)
        started = time.monotonic()
        for t in threads + [faults]:
            t.start()
        warm_s = min(120, self.minutes * 60 / 4)
        time.sleep(warm_s)
        warm = self.quiet_measure(names)
        print(f"after warm-up ({warm_s:.0f}s): RSS {warm[0]} KiB, {warm[1]} fds", flush=True)
        end = started + self.minutes * 60
        while time.monotonic() < end:
            time.sleep(min(30, max(0.1, end - time.monotonic())))
            rss, fds = self.gateway_numbers()
            self.samples.append((round(time.monotonic() - started), rss, fds))
            print(f"{self.samples[-1][0]:>6}s RSS {rss} KiB, {fds} fds; {self.stats.counts}", flush=True)
            if self.gw.poll() is not None:
                break
        final = self.quiet_measure(names) if self.gw.poll() is None else (0, 0)
        self.stop.set()
        faults.join(30)
        for t in threads:
            t.join(15)
        self.gw.send_signal(signal.SIGTERM)
        try:
            code = self.gw.wait(60)
        except subprocess.TimeoutExpired:
            self.gw.kill()
            code = "killed after 60 s"
        for p in (self.redis_proc, self.up_proc):
            p.kill()
        log = (self.work / "floodgate.log").read_text(errors="replace")
        reports = [m for m in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:") if m in log]
        result = {
            "minutes": self.minutes, "binary": self.binary, "exit": code, "sanitizer_reports": reports,
            "warm_up": {"rss_kib": warm[0], "fds": warm[1]}, "end": {"rss_kib": final[0], "fds": final[1]},
            "counts": self.stats.counts, "unexpected": self.stats.bad, "samples": self.samples,
        }
        checks = {
            "no sanitizer report": not reports,
            "exit 0 on SIGTERM": code == 0,
            "RSS within 10% of warm-up": final[0] and final[0] <= warm[0] * 1.10,
            "fds within 10% of warm-up": final[1] and final[1] <= max(warm[1] * 1.10, warm[1] + 1),
            "every request answered by its policy": self.stats.counts.get("unexpected", 0) == 0,
        }
        result["checks"] = checks
        out = ROOT / "bench" / "results"
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json"
        path.write_text(json.dumps(result, indent=2))
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
        for k, ok in checks.items():
            print(("PASS " if ok else "FAIL ") + k)
        if reports:
            print(log[-5000:])
        print(f"written to {path}")
        return 0 if all(checks.values()) else 1


def main():
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 30
    binary = sys.argv[2] if len(sys.argv) > 2 else str(ROOT / "build-asan" / "src" / "floodgate")
    sys.exit(Soak(minutes, binary).run())


if __name__ == "__main__":
    main()
