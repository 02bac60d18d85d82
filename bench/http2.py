#!/usr/bin/env python3
"""floodgate's HTTP/2 (TLS, ALPN h2) against nginx's `http2` on the same certificate,
same machine, one run.

    /usr/bin/python3 bench/http2.py [seconds] [rounds]     (default 3 s, 3 rounds; Debian's python3-h2)

Both proxies: one worker, on the servers' core beside the origin (nginx `return 200`,
HTTP/1.1 with keep-alive upstream, as both speak to upstreams); h2load (Debian's
nghttp2-client, one thread) on the other core. Two loads, each in turn on nginx then
floodgate (the reverse order the next round), medians over rounds: 64 connections with
10 streams each, and 256 connections with 1. req/s, and p99 from h2load's per-request
log. Then the resident memory of 2,000 idle HTTP/2 connections (preface, SETTINGS and
one request each, then nothing), per connection, against nginx's. Ratios are
floodgate's over nginx's in the same round."""
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
from bench import CLIENT_CORE  # noqa: E402
from tls import print_medians, rss_kib, start_proxies  # noqa: E402  (the same servers as bench/tls.py)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))


def h2load(port, conns, streams, seconds, work, url=None, extra=()):
    """h2load's (req/s, p99 ms, requests that succeeded) against `url` (default the TLS
    port's /), `extra` its further arguments (a body, fields)."""
    log = work / f"h2load-{port}-{conns}.log"
    out = subprocess.run(["taskset", "-c", CLIENT_CORE, "h2load", "-c", str(conns), "-m", str(streams), "-D",
                          str(seconds), "--warm-up-time=1", "--log-file", str(log), *extra,
                          url or f"https://127.0.0.1:{port}/"], capture_output=True, text=True).stdout
    done = next((line for line in out.splitlines() if line.startswith("requests:")), "")
    fields = done.replace(",", "").split()
    ok = int(fields[fields.index("succeeded") - 1]) if "succeeded" in fields else 0
    rps = next((float(line.split()[3]) for line in out.splitlines() if line.startswith("finished in")), 0.0)
    times = sorted(int(line.split("\t")[2]) for line in log.read_text().splitlines() if line.count("\t") >= 2)
    p99 = times[int(len(times) * 0.99)] / 1000 if times else 0.0
    log.unlink()
    return rps, p99, ok


def idle_h2_kib(port, pids, n=2000):
    """RSS growth per connection while n HTTP/2 connections, each past one request, idle."""
    from h2client import PREFACE
    from hyperframe.frame import HeadersFrame, SettingsFrame
    import hpack
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    block = hpack.Encoder().encode([(":method", "GET"), (":scheme", "https"), (":authority", "bench.test"),
                                    (":path", "/")])
    request = PREFACE + SettingsFrame(0).serialize() + HeadersFrame(1, block, flags=["END_HEADERS", "END_STREAM"]).serialize()
    time.sleep(0.5)
    before = rss_kib(pids)
    socks = []
    try:
        for _ in range(n):
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="bench.test")
            s.sendall(request)
            got = b""
            while b"ok" not in got:  # (the answer's DATA)
                got += s.recv(65536)
            socks.append(s)
        time.sleep(1.0)
        after = rss_kib(pids)
    finally:
        for s in socks:
            s.close()
    return (after - before) / n


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 30_000), hard))
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    work = Path(tempfile.mkdtemp(prefix="fg-h2-bench-"))
    procs = []
    try:
        ports, pids = start_proxies(work, procs, http2=True)
        loads = [("c=64, 10 streams each", 64, 10), ("c=256, 1 stream each", 256, 1)]
        results = {(load, name): [] for load, _, _ in loads for name in ports}
        for r in range(rounds):
            order = ["nginx", "floodgate"] if r % 2 == 0 else ["floodgate", "nginx"]
            for load, conns, streams in loads:
                for name in order:
                    results[(load, name)].append(h2load(ports[name], conns, streams, seconds, work))
        print_medians(f"HTTP/2 over TLS 1.3, ECDSA P-256, one worker each; {rounds} rounds of {seconds} s; medians",
                      loads, results)
        mem = {name: idle_h2_kib(ports[name], pids[name]) for name in ("nginx", "floodgate")}
        print(f"RSS per idle HTTP/2 connection (2,000 open): nginx {mem['nginx']:.1f} KiB, "
              f"floodgate {mem['floodgate']:.1f} KiB")
    finally:
        bench.stop_all(procs, work)


if __name__ == "__main__":
    main()
