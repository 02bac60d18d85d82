#!/usr/bin/env python3
"""floodgate's TLS listener against nginx terminating the same TLS, same machine, one run.

    bench/tls.py [seconds] [rounds]     (default 3 s, 3 rounds)

Both proxies: one worker, on the servers' core beside the origin (nginx `return 200`),
the same ECDSA P-256 certificate, TLS 1.3 (wrk's OpenSSL chooses it), ALPN http/1.1,
upstream keep-alive; wrk on the other core. Three loads, each in turn on nginx then
floodgate (then the reverse order the next round), medians over rounds:
- keep-alive at 64 and 256 connections: req/s and p99 (TLS termination, the handshake
  amortised);
- `Connection: close` at 64 connections: every request a new connection, so req/s is
  the handshakes per second. wrk keeps each connection's SSL object (SSL_clear), which
  keeps the session its last connection was given: these are TLS 1.3 resumptions (PSK
  with ECDHE), each bringing a new ticket;
- full handshakes under load: 8 `openssl s_time -new` at once, TLS 1.3 (no session
  offered), connections per second of wall time;
- one connection after another: `openssl s_time -new` (full) and `-reuse` (each
  resuming the first's TLS 1.2 session; s_time cannot resume TLS 1.3's tickets);
- the resident memory of 10,000 idle TLS connections (a handshake and one request each,
  then nothing), per connection, against nginx's.
Ratios are floodgate's over nginx's in the same round."""
import re
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
from bench import CLIENT_CORE, FLOODGATE, SERVER_CORE, children, free_port, nginx, wait_port  # noqa: E402


def wrk_tls(port, conns, seconds, close=False):
    rps, _, p99 = bench.wrk(port, conns, seconds, scheme="https", headers=["Connection: close"] if close else ())
    return rps, p99


def s_time(port, reuse, seconds, clients=1, version="-tls1_2"):
    """Connections per second of wall time, one after another in each of `clients`
    openssl s_time processes."""
    t0 = time.monotonic()
    runs = [subprocess.Popen(["taskset", "-c", CLIENT_CORE, "openssl", "s_time", "-connect", f"127.0.0.1:{port}",
                              "-reuse" if reuse else "-new", version, "-time", str(seconds)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(clients)]
    out = "".join(r.communicate()[0] for r in runs)
    elapsed = time.monotonic() - t0
    counts = [int(n) for n in re.findall(r"(\d+) connections in [\d.]+s", out)]
    return sum(counts) / elapsed if counts else 0.0


def rss_kib(pids):
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def idle_connections_kib(port, pids, n=10_000):
    """RSS growth per connection while n TLS connections, each past its handshake and one
    request, stay open and idle."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    time.sleep(0.5)
    before = rss_kib(pids)
    socks = []
    try:
        for _ in range(n):
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="bench.test")
            s.sendall(b"GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n")
            s.recv(4096)
            socks.append(s)
        time.sleep(1.0)
        after = rss_kib(pids)
    finally:
        for s in socks:
            s.close()
    return (after - before) / n


def floodgate(work, port, origin_port, cert, key):
    d = work / "floodgate"
    d.mkdir()
    conf = d / "floodgate.yaml"
    conf.write_text(f"""listen: "127.0.0.1:{free_port()}"
workers: 1
log: {{level: warn, access_log: off}}
http: {{max_connections: 20000, idle_timeout: 120s}}
tls:
  listen: "127.0.0.1:{port}"
  certificates: [{{cert: "{cert}", key: "{key}"}}]
  max_handshakes: 4096
upstreams:
  origin: {{address: "127.0.0.1:{origin_port}", max_idle: 1024}}
routes:
  - {{name: all, match: {{path_prefix: /}}, upstream: origin}}
""")
    return subprocess.Popen(["taskset", "-c", SERVER_CORE, FLOODGATE, "--config", str(conf)])


def start_proxies(work, procs, http2=False):
    """A certificate, the origin, nginx terminating TLS before it (`http2`: with its
    http2 on) and floodgate's TLS listener, started into `procs`: their ports and pids."""
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=bench.test"],
                   check=True, capture_output=True)
    origin_port, nginx_port, fg_port = free_port(), free_port(), free_port()
    procs.append(nginx(work, "origin", f"listen 127.0.0.1:{origin_port} backlog=4096; "
                                       'location / { return 200 "ok\\n"; }'))
    listen = f"listen 127.0.0.1:{nginx_port} ssl{' http2' if http2 else ''} backlog=4096; "
    procs.append(nginx(work, "proxy",
                       listen + f"ssl_certificate {cert}; "
                       f"ssl_certificate_key {key}; ssl_protocols TLSv1.2 TLSv1.3; keepalive_timeout 120s; "
                       "ssl_session_cache shared:SSL:10m; "
                       "location / { proxy_pass http://origin; proxy_http_version 1.1; "
                       'proxy_set_header Connection ""; }',
                       f"upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 1024; }}", connections=20000))
    procs.append(floodgate(work, fg_port, origin_port, cert, key))
    for p in (origin_port, nginx_port, fg_port):
        wait_port(p)
    pids = {"nginx": children(procs[1].pid) or [procs[1].pid], "floodgate": [procs[2].pid]}
    return {"nginx": nginx_port, "floodgate": fg_port}, pids


def print_medians(title, loads, results):
    """The table of a run: per load, each server's median req/s and p99 (results[(load,
    name)]: a (req/s, p99 ms) per round) and the median of floodgate's ratios to nginx."""
    print(title)
    print(f"{'load':<24}{'nginx req/s':>12}{'p99 ms':>8}{'floodgate':>12}{'p99 ms':>8}{'ratio':>8}")
    for load, *_ in loads:
        n = results[(load, "nginx")]
        f = results[(load, "floodgate")]
        ratios = [fr[0] / nr[0] for fr, nr in zip(f, n) if nr[0]]
        print(f"{load:<24}{statistics.median(x[0] for x in n):>12.0f}{statistics.median(x[1] for x in n):>8.2f}"
              f"{statistics.median(x[0] for x in f):>12.0f}{statistics.median(x[1] for x in f):>8.2f}"
              f"{statistics.median(ratios):>7.2f}x")


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # 10,000 client sockets and more
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 30_000), hard))
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    work = Path(tempfile.mkdtemp(prefix="fg-tls-bench-"))
    procs = []
    try:
        ports, pids = start_proxies(work, procs)
        loads = [("keep-alive c=64", 64, False), ("keep-alive c=256", 256, False),
                 ("resumed, new conn. c=64", 64, True)]
        results = {(load, name): [] for load, _, _ in loads for name in ports}
        for r in range(rounds):
            order = ["nginx", "floodgate"] if r % 2 == 0 else ["floodgate", "nginx"]
            for load, conns, close in loads:
                for name in order:
                    results[(load, name)].append(wrk_tls(ports[name], conns, seconds, close))
        print_medians(f"TLS 1.3, ECDSA P-256, one worker each; {rounds} rounds of {seconds} s; medians", loads,
                      results)
        for label, reuse, clients, version in (("full, 8 s_time, TLS 1.3", False, 8, "-tls1_3"),
                                               ("s_time full, TLS 1.2", False, 1, "-tls1_2"),
                                               ("s_time resumed, TLS 1.2", True, 1, "-tls1_2")):
            per = {name: [] for name in ports}
            for r in range(rounds):
                for name in (["nginx", "floodgate"] if r % 2 == 0 else ["floodgate", "nginx"]):
                    per[name].append(s_time(ports[name], reuse, seconds, clients, version))
            ratios = [f / n for f, n in zip(per["floodgate"], per["nginx"]) if n]
            print(f"{label:<24}{statistics.median(per['nginx']):>12.0f}{'':>8}"
                  f"{statistics.median(per['floodgate']):>12.0f}{'':>8}{statistics.median(ratios):>7.2f}x")
        mem = {name: idle_connections_kib(ports[name], pids[name]) for name in ("nginx", "floodgate")}
        print(f"RSS per idle TLS connection (10,000 open): nginx {mem['nginx']:.1f} KiB, "
              f"floodgate {mem['floodgate']:.1f} KiB")
    finally:
        bench.stop_all(procs, work)


if __name__ == "__main__":
    main()
