"""Redis Cluster and Sentinel groundwork (issue 14): the fixtures bring up real
deployments, and floodgate's slot hashing and CLUSTER SLOTS parser agree with a real
cluster (through tests/tools/cluster_probe.cpp)."""
import os
import random
import socket
import string
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN

PROBE = os.environ.get("FLOODGATE_CLUSTER_PROBE",
                       str(Path(BIN).resolve().parent.parent / "tests" / "floodgate-cluster-probe"))


def probe(*args, stdin=""):
    out = subprocess.run([PROBE, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def probe_map(port):
    """The cluster's map as floodgate's parser reads CLUSTER SLOTS of the node at `port`:
    ([(first, last, master, [replicas])], {master address: id}, covered)."""
    ranges, masters, covered = [], {}, None
    for line in probe("map", "127.0.0.1", port):
        kind, *rest = line.split()
        if kind == "range":
            ranges.append((int(rest[0]), int(rest[1]), rest[2], rest[3:]))
        elif kind == "master":
            masters[rest[0]] = rest[1]
        else:
            covered = int(rest[0])
    return ranges, masters, covered


def pipelined(port, commands):
    """The replies (bytes, integers as bytes) to RESP commands sent at once over one socket."""
    out = b""
    for args in commands:
        parts = [a.encode() for a in args]
        out += f"*{len(parts)}\r\n".encode() + b"".join(f"${len(a)}\r\n".encode() + a + b"\r\n" for a in parts)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(out)
        f = sock.makefile("rb")
        replies = []
        for _ in commands:
            line = f.readline()
            assert line[:1] in b":+", line  # integers and statuses only here
            replies.append(line[1:-2])
        return replies


def random_keys(n, seed=14):
    rnd = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + ":.-_{}/ "
    keys = ["", "{", "}", "{}", "{{}}", "a{}b", "{a}{b}", "}{", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}",
            "{user1000}.following", "{user1000}.followers"]
    while len(keys) < n:
        shape = rnd.randrange(4)
        body = "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 40)))
        if shape == 0:
            keys.append(body)
        elif shape == 1:
            ip = ".".join(str(rnd.randrange(256)) for _ in range(4))
            keys.append(f"floodgate:{{route{rnd.randrange(50)}:limit{rnd.randrange(5)}:{ip}}}")
        elif shape == 2:
            ip6 = ":".join(f"{rnd.randrange(65536):x}" for _ in range(8))
            keys.append(f"floodgate:{{api:per-ip:{ip6}}}:{body}")
        else:
            keys.append(f"{body[:5]}{{{body[5:]}}}{body[:3]}")
    return keys


def test_cluster_three_masters_each_with_a_replica(shared_cluster):
    redis_cluster = shared_cluster
    masters = redis_cluster.masters()
    assert len(masters) == 3
    assert sum(m.slot_count for m in masters) == 16384
    for m in masters:
        replicas = redis_cluster.replicas_of(m.port)
        assert len(replicas) == 1, (m, replicas)
        assert replicas[0].port != m.port
        assert "role:slave" in redis_cluster.cli(replicas[0].port, "info", "replication")
    info = redis_cluster.cli(masters[0].port, "cluster", "info")
    assert "cluster_state:ok" in info and "cluster_size:3" in info and "cluster_known_nodes:6" in info


def test_key_slot_equals_cluster_keyslot(shared_cluster):
    redis_cluster = shared_cluster
    keys = random_keys(2000)
    assert not any("\n" in k for k in keys)
    ours = [int(s) for s in probe("slots", stdin="".join(k + "\n" for k in keys))]
    assert len(ours) == len(keys)
    theirs = [int(s) for s in pipelined(redis_cluster.masters()[0].port, [["CLUSTER", "KEYSLOT", k] for k in keys])]
    wrong = [(k, a, b) for k, a, b in zip(keys, ours, theirs) if a != b]
    assert not wrong, wrong[:10]
    # The sample reaches the whole slot space, and floodgate's keys hash on their tag only.
    assert len(set(theirs)) > 1500
    assert ours[keys.index("{user1000}.following")] == ours[keys.index("{user1000}.followers")]


def test_cluster_slots_parsed_covers_every_slot_with_the_three_masters(shared_cluster):
    redis_cluster = shared_cluster
    masters = {f"127.0.0.1:{m.port}": m for m in redis_cluster.masters()}
    for node in redis_cluster.live():
        ranges, parsed_masters, covered = probe_map(node.port)
        assert covered == 16384
        assert set(parsed_masters) == set(masters)
        assert all(parsed_masters[a] == m.id for a, m in masters.items())
        # Ranges in order, no gap, no overlap, each with its master's one replica.
        assert ranges[0][0] == 0 and ranges[-1][1] == 16383
        assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))
        for first, last, master, replicas in ranges:
            want = [f"127.0.0.1:{r.port}" for r in redis_cluster.replicas_of(masters[master].port)]
            assert replicas == want
            assert (first, last) in masters[master].slots


def test_a_moved_redirection_from_a_real_node_is_parsed(shared_cluster):
    redis_cluster = shared_cluster
    masters = redis_cluster.masters()
    key = "floodgate:{r:l:10.1.2.3}"
    slot = int(redis_cluster.cli(masters[0].port, "cluster", "keyslot", key))
    owner = next(m for m in masters if any(a <= slot <= b for a, b in m.slots))
    other = next(m for m in masters if m is not owner)
    error = redis_cluster.cli(other.port, "get", key)
    assert error.startswith("MOVED"), error
    assert probe("redirect", "127.0.0.1", other.port, stdin=error + "\n") == [f"moved {slot} 127.0.0.1:{owner.port}"]


def test_an_ask_redirection_from_a_real_node_is_parsed(redis_cluster):
    key = "floodgate:{r:l:10.9.8.7}"
    masters = redis_cluster.masters()
    slot = int(redis_cluster.cli(masters[0].port, "cluster", "keyslot", key))
    # The owner as the nodes themselves say (a MOVED names it), not a view that may lag.
    answer = redis_cluster.cli(masters[0].port, "get", key)
    owner_port = int(answer.rsplit(":", 1)[1]) if answer.startswith("MOVED") else masters[0].port
    owner = next(m for m in masters if m.port == owner_port)
    target = next(m for m in masters if m is not owner)
    # A migration of the slot begun by hand, as redis-cli --cluster reshard begins it.
    assert redis_cluster.cli(target.port, "cluster", "setslot", slot, "importing", owner.id) == "OK"
    assert redis_cluster.cli(owner.port, "cluster", "setslot", slot, "migrating", target.id) == "OK"
    error = redis_cluster.cli(owner.port, "get", key)  # not on the owner any more: ask the target
    assert error.startswith("ASK"), error
    assert probe("redirect", "127.0.0.1", owner.port, stdin=error + "\n") == [f"ask {slot} 127.0.0.1:{target.port}"]
    for m in (owner, target):
        assert redis_cluster.cli(m.port, "cluster", "setslot", slot, "stable") == "OK"


def test_reshard_moves_slots_and_the_parsed_map_follows(redis_cluster):
    a, b, _ = redis_cluster.masters()
    before = a.slot_count
    redis_cluster.reshard(a.port, b.port, 100)
    now = {m.port: m for m in redis_cluster.masters()}
    assert now[a.port].slot_count == before - 100
    ranges, _, covered = probe_map(a.port)
    assert covered == 16384
    assert sum(last - first + 1 for first, last, m, _ in ranges if m == f"127.0.0.1:{b.port}") == \
        now[b.port].slot_count


def test_kill_master_promotes_its_replica(redis_cluster):
    killed, promoted = redis_cluster.kill_master()
    assert promoted is not None and promoted != killed
    masters = redis_cluster.masters()
    assert {m.port for m in masters} >= {promoted}
    assert killed not in {m.port for m in masters}
    _, parsed_masters, covered = probe_map(promoted)
    assert covered == 16384
    assert f"127.0.0.1:{promoted}" in parsed_masters and f"127.0.0.1:{killed}" not in parsed_masters


def test_sentinel_names_the_master_and_follows_a_failover(redis_sentinel):
    master, replica = redis_sentinel.servers
    assert redis_sentinel.master_address() == ("127.0.0.1", master.port)
    started = time.monotonic()
    redis_sentinel.failover()
    redis_sentinel.wait_master(replica.port, deadline_s=10)
    assert time.monotonic() - started < 10
    assert redis_sentinel.master_address() == ("127.0.0.1", replica.port)
    # The old master is told to follow the new one, but only when a sentinel next reads
    # its INFO (every 10 s): until then it is a second master, accepting writes.
    role = _wait_role(master, "slave", deadline_s=30)
    assert role[1:3] == ["127.0.0.1", str(replica.port)]


def test_sentinel_promotes_the_replica_when_the_master_dies(redis_sentinel):
    _, replica = redis_sentinel.servers
    killed = redis_sentinel.kill_master()
    assert killed != replica.port
    redis_sentinel.wait_master(replica.port, deadline_s=15)


def _wait_role(server, role, deadline_s=10):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        lines = server.cli("role").splitlines()
        if lines[:1] == [role]:
            return lines
        time.sleep(0.05)
    pytest.fail(f"{server.port} never became {role}: {lines}")
