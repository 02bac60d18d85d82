#!/usr/bin/env python3
"""floodgate on a 3-master Redis Cluster next to floodgate on one Redis, same machine,
one run, paired rounds: req/s, p99 and Redis calls per request, as ratios.

    python3 bench/cluster.py [SECONDS [ROUNDS]]

Both gateways are the same build (workers: 1, on the servers' core), with the same
routes; every redis-server runs on the client's core (as Redis on its own hosts). Paths:
  /limited   a per-IP limit (one client: one key, one slot), never reached
  /clients   a limit keyed on X-Client, 1000 clients in turn (keys on every master)
  /two       a per-IP limit beside a global one (two slots: decided slot by slot)
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (CLIENT_CORE, FLOODGATE, LIMITED_ROUTE, SERVER_CORE, free_port, nginx,  # noqa: E402
                   parse_ms, stop_all, wait_port)

CONNS = 64
PATHS = ["/limited", "/clients", "/two"]


def redis_server(work, name, cluster=False):
    port = free_port()
    d = work / name
    d.mkdir()
    args = ["taskset", "-c", CLIENT_CORE, "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(d)]
    if cluster:
        args += ["--cluster-enabled", "yes", "--cluster-config-file", str(d / "nodes.conf"),
                 "--cluster-port", str(free_port())]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return p, port


def evals(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "info", "commandstats"], capture_output=True, text=True).stdout
    return sum(int(line.split("calls=")[1].split(",")[0]) for line in out.splitlines()
               if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")))


def floodgate(work, name, port, upstream_port, redis_ports, cluster):
    d = work / name
    d.mkdir()
    conf = d / "floodgate.yaml"
    addresses = ", ".join(f'"127.0.0.1:{p}"' for p in redis_ports)
    conf.write_text(f"""listen: "127.0.0.1:{port}"
workers: 1
log: {{level: warn, access_log: off}}
store: redis
redis:
  mode: {"cluster" if cluster else "standalone"}
  addresses: [{addresses}]
  timeout: 100ms
upstreams:
  origin: {{address: "127.0.0.1:{upstream_port}", max_idle: 1024}}
routes:
{LIMITED_ROUTE}  - name: clients
    match: {{path: /clients}}
    upstream: origin
    limits:
      - {{name: per-client, algorithm: fixed_window, key: "header:X-Client", limit: 1000000000, window: 1h}}
  - name: two
    match: {{path: /two}}
    upstream: origin
    limits:
      - {{name: per-ip, algorithm: fixed_window, key: ip, limit: 1000000000, window: 1h}}
      - {{name: all, algorithm: fixed_window, key: global, limit: 1000000000, window: 1h}}
  - name: rest
    match: {{path_prefix: /}}
    upstream: origin
""")
    return subprocess.Popen(["taskset", "-c", SERVER_CORE, FLOODGATE, "--config", str(conf)])


def wrk(port, path, seconds, script):
    import re
    args = ["taskset", "-c", CLIENT_CORE, "wrk", "-t1", f"-c{CONNS}", f"-d{seconds}s", "--latency"]
    if path == "/clients":
        args += ["-s", str(script)]
    out = subprocess.run(args + [f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    n = int(re.search(r"(\d+) requests in", out).group(1))
    p99 = parse_ms(re.search(r"\s99%\s+(\S+)", out).group(1))
    if re.search(r"Non-2xx or 3xx responses|Socket errors", out):
        print(f"  warning: {path}: {out}")
    return rps, p99, n


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    work = Path(tempfile.mkdtemp(prefix="fg-cluster-bench-"))
    procs = []
    try:
        single, single_port = redis_server(work, "single")
        procs.append(single)
        nodes = [redis_server(work, f"node{i}", cluster=True) for i in range(3)]
        procs += [p for p, _ in nodes]
        node_ports = [port for _, port in nodes]
        out = subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in node_ports),
                              "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if "All 16384 slots covered" not in out.stdout:
            sys.exit(f"redis-cli --cluster create failed:\n{out.stdout}\n{out.stderr}")
        for _ in range(100):
            if all("cluster_state:ok" in subprocess.run(["redis-cli", "-p", str(p), "cluster", "info"],
                                                        capture_output=True, text=True).stdout for p in node_ports):
                break
            time.sleep(0.1)
        up_port = free_port()
        procs.append(nginx(work, "origin", f'listen 127.0.0.1:{up_port} backlog=4096; location / {{ return 200 "ok\\n"; }}'))
        ports = {"single": free_port(), "cluster": free_port()}
        procs.append(floodgate(work, "fg-single", ports["single"], up_port, [single_port], False))
        procs.append(floodgate(work, "fg-cluster", ports["cluster"], up_port, node_ports[:1], True))
        for p in (up_port, *ports.values()):
            wait_port(p)
        script = work / "clients.lua"
        script.write_text('local n = 0\nrequest = function()\n  n = n + 1\n'
                          '  return wrk.format("GET", nil, {["X-Client"] = "c" .. (n % 1000)})\nend\n')
        redis_of = {"single": [single_port], "cluster": node_ports}
        for name, port in ports.items():  # warm-up: connections, scripts, pools
            for path in PATHS:
                wrk(port, path, 1, script)
        results = {}
        for r in range(rounds):
            for path in PATHS:
                # paired: both in each round, the order alternating
                order = ["single", "cluster"] if r % 2 == 0 else ["cluster", "single"]
                for name in order:
                    before = sum(evals(p) for p in redis_of[name])
                    rps, p99, n = wrk(ports[name], path, seconds, script)
                    calls = (sum(evals(p) for p in redis_of[name]) - before) / n
                    results.setdefault((name, path), []).append((rps, p99, calls))
                    print(f"round {r + 1} {path:9} {name:8} {rps:9.0f} req/s  p99 {p99:6.2f} ms  "
                          f"calls/req {calls:.4f}", flush=True)
        print(f"\n{'path':9} | {'single req/s':>12} {'cluster req/s':>13} {'ratio':>6} | {'p99 single':>10} "
              f"{'p99 cluster':>11} | {'calls/req single':>16} {'cluster':>8}")
        for path in PATHS:
            s = results[("single", path)]
            c = results[("cluster", path)]
            ratios = [b[0] / a[0] for a, b in zip(s, c)]
            med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
            print(f"{path:9} | {med(s, 0):12.0f} {med(c, 0):13.0f} {statistics.median(ratios):6.3f} | "
                  f"{med(s, 1):8.2f}ms {med(c, 1):9.2f}ms | {med(s, 2):16.4f} {med(c, 2):8.4f}")
    finally:
        stop_all(procs, work)


if __name__ == "__main__":
    main()
