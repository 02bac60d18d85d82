#!/usr/bin/env python3
"""Several servers per upstream: the shares of three servers weighted 1:2:3, and req/s
through three servers against one, same machine, one run.

    bench/upstreams.py [seconds] [rounds]     (default 5 s, 3 rounds)

One nginx process serves three origin ports (`return 200`, each logging its requests to
a file of its own); floodgate (one worker) has two upstreams over them: `one` (the first
origin) and `three` (all three, weights 1, 2, 3, round robin); the proxy and the origins
on the servers' core, wrk on the other. First wrk on /three until at least 60,000
requests have been answered: each origin's share of them against its weight's. Then
rounds of /one and /three in turn (c=64): req/s of three servers over one, median; and
the same through nginx (one worker, upstream blocks with the same weights and keepalive)
as the reference for what more upstream servers cost."""
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
from bench import FLOODGATE, SERVER_CORE, free_port, nginx, wait_port  # noqa: E402

WEIGHTS = (1, 2, 3)


def wrk(port, path, seconds, conns=64):
    rps = bench.wrk(port, conns, seconds, path)[0]
    return rps, bench.wrk.last_requests


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    work = Path(tempfile.mkdtemp(prefix="fg-upstreams-bench-"))
    ports = [free_port() for _ in WEIGHTS]
    logs = [work / f"origin-{i}.log" for i in range(len(WEIGHTS))]
    fg_port = free_port()
    blocks = [f"listen 127.0.0.1:{p} backlog=4096; access_log {log} hit; location / {{ return 200 \"ok\\n\"; }}"
              for p, log in zip(ports, logs)]
    extra = "log_format hit '1';\n" + "".join(f"  server {{ {b} }}\n" for b in blocks[1:])
    procs = []
    try:
        procs.append(nginx(work, "origins", blocks[0], extra))
        conf = work / "floodgate.yaml"
        servers = ", ".join(f'{{address: "127.0.0.1:{p}", weight: {w}}}' for p, w in zip(ports, WEIGHTS))
        conf.write_text(f"""listen: "127.0.0.1:{fg_port}"
workers: 1
log: {{level: warn, access_log: off}}
upstreams:
  one: {{address: "127.0.0.1:{ports[0]}", max_idle: 1024}}
  three: {{servers: [{servers}], max_idle: 1024}}
routes:
  - {{name: one, match: {{path: /one}}, upstream: one}}
  - {{name: three, match: {{path: /three}}, upstream: three}}
""")
        procs.append(subprocess.Popen(["taskset", "-c", SERVER_CORE, FLOODGATE, "--config", str(conf)]))
        ng_port = free_port()
        ups = (f"upstream one {{ server 127.0.0.1:{ports[0]}; keepalive 1024; }}\n"
               "  upstream three { " + " ".join(f"server 127.0.0.1:{p} weight={w};" for p, w in zip(ports, WEIGHTS))
               + " keepalive 1024; }")
        proxy = 'proxy_http_version 1.1; proxy_set_header Connection "";'
        procs.append(nginx(work, "proxy", f"listen 127.0.0.1:{ng_port} backlog=4096; "
                                          f"location /one {{ proxy_pass http://one; {proxy} }} "
                                          f"location /three {{ proxy_pass http://three; {proxy} }}", ups))
        for p in (*ports, fg_port, ng_port):
            wait_port(p)
        # The shares: /three until 60,000 answers at least.
        answered, before = 0, [0] * len(logs)
        while answered < 60_000:
            answered += wrk(fg_port, "/three", max(seconds, 5))[1]
        counts = [len(log.read_bytes().splitlines()) - b for log, b in zip(logs, before)]
        total = sum(counts)
        print(f"three servers, weights {':'.join(map(str, WEIGHTS))}, {total} requests:")
        worst = 0.0
        for i, (c, w) in enumerate(zip(counts, WEIGHTS)):
            want = w / sum(WEIGHTS)
            off = abs(c / total - want) / want
            worst = max(worst, off)
            print(f"  server {i + 1} (weight {w}): {c:>7} = {c / total:.4f} of them, want {want:.4f} ({off:.2%} off)")
        print(f"  largest deviation from a weight's share: {worst:.2%}")
        for name, port in (("floodgate", fg_port), ("nginx", ng_port)):
            one, three = [], []
            for r in range(rounds):
                order = [("/one", one), ("/three", three)] if r % 2 == 0 else [("/three", three), ("/one", one)]
                for path, into in order:
                    into.append(wrk(port, path, seconds)[0])
            ratios = [t / o for t, o in zip(three, one)]
            print(f"{name:<10} req/s, c=64, {rounds} rounds of {seconds} s (medians): one server "
                  f"{statistics.median(one):.0f}, three servers {statistics.median(three):.0f}: "
                  f"{statistics.median(ratios):.3f}x")
    finally:
        bench.stop_all(procs, work)


if __name__ == "__main__":
    main()
