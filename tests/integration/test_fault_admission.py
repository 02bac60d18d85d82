"""Limits under network faults between three gateways and one Redis (fault_proxy.py in
between): each fault with fixed_window, each algorithm with a black hole; the bounds
each must keep are fault_admission.py's (docs/redis.md, "Limits under network faults").
The whole matrix, every algorithm x fault x mode: bench/fault_matrix.py."""
import pytest

from conftest import SANITIZED, keys_without_ttl, record
import fault_admission as fa

SCENARIOS = [("fixed_window", f) for f in fa.FAULTS] + [(a, "blackhole") for a in fa.ALGORITHMS if a != "fixed_window"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    stores = fa.Stores(tmp, "standalone")
    try:
        e = fa.Env(tmp, stores.redis, stores.redis_extra, stores.proxies)
    except BaseException:
        stores.stop()
        raise
    yield e
    e.stop()
    try:
        # Whatever the faults cut short, every key written keeps a TTL.
        assert keys_without_ttl(stores.servers[0].port) == []
    finally:
        stores.stop()


@pytest.mark.parametrize("algorithm,fault", SCENARIOS, ids=[f"{a}-{f}" for a, f in SCENARIOS])
def test_limits_hold_through_a_network_fault(env, algorithm, fault):
    # (under ASan a lighter load: the same bounds)
    r = fa.run(env, algorithm, fault, pace_s=0.03 if SANITIZED else 0.01)
    record(r.line())
    r.check()
