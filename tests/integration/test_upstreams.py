"""An upstream of several servers (upstreams.<name>.servers): smooth weighted round robin
spreads requests by weight; least_conn sends to the server with the fewest requests in
flight over all workers; a rendezvous hash keeps each key on its server and moves only
an added server's share (or a removed server's keys) on a reload; passive health ejects
a server that fails eject.failures times in a row (growing backoff, max_share) and takes
it back once it answers; retries send a request another server's way after a connect
failure (any request) or a connection closed before any response byte (idempotent
requests without a body only); bad upstream sections are refused by --check with their
file:line. Last, GET /upstreams and the per-server metrics, the view of each server
and its health.

Which server got a request is read from the origins themselves (each is its own
upstream.py process with its own /__stats counters), never from timing."""
import json
import math
import re
import socket
import subprocess
import sys

import pytest

from conftest import BIN, HERE, Upstream, get, read_response, record, run_threads, wait_for, wait_until
from test_admin import admin_get, with_admin
from test_metrics import scrape, value
from test_reload import post_reload


# --- helpers -------------------------------------------------------------------------

class Origin(Upstream):
    """An origin process (upstream.py), on `port` when given: a restarted server comes
    back where the gateway expects it. Its /__stats are read over one kept-alive control
    connection (hundreds of reads a test)."""

    def __init__(self, port=None, host="127.0.0.1"):
        args = [sys.executable, str(HERE / "upstream.py"), str(port or 0), host]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        assert line and line[0] == "PORT", (port, line)
        self.port, self.control = int(line[1]), int(line[2])
        self.address = f"{host}:{self.port}"
        self._ctl = None

    def stats(self):
        for attempt in (0, 1):
            try:
                if self._ctl is None:
                    self._ctl = socket.create_connection(("127.0.0.1", self.control), timeout=5)
                self._ctl.sendall(b"GET /__stats HTTP/1.1\r\nHost: c\r\n\r\n")
                return json.loads(read_response(self._ctl).body)
            except (OSError, EOFError):
                self._close_ctl()
                if attempt:
                    raise

    def requests(self):
        """Requests it has received whole (counted before it answers)."""
        return self.stats()["requests"]

    def set_health(self, code):
        """What its /__check answers from now on."""
        self._ctl_get(f"/__health?code={code}")

    def health_checks(self):
        return self.stats()["health_checks"]

    def _ctl_get(self, path):
        if self._ctl is None:
            self._ctl = socket.create_connection(("127.0.0.1", self.control), timeout=5)
        self._ctl.sendall(f"GET {path} HTTP/1.1\r\nHost: c\r\n\r\n".encode())
        assert read_response(self._ctl).status == 200

    def _close_ctl(self):
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None

    def stop(self):
        self._close_ctl()
        super().stop()


@pytest.fixture
def origins():
    """origins(n) starts n origin processes (origins.start(port) one more); all are
    stopped at the end of the test."""
    made = []

    class Factory:
        def __call__(self, n):
            out = [Origin() for _ in range(n)]
            made.extend(out)
            return out

        def start(self, port=None, host="127.0.0.1"):
            o = Origin(port, host)
            made.append(o)
            return o

    yield Factory()
    for o in made:
        o.stop()


@pytest.fixture
def dead_address():
    """An address that refuses connections: a port bound but never listening (held for
    the test, so no one else takes it meanwhile)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    yield f"127.0.0.1:{s.getsockname()[1]}"
    s.close()


def upstream_section(servers, name="api", **opts):
    """An upstreams section: upstream `name` with `servers` (an address, or (address,
    weight)) and `opts` (key: YAML text), connect and response timeouts included."""
    lines = [f"  {name}:", "    servers:"]
    for s in servers:
        if isinstance(s, tuple):
            lines.append(f'      - {{ address: "{s[0]}", weight: {s[1]} }}')
        else:
            lines.append(f'      - "{s}"')
    opts = {"connect_timeout": "2s", "response_timeout": "10s", **opts}
    lines += [f"    {k}: {v}" for k, v in opts.items()]
    return "\n".join(lines) + "\n"


def start(gateway_factory, upstreams, admin=False, admin_more="", **kw):
    if admin:
        return with_admin(lambda extra: gateway_factory(upstreams=upstreams, extra=extra, **kw), more=admin_more)
    return gateway_factory(upstreams=upstreams, **kw)


def reload_with(g, old_section, new_section):
    """Rewrites the gateway's upstreams section and reloads (POST /reload answers once
    every worker has the new file)."""
    text = g.config.read_text()
    assert old_section in text
    g.config.write_text(text.replace(old_section, new_section))
    r = post_reload(g)
    assert r.status == 200 and r.json()["status"] == "reloaded", (r.status, r.body, g.log_text()[-2000:])


def counts(servers):
    return [o.requests() for o in servers]


def one_get(g, path="/echo", extra=""):
    """A GET on a connection of its own (so the gateway's workers share them)."""
    return g.request(get(path, extra=extra))


def served_by(g, servers, extra="", sock=None, path="/echo"):
    """Sends one GET (on `sock`, else a connection of its own) and returns the index of
    the origin that received it (exactly one must have)."""
    before = counts(servers)
    if sock is None:
        r = one_get(g, path, extra)
    else:
        sock.sendall(get(path, extra=extra))
        r = read_response(sock)
    assert r.status == 200, (r.status, r.body)
    after = counts(servers)
    moved = [i for i in range(len(servers)) if after[i] != before[i]]
    assert len(moved) == 1 and after[moved[0]] - before[moved[0]] == 1, (before, after)
    return moved[0]


def owners(g, servers, keys):
    """{key: the port of the origin a request with X-User: key reached}."""
    out = {}
    with g.connect() as s:
        for k in keys:
            out[k] = servers[served_by(g, servers, f"X-User: {k}\r\n", sock=s)].port
    return out


class HeldUpload:
    """A POST whose body the client holds back: the gateway has chosen a server and sent
    it the head and the first bytes, and the request stays in flight on that server until
    release(). Which server has it: the one whose origin received bytes."""

    LENGTH = 100

    def __init__(self, g, servers):
        before = [o.stats()["bytes"] for o in servers]
        self.sock = g.connect(timeout=30)
        self.sock.sendall(f"POST /echo HTTP/1.1\r\nHost: example.com\r\nContent-Length: {self.LENGTH}\r\n\r\n"
                          .encode() + b"a" * 10)

        def reached():
            moved = [i for i, o in enumerate(servers) if o.stats()["bytes"] != before[i]]
            return moved if moved else None
        moved = wait_for("a held upload reaching an origin", reached, 15)
        assert len(moved) == 1, moved
        self.server = moved[0]

    def release(self):
        self.sock.sendall(b"a" * (self.LENGTH - 10))
        r = read_response(self.sock)
        self.sock.close()
        return r


def log_count(g, text):
    return g.log_text().count(text)


ONE = {"connect failures": "connect failure", "failing statuses": "failing status", "timeouts": "timeout"}


def ejected_line(address, ms, n, why="connect failures"):
    what = ONE.get(why, why) if n == 1 else why
    return f"upstream api: server {address} ejected for {ms} ms after {n} {what} in a row"


def back_line(address):
    return f"upstream api: server {address} back in service"


def connect_failed(address):
    return f"upstream api ({address}): connect failed"


# --- round robin ---------------------------------------------------------------------

def test_weighted_round_robin_spreads_by_weight_over_two_workers(gateway_factory, origins):
    servers = origins(3)
    weights = (1, 2, 3)
    g = start(gateway_factory, upstream_section([(o.address, w) for o, w in zip(servers, weights)]), workers=2)
    threads, per_thread = 4, 150  # 600: a multiple of 6 (the weights' total) x 2 workers

    def client():
        for _ in range(per_thread):
            r = one_get(g)
            assert r.status == 200, (r.status, r.body)

    run_threads(client, [()] * threads, 120)
    got = counts(servers)
    n = threads * per_thread
    want = [n * w // sum(weights) for w in weights]
    record(f"weighted round robin 1:2:3 over 2 workers, {n} requests: {got} (exact: {want})")
    assert sum(got) == n, got
    # Each worker's smooth WRR is within half a request of its exact share at every point
    # (weights 1:2:3), so the two workers together are within one of n x w / 6.
    for i, w in enumerate(weights):
        assert abs(got[i] - want[i]) <= 1, (weights, got, want)


def test_a_bare_address_in_servers_weighs_one(gateway_factory, origins):
    # servers: a mix of "host:port" strings and {address, weight}; one worker, one
    # connection: the exact smooth sequence of weights 1:1:2 repeats every 4 requests.
    servers = origins(3)
    g = start(gateway_factory, upstream_section([servers[0].address, servers[1].address, (servers[2].address, 2)]))
    with g.connect() as s:
        seq = [served_by(g, servers, sock=s) for _ in range(8)]
    assert [seq.count(i) for i in range(3)] == [2, 2, 4], seq
    assert seq[:4] == seq[4:], seq


# --- least_conn ----------------------------------------------------------------------

def test_least_conn_sends_to_the_server_with_fewer_requests_in_flight(gateway_factory, origins):
    servers = origins(2)
    # (the held uploads' bodies wait on the client: idle_timeout, not the default 5 s)
    g = start(gateway_factory, upstream_section([o.address for o in servers], balance="least_conn"), workers=2,
              http={"idle_timeout": "60s"})
    held = []
    try:
        # Held one at a time, each on a connection of its own (either worker): each goes
        # to a server with the fewest in flight over the whole process, so the two never
        # differ by more than one.
        for _ in range(3):
            held.append(HeldUpload(g, servers))
            on = [sum(1 for h in held if h.server == i) for i in range(2)]
            assert max(on) - min(on) <= 1, on
        on = [sum(1 for h in held if h.server == i) for i in range(2)]
        lighter = on.index(1)
        # 2 in flight on one, 1 on the other: every request meanwhile goes to the
        # lighter. (On one connection: each request ends, and lets go of its server,
        # before the next one is read.)
        before = counts(servers)
        with g.connect() as s:
            for _ in range(10):
                s.sendall(get("/echo"))
                assert read_response(s).status == 200
        after = counts(servers)
        assert after[lighter] - before[lighter] == 10 and after[1 - lighter] == before[1 - lighter], (before, after)
        # The next held one evens them out.
        held.append(HeldUpload(g, servers))
        assert held[-1].server == lighter
    finally:
        responses = [h.release() for h in held]
    for r in responses:
        assert r.status == 200 and r.json()["body_length"] == HeldUpload.LENGTH, (r.status, r.body)


# --- hash ----------------------------------------------------------------------------

KEYS = [f"user-{i}" for i in range(300)]


def test_hash_keeps_each_key_on_its_server_and_moves_few_on_a_change(gateway_factory, origins):
    a, b, c, d = origins(4)
    opts = {"balance": "hash", "hash_key": "header:X-User"}
    three = upstream_section([a.address, b.address, c.address], **opts)
    g = start(gateway_factory, three, admin=True, workers=2)
    servers = [a, b, c]
    first = owners(g, servers, KEYS)
    per = {o.port: sum(1 for p in first.values() if p == o.port) for o in servers}
    record(f"hash over 3 servers, {len(KEYS)} keys: {sorted(per.values())}")
    # ~100 each (4 standard deviations: 33)
    assert all(p >= 100 - 33 for p in per.values()), per
    # The same key, again and again, on new connections (either worker): the same server.
    for k in KEYS[:20]:
        for _ in range(3):
            assert servers[served_by(g, servers, f"X-User: {k}\r\n")].port == first[k], k
    # Without the key: round robin (a worker's smooth sequence: three requests in a row
    # on one connection reach the three servers).
    with g.connect() as s:
        assert sorted(served_by(g, servers, sock=s) for _ in range(3)) == [0, 1, 2]

    # A fourth server, first in a reordered list: the keys that move all move to it,
    # about a quarter of them.
    four = upstream_section([d.address, c.address, a.address, b.address], **opts)
    reload_with(g, three, four)
    servers = [a, b, c, d]
    second = owners(g, servers, KEYS)
    moved = [k for k in KEYS if second[k] != first[k]]
    record(f"hash: a fourth server took {len(moved)} of {len(KEYS)} keys (expected ~{len(KEYS) // 4})")
    assert all(second[k] == d.port for k in moved), [(k, first[k], second[k]) for k in moved if second[k] != d.port]
    sigma = math.sqrt(len(KEYS) * 0.25 * 0.75)
    assert len(KEYS) * 0.25 - 4 * sigma <= len(moved) <= len(KEYS) * 0.25 + 4 * sigma, len(moved)
    cfg = admin_get(g, "/config").json()["upstreams"]["api"]
    assert cfg["balance"] == "hash" and cfg["hash_key"] == "header:X-User", cfg
    assert [s["address"] for s in cfg["servers"]] == [d.address, c.address, a.address, b.address], cfg

    # One removed: only its keys move.
    without_a = upstream_section([d.address, c.address, b.address], **opts)
    reload_with(g, four, without_a)
    servers = [b, c, d]
    third = owners(g, servers, KEYS)
    for k in KEYS:
        if second[k] == a.port:
            assert third[k] != a.port
        else:
            assert third[k] == second[k], (k, second[k], third[k])


def test_hash_weights_and_a_query_key(gateway_factory, origins):
    # hash_key: query:<name>; a server of weight 3 beside one of weight 1 gets ~3/4 of the keys.
    light, heavy = origins(2)
    g = start(gateway_factory, upstream_section([(light.address, 1), (heavy.address, 3)], balance="hash",
                                                hash_key="query:user"))
    servers = [light, heavy]
    got = [0, 0]
    seen = {}
    with g.connect() as s:
        for k in KEYS:
            i = served_by(g, servers, sock=s, path=f"/echo?user={k}")
            got[i] += 1
            seen[k] = i
        for k in KEYS[:10]:
            assert served_by(g, servers, sock=s, path=f"/echo?x=1&user={k}") == seen[k]
    record(f"hash weights 1:3, {len(KEYS)} keys: {got}")
    sigma = math.sqrt(len(KEYS) * 0.25 * 0.75)
    assert abs(got[1] - len(KEYS) * 0.75) <= 4 * sigma, got


# --- passive health and retries ------------------------------------------------------

def test_a_killed_server_is_ejected_and_taken_back_once_it_answers(gateway_factory, origins):
    up, down = origins(2)
    addr = down.address
    section = upstream_section([up.address, down.address], eject="{ failures: 2, base_time: 1s, max_time: 2s }")
    g = start(gateway_factory, section, workers=2)
    statuses = []

    def send(n=1):
        for _ in range(n):
            statuses.append(one_get(g).status)
        return True

    send(6)
    assert down.requests() > 0
    down.stop()
    # Every GET meanwhile is answered: a connect failure is tried again on the other server.
    wait_for("the ejection", lambda: send() and ejected_line(addr, 1000, 2) in g.log_text(), 30)
    assert connect_failed(addr) in g.log_text()
    # Back after 1 s, it fails once and is out again, for twice as long (capped at 2 s).
    wait_for("a second and third ejection", lambda: send() and log_count(g, ejected_line(addr, 2000, 1)) >= 2, 60)
    assert "ejected for 4000 ms" not in g.log_text()
    assert set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}

    # Restarted where it was: chosen again once its ejection ends, and back in service.
    again = origins.start(down.port)
    wait_for("requests reaching the restarted server", lambda: send() and again.requests() > 0, 30)
    assert wait_until(lambda: back_line(addr) in g.log_text(), 10), g.log_text()[-3000:]
    # A success reset its backoff: killed again, it takes eject.failures failures and the
    # base time again.
    again.stop()
    wait_for("the ejection after a success", lambda: send() and log_count(g, ejected_line(addr, 1000, 2)) == 2, 30)
    assert set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}
    record(f"killed server: {len(statuses)} GETs, all 200")


@pytest.mark.parametrize("opts,want_502", [
    ({"retries": 0}, 5),
    ({"retries": 1}, 0),
    # no room in the retry budget: as if retries were 0
    ({"retries": 1, "retry_budget": "{ share: 0, min: 0 }"}, 5),
], ids=["retries_0", "retries_1", "no_budget"])
def test_a_connect_failure_goes_to_another_server_unless_retries_is_0(gateway_factory, origins, dead_address,
                                                                     opts, want_502):
    (live,) = origins(1)
    # never ejected (eject.failures 0), one worker: the dead server is every other pick
    g = start(gateway_factory, upstream_section([live.address, dead_address], eject="{ failures: 0 }", **opts))
    statuses = [one_get(g).status for _ in range(10)]
    assert statuses.count(502) == want_502, statuses
    assert statuses.count(200) == 10 - want_502, statuses
    if want_502:
        assert statuses[::2] in ([200] * 5, [502] * 5), statuses  # alternating
    assert live.requests() == 10 - want_502
    assert wait_until(lambda: log_count(g, connect_failed(dead_address)) == 5, 10), g.log_text()[-3000:]
    assert "ejected" not in g.log_text()
    # A retry the budget refused is said (no more than a line every 5 s).
    assert ("refused by retry_budget" in g.log_text()) == ("retry_budget" in opts), g.log_text()[-3000:]


def test_a_response_timeout_is_not_tried_on_another_server(gateway_factory, origins):
    servers = origins(2)
    # (the origin sleeps 10 s: far past the 1 s timeout on any machine)
    g = start(gateway_factory, upstream_section([o.address for o in servers], response_timeout="1s",
                                                eject="{ failures: 0 }"), workers=2)
    before = counts(servers)
    r = g.request(get("/slow?ms=10000"), timeout=30)
    after = counts(servers)
    assert r.status == 504, (r.status, r.body)
    assert sorted(after[i] - before[i] for i in range(2)) == [0, 1], (before, after)
    assert wait_until(lambda: "no response in time" in g.log_text(), 10), g.log_text()[-3000:]


def test_a_timeout_on_a_pooled_connection_counts_against_its_server(gateway_factory, origins):
    """A pooled connection the server closed is no fault of the server's; a server that
    does not answer in time is at fault on any connection: a hung server behind a warm
    pool is ejected, not only once its pool has drained."""
    servers = origins(2)
    g = start(gateway_factory, upstream_section([o.address for o in servers], response_timeout="300ms",
                                                eject="{ failures: 1, base_time: 30s, max_time: 30s }"), workers=1)
    # One request each (round robin): both connections go back to the pool.
    assert [one_get(g).status for _ in range(2)] == [200, 200]
    assert [o.stats()["connections"] for o in servers] == [1, 1]
    # The next goes to the first server, on its pooled connection (the origin sleeps
    # 10 s: far past the 300 ms timeout on any machine).
    assert g.request(get("/slow?ms=10000"), timeout=30).status == 504
    assert [o.stats()["connections"] for o in servers] == [1, 1]
    assert wait_until(lambda: ejected_line(servers[0].address, 30000, 1, "timeouts") in g.log_text(), 10), \
        g.log_text()[-3000:]


def test_an_answer_before_the_whole_body_is_relayed_not_a_502(gateway_factory, origins):
    """A server that answers early (a 413) and closes while the body streams: its answer
    reaches the client (then the connection closes), and it is not a failure of the
    server's."""
    servers = origins(2)
    g = start(gateway_factory, upstream_section([o.address for o in servers], eject="{ failures: 1 }"), workers=1)
    body = b"x" * 8_000_000
    for _ in range(2):  # (one per server)
        with g.connect() as s:
            s.sendall(f"POST /early-413 HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode())
            try:
                s.sendall(body)
            except OSError:
                pass  # (the gateway may close before it has read it all)
            r = read_response(s)
            assert r.status == 413 and r.body == b"too large, said early", (r.status, r.body)
            assert r.header("connection") == "close"
    assert "ejected" not in g.log_text()
    assert all(o.requests() == 0 for o in servers)  # (neither read a whole request)


@pytest.fixture
def silent_address():
    """An address that takes connections and requests and never answers: a listening
    socket nobody accepts on (the kernel completes the handshake and buffers the
    request)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    yield f"127.0.0.1:{s.getsockname()[1]}"
    s.close()


def test_a_try_past_try_timeout_goes_to_another_server(gateway_factory, origins, silent_address):
    (live,) = origins(1)
    # try_timeout 300 ms against a response_timeout of 60 s: an answer within 30 s can
    # only come from the try's own timeout on any machine.
    g = start(gateway_factory, upstream_section([silent_address, live.address], try_timeout="300ms",
                                                response_timeout="60s", eject="{ failures: 0 }"))
    for _ in range(4):
        r = g.request(get("/echo"), timeout=30)
        assert r.status == 200, (r.status, r.body)
    assert live.requests() == 4
    # Round robin gave the silent server two of the four: each timed out and went on.
    assert wait_until(lambda: log_count(g, "no response in time") == 2, 10), g.log_text()[-3000:]
    # A request with a body is not sent twice: the silent server's try ends in a 504.
    codes = []
    for _ in range(2):
        r = g.request(b"POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\n\r\nabc", timeout=30)
        codes.append(r.status)
    assert sorted(codes) == [200, 504], codes
    assert live.requests() == 5


def test_a_post_with_a_body_is_retried_after_a_connect_failure(gateway_factory, origins, dead_address):
    (live,) = origins(1)
    g = start(gateway_factory, upstream_section([live.address, dead_address], eject="{ failures: 0 }"))
    body = bytes(range(256)) * 40
    for _ in range(10):
        r = g.request(f"POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                      + body)
        assert r.status == 200, (r.status, r.body)
        assert r.json()["length"] == len(body)
    assert live.requests() == 10
    assert wait_until(lambda: log_count(g, connect_failed(dead_address)) == 5, 10), g.log_text()[-3000:]


def test_a_connection_closed_before_a_response_is_retried_for_an_idempotent_request_only(gateway_factory, origins):
    # /status?code=x: upstream.py reads the whole request, then fails on the code and
    # closes the connection without a byte of answer, on whichever server has it.
    servers = origins(2)
    g = start(gateway_factory, upstream_section([o.address for o in servers], eject="{ failures: 0 }"), workers=2)

    def reached(raw):
        before = counts(servers)
        r = g.request(raw)
        after = counts(servers)
        return r.status, [after[i] - before[i] for i in range(2)]

    # A POST with a body: the server may have acted on it; it is not sent again.
    status, hit = reached(b"POST /status?code=x HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\n\r\nabc")
    assert status == 502 and sorted(hit) == [0, 1], (status, hit)
    # A GET without a body: tried on the other server too (retries: 1), then 502.
    status, hit = reached(get("/status?code=x"))
    assert status == 502 and hit == [1, 1], (status, hit)
    assert wait_until(lambda: log_count(g, "bad or missing response") == 3, 10), g.log_text()[-3000:]
    # (and the servers still answer what they can)
    assert one_get(g).status == 200


def test_max_share_keeps_a_failing_server_in_and_an_ejected_one_is_tried_last(gateway_factory, dead_address):
    # Two dead servers, max_share 0.5: one may be ejected, the other stays in however it
    # fails; the ejected one is still tried when it is the only one left untried.
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    with other:
        second = f"127.0.0.1:{other.getsockname()[1]}"
        g = start(gateway_factory, upstream_section([dead_address, second],
                                                    eject="{ failures: 1, base_time: 60s, max_time: 60s }"))
        statuses = [one_get(g).status for _ in range(6)]
        assert statuses == [502] * 6, statuses
        assert wait_until(lambda: log_count(g, connect_failed(dead_address)) == 6 and
                          log_count(g, connect_failed(second)) == 6, 10), g.log_text()[-3000:]
    text = g.log_text()
    assert len(re.findall(r"ejected for 60000 ms after 1 connect failure in a row", text)) == 1, text[-3000:]


def test_a_reload_keeps_a_kept_servers_ejection(gateway_factory, origins):
    up, down = origins(2)
    section = upstream_section([up.address, down.address], eject="{ failures: 1, base_time: 60s, max_time: 60s }")
    g = start(gateway_factory, section, admin=True, workers=2)
    down.stop()
    wait_for("the ejection", lambda: one_get(g).status == 200 and
             ejected_line(down.address, 60000, 1) in g.log_text(), 30)
    # Back where it was, but still ejected for a minute: a reload that keeps it (other
    # settings changed, the list reordered) keeps that, and it gets nothing.
    again = origins.start(down.port)
    moved = upstream_section([down.address, up.address], retries=2,
                             eject="{ failures: 1, base_time: 60s, max_time: 60s }")
    reload_with(g, section, moved)
    before = up.requests()
    for _ in range(10):
        assert one_get(g).status == 200
    assert up.requests() - before == 10 and again.requests() == 0


def test_a_status_in_eject_statuses_counts_as_a_failure(gateway_factory, origins):
    servers = origins(2)
    g = start(gateway_factory, upstream_section([o.address for o in servers],
                                                eject="{ failures: 2, base_time: 60s, max_time: 60s, "
                                                      "statuses: [503] }"), workers=2)
    # 500 is not listed: answered, no failure counted
    for _ in range(6):
        assert one_get(g, "/status?code=500").status == 500
    assert "ejected" not in g.log_text()
    # 503s are passed on to the client as they are (a status is not retried), and count
    for _ in range(6):
        assert one_get(g, "/status?code=503").status == 503
    text = wait_for("an ejection for 503s", lambda: "failing statuses in a row (last 503)" in g.log_text() and
                    g.log_text(), 10)
    out = [i for i, o in enumerate(servers) if ejected_line(o.address, 60000, 2, "failing statuses") in text]
    assert len(out) == 1, text[-3000:]
    # Ejected for a minute: everything goes to the other.
    before = counts(servers)
    for _ in range(10):
        assert one_get(g).status == 200
    after = counts(servers)
    assert after[out[0]] == before[out[0]] and after[1 - out[0]] - before[1 - out[0]] == 10, (before, after)


def test_active_health_checks_take_a_failing_server_out_and_bring_it_back(gateway_factory, origins):
    a, b = servers = origins(2)
    g = start(gateway_factory, upstream_section([o.address for o in servers], eject="{ failures: 0 }",
                                                health="{ path: /__check, interval: 500ms, timeout: 500ms, "
                                                       "rise: 2, fall: 2 }"),
              admin=True, admin_more=f'  token: "{TOKEN}"\n', workers=2)
    # One checker per process, not one per worker: each server sees its checks, and
    # none of them counts as a request.
    wait_for("checks on both servers", lambda: a.health_checks() >= 3 and b.health_checks() >= 3, 20)
    assert counts(servers) == [0, 0]
    a.set_health(503)
    wait_for("a out of service", lambda: f"server {a.address} failed 2 health check(s) in a row (last: status 503)"
             in g.log_text(), 20)
    s = by_address(view(g)["api"])[a.address]
    assert s["state"] == "failing_checks" and s["checks"]["passing"] is False, s
    assert s["checks"]["last_failure"] == "failing statuses" and s["checks"]["last_status"] == 503, s
    before = counts(servers)
    for _ in range(10):
        assert one_get(g).status == 200
    after = counts(servers)
    assert after[0] == before[0] and after[1] - before[1] == 10, (before, after)
    a.set_health(200)
    wait_for("a back", lambda: f"server {a.address} passed 2 health check(s) in a row: back in service"
             in g.log_text(), 20)
    assert by_address(view(g)["api"])[a.address]["state"] == "up"
    before = counts(servers)
    for _ in range(10):
        assert one_get(g).status == 200
    after = counts(servers)
    assert after[0] - before[0] >= 3, (before, after)


# --- servers given by name (resolver) -----------------------------------------------

@pytest.fixture
def dns():
    from dns_server import DNSServer
    d = DNSServer()
    yield d
    d.close()


def same_port_origins(origins):
    """Two origins on one port, at 127.0.0.1 and 127.0.0.2: the two addresses of a name."""
    for _ in range(5):
        a = origins.start()
        try:
            return a, origins.start(a.port, "127.0.0.2")
        except AssertionError:  # that port was taken on 127.0.0.2: another one
            a.stop()
    raise RuntimeError("no port free on both 127.0.0.1 and 127.0.0.2")


def addresses(upstream):
    return sorted(s["address"] for s in upstream["servers"])


def test_a_name_is_a_server_per_address_re_resolved_and_kept_through_failures(gateway_factory, origins, dns):
    a, b = servers = same_port_origins(origins)
    port = a.port
    dns.set("api.fg.test", ["127.0.0.1", "127.0.0.2"])
    section = (upstream_section([f"api.fg.test:{port}"], eject="{ failures: 0 }")
               + upstream_section([f"late.fg.test:{port}"], name="late"))
    routes = ("  - name: late\n    match: { path_prefix: /late }\n    upstream: late\n"
              "  - name: all\n    match: { path_prefix: / }\n    upstream: api\n")
    resolver = f'resolver:\n  servers: ["{dns.address}"]\n  timeout: 300ms\n  tries: 1\n  refresh: 1s\n'
    g = with_admin(lambda extra: gateway_factory(upstreams=section, routes=routes, extra=extra + resolver),
                   more=f'  token: "{TOKEN}"\n')
    # Resolved before the first request: both addresses are servers, named after the name.
    v = view(g)
    assert addresses(v["api"]) == sorted([a.address, b.address]), v
    assert {s["name"] for s in v["api"]["servers"]} == {f"api.fg.test:{port}"}, v
    before = counts(servers)
    for _ in range(20):
        assert one_get(g).status == 200
    after = counts(servers)
    assert after[0] - before[0] >= 5 and after[1] - before[1] >= 5, (before, after)

    # A name that does not resolve gives no server: 502 at once, logged; once it
    # resolves (asked again after 1 s, 2 s, ...), its upstream serves.
    assert v["late"]["servers"] == [], v
    r = one_get(g, "/late")
    assert r.status == 502, r.status
    assert "late.fg.test: cannot resolve" in g.log_text()
    dns.set("late.fg.test", ["127.0.0.1"])
    wait_for("late resolved", lambda: addresses(view(g)["late"]) == [a.address], 30)
    assert one_get(g, "/late").status == 200

    # The name's addresses change: the servers follow, at the next refresh.
    dns.set("api.fg.test", ["127.0.0.2"])
    wait_for("one address left", lambda: addresses(view(g)["api"]) == [b.address], 20)
    before = counts(servers)
    for _ in range(10):
        assert one_get(g).status == 200
    after = counts(servers)
    assert after[0] == before[0] and after[1] - before[1] == 10, (before, after)

    # The name server fails: the last good address stays, said in the log.
    dns.fail(True)
    asked = dns.asked("api.fg.test")
    wait_for("two failed refreshes", lambda: dns.asked("api.fg.test") >= asked + 2, 20)
    wait_for("the failure logged", lambda: "keeping its last 1 address(es) (127.0.0.2)" in g.log_text(), 20)
    assert addresses(view(g)["api"]) == [b.address]
    for _ in range(5):
        assert one_get(g).status == 200
    dns.fail(False)
    dns.set("api.fg.test", ["127.0.0.1", "127.0.0.2"])
    wait_for("both again", lambda: addresses(view(g)["api"]) == sorted([a.address, b.address]), 30)


# --- config errors -------------------------------------------------------------------

CHECK_HEAD = 'listen: "127.0.0.1:8080"\nupstreams:\n  api:\n'
CHECK_TAIL = "routes:\n  - name: all\n    match:\n      path_prefix: /\n    upstream: api\n"
# (the upstream's lines; the line the error is on, 1-based in the whole file; the error)
BAD_UPSTREAMS = {
    "both": ('    address: "127.0.0.1:9001"\n    servers:\n      - "127.0.0.1:9002"\n', 6,
             "upstream 'api' has both address and servers (use one)"),
    "twice": ('    servers:\n      - "127.0.0.1:9001"\n      - { address: "127.0.0.1:9001", weight: 2 }\n', 6,
              "server 127.0.0.1:9001 is listed twice in upstream 'api'"),
    "hash_key": ('    servers: ["127.0.0.1:9001", "127.0.0.1:9002"]\n    hash_key: header:X-User\n', 5,
                 "hash_key is read with balance: hash only"),
    "balance": ('    servers: ["127.0.0.1:9001"]\n    balance: random\n', 5,
                "expected one of round_robin|least_conn|hash"),
    "empty": ("    servers: []\n", 4, "servers must be a list of {address, weight} (at least one)"),
    "health path": ('    address: "127.0.0.1:9001"\n    health: { path: "/a b" }\n', 5, "health.path must be a path"),
    "health host": ('    address: "127.0.0.1:9001"\n    health: { host: "a\\r\\nX: y" }\n', 5,
                    "health.host must be a host name"),
    "health timeout": ('    address: "127.0.0.1:9001"\n    health: { interval: 1s, timeout: 2s }\n', 5,
                       "health.timeout is longer than health.interval"),
    "retries": ('    servers: ["127.0.0.1:9001"]\n    retries: 6\n', 5, "expected an integer from 0 to 5"),
    "status": ('    servers: ["127.0.0.1:9001"]\n    eject: { statuses: [404] }\n', 5,
               "expected an integer from 500 to 599"),
    "max_time": ('    servers: ["127.0.0.1:9001"]\n    eject: { base_time: 10s, max_time: 5s }\n', 5,
                 "eject.max_time is shorter than eject.base_time"),
    "share": ('    servers: ["127.0.0.1:9001"]\n    eject: { max_share: 2 }\n', 5, "invalid share '2'"),
    "weight_0": ('    servers:\n      - { address: "127.0.0.1:9001", weight: 0 }\n', 5,
                 "expected an integer from 1 to 10000"),
    "unknown_server_key": ('    servers:\n      - { address: "127.0.0.1:9001", wieght: 2 }\n', 5,
                           "unknown key 'wieght'"),
}


def check(tmp_path, upstream_lines):
    cfg = tmp_path / "floodgate.yaml"
    cfg.write_text(CHECK_HEAD + upstream_lines + CHECK_TAIL)
    out = subprocess.run([BIN, "--check", "--config", str(cfg)], capture_output=True, text=True, timeout=30)
    return cfg, out.returncode, out.stdout + out.stderr


@pytest.mark.parametrize("kind", sorted(BAD_UPSTREAMS))
def test_a_bad_upstream_is_refused_with_its_line(tmp_path, kind):
    lines, line, message = BAD_UPSTREAMS[kind]
    cfg, code, text = check(tmp_path, lines)
    assert code != 0, text
    assert message in text, text
    assert re.search(rf"^{re.escape(str(cfg))}:{line}:\d+: .*{re.escape(message)}", text, re.M), text


def test_a_good_upstream_passes_check(tmp_path):
    cfg, code, text = check(tmp_path, '    servers:\n      - "127.0.0.1:9001"\n'
                                      '      - { address: "127.0.0.1:9002", weight: 3 }\n'
                                      "    balance: hash\n    hash_key: cookie:session\n"
                                      "    eject: { failures: 3, base_time: 5s, max_time: 1m, max_share: 0.34, "
                                      "statuses: [502, 503] }\n"
                                      "    retries: 2\n    retry_budget: { share: 0.1, min: 1 }\n"
                                      "    health: { path: /healthz, interval: 2s, timeout: 1s, rise: 2, fall: 3, "
                                      "statuses: [200, 204], host: api.internal }\n"
                                      "    try_timeout: 2s\n")
    assert code == 0, text


# --- GET /upstreams and the per-server metrics ------------------------------------------

TOKEN = "f1oodgate-upstreams-token-0123456789"
BEARER = f"Authorization: Bearer {TOKEN}\r\n"


def admin_call(g, path, headers=""):
    with socket.create_connection(("127.0.0.1", g.admin_port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Connection: close\r\n\r\n".encode())
        return read_response(s)


def view(g):
    r = admin_call(g, "/upstreams", BEARER)
    assert r.status == 200, (r.status, r.body)
    return {u["name"]: u for u in r.json()["upstreams"]}


def by_address(upstream):
    return {s["address"]: s for s in upstream["servers"]}


def test_admin_upstreams_view(gateway_factory, origins):
    up, down = origins(2)
    section = (upstream_section([(up.address, 1), (down.address, 2)],
                                eject="{ failures: 2, base_time: 60s, max_time: 60s }")
               + upstream_section([up.address], name="sticky", balance="hash", hash_key="header:X-User"))
    routes = ("  - name: sticky\n    match:\n      path_prefix: /sticky\n    upstream: sticky\n"
              "  - name: all\n    match:\n      path_prefix: /\n    upstream: api\n")
    g = start(gateway_factory, section, admin=True, admin_more=f'  token: "{TOKEN}"\n', routes=routes, workers=2,
              http={"idle_timeout": "60s"})
    # Privileged, like /config.
    assert admin_call(g, "/upstreams").status == 401
    ups = view(g)
    assert set(ups) == {"api", "sticky"}
    assert ups["api"]["balance"] == "round_robin" and ups["sticky"]["balance"] == "hash"
    fresh = by_address(ups["api"])
    assert [s["address"] for s in ups["api"]["servers"]] == [up.address, down.address]
    for addr, weight in ((up.address, 1), (down.address, 2)):
        s = fresh[addr]
        assert s["weight"] == weight and s["state"] == "up" and s["ejected_for_ms"] == 0, s
        assert (s["active"], s["requests"], s["failures"], s["ejections"], s["retries"]) == (0, 0, 0, 0, 0), s
        assert s["last_failure"] is None and s["failures_in_row"] == 0, s

    # A request in flight is active on its server.
    held = HeldUpload(g, [up, down])
    try:
        srv = by_address(view(g)["api"])[[up, down][held.server].address]
        assert srv["active"] == 1, srv
    finally:
        assert held.release().status == 200
    for _ in range(9):
        assert one_get(g).status == 200
    s = by_address(view(g)["api"])
    assert s[up.address]["requests"] == up.requests() and s[down.address]["requests"] == down.requests(), s
    # A request stops being active when its exchange ends, just after its response's last
    # bytes went: the client may ask the admin before the worker has got there.
    idle = lambda: all(v["active"] == 0 for v in by_address(view(g)["api"]).values())  # noqa: E731
    assert wait_until(idle, 10), by_address(view(g)["api"])

    # Killed: two connect failures eject it; each of them was retried on the other.
    served = (up.requests(), down.requests())
    down.stop()
    wait_for("the ejection", lambda: one_get(g).status == 200 and ejected_line(down.address, 60000, 2) in g.log_text(),
             30)
    s = by_address(view(g)["api"])
    d, u = s[down.address], s[up.address]
    assert d["state"] == "ejected" and 0 < d["ejected_for_ms"] <= 60000, d
    assert d["ejections"] == 1 and d["failures"] == 2 and d["failures_in_row"] == 0, d
    assert d["last_failure"] == "connect failures" and d["last_status"] == 0, d
    assert d["requests"] == served[1] + 2, (d, served)
    assert u["state"] == "up" and u["failures"] == 0 and u["retries"] == 2, u
    assert u["requests"] == up.requests(), u


def test_per_server_metrics(gateway_factory, origins):
    up, down = origins(2)
    g = start(gateway_factory, upstream_section([up.address, down.address],
                                                eject="{ failures: 2, base_time: 60s, max_time: 60s }"),
              admin=True, workers=2, http={"idle_timeout": "60s"})

    def metric(name, server):
        return value(scrape(g)[0], name, upstream="api", server=server.address)

    held = HeldUpload(g, [up, down])
    try:
        on, off = [up, down][held.server], [up, down][1 - held.server]
        assert metric("floodgate_upstream_server_active", on) == 1
        assert metric("floodgate_upstream_server_active", off) == 0
    finally:
        assert held.release().status == 200
    for _ in range(9):
        assert one_get(g).status == 200
    for o in (up, down):
        assert metric("floodgate_upstream_server_requests_total", o) == o.requests()
        assert metric("floodgate_upstream_server_healthy", o) == 1
        assert metric("floodgate_upstream_server_active", o) == 0
    served = down.requests()
    down.stop()
    wait_for("the ejection", lambda: one_get(g).status == 200 and ejected_line(down.address, 60000, 2) in g.log_text(),
             30)
    series, text = scrape(g)
    assert "# TYPE floodgate_upstream_server_requests_total counter" in text
    assert "# TYPE floodgate_upstream_server_healthy gauge" in text

    def m(name, o):
        return value(series, name, upstream="api", server=o.address)
    assert m("floodgate_upstream_server_healthy", down) == 0 and m("floodgate_upstream_server_healthy", up) == 1
    assert m("floodgate_upstream_server_ejections_total", down) == 1
    assert m("floodgate_upstream_server_failures_total", down) == 2
    assert m("floodgate_upstream_server_failures_total", up) == 0
    assert m("floodgate_upstream_server_retries_total", up) == 2
    assert m("floodgate_upstream_server_retries_total", down) == 0
    assert m("floodgate_upstream_server_requests_total", down) == served + 2
    assert m("floodgate_upstream_server_requests_total", up) == up.requests()
