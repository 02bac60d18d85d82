#!/usr/bin/env python3
"""floodgate's three paths against nginx and HAProxy, one worker each, in one run: the
table of issue 24.

    bench/peers.py [seconds] [reps]     (default 5 s, 3 repetitions)

The layout: wrk on one core; every server on the other (the nginx `return 200` origin,
the proxies, and the redis-server of floodgate's Redis path: Redis shares the proxy's
core). The targets, each a plain proxy with upstream keep-alive to the same origin:
- nginx: `proxy_pass` (the reference: every ratio is against it);
- nginx limit_req: the same with `limit_req` keyed on the client address, never reached;
- HAProxy: `http-reuse always`; HAProxy stick table: the same with a per-address
  `http_req_rate` tracked and checked on every request;
- floodgate: no limit; floodgate memory: a memory-store `sliding_window` on every request;
  floodgate redis: a Redis `fixed_window` on every request (neither ever reached).
Each repetition runs every target at 64 and then 256 connections in a shuffled order;
the table gives per target and connection count the median req/s over the repetitions,
its ratio to nginx's median, and the median p99."""
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
from bench import CLIENT_CORE, FLOODGATE, SERVER_CORE, free_port, nginx, wait_port, wrk  # noqa: E402

CONNECTIONS = (64, 256)


def haproxy(work, name, port, origin, stick):
    d = work / name
    d.mkdir()
    conf = d / "haproxy.cfg"
    table = ("  stick-table type ip size 1m expire 60s store http_req_rate(10s)\n"
             "  http-request track-sc0 src\n"
             "  http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000000 }\n") if stick else ""
    conf.write_text(f"""global
  nbthread 1
  maxconn 8000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend f
  bind 127.0.0.1:{port}
{table}  default_backend b
backend b
  server s1 127.0.0.1:{origin} maxconn 0
""")
    return subprocess.Popen(["taskset", "-c", SERVER_CORE, "haproxy", "-f", str(conf), "-db"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_floodgate(work, name, port, origin, store, routes):
    """One floodgate (one worker) in work/name, with `store` (YAML lines) and `routes`."""
    d = work / name
    d.mkdir()
    conf = d / "floodgate.yaml"
    conf.write_text(f"""listen: "127.0.0.1:{port}"
workers: 1
log: {{level: warn, access_log: off}}
{store}upstreams:
  origin: {{address: "127.0.0.1:{origin}", max_idle: 1024}}
routes:
{routes}""")
    return subprocess.Popen(["taskset", "-c", SERVER_CORE, FLOODGATE, "--config", str(conf)])


def floodgate(work, port, origin, redis_port):
    return start_floodgate(work, "floodgate", port, origin,
                           f'store: redis\nredis: {{addresses: ["127.0.0.1:{redis_port}"], timeout: 100ms}}\n',
                           """  - name: memory
    match: {path: /memory}
    upstream: origin
    on_store_error: local
    limits:
      - {name: per-ip, algorithm: sliding_window, key: ip, limit: 1000000000, window: 1h}
  - name: redis
    match: {path: /redis}
    upstream: origin
    limits:
      - {name: per-ip, algorithm: fixed_window, key: ip, limit: 1000000000, window: 1h}
  - name: all
    match: {path_prefix: /}
    upstream: origin
""")


def floodgate_memory(work, port, origin):
    """The memory store's path in a process of its own: store: memory is per process."""
    return start_floodgate(work, "floodgate-memory", port, origin, "", """  - name: memory
    match: {path_prefix: /}
    upstream: origin
    limits:
      - {name: per-ip, algorithm: sliding_window, key: ip, limit: 1000000000, window: 1h}
""")


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for tool in ("nginx", "haproxy", "wrk", "taskset", "redis-server"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: scripts/deps.sh bench installs it")
    work = Path(tempfile.mkdtemp(prefix="fg-peers-"))
    ports = {k: free_port() for k in ("origin", "nginx", "nginx_lr", "haproxy", "haproxy_st", "fg", "fg_mem", "redis")}
    procs = []
    try:
        procs.append(subprocess.Popen(["taskset", "-c", SERVER_CORE, "redis-server", "--port", str(ports["redis"]),
                                       "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(nginx(work, "origin", f'listen 127.0.0.1:{ports["origin"]} backlog=4096; '
                                           'location / { return 200 "ok\\n"; }'))
        upstream = (f'upstream origin {{ server 127.0.0.1:{ports["origin"]}; keepalive 1024; '
                    "keepalive_requests 100000000; }")
        proxy = 'proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection "";'
        procs.append(nginx(work, "nginx", f'listen 127.0.0.1:{ports["nginx"]} backlog=4096; location / {{ {proxy} }}',
                           upstream))
        procs.append(nginx(work, "nginx-limit-req",
                           f'listen 127.0.0.1:{ports["nginx_lr"]} backlog=4096; '
                           f"location / {{ limit_req zone=perip burst=1000000000 nodelay; {proxy} }}",
                           upstream + " limit_req_zone $binary_remote_addr zone=perip:10m rate=1000000r/s;"))
        procs.append(haproxy(work, "haproxy", ports["haproxy"], ports["origin"], False))
        procs.append(haproxy(work, "haproxy-stick", ports["haproxy_st"], ports["origin"], True))
        procs.append(floodgate(work, ports["fg"], ports["origin"], ports["redis"]))
        procs.append(floodgate_memory(work, ports["fg_mem"], ports["origin"]))
        for p in ports.values():
            wait_port(p)
        targets = {"nginx": (ports["nginx"], "/"), "nginx limit_req": (ports["nginx_lr"], "/"),
                   "HAProxy": (ports["haproxy"], "/"), "HAProxy stick table": (ports["haproxy_st"], "/"),
                   "floodgate": (ports["fg"], "/"), "floodgate memory": (ports["fg_mem"], "/"),
                   "floodgate redis": (ports["fg"], "/redis")}
        for port, path in targets.values():  # warm-up: the pools filled
            wrk(port, 256, 2, path, expect_errors=True)
        results = {(t, c): [] for t in targets for c in CONNECTIONS}
        rnd = random.Random(24)
        for _ in range(reps):
            order = list(targets)
            rnd.shuffle(order)
            for c in CONNECTIONS:
                for t in order:
                    port, path = targets[t]
                    rps, _, p99 = wrk(port, c, seconds, path)
                    results[(t, c)].append((rps, p99))
        print(f"one worker each; wrk on core {CLIENT_CORE}, every server on core {SERVER_CORE}; "
              f"{reps} shuffled repetitions of {seconds} s; medians; ratios to nginx's req/s")
        print(f"{'target':<22}" + "".join(f"{f'c={c} req/s':>14}{'ratio':>8}{'p99 ms':>9}" for c in CONNECTIONS))
        for t in targets:
            row = f"{t:<22}"
            for c in CONNECTIONS:
                rps = statistics.median(r for r, _ in results[(t, c)])
                base = statistics.median(r for r, _ in results[("nginx", c)])
                p99 = statistics.median(p for _, p in results[(t, c)])
                row += f"{rps:>14.0f}{rps / base:>7.2f}x{p99:>9.2f}"
            print(row, flush=True)
    finally:
        bench.stop_all(procs, work)


if __name__ == "__main__":
    main()
