#!/usr/bin/env python3
"""floodgate vs nginx plain proxy, same machine, one run. See bench/run.sh."""
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOODGATE = os.environ.get("FLOODGATE_BIN", str(ROOT / "build" / "src" / "floodgate"))
SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
CONNECTIONS = [64, 256]
CLIENT_CORE, SERVER_CORE = ("0", "1") if os.cpu_count() >= 2 else ("0", "0")


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


def nginx(work, name, server_block, upstream_block=""):
    d = work / name
    d.mkdir()
    conf = d / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 8192; }}
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


def start_floodgate(work, port, upstream_port):
    conf = work / "floodgate.yaml"
    conf.write_text(f"""listen: "127.0.0.1:{port}"
workers: 1
log:
  level: warn
  access_log: off
upstreams:
  origin:
    address: "127.0.0.1:{upstream_port}"
    max_idle: 1024
routes:
  - name: all
    match:
      path_prefix: /
    upstream: origin
""")
    return subprocess.Popen(["taskset", "-c", SERVER_CORE, FLOODGATE, "--config", str(conf)])


def parse_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v


def wrk(port, conns, seconds):
    out = subprocess.run(["taskset", "-c", CLIENT_CORE, "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency",
                          f"http://127.0.0.1:{port}/"], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = parse_ms(re.search(r"\s50%\s+(\S+)", out).group(1))
    p99 = parse_ms(re.search(r"\s99%\s+(\S+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock_err = re.search(r"Socket errors: (.*)", out)
    if errors or sock_err:
        print(f"  warning: port {port} c={conns}: {errors.group(0) if errors else ''} {sock_err.group(0) if sock_err else ''}")
    return rps, p50, p99


def peak_rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main():
    for tool in ("nginx", "wrk", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: run bench/run.sh (it installs it)")
    work = Path(tempfile.mkdtemp(prefix="fg-bench-"))
    up_port, nginx_port, fg_port = free_port(), free_port(), free_port()
    procs = []
    try:
        procs.append(nginx(work, "origin", f'listen 127.0.0.1:{up_port} backlog=4096; location / {{ return 200 "ok\\n"; }}'))
        procs.append(nginx(work, "proxy",
                           f"listen 127.0.0.1:{nginx_port} backlog=4096; location / {{ proxy_pass http://origin; "
                           'proxy_http_version 1.1; proxy_set_header Connection ""; }',
                           f"upstream origin {{ server 127.0.0.1:{up_port}; keepalive 1024; keepalive_requests 100000000; }}"))
        fg = start_floodgate(work, fg_port, up_port)
        procs.append(fg)
        for p in (up_port, nginx_port, fg_port):
            wait_port(p)
        targets = {"nginx": nginx_port, "floodgate": fg_port}
        # warm-up: fill both upstream pools
        for name, port in targets.items():
            wrk(port, 256, 2)
        runs = [(name, c) for name in targets for c in CONNECTIONS] * ROUNDS
        random.shuffle(runs)
        results = {}
        print(f"{len(runs)} runs of {SECONDS}s, shuffled; wrk on core {CLIENT_CORE}, servers on core {SERVER_CORE}")
        for i, (name, c) in enumerate(runs, 1):
            r = wrk(targets[name], c, SECONDS)
            results.setdefault((name, c), []).append(r)
            print(f"  [{i:2}/{len(runs)}] {name:9} c={c:<3} {r[0]:10.0f} req/s  p50 {r[1]:6.2f} ms  p99 {r[2]:6.2f} ms")
        rss = peak_rss_kib(fg.pid)
        print()
        print(f"{'connections':>11} | {'nginx req/s':>11} {'p50':>7} {'p99':>7} | {'floodgate req/s':>15} {'p50':>7} {'p99':>7} | {'req/s ratio':>11} {'p99 ratio':>9}")
        for c in CONNECTIONS:
            med = {}
            for name in targets:
                rs = results[(name, c)]
                med[name] = tuple(statistics.median(x[k] for x in rs) for k in range(3))
            n, f = med["nginx"], med["floodgate"]
            print(f"{c:>11} | {n[0]:>11.0f} {n[1]:>6.2f}ms {n[2]:>6.2f}ms | {f[0]:>15.0f} {f[1]:>6.2f}ms {f[2]:>6.2f}ms | "
                  f"{f[0] / n[0]:>10.2f}x {f[2] / n[2]:>8.2f}x")
        print(f"floodgate peak RSS: {rss / 1024:.1f} MiB")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
