#!/usr/bin/env python3
"""A consumer file of a million API keys (plans.consumers): its load time, its memory,
and req/s with every request's key looked up in it against the same limit without
plans, same machine, one run; then a reload of the file under load, which must lose no
request.

    bench/consumers.py [seconds] [rounds] [consumers]     (default 5 s, 3 rounds, 1,000,000)

floodgate (one worker, memory store) on the servers' core beside the nginx `return 200`
origin, wrk on the other core with one consumer's key on every request (gold: a limit
it never reaches). /planned has a gcra limit with plans from the file, /plain the same
limit without plans. The memory is RSS after the start against a floodgate with an
empty file."""
import hashlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
from bench import FLOODGATE, SERVER_CORE, free_port, nginx, wait_port  # noqa: E402
from tls import rss_kib  # noqa: E402

LIMIT = """      - name: per-key
        algorithm: gcra
        key: header:X-Api-Key
        rate: 1000000/s
        burst: 1000000
"""


def write_consumers(path, n):
    with open(path, "w") as f:
        f.write("# sha256(key) plan\n")
        for i in range(n):
            f.write(f"{hashlib.sha256(f'key-{i:07d}'.encode()).hexdigest()} {'gold' if i % 10 == 0 else 'free'}\n")


def config(work, port, origin, consumers):
    conf = work / f"floodgate-{port}.yaml"
    conf.write_text(f"""listen: "127.0.0.1:{port}"
workers: 1
log: {{level: info, access_log: off}}
upstreams:
  origin: {{address: "127.0.0.1:{origin}", max_idle: 1024}}
routes:
  - name: planned
    match: {{path: /planned}}
    upstream: origin
    limits:
{LIMIT}        plans:
          consumers: "{consumers}"
          unknown: reject
          gold: {{rate: 1000000/s, burst: 1000000}}
          free: {{rate: 1000000/s, burst: 1000000}}
  - name: plain
    match: {{path: /plain}}
    upstream: origin
    limits:
{LIMIT}""")
    return conf


def start(conf, log):
    t0 = time.monotonic()
    p = subprocess.Popen(["taskset", "-c", SERVER_CORE, FLOODGATE, "--config", str(conf)], stdout=log, stderr=log)
    port = int(re.search(r'listen: "127.0.0.1:(\d+)"', conf.read_text()).group(1))
    wait_port(port, 60)
    return p, time.monotonic() - t0


def wrk(port, path, seconds, conns=64):
    rps = bench.wrk(port, conns, seconds, path, expect_errors=True, headers=["X-Api-Key: key-0000000"])[0]
    return rps, bench.wrk.last_non2xx, bench.wrk.last_socket_errors


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
    work = Path(tempfile.mkdtemp(prefix="fg-consumers-bench-"))
    big, empty = work / "consumers.txt", work / "empty.txt"
    t0 = time.monotonic()
    write_consumers(big, n)
    write_consumers(empty, 1)
    print(f"{n} consumers written in {time.monotonic() - t0:.1f} s ({big.stat().st_size >> 20} MiB)")
    origin = free_port()
    procs = []
    log = open(work / "floodgate.log", "w")
    try:
        procs.append(nginx(work, "origin", f"listen 127.0.0.1:{origin} backlog=4096; "
                                           'location / { return 200 "ok\\n"; }'))
        wait_port(origin)
        small, small_start = start(config(work, free_port(), origin, empty), log)
        procs.append(small)
        fg_port = free_port()
        fg, fg_start = start(config(work, fg_port, origin, big), log)
        procs.append(fg)
        time.sleep(0.5)
        loaded = re.findall(r"consumer file .*consumers.txt: (\d+) consumer\(s\).*read in (\d+) ms",
                            (work / "floodgate.log").read_text())
        mem = (rss_kib([fg.pid]) - rss_kib([small.pid])) / 1024
        print(f"start with the file: {fg_start:.2f} s (without: {small_start:.2f} s); read and sorted in "
              f"{loaded[-1][1] if loaded else '?'} ms; RSS {mem:.1f} MiB more than with an empty file")
        planned, plain = [], []
        for r in range(rounds):
            order = [("/planned", planned), ("/plain", plain)]
            for path, into in order if r % 2 == 0 else order[::-1]:
                rps, bad, errors = wrk(fg_port, path, seconds)
                assert bad == 0 and not errors, (path, bad, errors)
                into.append(rps)
        ratios = [a / b for a, b in zip(planned, plain)]
        print(f"req/s, c=64, {rounds} rounds of {seconds} s (medians): with the file's lookup "
              f"{statistics.median(planned):.0f}, without plans {statistics.median(plain):.0f}: "
              f"{statistics.median(ratios):.3f}x")
        # A reload of the file under load: every request answered 200.
        result = {}
        span = max(10, 2 * seconds)
        loader = bench.threading.Thread(target=lambda: result.update(zip(("rps", "bad", "errors"),
                                                                          wrk(fg_port, "/planned", span))))
        loader.start()
        time.sleep(1)
        text = big.read_text()
        written = time.monotonic()
        big.write_text(text.replace(" free\n", " gold\n", 1000))

        def reloads():
            return len(re.findall(r"consumers.txt: \d+ consumer", (work / "floodgate.log").read_text())) - 1
        while reloads() < 1 and time.monotonic() < written + span:
            time.sleep(0.05)
        took = time.monotonic() - written
        loader.join()
        print(f"a reload under load ({reloads()} reload(s), {took:.2f} s after the file was written): "
              f"{result['rps']:.0f} req/s over {span} s, {result['bad']} non-2xx, "
              f"socket errors: {result['errors'] or 'none'}")
    finally:
        bench.stop_all(procs, work)


if __name__ == "__main__":
    main()
