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
from stores import KINDS, store_gateway
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


QUOTA_AND_RATE = LIMIT + """      - name: pace
        algorithm: token_bucket
        key: header:X-Client
        rate: 1/m
        burst: 100
      - name: log
        algorithm: sliding_log
        key: header:X-Client
        limit: 100
        window: 10m
"""


def admitted_after_grant(gateways, client, want, seconds=5):
    """Requests round the gateways until `want` are admitted or the deadline; then as many
    again, all of which must be denied: a grant of N admits N, on whichever gateway."""
    admitted, i, end = 0, 0, time.monotonic() + seconds
    while admitted < want and time.monotonic() < end:
        admitted += status(gateways[i % len(gateways)], client) == 200
        i += 1
    after = [status(gateways[j % len(gateways)], client) for j in range(3 * len(gateways))]
    return admitted + after.count(200)


@pytest.mark.parametrize("kind", KINDS)
def test_a_grant_gives_a_consumer_that_many_more_on_every_gateway(kind, request, gateway_factory):
    if kind == "memory":
        gateways = [with_admin(lambda extra: gateway_factory(routes=QUOTA_AND_RATE, extra=extra, workers=2))]
    else:
        gateways = [store_gateway(kind, request, gateway_factory, routes=QUOTA_AND_RATE, workers=2) for _ in range(3)]
    n = len(gateways)
    statuses = [status(gateways[i % n], "x") for i in range(30)]
    assert statuses.count(200) == 10, statuses
    for g in gateways:
        assert [status(g, "x") for _ in range(4)] == [429] * 4
    # 3 more of the monthly quota: exactly 3 more requests, on whichever gateway.
    r = admin_get(gateways[-1], "/limits/grant?route=api&header.X-Client=x&limit=quota&amount=3", method="POST")
    assert r.status == 200, r.body
    assert json.loads(r.body) == {"route": "api", "amount": 3, "granted": ["quota"]}
    assert admitted_after_grant(gateways, "x", 3) == 3
    # Never more than was used: a grant of 1,000 gives back the 10 (the quota whole again),
    # and the token bucket's 13 tokens; the log is named as one a grant cannot change.
    r = admin_get(gateways[0], "/limits/grant?route=api&header.X-Client=x&amount=1000", method="POST")
    assert r.status == 200, r.body
    body = json.loads(r.body)
    assert body["granted"] == ["quota", "pace"] and [x["name"] for x in body["not_granted"]] == ["log"], body
    assert admitted_after_grant(gateways, "x", 10) == 10
    r = admin_get(gateways[0], "/limits?route=api&header.X-Client=x")
    limits = {x["name"]: x for x in json.loads(r.body)["limits"]}
    assert limits["quota"]["remaining"] == 0 and limits["pace"]["remaining"] == 90, limits
    # A limit that takes no grant, named: refused with a reason.
    r = admin_get(gateways[0], "/limits/grant?route=api&header.X-Client=x&limit=log&amount=1", method="POST")
    assert r.status == 400 and b"reset" in r.body, r.body
