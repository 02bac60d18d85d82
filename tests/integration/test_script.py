"""The limiter script itself (lua/*.lua, concatenated as the build does), called
directly on a real redis-server: many requests in one call, as the gateway's batcher
sends them. Each key is read once and written once per call, so these check that the
requests of one call are decided exactly as if they had come one call each."""
import re
import socket
import struct
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# In the order the build concatenates them (src/CMakeLists.txt).
# The limiter's parts, in order: the FG_LUA_FILES list of src/CMakeLists.txt.
PARTS = re.findall(r"/lua/(\w+)\.lua",
                   re.search(r"set\(FG_LUA_FILES(.*?)\)", (ROOT / "src" / "CMakeLists.txt").read_text(), re.S)[1])
SCRIPT = "\n".join((ROOT / "lua" / f"{p}.lua").read_text() for p in PARTS)
# The script's algorithm numbers (lua/prelude.lua).
FW, SL, SW, TB, GCRA, CC = 1, 2, 3, 4, 5, 6
# algorithm, a, b, c, cost for a limit of 5 (or burst 5) per minute
SPECS = {
    "fixed_window": (FW, 5, 60000, 0, 1),
    "sliding_log": (SL, 5, 60000, 0, 1),
    "sliding_window": (SW, 5, 60000, 0, 1),
    "token_bucket": (TB, 5, 60000, 5, 1),
    "gcra": (GCRA, 5, 60000, 5, 1),
    "concurrency": (CC, 5, 60000, 0, 1),
}


def eval_script(port, keys, args):
    """EVAL over a plain socket (the reply is binary): returns the bulk string."""
    parts = [p if isinstance(p, bytes) else p.encode() for p in ["EVAL", SCRIPT, str(len(keys)), *keys, *args]]
    cmd = f"*{len(parts)}\r\n".encode() + b"".join(f"${len(p)}\r\n".encode() + p + b"\r\n" for p in parts)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(cmd)
        f = s.makefile("rb")
        head = f.readline()
        assert head.startswith(b"$"), head + f.read1(4096)
        body = f.read(int(head[1:]) + 2)
        return body[:-2]


def ints(*values):
    return struct.pack(f"<{len(values)}q", *values)


def state(redis_server, key, fields):
    """The state the script keeps in a plain key: little-endian doubles."""
    raw = redis_server.raw("GET", key)
    return dict(zip(fields, struct.unpack(f"<{len(fields)}d", raw)))


def call(redis_server, requests, specs, group=True, dry=False):
    """requests: [(nonce, [(key, spec_index), ...]), ...]; specs: [(algorithm, a, b, c, cost, shadow), ...].
    Sends them as the gateway does: specs and shapes once; alike requests (same shape,
    same keys, no nonce needed) as one entry with a count, unless `group` is false;
    `dry`: a dry run (decides, records nothing; the admin's /limits);
    per entry its shape and its count, and for sliding_log or concurrency its nonce.
    Returns per request a list of (allowed, remaining, reset_ms, retry_ms) per limit,
    expanded from the runs the script answers with."""
    shapes, entries, slots = [], [], []
    for nonce, limits in requests:
        shape = [spec for _, spec in limits]
        if shape not in shapes:
            shapes.append(shape)
        named = any(specs[spec - 1][0] in (SL, CC) for spec in shape)
        keys = [key for key, _ in limits]
        match = [e for e in entries if group and not named and e["shape"] == shape and e["keys"] == keys]
        if match:
            slots.append((entries.index(match[0]), match[0]["count"]))
            match[0]["count"] += 1
        else:
            slots.append((len(entries), 0))
            entries.append({"shape": shape, "keys": keys, "count": 1, "nonce": nonce if named else None})
    numbers = [len(entries), len(specs), len(shapes), 1 if dry else 0]
    for s in specs:
        numbers += list(s)
    for shape in shapes:
        numbers += [len(shape)] + shape
    keys, nonces = [], []
    for e in entries:
        keys += e["keys"]
        numbers += [shapes.index(e["shape"]) + 1, e["count"]]
        nonces += [e["nonce"]] if e["nonce"] else []
    out = eval_script(redis_server.port, keys, [ints(*numbers), *nonces])
    assert len(out) % 8 == 0, out
    values = list(struct.unpack(f"<{len(out) // 8}q", out))
    # per entry: runs of (length, then per limit allowed, remaining, reset, retry, d_remaining, d_reset)
    rows, at, call.runs = [], 0, []
    for e in entries:
        k, entry_rows = len(e["keys"]), []
        call.runs.append(0)
        while len(entry_rows) < e["count"]:
            call.runs[-1] += 1
            n = values[at]
            assert 1 <= n <= e["count"] - len(entry_rows), (n, e)
            for j in range(n):
                entry_rows.append([(a, r + j * dr, t + j * dt, w)
                                   for a, r, t, w, dr, dt in (values[at + 1 + 6 * i:at + 7 + 6 * i] for i in range(k))])
            at += 1 + 6 * k
        rows.append(entry_rows)
    assert at == len(values)
    return [rows[entry][ordinal] for entry, ordinal in slots]


@pytest.mark.parametrize("algo", list(SPECS))
def test_one_call_of_many_requests_on_one_key_admits_exactly_the_limit(redis_server, algo):
    key = "fgtest:{r:l:one}"
    res = call(redis_server, [(f"n{i}", [(key, 1)]) for i in range(12)], [(*SPECS[algo], 0)])
    allowed = [r[0][0] for r in res]
    assert allowed == [1] * 5 + [0] * 7
    # remaining counts down exactly, request after request, within the one call
    assert [r[0][1] for r in res[:5]] == [4, 3, 2, 1, 0]
    assert all(r[0][1] == 0 and r[0][3] > 0 for r in res[5:])
    # and the next call sees what the first one recorded
    assert call(redis_server, [("m", [(key, 1)])], [(*SPECS[algo], 0)])[0][0][0] == 0
    if algo in ("sliding_log", "concurrency"):
        assert int(redis_server.cli("zcard", key)) == 5  # unique members, one per admitted request
    assert int(redis_server.cli("pttl", key)) > 0


def test_fixed_window_state_written_once_with_its_window(redis_server):
    key = "fgtest:{r:l:fw}"
    res = call(redis_server, [(f"n{i}", [(key, 1)]) for i in range(4)], [(FW, 7, 5000, 0, 2, 0)])
    assert [r[0][:2] for r in res] == [(1, 5), (1, 3), (1, 1), (0, 1)]
    assert all(0 < r[0][2] <= 5000 for r in res)
    assert state(redis_server, key, "ne")["n"] == 6
    assert 0 < int(redis_server.cli("pttl", key)) <= 5000
    # an existing window keeps its end: the second call's reset is what is left of it
    res = call(redis_server, [("m", [(key, 1)])], [(FW, 7, 5000, 0, 1, 0)])
    assert res[0][0][:2] == (1, 0) and 0 < res[0][0][2] <= 5000


def test_interleaved_keys_in_one_call_are_counted_apart(redis_server):
    keys = [f"fgtest:{{r:l:ip{i}}}" for i in range(3)]
    reqs = [(f"n{i}", [(keys[i % 3], 1)]) for i in range(15)]
    res = call(redis_server, reqs, [(FW, 4, 60000, 0, 1, 0)])
    for i in range(3):
        assert [res[j][0][0] for j in range(i, 15, 3)] == [1, 1, 1, 1, 0]
        assert state(redis_server, keys[i], "ne")["n"] == 4


def test_a_request_denied_by_one_limit_consumes_nothing_of_the_others_in_one_call(redis_server):
    wide, narrow = "fgtest:{r:wide:x}", "fgtest:{r:narrow:x}"
    specs = [(FW, 10, 60000, 0, 1, 0), (SL, 2, 60000, 0, 1, 0)]
    res = call(redis_server, [(f"n{i}", [(wide, 1), (narrow, 2)]) for i in range(5)], specs)
    assert [(r[0][0], r[1][0]) for r in res] == [(1, 1), (1, 1), (1, 0), (1, 0), (1, 0)]
    # only the two admitted requests were recorded, in both limits
    assert state(redis_server, wide, "ne")["n"] == 2
    assert int(redis_server.cli("zcard", narrow)) == 2
    # a shadow limit's denial does not block the others: all are recorded
    shadow = [(FW, 10, 60000, 0, 1, 0), (SL, 2, 60000, 0, 1, 1)]
    res = call(redis_server, [("s1", [(wide, 1), (narrow, 2)])], shadow)
    assert res[0][0][0] == 1 and res[0][1][0] == 0
    assert state(redis_server, wide, "ne")["n"] == 3


def test_requests_of_several_shapes_share_specs_and_keep_their_costs(redis_server):
    key, other = "fgtest:{r:l:tb}", "fgtest:{r:m:x}"
    specs = [(TB, 1, 1000, 5, 3, 0), (TB, 1, 1000, 5, 2, 0), (FW, 9, 60000, 0, 1, 0)]
    res = call(redis_server, [("a", [(key, 1)]), ("b", [(key, 1), (other, 3)]), ("c", [(key, 2)]),
                              ("d", [(other, 3)])], specs)
    assert [[x[:2] for x in r] for r in res] == [[(1, 2)], [(0, 2), (1, 8)], [(1, 0)], [(1, 8)]]
    assert res[1][0][3] >= 1000  # one token a second: the missing one is ~1 s away
    # b was denied by its token bucket, so its fixed window recorded nothing
    assert state(redis_server, other, "ne")["n"] == 1


@pytest.mark.parametrize("algo", list(SPECS))
def test_alike_requests_sent_as_one_entry_are_decided_as_if_sent_one_by_one(redis_server, algo):
    spec = [(*SPECS[algo], 0)]
    mixed = lambda key: [(f"n{i}", [(key if i % 3 else key + "x", 1)]) for i in range(14)]
    grouped = call(redis_server, mixed("fgtest:{r:l:g}"), spec, group=True)
    single = call(redis_server, mixed("fgtest:{r:l:s}"), spec, group=False)
    assert [[x[:2] for x in r] for r in grouped] == [[x[:2] for x in r] for r in single]
    assert sum(r[0][0] for r in grouped) == 10  # 5 on each of the two keys


def test_alike_multi_limit_requests_in_one_entry_consume_nothing_when_denied(redis_server):
    wide, narrow = "fgtest:{r:wide:y}", "fgtest:{r:narrow:y}"
    specs = [(FW, 10, 60000, 0, 1, 0), (GCRA, 1, 60000, 3, 1, 0)]
    res = call(redis_server, [(f"n{i}", [(wide, 1), (narrow, 2)]) for i in range(6)], specs)
    assert [(r[0][0], r[1][0]) for r in res] == [(1, 1)] * 3 + [(1, 0)] * 3
    assert state(redis_server, wide, "ne")["n"] == 3


@pytest.mark.parametrize("algo,spec,runs", [
    ("fixed_window", (FW, 30, 60000, 0, 2, 0), 2),
    ("sliding_window", (SW, 30, 60000, 0, 2, 0), 2),
    ("token_bucket, 12 s per token", (TB, 5, 60000, 30, 2, 0), 2),
    ("gcra, 12 s per token", (GCRA, 5, 60000, 30, 2, 0), 2),
    ("token_bucket, 1/3 s per token", (TB, 3, 1000, 30, 2, 0), 16),
    ("gcra, 1/3 s per token", (GCRA, 3, 1000, 30, 2, 0), 16),
])
def test_a_run_of_alike_requests_is_answered_in_runs_with_the_same_decisions(redis_server, algo, spec, runs):
    key = "fgtest:{r:l:run}"
    res = call(redis_server, [(f"n{i}", [(key, 1)]) for i in range(40)], [spec])
    # 15 fit (30 at cost 2): remaining 28, 26, ... 0, then all denied alike
    assert [r[0][0] for r in res] == [1] * 15 + [0] * 25
    assert [r[0][1] for r in res[:15]] == list(range(28, -1, -2))
    assert all(r[0][1] == 0 and r[0][3] > 0 for r in res[15:])
    # the admitted ones as one run where their resets are evenly spaced, else one each
    assert call.runs == [runs]
    resets = [r[0][2] for r in res[:15]]
    assert resets == sorted(resets)
    if algo.startswith(("token_bucket", "gcra")):
        # each admitted request puts the full bucket a cost's worth of tokens further off
        per = spec[2] * spec[4] / spec[1]
        assert all(abs(b - a - per) <= 1 for a, b in zip(resets, resets[1:]))
    else:
        assert len(set(resets)) == 1
    # what was recorded is what was admitted
    if algo == "fixed_window":
        assert state(redis_server, key, "ne")["n"] == 30
    if algo == "sliding_window":
        assert state(redis_server, key, "bcpo")["c"] == 30  # bucket, counts, origin
    assert call(redis_server, [("m", [(key, 1)])], [spec])[0][0][0] == 0
    assert int(redis_server.cli("pttl", key)) > 0


def redis_ms(redis_server):
    """Redis' clock (TIME), in milliseconds."""
    sec, usec = redis_server.cli("time").split()
    return int(sec) * 1000 + int(usec) // 1000


def key_state(redis_server, key):
    """A key's value (DUMP), absolute expiry and the number of keys."""
    return redis_server.raw("DUMP", key), redis_server.cli("pexpiretime", key), redis_server.cli("dbsize")


@pytest.mark.parametrize("fill", [3, 5], ids=["allowed", "denied"])
@pytest.mark.parametrize("algo", list(SPECS))
def test_a_dry_run_answers_as_the_real_call_and_writes_nothing(redis_server, algo, fill):
    key = "fgtest:{r:l:dry}"
    spec = [(*SPECS[algo], 0)]
    call(redis_server, [(f"n{i}", [(key, 1)]) for i in range(fill)], spec)
    if algo in ("sliding_log", "concurrency"):
        # Expired entries, which a real call removes and a dry run must read past: admitted
        # 61 s ago (sliding_log's window is 60 s), or leases that ended 1 ms ago.
        t = redis_server.cli("time").split()
        now = int(t[0]) * 1000 + int(t[1]) // 1000
        old = now - 61000 if algo == "sliding_log" else now - 1
        redis_server.cli("zadd", key, str(old), "old:1", str(old - 5), "old:2")
    before = key_state(redis_server, key)
    started = redis_ms(redis_server)
    dry = [call(redis_server, [("d", [(key, 1)])], spec, dry=True)[0][0] for _ in range(3)]
    assert key_state(redis_server, key) == before
    # and a key it is asked about that does not exist is not created
    fresh = call(redis_server, [("d", [("fgtest:{r:l:none}", 1)])], spec, dry=True)[0][0]
    assert fresh[:2] == (1, 4) and redis_server.raw("DUMP", "fgtest:{r:l:none}") is None
    real = call(redis_server, [("r", [(key, 1)])], spec)[0][0]
    # (in Redis' clock, the script's: at most this many ms passed between the calls)
    between = redis_ms(redis_server) - started + 1
    for d in dry:
        assert d[:2] == real[:2] == ((1, 5 - fill - 1) if fill < 5 else (0, 0))
        # the same times, but for the milliseconds between the calls
        assert abs(d[2] - real[2]) <= between and abs(d[3] - real[3]) <= between, (d, real, between)
    if algo in ("sliding_log", "concurrency"):
        assert int(redis_server.cli("zcount", key, "-inf", "+inf")) == fill + (1 if fill < 5 else 0)


def test_a_dry_run_of_several_limits_records_nothing_for_any(redis_server):
    wide, narrow = "fgtest:{r:wide:d}", "fgtest:{r:narrow:d}"
    specs = [(FW, 10, 60000, 0, 1, 0), (SL, 2, 60000, 0, 1, 0)]
    call(redis_server, [("n0", [(wide, 1), (narrow, 2)])], specs)
    before = key_state(redis_server, wide), key_state(redis_server, narrow)
    res = call(redis_server, [("d", [(wide, 1), (narrow, 2)])], specs, dry=True)
    assert [x[:2] for x in res[0]] == [(1, 8), (1, 0)]
    assert (key_state(redis_server, wide), key_state(redis_server, narrow)) == before


def test_sliding_window_a_clock_behind_the_bucket_last_written_counts_in_that_bucket(redis_server):
    # Redis' clock is its wall clock: stepped back (NTP, a failover to a node behind),
    # `now` falls in a bucket before the one the key holds. Read as that earlier bucket,
    # the key had no count and began afresh with a whole limit; it counts in its bucket.
    key = "fgtest:{r:l:sw-back}"
    origin = redis_ms(redis_server) - 30000  # now: half way into bucket 0 of 60 s buckets
    # bucket 1 holds the whole limit (5), bucket 0 before it too
    redis_server.cli("eval", "redis.call('SET', KEYS[1], struct.pack('<dddd', tonumber(ARGV[1]), tonumber(ARGV[2]),"
                     " tonumber(ARGV[3]), tonumber(ARGV[4])), 'PX', 180000)", "1", key, "1", "5", "5", str(origin))
    res = call(redis_server, [(f"n{i}", [(key, 1)]) for i in range(3)], [(*SPECS["sliding_window"], 0)])
    assert [r[0][0] for r in res] == [0, 0, 0], res
    assert state(redis_server, key, "bcpo") == {"b": 1, "c": 5, "p": 5, "o": origin}


def redis_now_ms(redis_server):
    s, us = redis_server.cli("time").split()
    return int(s) * 1000 + int(us) // 1000


def test_a_calendar_window_ends_where_the_gateway_says_and_redis_chooses_which(redis_server):
    # spec (FW, limit, b = the next period's end, c = the current one's): a new window
    # ends at c while Redis' clock is before it, at b once it is past.
    key = "fgtest:{r:l:cal}"
    now = redis_now_ms(redis_server)
    current, following = now + 1200, now + 61_200
    spec = (FW, 2, following, current, 1, 0)
    res = call(redis_server, [("n", [(key, 1)])], [spec])
    assert res[0][0][0] == 1 and abs(res[0][0][2] - 1200) <= 100, res
    assert int(redis_server.cli("pexpiretime", key)) == current
    while redis_now_ms(redis_server) <= current + 5:  # (what is tested: Redis' clock passing c)
        time.sleep(0.05)
    res = call(redis_server, [("n", [(key, 1)])], [spec])
    assert res[0][0][0] == 1 and res[0][0][1] == 1
    assert int(redis_server.cli("pexpiretime", key)) == following
    # A gateway whose clock is behind Redis' (c already past): the next period at once.
    late = "fgtest:{r:l:late}"
    call(redis_server, [("n", [(late, 1)])], [(FW, 2, now + 90_000, now - 1000, 1, 0)])
    assert int(redis_server.cli("pexpiretime", late)) == now + 90_000


def charge(redis_server, key, spec):
    """The script's charge mode (flag 3): spec's cost added to the key, no decision."""
    numbers = [1, 1, 1, 3, *spec, 1, 1, 1, 1]
    assert eval_script(redis_server.port, [key], [ints(*numbers)]) == b""


@pytest.mark.parametrize("algo", ["fixed_window", "sliding_window", "token_bucket", "gcra"])
def test_a_charge_adds_its_cost_past_the_limit(redis_server, algo):
    key = f"fgtest:{{r:l:charge-{algo}}}"
    spec = (*SPECS[algo], 0)  # a limit (or burst) of 5 per minute
    assert call(redis_server, [("n", [(key, 1)])], [spec])[0][0][:2] == (1, 4)
    charge(redis_server, key, (*SPECS[algo][:4], 2, 0))
    assert call(redis_server, [("n", [(key, 1)])], [spec])[0][0][:2] == (1, 1)
    charge(redis_server, key, (*SPECS[algo][:4], 4, 0))  # past the limit: 8 of 5 used
    denied = call(redis_server, [("n", [(key, 1)])], [spec])[0][0]
    assert denied[0] == 0 and denied[3] > 0, denied
    assert int(redis_server.cli("pttl", key)) > 0
    # A charge to a key that is gone (its window over, a bucket full again) begins it
    # afresh and charges it: a key with a TTL, 5 - 3 left.
    gone = f"fgtest:{{r:l:gone-{algo}}}"
    charge(redis_server, gone, (*SPECS[algo][:4], 3, 0))
    assert int(redis_server.cli("pttl", gone)) > 0
    assert call(redis_server, [("n", [(gone, 1)])], [spec])[0][0][:2] == (1, 1)
