"""Start-up and readiness: the proxy port opens only once every worker's store is ready
(or redis.startup_wait has passed, logged), so that no request is decided by
on_store_error because the store was still connecting, in every Redis mode; readiness
means "can serve its routes under their policies": a stopped Redis leaves a gateway whose
routes allow ready, and one with a deny route (or admin.ready_requires_store) not."""
import signal
import socket
import subprocess
import time

import pytest

from conftest import BIN, Thread, free_port, get, read_response, wait_until
from test_admin import admin_get, with_admin
from test_metrics import scrape, value


def routes(policy="allow", limit=10):
    return f"""  - name: r
    match:
      path_prefix: /
    upstream: api
    on_store_error: {policy}
    limits:
      - name: global
        algorithm: fixed_window
        key: global
        limit: {limit}
        window: 1m
"""


def store_errors(g):
    series, _ = scrape(g)
    decided = sum(value(series, "floodgate_ratelimit_decisions_total", route="r", limit="global", outcome=o)
                  for o in ("store_error_allowed", "store_error_denied", "local_fallback"))
    return decided


def fire_at_open(port, n, statuses, deadline_s=60):
    """Connects the moment `port` accepts (tries every millisecond), then sends n requests
    at once, one per connection, and records their statuses."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            first = socket.create_connection(("127.0.0.1", port), timeout=10)
            break
        except OSError:
            if time.monotonic() > end:
                raise TimeoutError(f"port {port} never opened")
            time.sleep(0.001)
    socks = [first] + [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(n - 1)]
    for s in socks:
        s.sendall(get("/x", extra="Connection: close\r\n"))
    for s in socks:
        statuses.append(read_response(s).status)
        s.close()


def start_and_fire(gateway_factory, n=20, **kw):
    """Starts a gateway (2 workers, an admin port) while a client waits on its port to
    send n requests the moment it opens; returns (gateway, statuses)."""
    admin_port = free_port()
    kw["extra"] = f'admin:\n  listen: "127.0.0.1:{admin_port}"\n'
    port = free_port()
    statuses = []
    # The gateway takes this port (the factory's free_port() is patched for its first call).
    import conftest
    real = conftest.free_port
    calls = [0]

    def first_is_ours():
        calls[0] += 1
        return port if calls[0] == 1 else real()
    conftest.free_port = first_is_ours
    client = Thread(target=fire_at_open, args=(port, n, statuses))
    client.start()
    try:
        g = gateway_factory(workers=2, **kw)
    finally:
        conftest.free_port = real
    client.join(60)
    assert g.port == port, "the gateway did not take the port the client waited on"
    g.admin_port = admin_port
    return g, statuses


def check_no_store_error_at_start(g, statuses, limit=10):
    assert sorted(statuses) == [200] * limit + [429] * (len(statuses) - limit), statuses
    assert store_errors(g) == 0, scrape(g)[1]
    assert "the store is ready on every worker after" in g.log_text(), g.log_text()[-2000:]


def test_standalone_opens_once_redis_is_connected(gateway_factory, redis_server):
    g, statuses = start_and_fire(gateway_factory, store="redis", redis=redis_server.address,
                                 routes=routes("allow"))
    check_no_store_error_at_start(g, statuses)


def test_sentinel_opens_once_the_master_is_known(gateway_factory, redis_sentinel):
    addresses = '", "'.join(f"127.0.0.1:{s.port}" for s in redis_sentinel.sentinels)
    g, statuses = start_and_fire(gateway_factory, store="redis", redis=addresses, routes=routes("allow"),
                                 redis_extra=f"  mode: sentinel\n  master_name: {redis_sentinel.name}\n")
    check_no_store_error_at_start(g, statuses)


def test_cluster_opens_once_the_map_is_read_and_every_master_connected(gateway_factory, shared_cluster):
    for m in shared_cluster.masters():
        shared_cluster.cli(m.port, "flushall")
    seed = f"127.0.0.1:{shared_cluster.masters()[0].port}"
    g, statuses = start_and_fire(gateway_factory, store="redis", redis=seed, routes=routes("allow"),
                                 redis_extra="  mode: cluster\n")
    check_no_store_error_at_start(g, statuses)


def test_a_store_that_never_comes_opens_after_startup_wait_logged(gateway_factory):
    dead = free_port()  # nothing listens there
    started = time.monotonic()
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=f"127.0.0.1:{dead}", routes=routes("allow"),
                                                 extra=extra, redis_extra="  startup_wait: 1500ms\n"))
    took = time.monotonic() - started
    assert "after redis.startup_wait (1500ms): serving anyway" in g.log_text(), g.log_text()[-2000:]
    # it waited (at least the configured wait), then served under the route's policy
    assert took >= 1.5, took
    assert g.request(get("/x")).status == 200
    assert store_errors(g) == 1


def stopped_redis_gateway(gateway_factory, redis_server, policy, admin_more=""):
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=redis_server.address, routes=routes(policy),
                                                 extra=extra), admin_more)
    assert admin_get(g, "/readyz").status == 200
    redis_server.stop()
    # until the gateway has seen the store go (the connection's loss, or a call failing)
    assert wait_until(lambda: not store_check(g)["ok"], 15), admin_get(g, "/readyz?verbose").body
    return g


def store_check(g):
    return next(c for c in admin_get(g, "/readyz?verbose").json()["checks"] if c["name"] == "store")


def health_check(g):
    out = subprocess.run([BIN, "--health-check", f"http://127.0.0.1:{g.admin_port}/healthz"],
                         capture_output=True, text=True, timeout=30)
    return out.returncode


def test_redis_stopped_with_allow_routes_is_ready(gateway_factory, redis_server):
    g = stopped_redis_gateway(gateway_factory, redis_server, "allow")
    r = admin_get(g, "/readyz")
    assert r.status == 200, r.body
    store = store_check(g)
    assert store["ok"] is False and store["required"] is False, store
    assert "every route serves under on_store_error" in store["detail"], store
    assert g.request(get("/x")).status == 200  # served, as the route says
    assert admin_get(g, "/healthz").status == 200 and health_check(g) == 0


def test_redis_stopped_with_a_deny_route_is_not_ready_and_says_which(gateway_factory, redis_server):
    g = stopped_redis_gateway(gateway_factory, redis_server, "deny")
    r = admin_get(g, "/readyz")
    assert r.status == 503, r.body
    assert "route(s) r answer 503 on a store error" in r.json()["reason"], r.body
    # liveness (the image's HEALTHCHECK) is not readiness: it stays healthy
    assert admin_get(g, "/healthz").status == 200 and health_check(g) == 0


def test_ready_requires_store_makes_the_store_required(gateway_factory, redis_server):
    g = stopped_redis_gateway(gateway_factory, redis_server, "allow", "  ready_requires_store: true\n")
    r = admin_get(g, "/readyz")
    assert r.status == 503, r.body
    assert "admin.ready_requires_store" in r.json()["reason"], r.body
    assert health_check(g) == 0


def test_sigterm_during_the_startup_wait_exits_cleanly(tmp_path):
    """A SIGTERM while the port waits for the store: exit 0 at once, the wait given up
    (it must not try to open the port the drain has closed, nor turn the exit into 1).
    The failure this guards against needed the wait's deadline to fall inside the drain
    (measured: SIGTERM 4.96 s into a 5 s wait gave exit 1); the fix gives the wait up
    when the signal comes, whatever the deadline, and this checks the outcome."""
    dead = free_port()
    cfg = tmp_path / "floodgate.yaml"
    cfg.write_text(f'listen: "127.0.0.1:{free_port()}"\nstore: redis\nredis:\n  addresses: ["127.0.0.1:{dead}"]\n'
                   '  startup_wait: 60s\nupstreams:\n  api:\n    address: "127.0.0.1:9"\n' + "routes:\n" + routes())
    log = tmp_path / "floodgate.log"
    with open(log, "w") as out:
        p = subprocess.Popen([BIN, "--config", str(cfg)], stdout=out, stderr=out)
    try:
        # until it is waiting: it has tried Redis at least once
        assert wait_until(lambda: "127.0.0.1:%d" % dead in log.read_text(), 30), log.read_text()
        p.send_signal(signal.SIGTERM)
        code = p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = log.read_text()
    assert code == 0, text
    assert "cannot listen" not in text and "floodgate listening on" not in text, text
