#!/usr/bin/env python3
"""Memory per idle keep-alive connection: floodgate and nginx (plain proxy_pass) in one
run, in front of the same nginx origin.

Each server gets N connections; each sends one request, reads the answer and stays
open, idle. Printed per server: RSS before, with the N connections open (after they
have been idle for a second), and after they closed, and the RSS per connection.

Usage: bench/conn_memory.py [connections]   (default 10000; run as root, or with a
descriptor limit above 2*N + 100)."""
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import FLOODGATE, free_port, nginx, stop_all, wait_port  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000


def rss_kib(pids):
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def tree(pid):
    """The process and its children (nginx's master and worker)."""
    out = [pid]
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    for k in kids:
        out += tree(int(k))
    return out


def measure(name, port, pid):
    req = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
    time.sleep(1.0)
    pids = tree(pid)
    before = rss_kib(pids)
    socks, pending = [], []
    for i in range(N):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(req)
        socks.append(s)
        pending.append(s)
        # Read the answers in batches, so the servers see many connections at once.
        if len(pending) == 200 or i == N - 1:
            for t in pending:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = t.recv(4096)
                    if not chunk:
                        raise RuntimeError(f"{name}: connection closed")
                    data += chunk
            pending = []
    time.sleep(1.5)  # idle: floodgate gives buffers back after 100 ms
    pids = tree(pid)
    early = rss_kib(pids)
    time.sleep(float(os.environ.get("FG_IDLE_WAIT", "0")))
    during = rss_kib(pids)
    if during != early:
        print(f"{name}: {early / 1024:.1f} MiB after 1.5 s idle, {during / 1024:.1f} MiB later")
    for s in socks:
        s.close()
    # jemalloc gives freed pages back over its dirty_decay_ms (10 s by default).
    time.sleep(12.0)
    after = rss_kib(pids)
    per = (during - before) * 1024 / N
    print(f"{name:10s} before {before / 1024:7.1f} MiB  with {N} idle {during / 1024:7.1f} MiB  "
          f"after close {after / 1024:7.1f} MiB  per connection {per:7.0f} B  "
          f"after/before {after / before:5.2f}", flush=True)
    return per, before, after


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * N + 200
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(want, soft)), hard))
    work = Path(tempfile.mkdtemp(prefix="fg-connmem-"))
    procs = []
    try:
        origin_port = free_port()
        procs.append(nginx(work, "origin", f"listen 127.0.0.1:{origin_port} backlog=4096; "
                           "location / { return 200 'ok'; }"))
        wait_port(origin_port)
        proxy_port = free_port()
        upstream = f"upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 64; }}"
        block = (f"listen 127.0.0.1:{proxy_port} backlog=4096; location / {{ proxy_pass http://origin; "
                 "proxy_http_version 1.1; proxy_set_header Connection \"\"; }")
        procs.append(nginx(work, "proxy", block, upstream, connections=N + 1000))
        wait_port(proxy_port)
        fg_port = free_port()
        (work / "fg").mkdir()
        conf = work / "fg" / "floodgate.yaml"
        conf.write_text(f"""listen: "127.0.0.1:{fg_port}"
workers: 1
log: {{level: warn, access_log: off}}
http: {{idle_timeout: 60s, max_connections: {N + 1000}}}
upstreams:
  origin: {{address: "127.0.0.1:{origin_port}", max_idle: 64}}
routes:
  - name: all
    match: {{path_prefix: /}}
    upstream: origin
    limits:
      - {{name: per-ip, algorithm: sliding_window, key: ip, limit: 1000000000, window: 1m}}
""")
        fg = subprocess.Popen([FLOODGATE, "--config", str(conf)])
        procs.append(fg)
        wait_port(fg_port)
        print(f"{N} idle keep-alive connections, each after one request (RSS of the whole process tree)")
        ng_per, _, _ = measure("nginx", proxy_port, procs[1].pid)
        fg_per, fg_before, fg_after = measure("floodgate", fg_port, fg.pid)
        print(f"floodgate/nginx per connection: {fg_per / max(ng_per, 1):.2f}x; "
              f"floodgate target <= 2048 B: {'met' if fg_per <= 2048 else 'NOT met'}; "
              f"back within 10% after close: {'yes' if fg_after <= fg_before * 1.10 else 'no'}")
    finally:
        stop_all(procs, work)


if __name__ == "__main__":
    main()
