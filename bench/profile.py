#!/usr/bin/env python3
"""Where a request's time goes, in measures that do not move with this VM's speed.

  bench/profile.py syscalls [conns]   perf stat on each proxy while wrk loads it: system
                                      calls, reads that found nothing (EAGAIN), epoll_wait
                                      and context switches per request, and CPU µs per
                                      request of the proxy and of the origin behind it
  bench/profile.py callgrind [paths]  floodgate under callgrind: user-space instructions
                                      per request on each path (default / /limited /flood)

Same set-up as bench/bench.py (nginx origin, nginx plain proxy, floodgate with its three
routes, redis-server beside wrk). Needs linux-perf (syscalls) or valgrind (callgrind):
    apt-get install -y linux-perf valgrind
Build floodgate first (bench/run.sh does); FLOODGATE_BIN picks another binary;
FG_PROFILE_ADMIN=1 turns the admin listener on (so the metrics are counted);
FG_PROFILE_STORE=memory counts every limit in the process (`callgrind /memory`: peers.py's
memory-store path); FG_PROFILE_H2C=1 loads it with cleartext HTTP/2 (h2load, 32
connections of 10 streams; http2.cleartext on) instead of wrk's HTTP/1.1, and says what
share of the instructions nghttp2's own code took; FG_PROFILE_TRACING=1 turns
tracing.propagate on (a traceparent to every upstream request), =export also exports
spans (tracing.export, 1% sampled) to the origin, =export-all every request's."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402


class Setup:
    """Origin, nginx proxy, redis-server and floodgate, started as bench.py starts them."""

    def __enter__(self):
        self.work = Path(tempfile.mkdtemp(prefix="fg-profile-"))
        self.procs = []
        self.up, self.nginx, self.fg, self.redis = (bench.free_port() for _ in range(4))
        self.procs.append(subprocess.Popen(["taskset", "-c", bench.CLIENT_CORE, "redis-server", "--port",
                                            str(self.redis), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                            "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        bench.wait_port(self.redis)
        self.origin = bench.nginx(self.work, "origin",
                                  f'listen 127.0.0.1:{self.up} backlog=4096; location / {{ return 200 "ok\\n"; }}')
        self.proxy = bench.nginx(self.work, "proxy",
                                 f"listen 127.0.0.1:{self.nginx} backlog=4096; location / {{ proxy_pass http://origin; "
                                 'proxy_http_version 1.1; proxy_set_header Connection ""; }',
                                 f"upstream origin {{ server 127.0.0.1:{self.up}; keepalive 1024; "
                                 "keepalive_requests 100000000; }")
        self.procs += [self.origin, self.proxy]
        for p in (self.up, self.nginx):
            bench.wait_port(p)
        time.sleep(0.2)
        return self

    def start_floodgate(self, wrapper=()):
        # bench.start_floodgate writes the config and starts the binary; a wrapper
        # (valgrind) goes in front of it.
        saved, d = bench.FLOODGATE, self.work / f"fg{len(self.procs)}"
        bench.FLOODGATE = "/bin/true"
        # FG_PROFILE_ADMIN=1: with the admin listener on (metrics counted).
        admin = bench.free_port() if os.environ.get("FG_PROFILE_ADMIN") == "1" else None
        # FG_PROFILE_STORE=memory: every limit in the process (/memory is peers.py's).
        store = os.environ.get("FG_PROFILE_STORE", "redis")
        bench.start_floodgate(d, self.fg, self.up, self.redis, admin, store=store).wait()
        bench.FLOODGATE = saved
        conf = d / "floodgate.yaml"
        if H2C:
            conf.write_text(conf.read_text() + "http2:\n  cleartext: true\n")
        tracing = os.environ.get("FG_PROFILE_TRACING", "")
        if tracing:  # a traceparent to every upstream request; spans to the origin (any path is a 200)
            ratio = {"export": "0.01", "export-all": "1"}.get(tracing)
            export = (f"  sample_ratio: {ratio}\n  export:\n    endpoint: http://127.0.0.1:{self.up}/v1/traces\n"
                      if ratio else "")
            conf.write_text(conf.read_text() + "tracing:\n  propagate: true\n" + export)
        p = subprocess.Popen(["taskset", "-c", bench.SERVER_CORE, *wrapper, bench.FLOODGATE, "--config", str(conf)],
                             stderr=subprocess.DEVNULL if wrapper else None)
        self.procs.append(p)
        bench.wait_port(self.fg, 60)
        return p

    def __exit__(self, *exc):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def perf_stat(pid, seconds):
    events = ["raw_syscalls:sys_enter", "syscalls:sys_enter_epoll_wait", "context-switches", "task-clock"]
    cmd = ["perf", "stat", "-x,", "-p", str(pid)]
    for e in events:
        cmd += ["-e", e]
    cmd += ["-e", "syscalls:sys_exit_recvfrom", "--filter", "ret < 0", "--", "sleep", str(seconds)]
    out = subprocess.run(cmd, capture_output=True, text=True).stderr
    got = {}
    for line in out.splitlines():
        f = line.split(",")
        if len(f) > 3 and f[0] and f[0][0].isdigit():
            got[f[2]] = float(f[0])
    return got


def syscalls(conns):
    with Setup() as s:
        fg = s.start_floodgate()
        proxy_pid = (bench.children(s.proxy.pid) or [s.proxy.pid])[0]
        origin_pid = (bench.children(s.origin.pid) or [s.origin.pid])[0]
        targets = [("nginx", s.nginx, "/", proxy_pid), ("floodgate", s.fg, "/", fg.pid),
                   ("fg+redis", s.fg, "/limited", fg.pid), ("fg flood", s.fg, "/flood", fg.pid)]
        print(f"per request, wrk -c{conns}; measured over 2 s of a 3 s run")
        print(f"{'run':>10} | {'req/s':>7} {'syscalls':>8} {'EAGAIN':>6} {'epoll_w':>7} {'ctx sw':>6} {'proxy us':>8}"
              f" | {'origin us':>9} {'origin cs':>9}")
        for name, port, path, pid in targets:
            bench.wrk(port, conns, 1, path, expect_errors=True)  # warm-up
            rows = {}
            for who, p in (("proxy", pid), ("origin", origin_pid)):
                res = {}
                t = threading.Thread(target=lambda: res.update(r=bench.wrk(port, conns, 3, path, expect_errors=True)))
                t.start()
                time.sleep(0.5)
                rows[who] = perf_stat(p, 2)
                t.join()
                rows[who + " rps"] = res["r"][0]
            px, og = rows["proxy"], rows["origin"]
            n, no = rows["proxy rps"] * 2, rows["origin rps"] * 2
            print(f"{name:>10} | {rows['proxy rps']:7.0f} {px.get('raw_syscalls:sys_enter', 0) / n:8.2f} "
                  f"{px.get('syscalls:sys_exit_recvfrom', 0) / n:6.2f} "
                  f"{px.get('syscalls:sys_enter_epoll_wait', 0) / n:7.3f} {px.get('context-switches', 0) / n:6.3f} "
                  f"{px.get('task-clock', 0) * 1e3 / n:8.1f} | {og.get('task-clock', 0) * 1e3 / no:9.1f} "
                  f"{og.get('context-switches', 0) / no:9.3f}")


H2C = os.environ.get("FG_PROFILE_H2C") == "1"


def h2load(port, seconds, path):
    """Cleartext HTTP/2 load (prior knowledge) for `seconds`: the requests done."""
    out = subprocess.run(["taskset", "-c", bench.CLIENT_CORE, "h2load", "-c", "32", "-m", "10", "-D", str(seconds),
                          f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True).stdout
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done", out)
    if not m:
        sys.exit("h2load: " + out[-500:])
    return int(m.group(1))


def library_share(dump, name):
    """The share of a dump's instructions spent in the functions of library `name`."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", str(dump)], capture_output=True,
                          text=True).stdout
    total = mine = 0
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S", line)
        if not m:
            continue
        cost = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = cost
        elif name in line:
            mine += cost  # (each function's own instructions: --inclusive=no)
    return mine / total if total else 0.0


def callgrind(paths):
    for path in paths:
        with Setup() as s:
            out = s.work / "callgrind.out"
            fg = s.start_floodgate(["valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={out}"])
            if H2C:
                h2load(s.fg, 3, path)  # warm-up, then count from zero
            else:
                bench.wrk(s.fg, 32, 3, path, expect_errors=True)
            subprocess.run(["callgrind_control", "-z", str(fg.pid)], capture_output=True)
            if H2C:
                n = h2load(s.fg, 10, path)
            else:
                bench.wrk(s.fg, 32, 10, path, expect_errors=True)
                n = bench.wrk.last_requests
            subprocess.run(["callgrind_control", "-d", str(fg.pid)], capture_output=True)
            time.sleep(0.5)
            dumps = sorted(s.work.glob("callgrind.out.*"), key=lambda f: f.stat().st_mtime)
            text = dumps[-1].read_text(errors="replace") if dumps else ""
            # CALLGRIND_KEEP=DIR keeps each path's dump there, for callgrind_annotate.
            if dumps and os.environ.get("CALLGRIND_KEEP"):
                keep = Path(os.environ["CALLGRIND_KEEP"])
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(dumps[-1], keep / ("callgrind" + path.replace("/", "_") + ".out"))
            m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if not m:
                sys.exit("callgrind wrote no dump")
            share = f"  (nghttp2: {library_share(dumps[-1], 'libnghttp2') * 100:.1f}%)" if H2C else ""
            print(f"{path:10} {n:7} requests  {int(m.group(1)) / n:8.0f} instructions/request{share}", flush=True)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    tool = {"syscalls": "perf", "callgrind": "valgrind"}.get(mode)
    if not tool:
        sys.exit(__doc__)
    for t in (tool, "nginx", "wrk", "redis-server"):
        if not shutil.which(t):
            sys.exit(f"{t} not found (apt-get install -y linux-perf valgrind; bench/run.sh installs the rest)")
    if mode == "syscalls":
        syscalls(int(sys.argv[2]) if len(sys.argv) > 2 else 64)
    else:
        callgrind(sys.argv[2:] or ["/", "/limited", "/flood"])


if __name__ == "__main__":
    main()
