"""The limiter script itself (lua/*.lua, concatenated as the build does), called
directly on a real redis-server: many requests in one call, as the gateway's batcher
sends them. Each key is read once and written once per call, so these check that the
requests of one call are decided exactly as if they had come one call each."""
import re
import socket
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# In the order the build concatenates them (src/CMakeLists.txt).
PARTS = re.findall(r"/lua/(\w+)\.lua", (ROOT / "src" / "CMakeLists.txt").read_text())
SCRIPT = "\n".join((ROOT / "lua" / f"{p}.lua").read_text() for p in PARTS)
# algorithm code, a, b, c, cost for a limit of 5 (or burst 5) per minute
SPECS = {
    "fixed_window": ("fw", 5, 60000, 0, 1),
    "sliding_log": ("sl", 5, 60000, 0, 1),
    "sliding_window": ("sw", 5, 60000, 0, 1),
    "token_bucket": ("tb", 5, 60000, 5, 1),
    "gcra": ("gcra", 5, 60000, 5, 1),
    "concurrency": ("cc", 5, 60000, 0, 1),
}


def eval_script(port, keys, args):
    """EVAL over a plain socket (the reply is binary): returns the bulk string."""
    parts = ["EVAL", SCRIPT, str(len(keys)), *keys, *args]
    cmd = f"*{len(parts)}\r\n".encode() + b"".join(f"${len(p.encode())}\r\n".encode() + p.encode() + b"\r\n"
                                                     for p in parts)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(cmd)
        f = s.makefile("rb")
        head = f.readline()
        assert head.startswith(b"$"), head + f.read1(4096)
        body = f.read(int(head[1:]) + 2)
        return body[:-2]


def call(redis_server, requests, specs, group=True):
    """requests: [(nonce, [(key, spec_index), ...]), ...]; specs: [(code, a, b, c, cost, shadow), ...].
    Sends them as the gateway does: specs and shapes once; alike requests (same shape,
    same keys, no nonce needed) as one entry with a count, unless `group` is false;
    per entry its shape, its count and, for sliding_log or concurrency, its nonce.
    Returns per request a list of (allowed, remaining, reset_ms, retry_ms) per limit."""
    shapes, entries, slots = [], [], []
    for nonce, limits in requests:
        shape = [spec for _, spec in limits]
        if shape not in shapes:
            shapes.append(shape)
        named = any(specs[spec - 1][0] in ("sl", "cc") for spec in shape)
        keys = [key for key, _ in limits]
        match = [e for e in entries if group and not named and e["shape"] == shape and e["keys"] == keys]
        if match:
            slots.append((entries.index(match[0]), match[0]["count"]))
            match[0]["count"] += 1
        else:
            slots.append((len(entries), 0))
            entries.append({"shape": shape, "keys": keys, "count": 1, "nonce": nonce if named else None})
    args = [str(len(entries)), str(len(specs)), str(len(shapes))]
    for s in specs:
        args += [str(x) for x in s]
    for shape in shapes:
        args += [str(len(shape))] + [str(x) for x in shape]
    keys = []
    for e in entries:
        keys += e["keys"]
        args += [str(shapes.index(e["shape"]) + 1), str(e["count"])] + ([e["nonce"]] if e["nonce"] else [])
    out = eval_script(redis_server.port, keys, args)
    assert len(out) % 32 == 0, out
    values = list(struct.unpack(f"<{len(out) // 8}q", out))
    offsets, at = [], 0
    for e in entries:
        offsets.append(at)
        at += 4 * e["count"] * len(e["keys"])
    assert at == len(values)
    result = []
    for (nonce, limits), (entry, ordinal) in zip(requests, slots):
        base = offsets[entry] + 4 * ordinal * len(limits)
        result.append([tuple(values[base + 4 * i:base + 4 * i + 4]) for i in range(len(limits))])
    return result


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
    res = call(redis_server, [(f"n{i}", [(key, 1)]) for i in range(4)], [("fw", 7, 5000, 0, 2, 0)])
    assert [r[0][:2] for r in res] == [(1, 5), (1, 3), (1, 1), (0, 1)]
    assert all(0 < r[0][2] <= 5000 for r in res)
    assert redis_server.cli("hget", key, "n") == "6"
    assert 0 < int(redis_server.cli("pttl", key)) <= 5000
    # an existing window keeps its end: the second call's reset is what is left of it
    res = call(redis_server, [("m", [(key, 1)])], [("fw", 7, 5000, 0, 1, 0)])
    assert res[0][0][:2] == (1, 0) and 0 < res[0][0][2] <= 5000


def test_interleaved_keys_in_one_call_are_counted_apart(redis_server):
    keys = [f"fgtest:{{r:l:ip{i}}}" for i in range(3)]
    reqs = [(f"n{i}", [(keys[i % 3], 1)]) for i in range(15)]
    res = call(redis_server, reqs, [("fw", 4, 60000, 0, 1, 0)])
    for i in range(3):
        assert [res[j][0][0] for j in range(i, 15, 3)] == [1, 1, 1, 1, 0]
        assert redis_server.cli("hget", keys[i], "n") == "4"


def test_a_request_denied_by_one_limit_consumes_nothing_of_the_others_in_one_call(redis_server):
    wide, narrow = "fgtest:{r:wide:x}", "fgtest:{r:narrow:x}"
    specs = [("fw", 10, 60000, 0, 1, 0), ("sl", 2, 60000, 0, 1, 0)]
    res = call(redis_server, [(f"n{i}", [(wide, 1), (narrow, 2)]) for i in range(5)], specs)
    assert [(r[0][0], r[1][0]) for r in res] == [(1, 1), (1, 1), (1, 0), (1, 0), (1, 0)]
    # only the two admitted requests were recorded, in both limits
    assert redis_server.cli("hget", wide, "n") == "2"
    assert int(redis_server.cli("zcard", narrow)) == 2
    # a shadow limit's denial does not block the others: all are recorded
    shadow = [("fw", 10, 60000, 0, 1, 0), ("sl", 2, 60000, 0, 1, 1)]
    res = call(redis_server, [("s1", [(wide, 1), (narrow, 2)])], shadow)
    assert res[0][0][0] == 1 and res[0][1][0] == 0
    assert redis_server.cli("hget", wide, "n") == "3"


def test_requests_of_several_shapes_share_specs_and_keep_their_costs(redis_server):
    key, other = "fgtest:{r:l:tb}", "fgtest:{r:m:x}"
    specs = [("tb", 1, 1000, 5, 3, 0), ("tb", 1, 1000, 5, 2, 0), ("fw", 9, 60000, 0, 1, 0)]
    res = call(redis_server, [("a", [(key, 1)]), ("b", [(key, 1), (other, 3)]), ("c", [(key, 2)]),
                              ("d", [(other, 3)])], specs)
    assert [[x[:2] for x in r] for r in res] == [[(1, 2)], [(0, 2), (1, 8)], [(1, 0)], [(1, 8)]]
    assert res[1][0][3] >= 1000  # one token a second: the missing one is ~1 s away
    # b was denied by its token bucket, so its fixed window recorded nothing
    assert redis_server.cli("hget", other, "n") == "1"


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
    specs = [("fw", 10, 60000, 0, 1, 0), ("gcra", 1, 60000, 3, 1, 0)]
    res = call(redis_server, [(f"n{i}", [(wide, 1), (narrow, 2)]) for i in range(6)], specs)
    assert [(r[0][0], r[1][0]) for r in res] == [(1, 1)] * 3 + [(1, 0)] * 3
    assert redis_server.cli("hget", wide, "n") == "3"
