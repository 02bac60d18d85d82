"""Every input bounded, trusted peers included: a configuration file that is huge, endless,
a FIFO or an alias bomb is refused fast with a clear error, at the start and on a reload
(the old configuration serving on); a Cluster node that redirects to an address no map
names is not followed and gets no password; a Redis reply too large to hold is refused."""
import os
import signal
import subprocess
import time

import pytest

from conftest import BIN, SANITIZED, STARTUP_NOW, get, per_client_route, wait_until
from fake_redis import FakeRedis, array, bulk, integer, slots_of
from test_admin import ADMIN_HOST, ADMIN_POST_HEADER, admin_get, admin_request, with_admin
from test_metrics import scrape, value

LIMITED = per_client_route("    on_store_error: allow\n")

# What each refusal must say (floodgate --check prints it; the log says it on a reload).
BAD_FILES = {
    "huge": "a configuration is at most 4194304 bytes",
    "fifo": "is a FIFO, not a regular file",
    "dev_zero": "is a character device, not a regular file",
    "alias_bomb": "expands to more than 1000000 values",
}


def make_bad(kind, path):
    """Puts the bad file `kind` at `path` (replacing what is there)."""
    if path.is_symlink() or path.exists():
        path.unlink()
    if kind == "huge":
        with open(path, "wb") as f:
            line = b"#" * 1023 + b"\n"
            for _ in range(64 * 1024):  # 64 MiB of comments
                f.write(line)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", path)
    elif kind == "alias_bomb":
        text = ("upstreams:\n  api:\n    address: \"127.0.0.1:9\"\n"
                "x-route: &route\n  name: r\n  match: {path: /x}\n  upstream: api\nroutes:\n")
        path.write_text(text + "  - *route\n" * 200_000)  # 1.2 MB
    else:
        raise ValueError(kind)


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_bad_file_is_refused_fast_by_check_and_at_the_start(tmp_path, kind):
    path = tmp_path / "floodgate.yaml"
    make_bad(kind, path)
    for args in (["--check", "--config", str(path)], ["--config", str(path)]):
        started = time.monotonic()
        # (a hang would be the failure: the timeout fires far above what a refusal takes)
        out = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
        text = out.stdout + out.stderr
        assert out.returncode != 0, (args, text[-2000:])
        assert BAD_FILES[kind] in text, (args, text[-2000:])
        assert str(path) in text, text[-2000:]
        print(f"{kind} {args[0]}: refused in {took:.2f}s")


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_bad_file_on_reload_keeps_the_old_config_serving(gateway_factory, kind):
    g = with_admin(lambda extra: gateway_factory(extra=extra))
    assert g.request(get("/x")).status == 200
    make_bad(kind, g.config)
    # SIGHUP, then POST /reload: both refused, the gateway serving and its probes answering
    g.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: g.log_text().count(BAD_FILES[kind]) >= 1, 30), g.log_text()[-3000:]
    started = time.monotonic()
    # The reply comes once the file is read and refused: up to a 4 MiB parse, some seconds
    # on the sanitizer build of a loaded machine (the time is printed, not judged).
    r = admin_get(g, "/reload", method="POST", timeout=60)
    took = time.monotonic() - started
    assert r.status == 422, (r.status, r.body)
    assert BAD_FILES[kind] in r.body.decode(), r.body
    print(f"{kind}: POST /reload refused in {took:.2f}s")
    assert g.request(get("/x")).status == 200
    assert admin_get(g, "/healthz").status == 200
    # and SIGTERM is still heard (the read never held the signal thread)
    assert g.stop(timeout=20) == 0


def cluster_gateway(gateway_factory, node, password="pw-secret-for-the-cluster", startup=""):
    return with_admin(lambda extra: gateway_factory(
        store="redis", redis=node.address, routes=LIMITED, extra=extra,
        redis_extra=f"  mode: cluster\n  password: {password}\n{startup}"))


def test_a_redirect_to_an_address_no_map_names_is_not_followed_nor_sent_the_password(gateway_factory):
    # A one-master "cluster" whose node answers every script call with MOVED to 127.0.0.3,
    # where something listens and records who connects.
    foreign = FakeRedis(lambda args: b"+OK\r\n", host="127.0.0.3")
    node = None

    def answer(args):
        name = args[0].upper()
        if name == "CLUSTER" and args[1].upper() == "SLOTS":
            return slots_of("127.0.0.1", node.port)
        if name == "SCRIPT":
            return bulk("0" * 40)
        if name in ("EVALSHA", "EVAL"):
            return f"-MOVED 866 127.0.0.3:{foreign.port}\r\n".encode()
        return b"+OK\r\n"
    node = FakeRedis(answer)
    try:
        # (its port opens once the map is read and the master connected)
        g = cluster_gateway(gateway_factory, node)
        statuses = [g.request(get("/x", extra="X-Client: a\r\n")).status for _ in range(30)]
        # decided by on_store_error (allow), never by a foreign node
        assert statuses == [200] * 30, statuses
        series, _ = scrape(g)
        refused = value(series, "floodgate_redis_cluster_events_total", event="foreign_redirect")
        moved = value(series, "floodgate_redis_cluster_events_total", event="moved")
        assert refused >= 30, (refused, node.names()[-10:])
        assert moved == 0, moved
        assert foreign.connections == 0, foreign.commands
        assert "is not a node of the cluster's map: not followed" in g.log_text()
        # the password went only to the node of the seed list
        assert ["AUTH", "pw-secret-for-the-cluster"] in node.commands
        node.check()
        foreign.check()
    finally:
        node.stop()
        foreign.stop()


def test_a_reply_too_large_to_hold_is_refused(gateway_factory):
    # CLUSTER SLOTS answered with an array of 2,000,000,000 elements (14 bytes asking for
    # 16 GB of pointers), or a bulk string without end: the connection is dropped, the
    # gateway lives, small.
    huge = {"mode": "array"}

    def endless_bulk():
        yield b"$1000000000\r\n"
        chunk = b"x" * 65536
        for _ in range(1000000000 // 65536):
            yield chunk

    def answer(args):
        name = args[0].upper()
        if name == "CLUSTER":
            if huge["mode"] == "array":
                return b"*2000000000\r\n"
            return endless_bulk()
        if name == "SCRIPT":
            return bulk("0" * 40)
        return b"+OK\r\n"
    node = FakeRedis(answer)
    try:
        # (no map ever comes: the port opens at once)
        g = cluster_gateway(gateway_factory, node, startup=STARTUP_NOW)
        assert wait_until(lambda: node.names().count("CLUSTER") >= 3, 15), node.names()
        assert g.proc.poll() is None
        rss_array = g.peak_rss_kib()
        huge["mode"] = "bulk"
        before = node.names().count("CLUSTER")
        assert wait_until(lambda: node.names().count("CLUSTER") >= before + 2, 30), node.names()
        assert g.proc.poll() is None
        rss = g.peak_rss_kib()
        print(f"peak RSS after the huge array {rss_array} KiB, after the endless bulks {rss} KiB; "
              f"{node.sent_bytes >> 20} MiB sent")
        # the gateway reads at most the cap (16 MiB) of one reply before it hangs up
        assert rss < (600 if SANITIZED else 200) * 1024, rss
        assert g.request(get("/x", extra="X-Client: a\r\n")).status == 200
        assert admin_get(g, "/healthz").status == 200
        node.check()
    finally:
        node.stop()


def lying_sentinel(to_port):
    """A fake sentinel that names 127.0.0.3:<to_port> the master."""
    def answer(args):
        name = args[0].upper()
        if name == "SENTINEL":
            return array(bulk("127.0.0.3"), bulk(str(to_port)))
        if name == "SUBSCRIBE":
            return array(bulk("subscribe"), bulk(args[1]), integer(1))
        if name == "PING":
            return b"+PONG\r\n"
        return b"+OK\r\n"
    return FakeRedis(answer)


@pytest.mark.parametrize("quorum", [None, 2])
def test_a_sentinel_that_disagrees_does_not_choose_the_master(gateway_factory, redis_sentinel, quorum):
    """Three real sentinels and one that names a foreign master: with a quorum of 2 the
    real master is taken; with none set (all that answer must agree) no address is
    taken while they disagree. Either way nothing connects to the foreign address."""
    foreign = FakeRedis(lambda args: b"+OK\r\n", host="127.0.0.3")
    liar = lying_sentinel(foreign.port)
    try:
        addresses = '", "'.join([f"127.0.0.1:{s.port}" for s in redis_sentinel.sentinels] + [liar.address])
        more = f"  sentinel_quorum: {quorum}\n" if quorum else ""
        g = with_admin(lambda extra: gateway_factory(
            store="redis", redis=addresses, routes=LIMITED, extra=extra,
            redis_extra=f"  mode: sentinel\n  master_name: {redis_sentinel.name}\n  password: pw-not-for-strangers\n"
                        f"{more}{STARTUP_NOW}"))
        assert wait_until(lambda: liar.names().count("SENTINEL") >= 3, 15), liar.names()
        _, master = redis_sentinel.master_address()
        if quorum:
            assert wait_until(lambda: f"master 'mymaster' is 127.0.0.1:{master}" in g.log_text(), 15), \
                g.log_text()[-2000:]
        else:
            assert wait_until(lambda: "no agreement on master 'mymaster'" in g.log_text(), 15), g.log_text()[-2000:]
            assert "master 'mymaster' is" not in g.log_text()
        assert foreign.connections == 0, foreign.commands
        liar.check()
    finally:
        liar.stop()
        foreign.stop()
