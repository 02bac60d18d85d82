"""The network between the gateway and Redis misbehaving, through fault_proxy.py (a
user-space TCP proxy: this kernel has no netem). A connection whose flow was
black-holed after it was set up (bytes acknowledged, nothing ever answered; new
connections to the same address work) is closed by the gateway and made again, busy
or idle, for a standalone Redis, a Sentinel deployment (the master's connections and
the sentinels' own, subscribers included) and a Redis Cluster node; real decisions
come back within a bound far above what it takes."""
import time

import pytest

from conftest import RedisCluster, get, local_ports, per_client_route, record, wait_for, wait_until
from conftest import client_statuses as client
from fault_proxy import FaultProxy
from test_admin import READY_REQUIRES_STORE, admin_get, with_admin
from test_metrics import scrape, value

# Route r on /limited, 5 a minute per X-Client, allowing on a store error; no limit elsewhere.
ROUTES = per_client_route("    on_store_error: allow\n", path_prefix="/limited") + """  - name: rest
    match:
      path_prefix: /
    upstream: api
"""
# redis.timeout 50ms: the stall timeout is then its derived floor, 1 s.
TIMEOUT = "50ms"
STALL_S = 1.0
# The bound the tests hold the recovery to: far above stall + a tick + the first backoff
# (~1.6 s), far below "never" (before the fix: the on_store_error answer for as long as
# one waited).
RECOVERY_BOUND_S = 15.0


class Proxies:
    """FaultProxy processes for one test: proxies(target) starts one; .made lists them."""

    def __init__(self):
        self.made = []

    def __call__(self, target, listen_port=0):
        p = FaultProxy(target, listen_port)
        self.made.append(p)
        return p

    def stop(self):
        for p in self.made:
            p.stop()


@pytest.fixture
def proxies():
    made = Proxies()
    yield made
    made.stop()


def start(gateway_factory, redis, redis_extra="", workers=2):
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=redis, routes=ROUTES, extra=extra,
                                                 workers=workers, redis_timeout=TIMEOUT, redis_extra=redis_extra),
                   more=READY_REQUIRES_STORE)
    assert wait_until(lambda: admin_get(g, "/readyz").status == 200, 15), g.log_text()
    return g


_names = iter(range(10**9))


def decides(g):
    """Whether the store decides now: a new client's 6 requests are 5 admitted and one
    denied (on a store error the route allows: a 6th 200)."""
    return client(g, f"probe-{next(_names)}", 6) == [200] * 5 + [429]


def stalled_events(g):
    series, _ = scrape(g)
    return value(series, "floodgate_redis_connection_events_total", event="stalled")


def gateway_conns(g, proxy):
    """The ids of the connections open through `proxy` that are the gateway's own (not a
    sentinel's or a replica's, which may go through the same proxy)."""
    mine = local_ports(g.proc.pid, proxy.port)
    return [c["id"] for c in proxy.open_conns() if c["client_port"] in mine]


class NotYet:
    """A false answer that says why (wait_for's timeout names the last one)."""

    def __init__(self, why):
        self.why = why

    def __bool__(self):
        return False

    def __repr__(self):
        return self.why


def all_replaced(g, proxies, held):
    """Every connection in `held` ({id(proxy): [connection id]}) closed by the gateway, and
    as many new ones of the gateway's open through each proxy, answered on; else NotYet
    with what is missing."""
    for p in proxies:
        mine = local_ports(g.proc.pid, p.port)
        conns = {c["id"]: c for c in p.stats()["conns"]}
        left = [conns[i] for i in held[id(p)] if conns[i]["closed_by"] != "client"]
        if left:
            return NotYet(f"through {p.address}, not closed by the gateway: {left}")
        fresh = [c for c in conns.values() if c["closed_by"] is None and c["id"] not in held[id(p)]
                 and c["client_port"] in mine and c["down"] > 0]
        if len(fresh) < len(held[id(p)]):
            others = [c for c in conns.values() if c["closed_by"] is None and c["id"] not in held[id(p)]]
            return NotYet(f"through {p.address}, {len(fresh)} new connections of the gateway's answered on, "
                          f"{len(held[id(p)])} replaced; open: {others}; the gateway's ports: {sorted(mine)}")
    return True


def black_hole_and_recover(g, proxies, busy):
    """Black-holes every connection open through `proxies` now (new ones pass), then waits
    until the gateway decides for real again and has closed every one of them itself.
    Busy: requests keep coming meanwhile; idle: none until the connections are replaced
    (the liveness probe finds them). Returns the seconds until every connection is
    replaced and decisions are real again."""
    held = {id(p): gateway_conns(g, p) for p in proxies}
    assert all(held.values()), [p.stats() for p in proxies]
    accepted = {id(p): p.stats()["accepted"] for p in proxies}
    stalled = stalled_events(g)
    for p in proxies:
        p.set("blackhole", existing=True, new=False)
    t0 = time.monotonic()

    # Busy: requests keep coming meanwhile (each a probe of the store); idle: none.
    wait_for("the black-holed connections replaced by the gateway",
             lambda: (busy and decides(g), all_replaced(g, proxies, held))[1], RECOVERY_BOUND_S)
    took = time.monotonic() - t0
    # Every worker connected (readiness requires the store), and deciding.
    wait_for("real decisions again", lambda: admin_get(g, "/readyz").status == 200 and decides(g), RECOVERY_BOUND_S)
    assert all(p.stats()["accepted"] > accepted[id(p)] for p in proxies), [p.stats() for p in proxies]
    assert stalled_events(g) >= stalled + 1
    assert "no reply for" in g.log_text() and "closing the connection, connecting again" in g.log_text()
    return took


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "idle"])
def test_a_black_holed_redis_connection_is_replaced(gateway_factory, redis_server, proxies, busy):
    proxy = proxies(redis_server.address)
    g = start(gateway_factory, proxy.address)
    assert decides(g)
    took = black_hole_and_recover(g, [proxy], busy)
    record(f"standalone, {'busy' if busy else 'idle'}: real decisions {took:.2f} s after the black hole "
           f"(redis.stall_timeout {STALL_S} s)")
    # And they stay real.
    assert all(decides(g) for _ in range(3))



def sentinel_gateway(gateway_factory, sentinel, addresses=None):
    addresses = addresses or [f"127.0.0.1:{s.port}" for s in sentinel.sentinels]
    return start(gateway_factory, '", "'.join(addresses),
                 redis_extra=f"  mode: sentinel\n  master_name: {sentinel.name}\n")


@pytest.fixture
def sentinel_behind(tmp_path, proxies):
    """A Sentinel deployment whose sentinels monitor the master through a FaultProxy (so
    the gateway reaches it there too). The sentinels' own links to it go through the proxy
    as well and are black-holed with the gateway's: down-after 60 s keeps them from
    failing the master over during the test (a sentinel makes no new link to an instance
    within 15 s of the last)."""
    from conftest import RedisSentinel
    s = RedisSentinel(tmp_path / "sentinel", down_after_ms=60000, master_front=proxies)
    yield s
    s.stop()


def test_sentinel_a_black_holed_master_connection_is_replaced(gateway_factory, proxies, sentinel_behind):
    g = sentinel_gateway(gateway_factory, sentinel_behind)
    assert decides(g)
    took = black_hole_and_recover(g, proxies.made, busy=True)
    record(f"sentinel, the master's connections: real decisions {took:.2f} s after the black hole")


def test_sentinel_black_holed_sentinel_connections_are_replaced(gateway_factory, proxies, redis_sentinel):
    """The gateway's connections to the sentinels (each worker's query connection and
    +switch-master subscriber) black-holed while idle: all replaced, and a failover after
    that is followed."""
    fronts = [proxies(f"127.0.0.1:{s.port}") for s in redis_sentinel.sentinels]
    g = sentinel_gateway(gateway_factory, redis_sentinel, [p.address for p in fronts])
    assert decides(g)
    held = {id(p): gateway_conns(g, p) for p in fronts}
    # Two workers: a query connection and a subscriber each, to every sentinel.
    assert all(len(ids) >= 4 for ids in held.values()), held
    stalled = stalled_events(g)
    for p in fronts:
        p.set("blackhole", existing=True, new=False)
    t0 = time.monotonic()

    wait_for("every sentinel connection closed by the gateway and made again", lambda: all_replaced(g, fronts, held),
             RECOVERY_BOUND_S)
    record(f"sentinel, the sentinels' connections (subscribers included): all replaced "
           f"{time.monotonic() - t0:.2f} s after the black hole")
    assert stalled_events(g) >= stalled + len(fronts) * 4
    # The new connections serve: a failover is followed through them.
    _, old = redis_sentinel.master_address()
    new = next(s.port for s in redis_sentinel.servers if s.port != old)
    redis_sentinel.failover()
    redis_sentinel.wait_master(new)
    wait_for("the gateway on the new master",
             lambda: decides(g) and any(k for k in redis_sentinel.server(new).keys("fgtest:*")), RECOVERY_BOUND_S)


def test_cluster_black_holed_node_connections_are_replaced(gateway_factory, proxies, tmp_path):
    """Every node announces its proxy's port (cluster-announce-port), so the slot map, the
    redirections and the gateway's connections all go through the proxies; every node's
    connections black-holed at once."""
    cluster = RedisCluster(tmp_path / "cluster", masters=3, replicas=0)
    try:
        fronts = {}
        for node in cluster.servers:
            fronts[node.port] = proxies(node.address)
            assert cluster.cli(node.port, "config", "set", "cluster-announce-port", fronts[node.port].port) == "OK"
        want = sorted(p.port for p in fronts.values())

        def announced():
            return all(sorted(n.port for n in cluster.nodes(s.port)) == want for s in cluster.servers)

        wait_for("every node announcing its proxy's port", announced, 15)
        g = start(gateway_factory, ", ".join(f'"{p.address}"' for p in fronts.values()).strip('"'),
                  redis_extra="  mode: cluster\n")
        assert all(decides(g) for _ in range(6))
        took = black_hole_and_recover(g, list(fronts.values()), busy=True)
        record(f"cluster, every node's connections: real decisions {took:.2f} s after the black hole")
        # Every master decides again (clients spread over the slots).
        assert all(decides(g) for _ in range(12))
    finally:
        cluster.stop()


def one_lease_route():
    return """  - name: r
    match:
      path_prefix: /slow
    upstream: api
    on_store_error: deny
    limits:
      - name: one
        algorithm: concurrency
        key: global
        limit: 1
        window: 1h
"""


def test_a_lease_whose_answer_a_reset_cut_is_given_back_once_reconnected(gateway_factory, redis_server, proxies):
    """The reply to a concurrency call cut by a reset (the script ran: the lease is taken)
    and the connection gone with it: the lease's ZREM cannot go then. It is kept and sent
    ahead of the next call once the gateway is connected again, so that call finds the
    limit of 1 free; it would be held for its lifetime (1 h here) otherwise."""
    proxy = proxies(redis_server.address)
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=proxy.address, routes=one_lease_route(),
                                                 extra=extra, redis_timeout=TIMEOUT, workers=1),
                   more=READY_REQUIRES_STORE)
    assert wait_until(lambda: admin_get(g, "/readyz").status == 200, 15), g.log_text()
    proxy.set("reset_reply", existing=True, new=True)
    assert g.request(get("/slow?ms=1")).status == 503
    key = wait_for("the lease's key", lambda: redis_server.keys("fgtest:*"), 5)[0]
    assert redis_server.cli("zcard", key) == "1"  # granted, and its release not sent
    proxy.clear()
    # Until the gateway is connected again its calls fail at once (503, nothing sent);
    # the first call decided must find the lease given back.
    deadline, status = time.monotonic() + 15, 503
    while status == 503 and time.monotonic() < deadline:
        status = g.request(get("/slow?ms=1")).status
        if status == 503:
            time.sleep(0.05)  # (a poll interval)
    assert status == 200, f"{status}: the lease the reset cut is still held"
    # (the 200's own lease goes back after its answer, so the set empties a moment later)
    wait_for("every lease given back", lambda: redis_server.cli("zcard", key) == "0", 5)


def test_a_lease_granted_by_a_call_whose_answer_was_lost_is_given_back(gateway_factory, redis_server, proxies):
    """Every answer from Redis late past redis.timeout: a concurrency call times out (503,
    on_store_error: deny) though Redis ran it and granted the lease; the gateway gives it
    back (ZREM after the failure) instead of leaving it held for the lease's lifetime (1 h
    here), which would hold the limit of 1 taken."""
    proxy = proxies(redis_server.address)
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=proxy.address, routes=one_lease_route(), extra=extra,
                                                 redis_timeout=TIMEOUT), more=READY_REQUIRES_STORE)
    assert wait_until(lambda: admin_get(g, "/readyz").status == 200, 15), g.log_text()
    # The lease is in Redis only between the script and the ZREM (redis.timeout apart): a
    # look at the key could come before, between or after. The counts of the commands Redis
    # ran say what happened whenever they are read (a script's own calls are counted too).
    zadds, zrems = redis_server.command_calls("zadd"), redis_server.command_calls("zrem")
    proxy.set("latency", existing=True, new=True, ms=150)
    assert g.request(get("/slow?ms=1")).status == 503
    wait_for("the lease given back (a ZREM run)", lambda: redis_server.command_calls("zrem") > zrems, 5)
    assert redis_server.command_calls("zadd") == zadds + 1, "the script granted no lease: nothing to give back"
    assert redis_server.keys("fgtest:*") == [], "the lease's sorted set is left (an empty one is deleted)"
    proxy.clear()
    wait_for("the limit of 1 free again", lambda: g.request(get("/slow?ms=1")).status == 200, 15)
