"""POST /limits/reset: a consumer's limits start afresh, on every gateway at once. Three
gateways (two workers each) share one Redis (and a Cluster); a client is denied on all of
them, each worker holding the denial in its cache for the window's 10 minutes; a reset
on one gateway's admin deletes the keys and records them in the store (read by every
worker every 200 ms), and every gateway admits the
client again within a second. On the memory store the one gateway's keys go."""
import json
import time

import pytest

from conftest import get
from stores import store_gateway
from test_admin import admin_get, with_admin


LIMIT = """  - name: api
    match: { path_prefix: / }
    upstream: api
    limits:
      - name: quota
        algorithm: fixed_window
        key: header:X-Client
        limit: 10
        window: 10m
"""


def status(g, client):
    return g.request(get("/", extra=f"X-Client: {client}\r\n")).status


def admitted_within(g, client, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if status(g, client) == 200:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("kind", ["redis", "cluster"])
def test_a_reset_reaches_every_gateway_at_once(kind, request, gateway_factory):
    gateways = [store_gateway(kind, request, gateway_factory, routes=LIMIT, workers=2) for _ in range(3)]
    statuses = [status(gateways[i % 3], "x") for i in range(30)]
    assert statuses.count(200) == 10, statuses
    # Every worker of every gateway has seen a denial (and keeps it for 10 minutes).
    for g in gateways:
        assert [status(g, "x") for _ in range(8)] == [429] * 8
    assert status(gateways[0], "y") == 200  # (another client is not denied)
    r = admin_get(gateways[1], "/limits/reset?route=api&header.X-Client=x", method="POST")
    assert r.status == 200 and json.loads(r.body) == {"route": "api", "reset": ["quota"]}, r.body
    for g in gateways:
        assert admitted_within(g, "x", 2), "a gateway still denies from its cache after the reset"
    # The other client's count is untouched.
    r = admin_get(gateways[0], "/limits?route=api&header.X-Client=y")
    assert json.loads(r.body)["limits"][0]["remaining"] == 9, r.body


def test_a_reset_on_the_memory_store(gateway_factory):
    g = with_admin(lambda extra: gateway_factory(routes=LIMIT, extra=extra))
    assert [status(g, "x") for _ in range(11)] == [200] * 10 + [429]
    assert admin_get(g, "/limits/reset?route=api&header.X-Client=x", method="POST").status == 200
    assert [status(g, "x") for _ in range(11)] == [200] * 10 + [429]
    # Privileged: not for a web page, and not GET.
    assert admin_get(g, "/limits/reset?route=api&header.X-Client=x").status == 405
