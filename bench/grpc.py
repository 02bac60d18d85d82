#!/usr/bin/env python3
"""Unary gRPC calls through floodgate (an h2 upstream, a limit on every call) against
nginx's `grpc_pass`, same machine, one run.

    /usr/bin/python3 bench/grpc.py [seconds] [rounds]     (default 3 s, 3 rounds)

The origin: nghttpd (Debian's nghttp2-server), h2c, one thread, answering every call
with a small gRPC-framed message and a `grpc-status: 0` trailer, so that the origin is
not what saturates (a Python gRPC server would be). The proxies: one worker each, h2c
to clients (prior knowledge) and to the origin, on the servers' core beside the origin;
h2load (nghttp2-client, one thread) on the other core sends gRPC-framed POSTs with
`te: trailers`. floodgate's route has a memory-store sliding-window limit per client IP
that is never reached (every call asks it); nginx has no limit. Two loads, each in turn
on nginx then floodgate (the reverse order the next round), medians over rounds: 64
connections with 10 streams each, and 256 connections with 1. calls/s, and p99 from
h2load's per-request log. Ratios are floodgate's over nginx's in the same round."""
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
from bench import CLIENT_CORE, SERVER_CORE, FLOODGATE, free_port, nginx, wait_port  # noqa: E402
from http2 import h2load  # noqa: E402
from tls import print_medians  # noqa: E402

METHOD = "/bench.Echo/Unary"


def grpc_load(port, conns, streams, seconds, work, body):
    return h2load(port, conns, streams, seconds, work, url=f"http://127.0.0.1:{port}{METHOD}",
                  extra=("-d", str(body), "-H", "content-type: application/grpc", "-H", "te: trailers"))


def floodgate(work, port, origin_port):
    d = work / "floodgate"
    d.mkdir()
    conf = d / "floodgate.yaml"
    conf.write_text(f"""listen: "127.0.0.1:{port}"
workers: 1
log: {{level: warn, access_log: off}}
store: memory
http: {{max_connections: 20000, idle_timeout: 120s}}
http2: {{cleartext: true}}
upstreams:
  origin: {{address: "127.0.0.1:{origin_port}", protocol: h2}}
routes:
  - name: grpc
    match: {{path_prefix: /}}
    upstream: origin
    limits:
      - {{name: per-ip, algorithm: sliding_window, key: ip, limit: 1000000000, window: 1h}}
""")
    return subprocess.Popen(["taskset", "-c", SERVER_CORE, FLOODGATE, "--config", str(conf)])


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for tool in ("nghttpd", "h2load", "nginx", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing (scripts/deps.sh bench)")
    work = Path(tempfile.mkdtemp(prefix="fg-grpc-bench-"))
    procs = []
    try:
        # The origin's answer: a gRPC message of 32 bytes, then grpc-status 0 as a trailer.
        docroot = work / "docroot" / METHOD.strip("/").rsplit("/", 1)[0]
        docroot.mkdir(parents=True)
        (docroot / "Unary").write_bytes(struct.pack(">BI", 0, 32) + b"x" * 32)
        body = work / "request.bin"
        body.write_bytes(struct.pack(">BI", 0, 16) + b"y" * 16)
        origin_port, nginx_port, fg_port = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen(["taskset", "-c", SERVER_CORE, "nghttpd", "--no-tls", "-d",
                                       str(work / "docroot"), "--trailer", "grpc-status: 0", str(origin_port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(nginx(work, "proxy", f"listen 127.0.0.1:{nginx_port} http2 backlog=4096; "
                           "keepalive_timeout 120s; http2_max_concurrent_streams 128; "
                           "location / { grpc_pass grpc://origin; }",
                           f"upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 1024; }}", connections=20000))
        procs.append(floodgate(work, fg_port, origin_port))
        for p in (origin_port, nginx_port, fg_port):
            wait_port(p)
        ports = {"nginx": nginx_port, "floodgate": fg_port}
        loads = [("c=64, 10 streams each", 64, 10), ("c=256, 1 stream each", 256, 1)]
        results = {(load, name): [] for load, _, _ in loads for name in ports}
        for r in range(rounds):
            order = ["nginx", "floodgate"] if r % 2 == 0 else ["floodgate", "nginx"]
            for load, conns, streams in loads:
                for name in order:
                    rps, p99, ok = grpc_load(ports[name], conns, streams, seconds, work, body)
                    if not ok:
                        sys.exit(f"{name}: no call succeeded at {load}")
                    results[(load, name)].append((rps, p99))
        print_medians(f"unary gRPC calls, h2c both sides, one worker each; floodgate with a limit on every call; "
                      f"{rounds} rounds of {seconds} s; medians", loads, results)
    finally:
        bench.stop_all(procs, work)


if __name__ == "__main__":
    main()
