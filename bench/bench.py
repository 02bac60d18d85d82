#!/usr/bin/env python3
"""floodgate vs nginx plain proxy, same machine, one run. See bench/run.sh.

Runs: nginx (plain proxy_pass), floodgate (no limit), fg+redis (a per-IP Redis limit
on every request, never reached; redis-server on the client's core, as Redis on its own
host: the proxy's core does not pay for it), fg+redis 1core (the same with redis-server
on the servers' core, the harshest case: the proxy's core pays for Redis too), fg flood
(one client far past its Redis limit)."""
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOODGATE = os.environ.get("FLOODGATE_BIN", str(ROOT / "build" / "src" / "floodgate"))
SECONDS, ROUNDS = 3, 6  # per run, and rounds; main() takes them from the command line
CONNECTIONS = [64, 256]
CLIENT_CORE, SERVER_CORE = ("0", "1") if os.cpu_count() >= 2 else ("0", "0")


def refuse_io_uring():
    """FG_IO_URING=off: every process the benchmarks start gets bench/no_io_uring.c's
    shim preloaded, so that floodgate runs as under a container runtime that refuses
    io_uring (the others never call what it replaces)."""
    if os.environ.get("FG_IO_URING", "on") != "off":
        return
    shim = Path(tempfile.gettempdir()) / "fg-no-io-uring.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(ROOT / "bench" / "no_io_uring.c")],
                   check=True)
    os.environ["LD_PRELOAD"] = str(shim)
    print("io_uring refused (FG_IO_URING=off): floodgate's writes go without a ring", file=sys.stderr)


refuse_io_uring()
# The /limited route of bench.py and cluster.py (an item of floodgate.yaml's `routes:`): a
# per-IP Redis limit on the upstream `origin`, so high that no run reaches it.
LIMITED_ROUTE = """  - name: limited
    match: {path: /limited}
    upstream: origin
    limits:
      - {name: per-ip, algorithm: fixed_window, key: ip, limit: 1000000000, window: 1h}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


def nginx(work, name, server_block, upstream_block="", connections=8192):
    d = work / name
    d.mkdir()
    conf = d / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
worker_rlimit_nofile {2 * connections + 100};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections {connections}; }}
http {{
  access_log off;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  keepalive_requests 100000000;
  {upstream_block}
  server {{ {server_block} }}
}}
""")
    return subprocess.Popen(["taskset", "-c", SERVER_CORE, "nginx", "-c", str(conf), "-e", f"{d}/error.log"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_floodgate(work, port, upstream_port, redis_port, admin_port=None, store="redis"):
    # One process, four routes: no limit; a per-IP Redis limit high enough that nothing
    # is denied; a per-IP Redis limit that a flood is far past (answered from the local
    # deny cache); and /memory, peers.py's memory-store limit (a sliding window per IP,
    # never reached), which is that only with store="memory" (every limit then counts in
    # the process, /limited's too).
    work.mkdir()
    conf = work / "floodgate.yaml"
    admin = f'admin: {{listen: "127.0.0.1:{admin_port}"}}\n' if admin_port else ""
    stored = ("store: memory\n" if store == "memory" else
              f'store: redis\nredis:\n  addresses: ["127.0.0.1:{redis_port}"]\n  timeout: 100ms\n')
    conf.write_text(f"""listen: "127.0.0.1:{port}"
workers: 1
{admin}log:
  level: warn
  access_log: off
{stored}upstreams:
  origin:
    address: "127.0.0.1:{upstream_port}"
    max_idle: 1024
routes:
{LIMITED_ROUTE}  - name: memory
    match: {{path: /memory}}
    upstream: origin
    limits:
      - {{name: per-ip, algorithm: sliding_window, key: ip, limit: 1000000000, window: 1h}}
  - name: flood
    match: {{path: /flood}}
    upstream: origin
    limits:
      - {{name: per-ip, algorithm: fixed_window, key: ip, limit: 10, window: 1h}}
  - name: all
    match:
      path_prefix: /
    upstream: origin
""")
    return subprocess.Popen(["taskset", "-c", SERVER_CORE, FLOODGATE, "--config", str(conf)])


class Scraper:
    """GET /metrics once a second on the admin port, as Prometheus would, until stopped."""

    def __init__(self, port):
        self.port, self.done = port, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.wait(1.0):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    while s.recv(65536):
                        pass
            except OSError:
                pass

    def stop(self):
        self.done.set()
        self.thread.join()


def parse_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v


def wrk(port, conns, seconds, path="/", expect_errors=False, scheme="http", headers=()):
    """One wrk run (one thread, on the client's core): (req/s, p50 ms, p99 ms). Also sets
    wrk.last_requests, wrk.last_non2xx and wrk.last_socket_errors ("" for none)."""
    extra = [a for h in headers for a in ("-H", h)]
    out = subprocess.run(["taskset", "-c", CLIENT_CORE, "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency", *extra,
                          f"{scheme}://127.0.0.1:{port}{path}"], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    wrk.last_requests = int(re.search(r"(\d+) requests in", out).group(1))
    p50 = parse_ms(re.search(r"\s50%\s+(\S+)", out).group(1))
    p99 = parse_ms(re.search(r"\s99%\s+(\S+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock_err = re.search(r"Socket errors: (.*)", out)
    wrk.last_non2xx = int(errors.group(1)) if errors else 0
    wrk.last_socket_errors = sock_err.group(1) if sock_err else ""
    if (errors and not expect_errors) or sock_err:
        print(f"  warning: port {port} c={conns}: {errors.group(0) if errors else ''} {sock_err.group(0) if sock_err else ''}")
    return rps, p50, p99


def redis_calls(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "info", "commandstats"], capture_output=True, text=True).stdout
    return sum(int(line.split("calls=")[1].split(",")[0]) for line in out.splitlines() if line.startswith("cmdstat_eval"))


def cpu_seconds(pids):
    """user + system CPU time of these processes so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def core_ticks(core):
    """(idle, total) clock ticks of one core so far, from /proc/stat."""
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f[0] == f"cpu{core}":
            ticks = [int(x) for x in f[1:9]]
            return ticks[3] + ticks[4], sum(ticks)
    return 0, 1


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def peak_rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def stop_all(procs, work):
    """Stops the processes, last started first (gateways before the Redis they use),
    and removes the work directory."""
    for p in reversed(procs):
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(work, ignore_errors=True)


def units_column(values):
    values = [v for v in values if v is not None]
    return f"{statistics.median(values):.2f}" if values else "-"


def main():
    global SECONDS, ROUNDS
    if len(sys.argv) > 1:
        SECONDS = int(sys.argv[1])
    if len(sys.argv) > 2:
        ROUNDS = int(sys.argv[2])
    for tool in ("nginx", "wrk", "taskset", "redis-server", "redis-cli"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: run bench/run.sh (it installs it)")
    work = Path(tempfile.mkdtemp(prefix="fg-bench-"))
    up_port, nginx_port, fg_port, fg1_port = free_port(), free_port(), free_port(), free_port()
    # The same build with the admin listener on (metrics counted, /metrics scraped
    # every second during its runs), against `floodgate` without it.
    fga_port, admin_port = free_port(), free_port()
    # Two redis-servers, one per placement, each with its own floodgate.
    redis_ports = {CLIENT_CORE: free_port(), SERVER_CORE: free_port()}
    procs, redis_pids = [], {}
    try:
        for core, port in redis_ports.items():
            r = subprocess.Popen(["taskset", "-c", core, "redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            procs.append(r)
            redis_pids[core] = r.pid
            wait_port(port)
        origin = nginx(work, "origin", f'listen 127.0.0.1:{up_port} backlog=4096; location / {{ return 200 "ok\\n"; }}')
        procs.append(origin)
        proxy = nginx(work, "proxy",
                           f"listen 127.0.0.1:{nginx_port} backlog=4096; location / {{ proxy_pass http://origin; "
                           'proxy_http_version 1.1; proxy_set_header Connection ""; }',
                           f"upstream origin {{ server 127.0.0.1:{up_port}; keepalive 1024; keepalive_requests 100000000; }}")
        procs.append(proxy)
        fg = start_floodgate(work / "fg", fg_port, up_port, redis_ports[CLIENT_CORE])
        fg1 = start_floodgate(work / "fg1", fg1_port, up_port, redis_ports[SERVER_CORE])
        fga = start_floodgate(work / "fga", fga_port, up_port, redis_ports[CLIENT_CORE], admin_port)
        procs += [fg, fg1, fga]
        for p in (up_port, nginx_port, fg_port, fg1_port, fga_port, admin_port):
            wait_port(p)
        time.sleep(0.2)
        proxy_pids = {"nginx": children(proxy.pid) or [proxy.pid], "fg+redis 1core": [fg1.pid],
                      "fg admin": [fga.pid], "fg+redis admin": [fga.pid]}
        origin_pids = children(origin.pid) or [origin.pid]
        # name: (port, path, the redis-server it uses)
        targets = {"nginx": (nginx_port, "/", CLIENT_CORE), "floodgate": (fg_port, "/", CLIENT_CORE),
                   "fg+redis": (fg_port, "/limited", CLIENT_CORE),
                   "fg+redis 1core": (fg1_port, "/limited", SERVER_CORE),
                   "fg flood": (fg_port, "/flood", CLIENT_CORE),
                   "fg admin": (fga_port, "/", CLIENT_CORE), "fg+redis admin": (fga_port, "/limited", CLIENT_CORE)}
        # warm-up: fill the upstream pools
        for name, (port, path, _) in targets.items():
            wrk(port, 256, 2, path, expect_errors=True)
        # Bracketed runs: each run of a floodgate target sits between two nginx runs at the
        # same connection count, and its ratio is taken against their mean. This machine's
        # speed moves by up to +-40% from one few-second stretch to the next (the same
        # binary, back to back), so only runs seconds apart are compared, and any steady
        # drift cancels out. Each round shuffles the targets.
        others = [name for name in targets if name != "nginx"]
        runs = []
        for _ in range(ROUNDS):
            for c in CONNECTIONS:
                order = others[:]
                random.shuffle(order)
                seq = ["nginx"]
                for name in order:
                    seq += [name, "nginx"]
                runs.append([(name, c) for name in seq])
        results, ratios = {}, {}
        total = sum(len(r) for r in runs)
        print(f"{ROUNDS} rounds of {total // ROUNDS} runs of {SECONDS}s; wrk on core {CLIENT_CORE}, servers on core "
              f"{SERVER_CORE}")
        commands, cpu = {}, {}
        i = 0
        for group in runs:
            got = []
            for name, c in group:
                i += 1
                port, path, core = targets[name]
                pids = proxy_pids.get(name, [fg.pid])
                redis_port, redis_pid = redis_ports[core], redis_pids[core]
                before = redis_calls(redis_port)
                cpu_before = cpu_seconds(pids), cpu_seconds([redis_pid]), cpu_seconds(origin_pids)
                idle_before = core_ticks(SERVER_CORE)
                scraper = Scraper(admin_port) if "admin" in name else None
                r = wrk(port, c, SECONDS, path, expect_errors=name == "fg flood")
                if scraper:
                    scraper.stop()
                n = max(1, wrk.last_requests)
                per_req = (redis_calls(redis_port) - before) / n
                proxy_us = (cpu_seconds(pids) - cpu_before[0]) / n * 1e6
                redis_us = (cpu_seconds([redis_pid]) - cpu_before[1]) / n * 1e6
                origin_us = (cpu_seconds(origin_pids) - cpu_before[2]) / n * 1e6
                idle_after = core_ticks(SERVER_CORE)
                idle = (idle_after[0] - idle_before[0]) / max(1, idle_after[1] - idle_before[1])
                commands.setdefault((name, c), []).append(per_req)
                # (a flood's 429s never reach the origin: no ratio)
                units = proxy_us / origin_us if origin_us > 0.5 else None
                cpu.setdefault((name, c), []).append((proxy_us, redis_us, units, idle))
                results.setdefault((name, c), []).append(r)
                got.append((name, r))
                print(f"  [{i:3}/{total}] {name:14} c={c:<3} {r[0]:10.0f} req/s  p50 {r[1]:6.2f} ms  p99 {r[2]:6.2f} ms"
                      f"  redis cmds/req {per_req:.4f}  cpu/req: proxy {proxy_us:5.1f} us, redis {redis_us:4.1f} us,"
                      f" origin {origin_us:4.1f} us  servers' core idle {idle * 100:4.1f}%")
            for k in range(1, len(got), 2):
                name, r = got[k]
                rps = (got[k - 1][1][0] + got[k + 1][1][0]) / 2
                p99 = (got[k - 1][1][2] + got[k + 1][1][2]) / 2
                ratios.setdefault((name, c), []).append((r[0] / rps, r[2] / p99))
        rss = peak_rss_kib(fg.pid)
        print()
        print("medians over rounds; each ratio is against the mean of the two nginx plain proxy runs around it")
        print("(same connection count), then the median (and the lowest, highest) of those. 'proxy/origin':")
        print("the proxy's CPU per request in units of the origin nginx's (whose work per request is the same")
        print("in every run), which this VM's swings of speed move far less than req/s; 'idle': the servers' core")
        print(f"{'run':>14} {'conns':>5} | {'req/s':>9} {'p50':>8} {'p99':>8} | {'req/s ratio':>11} {'(min..max)':>12} "
              f"{'p99 ratio':>9} | {'redis cmds/req':>14} | {'proxy us/req':>12} {'redis us/req':>12} | "
              f"{'proxy/origin':>12} {'idle':>5}")
        for c in CONNECTIONS:
            for name in targets:
                rs = results[(name, c)]
                f = tuple(statistics.median(x[k] for x in rs) for k in range(3))
                rr = [x[0] for x in ratios.get((name, c), [(1.0, 1.0)])]
                pr = statistics.median(x[1] for x in ratios.get((name, c), [(1.0, 1.0)]))
                print(f"{name:>14} {c:>5} | {f[0]:>9.0f} {f[1]:>6.2f}ms {f[2]:>6.2f}ms | {statistics.median(rr):>10.2f}x "
                      f"({min(rr):.2f}..{max(rr):.2f}) {pr:>8.2f}x | {statistics.median(commands[(name, c)]):>14.4f} | "
                      f"{statistics.median(x[0] for x in cpu[(name, c)]):>12.1f} {statistics.median(x[1] for x in cpu[(name, c)]):>12.1f} | "
                      f"{units_column([x[2] for x in cpu[(name, c)]]):>12} "
                      f"{statistics.median(x[3] for x in cpu[(name, c)]) * 100:>4.1f}%")
        print(f"floodgate peak RSS: {rss / 1024:.1f} MiB")
        print()
        print("admin listener on (metrics counted, scraped each second) against off, the same build: the ratio of")
        print("their median req/s ratios against nginx")
        for c in CONNECTIONS:
            for on, off in (("fg admin", "floodgate"), ("fg+redis admin", "fg+redis")):
                a = statistics.median(x[0] for x in ratios[(on, c)])
                b = statistics.median(x[0] for x in ratios[(off, c)])
                print(f"{on:>14} {c:>5} | {a:.3f}x vs {b:.3f}x: {a / b:.3f}")
    finally:
        stop_all(procs, work)


if __name__ == "__main__":
    main()
