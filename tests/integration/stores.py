"""One gateway on each kind of store, for tests that must hold on all of them: the
memory store, one Redis, Redis behind Sentinel (the module-wide set of conftest, its
master flushed before) and a 3-master Redis Cluster (the module-wide cluster of
conftest, flushed before). `store_gateway(kind, request, gateway_factory, **kw)` starts
it and waits until every worker can reach its store."""
from conftest import wait_until
from test_admin import READY_REQUIRES_STORE, admin_get, with_admin

KINDS = ["memory", "redis", "sentinel", "cluster"]


def store_gateway(kind, request, gateway_factory, **kw):
    if kind == "memory":
        return gateway_factory(**kw)
    if kind == "redis":
        server = request.getfixturevalue("redis_server")
        redis, extra = f"127.0.0.1:{server.port}", ""
    elif kind == "sentinel":
        sentinel = request.getfixturevalue("shared_sentinel")
        sentinel.server(sentinel.master_address()[1]).cli("flushall")
        redis = '", "'.join(f"127.0.0.1:{s.port}" for s in sentinel.sentinels)
        extra = f"  mode: sentinel\n  master_name: {sentinel.name}\n"
    else:
        cluster = request.getfixturevalue("shared_cluster")
        for m in cluster.masters():
            cluster.cli(m.port, "flushall")
        redis, extra = cluster.servers[0].address, "  mode: cluster\n"
    more = kw.pop("extra", "")
    g = with_admin(lambda admin: gateway_factory(store="redis", redis=redis, redis_extra=extra, extra=more + admin, **kw),
                   more=READY_REQUIRES_STORE)
    assert wait_until(lambda: admin_get(g, "/readyz").status == 200, 15), g.log_text()
    return g
