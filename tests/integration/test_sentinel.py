"""redis.mode: sentinel against real redis-sentinel processes: the gateway asks the
sentinels for the master, follows SENTINEL FAILOVER and a killed master within 10 s of
the promotion, and its limits hold afterwards."""
import threading
import time

import pytest

from conftest import Load, allowed_through_a_move, keys_without_ttl, per_client_route, record, wait_until
from conftest import client_statuses as client
from test_admin import READY_REQUIRES_STORE, admin_get, with_admin
from test_metrics import decisions, scrape, value


# Route r on /limited, 5 an hour per X-Client, allowing on a store error; no limit elsewhere.
ROUTES = per_client_route("    on_store_error: allow\n", path_prefix="/limited", window="1h") + """  - name: rest
    match:
      path_prefix: /
    upstream: api
"""


@pytest.fixture(autouse=True)
def every_key_keeps_a_ttl(redis_sentinel):
    """After each test, no key floodgate wrote is without a TTL, on the master or the replica."""
    yield
    for server in redis_sentinel.servers:
        if server.alive:
            assert keys_without_ttl(server.port) == [], server.port


def start(gateway_factory, sentinel, workers=2):
    addresses = '", "'.join(f"127.0.0.1:{s.port}" for s in sentinel.sentinels)
    # (/readyz then says whether every worker is connected to the master: the routes
    # allow on a store error, so without ready_requires_store it would not)
    return with_admin(lambda extra: gateway_factory(
        store="redis", redis=addresses, routes=ROUTES, extra=extra, workers=workers,
        redis_extra=f"  mode: sentinel\n  master_name: {sentinel.name}\n"), more=READY_REQUIRES_STORE)


def keys_on(sentinel, port):
    return [k for k in sentinel.server(port).cli("--scan", "--pattern", "fgtest:*").splitlines() if k]



def test_the_master_comes_from_the_sentinels(gateway_factory, redis_sentinel):
    g = start(gateway_factory, redis_sentinel)
    assert wait_until(lambda: admin_get(g, "/readyz").status == 200, 10)
    assert client(g, "a", 7) == [200] * 5 + [429] * 2
    _, master = redis_sentinel.master_address()
    assert keys_on(redis_sentinel, master) == ["fgtest:{r:per-client:a}"]
    assert f"sentinel: master 'mymaster' is 127.0.0.1:{master}" in g.log_text()


def follows(gateway_factory, redis_sentinel, move):
    g = start(gateway_factory, redis_sentinel)
    assert wait_until(lambda: admin_get(g, "/readyz").status == 200, 10)
    assert client(g, "before", 5) == [200] * 5
    _, old = redis_sentinel.master_address()
    new = next(s.port for s in redis_sentinel.servers if s.port != old)
    n = [0]
    decided = decisions(g, "r", "per-client")
    load = Load(g)
    try:
        assert wait_until(lambda: len(load.statuses) > 20, 10)  # (the load under way)
        move()
        redis_sentinel.wait_master(new, 15)
        promoted = time.monotonic()
        # Followed: a new client's requests are counted on the new master.

        def counted_on_new():
            n[0] += 1
            name = f"probe-{n[0]}"
            client(g, name, 1)
            return f"fgtest:{{r:per-client:{name}}}" in keys_on(redis_sentinel, new)
        assert wait_until(counted_on_new, 10), g.log_text()
        # ... and every worker is connected again (/readyz).
        assert wait_until(lambda: admin_get(g, "/readyz").status == 200, 10 - (time.monotonic() - promoted))
        followed = time.monotonic() - promoted
        assert followed < 10
    finally:
        statuses = load.stop()
    # Every request answered 200 (on_store_error: allow covers the moments without a
    # master): each one decided by a master, or counted as a store error allowed; none
    # let through uncounted.
    moved = allowed_through_a_move(statuses, n[0], decided, decisions(g, "r", "per-client"))
    record(f"sentinel: {len(statuses)} requests through the move, decisions {moved}")
    # The limit holds on the new master; the old client's count came with the replica.
    assert client(g, "after", 8) == [200] * 5 + [429] * 3
    assert client(g, "before", 1) == [429]
    assert admin_get(g, "/readyz").status == 200
    # Counted: each of the 2 workers' connections followed the change (the admin's
    # /limits connection too, if it polled then).
    # (a worker may still be between reconnecting and its ROLE answer: waited for, as
    # /readyz is above)
    assert wait_until(lambda: value(scrape(g)[0], "floodgate_redis_sentinel_events_total",
                                    event="master_changed") >= 2, 5)
    # The sentinels announced it (+switch-master, to each worker's subscribers, 3 sentinels each).
    assert wait_until(lambda: value(scrape(g)[0], "floodgate_redis_sentinel_events_total",
                                    event="switch_master") >= 2, 5)
    return followed


def test_sentinel_failover_under_load_is_followed(gateway_factory, redis_sentinel):
    followed = follows(gateway_factory, redis_sentinel, redis_sentinel.failover)
    record(f"sentinel failover: followed {followed:.2f} s after the promotion")


def test_a_killed_master_is_followed(gateway_factory, redis_sentinel):
    followed = follows(gateway_factory, redis_sentinel, redis_sentinel.kill_master)
    record(f"sentinel, killed master: followed {followed:.2f} s after the promotion")
