#!/usr/bin/env python3
"""Limit accuracy under a flood: admitted / promised, per algorithm and store.

For each algorithm and store (memory, and one redis-server), several identities
(X-Id header) each flood their own key from idle for SECONDS with wrk, all at once.
Promised per identity, for a flood of s seconds (as wrk measured it) from idle: rate * s
+ burst for token_bucket and gcra; limit * ceil(s / window) for fixed_window and
sliding_log (a whole limit at each window's start); limit * s / window for
sliding_window, whose weighted count spreads the limit over each window after the first
(what HAProxy's sliding rate admits).

Usage: bench/accuracy.py [seconds] [identities]   (defaults 5 and 4)"""
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import FLOODGATE, free_port, nginx, stop_all, wait_port  # noqa: E402

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
IDS = int(sys.argv[2]) if len(sys.argv) > 2 else 4

# name: (algorithm spec, promised per identity for a flood of s seconds)
LIMITS = {
    "fixed_window 100/1s": ("algorithm: fixed_window, limit: 100, window: 1s", lambda s: 100 * math.ceil(s)),
    "sliding_log 100/1s": ("algorithm: sliding_log, limit: 100, window: 1s", lambda s: 100 * math.ceil(s)),
    "sliding_window 100/1s": ("algorithm: sliding_window, limit: 100, window: 1s", lambda s: 100 * s),
    "token_bucket 100/s b1": ("algorithm: token_bucket, rate: 100/s, burst: 1", lambda s: 100 * s + 1),
    "token_bucket 1000/s b1": ("algorithm: token_bucket, rate: 1000/s, burst: 1", lambda s: 1000 * s + 1),
    "gcra 100/s b1": ("algorithm: gcra, rate: 100/s, burst: 1", lambda s: 100 * s + 1),
    "gcra 1000/s b1": ("algorithm: gcra, rate: 1000/s, burst: 1", lambda s: 1000 * s + 1),
    "gcra 1000/s b20": ("algorithm: gcra, rate: 1000/s, burst: 20", lambda s: 1000 * s + 20),
    # A plan's numbers (the request says gold), a wait instead of a 429 (wrk -c2: two wait
    # at most, the rest go at the limit's pace), a calendar day's quota.
    "gcra plan gold 1000/s": ('algorithm: gcra, rate: 100/s, burst: 1, plans: {from: "header:X-Plan", '
                              "gold: {rate: 1000/s, burst: 20}}", lambda s: 1000 * s + 20),
    "gcra 100/s b1 delay": ("algorithm: gcra, rate: 100/s, burst: 1, on_exceed: delay, max_delay: 200ms",
                            lambda s: 100 * s + 1),
    "fixed_window 500/1d cal": ("algorithm: fixed_window, limit: 500, window: 1d, align: calendar, timezone: UTC",
                                lambda s: 500),
}
# Headers a row's requests carry besides X-Id.
HEADERS = {"gcra plan gold 1000/s": ["X-Plan: gold"]}


def start_gateway(work, store, redis_port, origin_port):
    port = free_port()
    routes = ""
    for i, (name, (spec, _)) in enumerate(LIMITS.items()):
        routes += f"""  - name: r{i}
    match: {{path: /r{i}}}
    upstream: origin
    limits:
      - {{name: l, key: "header:X-Id", {spec}}}
"""
    d = work / f"fg-{store}"
    d.mkdir()
    conf = d / "floodgate.yaml"
    conf.write_text(f"""listen: "127.0.0.1:{port}"
workers: 2
log: {{level: warn, access_log: off}}
store: {store}
redis: {{addresses: ["127.0.0.1:{redis_port}"], timeout: 200ms, key_prefix: "acc{int(time.time())}:"}}
upstreams:
  origin: {{address: "127.0.0.1:{origin_port}", max_idle: 256}}
routes:
{routes}""")
    p = subprocess.Popen([FLOODGATE, "--config", str(conf)])
    wait_port(port)
    return p, port


def flood(port, path, headers=()):
    """One wrk per identity, all at once; returns (admitted, seconds) per identity."""
    procs = []
    extra = [a for h in headers for a in ("-H", h)]
    for i in range(IDS):
        procs.append(subprocess.Popen(["wrk", "-t1", "-c2", f"-d{SECONDS}s", "-H", f"X-Id: id{i}-{time.time()}", *extra,
                                       f"http://127.0.0.1:{port}{path}"], stdout=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        text = p.communicate()[0]
        m = re.search(r"(\d+) requests in ([\d.]+)(ms|s)", text)
        total, dur = int(m.group(1)), float(m.group(2)) / (1000 if m.group(3) == "ms" else 1)
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
        out.append((total - (int(non2xx.group(1)) if non2xx else 0), dur))
    return out


def main():
    work = Path(tempfile.mkdtemp(prefix="fg-accuracy-"))
    procs = []
    try:
        origin_port = free_port()
        procs.append(nginx(work, "origin", f"listen 127.0.0.1:{origin_port}; location / {{ return 200 'ok'; }}"))
        wait_port(origin_port)
        redis_port = free_port()
        procs.append(subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no"], stdout=subprocess.DEVNULL))
        wait_port(redis_port)
        gateways = {}
        for store in ("memory", "redis"):
            p, port = start_gateway(work, store, redis_port, origin_port)
            procs.append(p)
            gateways[store] = port
        print(f"{IDS} identities, each flooding its own key from idle for {SECONDS:g} s (wrk -c2 each); "
              f"admitted / promised, min..max over identities")
        print(f"{'limit':24s} {'memory':>18s} {'redis':>18s}")
        for i, (name, (_, promised)) in enumerate(LIMITS.items()):
            cells = []
            for store in ("memory", "redis"):
                results = flood(gateways[store], f"/r{i}", HEADERS.get(name, ()))
                ratios = [admitted / promised(dur) for admitted, dur in results]
                mean = sum(ratios) / len(ratios)
                cells.append(f"{mean:5.3f} ({min(ratios):.3f}..{max(ratios):.3f})")
            print(f"{name:24s} {cells[0]:>18s} {cells[1]:>18s}", flush=True)
    finally:
        stop_all(procs, work)


if __name__ == "__main__":
    main()
