"""A limit admits what it promises under a flood, through Redis and the memory store:
token_bucket and gcra at a high rate (never above it with burst 1, where each store round
trip used to cost a turn; within 2% with a burst that outlasts the machine's stalls), and
sliding_window from idle (whose first bucket used to admit a whole
extra limit). The flood is several pipelined keep-alive connections on one key: wrk's
for the rates, this file's client (which also checks every answer's status) for the
window."""
import os
import re
import select
import socket
import subprocess
import threading
import time

import pytest

from conftest import SANITIZED, Thread, join_all, record

# The sanitizer build is several times slower, and one core (taskset -c 0) carries the
# gateway, Redis and the client at once: a rate each can still carry, so that what is
# measured is the limiter, not how often the machine stalls (with burst 1 every stall
# past 1/rate loses a token, hence the second burst below). The token_bucket and gcra floods come from wrk: the Python
# client's threads, waiting on each other for the interpreter, left the gateway with
# nothing to decide for a few ms at a time, and on an idle 2-core machine that lost
# 0.1-0.3 of the promise at 1000/s on some runs (wrk there: 0.995-1.0, and 0.95+ with a
# CPU hog on one core).
CPUS = len(os.sched_getaffinity(0))
RATE = 100 if SANITIZED else (1000 if CPUS >= 2 else 250)
SECONDS = 2.0


def routes(spec):
    return f"""  - name: r
    match:
      path_prefix: /r
    upstream: api
    limits:
      - name: l
        key: global
        {spec}
  - name: rest
    match:
      path_prefix: /
    upstream: api
"""


def flood(port, seconds, clients=4, depth=16):
    """Pipelined GETs of /r from `clients` connections for `seconds`; returns
    (admitted, elapsed) with elapsed from the first request sent to the last answer.
    Per connection a writer keeps requests queued at the gateway, so that one is there
    whenever a token comes (a client that sends, then reads, leaves gaps whenever its
    threads wait for the interpreter: at 1000/s with burst 1 a gap past 1 ms loses a
    token, and a loaded machine made such gaps), and a reader counts the answers by
    their status lines, without parsing each, so that it never holds the writer back."""
    counts, last = [0] * clients, [0.0] * clients
    stop = time.monotonic() + seconds
    req = b"GET /r HTTP/1.1\r\nHost: a\r\n\r\n" * depth
    first = time.monotonic()
    ok_line, denied_line = b"HTTP/1.1 200 ", b"HTTP/1.1 429 "

    def client(i):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sent = [0]
            # At most 4 pipelines unanswered: enough to keep the gateway busy, few enough
            # that the answers come back at once when the sending stops.
            credits = threading.Semaphore(4)

            def write():
                while time.monotonic() < stop:
                    if not credits.acquire(timeout=0.002):
                        continue
                    sent[0] += depth  # before the send: the reader never sees more answers than this
                    s.sendall(req)
            w = Thread(target=write)
            w.start()
            ok = denied = released = 0
            tail = b""
            deadline = time.monotonic() + seconds + 10
            while w.is_alive() or ok + denied < sent[0]:
                assert time.monotonic() < deadline, (ok, denied, sent[0])
                if not select.select([s], [], [], 0.002)[0]:
                    continue
                data = s.recv(1 << 20)
                assert data, "the gateway closed the connection"
                last[i] = time.monotonic()
                buf = tail + data
                # (the tail is shorter than a status line: none is counted twice)
                ok += buf.count(ok_line)
                denied += buf.count(denied_line)
                tail = buf[-(len(ok_line) - 1):]
                while ok + denied - released * depth >= depth:
                    released += 1
                    credits.release()
            w.join(10)
            assert ok + denied == sent[0], (ok, denied, sent[0])
            counts[i] = ok

    threads = [Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    join_all(threads, seconds + 30)
    return sum(counts), max(last) - first


# wrk's connections each keep DEPTH pipelined requests at the gateway.
WRK_PIPELINE = """init = function(args) local r = wrk.format() ; pipelined = r:rep(16) end
request = function() return pipelined end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("FG-SUMMARY %d %d %d %d\\n", summary.duration, summary.requests, e.status,
                         e.connect + e.read + e.write + e.timeout))
end
"""


def wrk_flood(port, seconds, tmp_path, clients=4):
    """GETs of /r from wrk (written in C, so no interpreter's pauses between sends) on
    `clients` keep-alive connections, 16 pipelined on each, for `seconds`; returns
    (admitted, elapsed, outer) as wrk counted and timed them, the time in microseconds
    (its printed summary rounds to 10 ms, 10 tokens at 1000/s), and the time from before
    wrk started to after it ended. Answers still on their way when wrk stops are not
    counted. wrk starts its threads (which connect and send at once) before it reads the
    clock it times the run from: answers of that moment are counted, not timed, so that
    `elapsed` may be short of the admissions' span (by a few ms on a loaded machine),
    while `outer` holds all of it."""
    script = tmp_path / "pipeline.lua"
    script.write_text(WRK_PIPELINE)
    began = time.monotonic()
    out = subprocess.run(["wrk", "-t2", f"-c{clients}", f"-d{round(seconds)}s", "-s", str(script),
                          f"http://127.0.0.1:{port}/r"], capture_output=True, text=True, timeout=seconds + 30)
    outer = time.monotonic() - began
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(r"FG-SUMMARY (\d+) (\d+) (\d+) (\d+)", out.stdout)
    assert m, out.stdout
    duration_us, total, non2xx, socket_errors = (int(g) for g in m.groups())
    assert socket_errors == 0, out.stdout  # every connection kept and every answer read
    return total - non2xx, duration_us / 1e6, outer


@pytest.mark.parametrize("store", ["memory", "redis"])
@pytest.mark.parametrize("algo", ["gcra", "token_bucket"])
def test_rate_limits_admit_what_they_promise_under_a_flood(gateway_factory, redis_server, store, algo, tmp_path):
    # Never above the promise, and not short of it by more than the machine's stalls can
    # explain. The promise is rate x elapsed + burst (each flood starts with the bucket
    # full, as from an empty key). With burst 1, every moment past 1/rate (+ the 2 ms a
    # late turn is credited) in which no worker, or Redis, is on a CPU loses a token for
    # good: on a virtual machine whose host takes the CPU away (66% steal measured on one
    # CI machine) that lost 0.1-0.35 of the promise at 1000/s, and more through Redis
    # (three processes to be scheduled, not one). So the floor is checked with a burst
    # that holds 500 ms of tokens (stalls shorter than that lose nothing), and burst 1 is
    # checked for the ceiling, its ratio recorded: the late-turn credit it exercised is
    # unit-tested in limit_test.cpp (rate-based limits: a turn taken late ...), exactly.
    # (A burst of 100 ms failed once in CI: both floods short by 110-120 tokens, at the
    # test command's start, when the sanitizer build, the fuzz targets and the image's
    # installs all begin beside the first tests: the machine stalled past 200 ms, twice.
    # The floor with 500 ms still catches a limiter short of its rate by 2.5%.)
    burst = RATE // 2
    for b in (1, burst):
        g = gateway_factory(store=store, redis=redis_server.address, workers=2,
                            routes=routes(f"algorithm: {algo}\n        rate: {RATE}/s\n        burst: {b}"))
        floods = []
        for attempt in range(2):
            time.sleep(b / RATE + 0.1)  # (the bucket full again)
            admitted, elapsed, outer = wrk_flood(g.port, SECONDS, tmp_path)
            promised = RATE * elapsed + b
            ratio = admitted / promised
            record(f"{algo} {store} burst {b} flood {attempt + 1}: admitted {admitted} of {promised:.1f} ({ratio:.4f}; "
                   f"at most {RATE * outer + b:.1f} over wrk's whole run)")
            floods.append((admitted, round(promised, 1), round(ratio, 4), round(RATE * outer + b, 1)))
            # The ceiling over the whole run, which holds every admission (wrk's own time
            # may miss its first moment); slack: 3 ms of tokens, for the decisions'
            # millisecond clock and the up to 2 ms a late turn is credited.
            assert admitted <= RATE * outer + b + 2 + RATE * 0.003, floods
            if b == 1 or ratio >= 0.98:
                break
        # (short of 0.98 it is measured once more and the better kept: the machine's stalls
        # only ever lower the count, so the best of two is the nearer to the limiter's own)
        if b > 1:
            assert max(f[2] for f in floods) >= 0.98, floods
        g.stop()


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_sliding_window_from_idle_admits_its_limit_not_more(gateway_factory, redis_server, store):
    limit = 100
    g = gateway_factory(store=store, redis=redis_server.address, workers=2,
                        routes=routes(f"algorithm: sliding_window\n        limit: {limit}\n        window: 1s"))
    # Started at a random phase of the clock's second: with buckets on the clock's
    # seconds, the first (partial) bucket admitted a whole limit and the next one too.
    time.sleep((0.5 - time.time() % 1.0) % 1.0)
    admitted, elapsed = flood(g.port, 3.2, depth=8)
    promised = limit * elapsed  # one limit at once, then a limit per window
    line = f"sliding_window {store}: admitted {admitted} of {promised:.1f} ({admitted / promised:.4f})"
    record(line)
    assert 0.95 * promised <= admitted <= 1.02 * promised, line
