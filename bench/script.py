#!/usr/bin/env python3
"""The limiter script's own cost in Redis: EVALSHA calls shaped as the gateway's batcher
sends them (a fixed_window limit; N requests per call, on K keys), one call at a time
over one connection to a redis-server this starts. Prints Redis' own time in the
script per call (INFO commandstats) and redis-server's CPU time per call (/proc); with
--callgrind, redis-server runs under callgrind and it prints instructions per call
instead, which do not move with the machine's speed (needs valgrind).
Usage: bench/script.py [calls] [--callgrind]   (run bench/run.sh once first: it
installs redis-server)"""
import glob
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import free_port, wait_port, cpu_seconds  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# The limiter's parts, in order: the FG_LUA_FILES list of src/CMakeLists.txt.
PARTS = re.findall(r"/lua/(\w+)\.lua",
                   re.search(r"set\(FG_LUA_FILES(.*?)\)", (ROOT / "src" / "CMakeLists.txt").read_text(), re.S)[1])
SCRIPT = "\n".join((ROOT / "lua" / f"{p}.lua").read_text() for p in PARTS)
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
CALLGRIND = "--callgrind" in sys.argv[1:]
CALLS = int(ARGS[0]) if ARGS else (500 if CALLGRIND else 20000)


def resp(parts):
    parts = [p if isinstance(p, bytes) else str(p).encode() for p in parts]
    return f"*{len(parts)}\r\n".encode() + b"".join(f"${len(p)}\r\n".encode() + p + b"\r\n" for p in parts)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.f = self.sock.makefile("rb")

    def call(self, *args):
        self.sock.sendall(resp(args))
        return self.read()

    def read(self):
        line = self.f.readline()
        if line[:1] == b"$":
            n = int(line[1:])
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if line[:1] == b"-":
            raise RuntimeError(line.decode().strip())
        return line


def instructions(pid, dump_prefix, run):
    """Instructions redis-server (under callgrind) executes during run()."""
    subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True, check=True)
    run()
    before = set(glob.glob(dump_prefix + "*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True)
    for _ in range(50):
        new = set(glob.glob(dump_prefix + "*")) - before
        if new:
            time.sleep(0.2)  # let it finish writing
            text = Path(max(new, key=os.path.getmtime)).read_text(errors="replace")
            return int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))
        time.sleep(0.1)
    sys.exit("callgrind wrote no dump")


def main():
    port = free_port()
    work = tempfile.mkdtemp(prefix="fg-script-")
    dump = f"{work}/callgrind.out"
    wrapper = ["valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={dump}"] if CALLGRIND else []
    redis = subprocess.Popen([*wrapper, "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, 60)
        c = Conn(port)
        sha = c.call("SCRIPT", "LOAD", SCRIPT).decode()
        if CALLGRIND:
            print(f"{'requests':>8} {'keys':>5} | {'instructions/call':>17} {'instructions/request':>20}")
        else:
            print(f"{'requests':>8} {'keys':>5} | {'in script us/call':>17} {'redis CPU us/call':>17} "
                  f"{'redis CPU us/request':>20}")
        for n, k in [(1, 1), (22, 1), (64, 1), (22, 22), (64, 64)]:
            per_key = [n // k + (1 if i < n % k else 0) for i in range(k)]
            keys = [f"bench:{{r:l:ip{i}}}" for i in range(k)]
            # entries, specs, shapes; fixed_window 1e9 per hour, cost 1; shape {1}; per key (shape 1, count)
            numbers = [k, 1, 1, 1, 1_000_000_000, 3_600_000, 0, 1, 0, 1, 1]
            for count in per_key:
                numbers += [1, count]
            cmd = resp(["EVALSHA", sha, k, *keys, struct.pack(f"<{len(numbers)}q", *numbers)])

            def run():
                for _ in range(CALLS):
                    c.sock.sendall(cmd)
                    c.read()

            if CALLGRIND:
                run()  # warm-up: the keys exist, as they do under load
                per_call = instructions(redis.pid, dump, run) / CALLS
                print(f"{n:>8} {k:>5} | {per_call:>17.0f} {per_call / n:>20.0f}")
                c.call("FLUSHALL")
                continue
            c.call("CONFIG", "RESETSTAT")
            before = cpu_seconds([redis.pid])
            run()
            cpu = (cpu_seconds([redis.pid]) - before) / CALLS * 1e6
            stats = c.call("INFO", "commandstats").decode()
            in_script = float(re.search(r"cmdstat_evalsha:.*usec_per_call=([\d.]+)", stats).group(1))
            print(f"{n:>8} {k:>5} | {in_script:>17.1f} {cpu:>17.1f} {cpu / n:>20.2f}")
            c.call("FLUSHALL")
    finally:
        redis.terminate()
        redis.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
