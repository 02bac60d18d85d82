#!/usr/bin/env python3
"""A/B two floodgate binaries on one path, in measures this VM's swings of speed move little.

    bench/ab.py A_BINARY B_BINARY [path] [rounds]     (default /limited, 8 rounds)

A binary may carry its own path, as BINARY@PATH: `bench/ab.py fg@/ fg@/limited` compares one
binary's plain and limited routes; BINARY+admin runs it with the admin listener on
(metrics counted, /metrics scraped every second): `bench/ab.py fg fg+admin /`;
BINARY+memory runs it with `store: memory`, where /memory is peers.py's memory-store limit:
`bench/ab.py fg@/ fg+memory@/memory` is what a local limit costs against no limit.

Both binaries run side by side behind bench.py's set-up (nginx origin, redis-server beside
wrk) and are loaded in turn, A then B, B then A, for 2 s each at 64 connections (CONNS and
SECONDS in the environment change that). Per run it takes floodgate's CPU per request in
units of the origin nginx's (the origin's work per request is the same in every run, so a
slower stretch of the VM moves both alike), and the servers' core idle time (moments when
every connection waits, e.g. for Redis). req/s is printed too, but only differences of
10% or more show through its noise; the CPU units resolve about 2% (an A/A run of one
binary against itself differed by 1.6%)."""
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402


def switches(pids):
    """Context switches so far (voluntary + involuntary) of these processes' threads."""
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binaries = {"A": sys.argv[1], "B": sys.argv[2]}
    scrapers = []
    path = sys.argv[3] if len(sys.argv) > 3 else "/limited"
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    conns, seconds = int(os.environ.get("CONNS", "64")), int(os.environ.get("SECONDS", "2"))
    work = Path(tempfile.mkdtemp(prefix="fg-ab-"))
    up, redis_port = bench.free_port(), bench.free_port()
    procs = []
    try:
        redis = subprocess.Popen(["taskset", "-c", bench.CLIENT_CORE, "redis-server", "--port", str(redis_port),
                                  "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(redis)
        bench.wait_port(redis_port)
        origin = bench.nginx(work, "origin", f'listen 127.0.0.1:{up} backlog=4096; location / {{ return 200 "ok\\n"; }}')
        procs.append(origin)
        targets = []
        for name, binary in binaries.items():
            port = bench.free_port()
            binary, _, own_path = binary.partition("@")
            # BINARY+admin: with the admin listener on (metrics counted, scraped each second).
            binary, memory = binary.removesuffix("+memory"), binary.endswith("+memory")
            binary, admin = binary.removesuffix("+admin"), binary.endswith("+admin")
            admin_port = bench.free_port() if admin else None
            bench.FLOODGATE = binary
            p = bench.start_floodgate(work / name, port, up, redis_port, admin_port, "memory" if memory else "redis")
            if admin_port:
                bench.wait_port(admin_port)
                scrapers.append(bench.Scraper(admin_port))
            procs.append(p)
            targets.append((name, port, p.pid, own_path or path))
        for _, port, _, _ in targets:
            bench.wait_port(port)
        bench.wait_port(up)
        time.sleep(0.3)
        origin_pids = bench.children(origin.pid) or [origin.pid]
        for _, port, _, target_path in targets:
            bench.wrk(port, conns, 1, target_path, expect_errors=True)
        runs = {}
        for rnd in range(rounds):
            for name, port, pid, target_path in (targets if rnd % 2 == 0 else targets[::-1]):
                cpu0, origin0, ticks0 = bench.cpu_seconds([pid]), bench.cpu_seconds(origin_pids), bench.core_ticks(
                    bench.SERVER_CORE)
                calls0 = bench.redis_calls(redis_port)
                switches0 = switches([pid]), switches(origin_pids)
                rps, p50, _ = bench.wrk(port, conns, seconds, target_path, expect_errors=True)
                n = max(1, bench.wrk.last_requests)
                ticks1 = bench.core_ticks(bench.SERVER_CORE)
                proxy_us = (bench.cpu_seconds([pid]) - cpu0) / n * 1e6
                origin_us = (bench.cpu_seconds(origin_pids) - origin0) / n * 1e6
                units = proxy_us / max(1e-9, origin_us)
                idle = (ticks1[0] - ticks0[0]) / max(1, ticks1[1] - ticks0[1])
                calls = (bench.redis_calls(redis_port) - calls0) / n
                cs = (switches([pid]) - switches0[0]) / n, (switches(origin_pids) - switches0[1]) / n
                runs.setdefault(name, []).append((units, idle, rps, p50, calls, proxy_us, origin_us, cs[0], cs[1]))
                print(f"  round {rnd + 1} {name}: {rps:7.0f} req/s  p50 {p50:5.2f} ms  proxy/origin CPU {units:.3f}"
                      f" ({proxy_us:4.1f}/{origin_us:4.1f} us)  idle {idle * 100:4.1f}%  redis calls/req {calls:.4f}"
                      f"  switches/req {cs[0]:.3f}/{cs[1]:.3f}", flush=True)
        print(f"medians of {rounds} runs each, {path}, {conns} connections")
        for name, rs in runs.items():
            med = [statistics.median(r[k] for r in rs) for k in range(9)]
            print(f"  {name} ({binaries[name]}): proxy/origin CPU {med[0]:.3f}  idle {med[1] * 100:.1f}%  "
                  f"{med[2]:.0f} req/s  p50 {med[3]:.2f} ms  redis calls/req {med[4]:.4f}  proxy {med[5]:.1f} us/req  "
                  f"origin {med[6]:.1f} us/req  context switches/req {med[7]:.3f} (proxy) {med[8]:.3f} (origin)")
        # Runs of one round are seconds apart: their ratios drift least.
        a, b = runs["A"], runs["B"]
        for k, what in ((2, "req/s"), (5, "proxy us/req"), (6, "origin us/req")):
            print(f"  B/A {what}, median of the rounds' ratios: "
                  f"{statistics.median(y[k] / x[k] for x, y in zip(a, b)):.3f}")
    finally:
        for sc in scrapers:
            sc.stop()
        bench.stop_all(procs, work)


if __name__ == "__main__":
    main()
