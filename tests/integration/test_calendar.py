"""Calendar quotas (window: 1d | 1w | 1mo, align: calendar, timezone): the window ends
at midnight in its zone, with DST and month lengths right. On the memory store under a
faked clock (libfaketime in the gateway): a day 23 hours long when Berlin moves to
summer time, a quota that resets at a month's end. Through Redis, Sentinel and a
3-master Cluster (whose clocks cannot be faked: Debian's redis-server is built with
jemalloc, which libfaketime cannot start beside): the key ends exactly at the next
midnight in its zone, and RateLimit's t counts the seconds to it; Redis' side of the
boundary, a window that starts past the gateway's period end, is test_script's."""
import datetime
import time
from zoneinfo import ZoneInfo

import pytest

from conftest import BIN_SYSTEM_MALLOC, SANITIZED, get
from stores import store_gateway
from test_redis import FAKETIME_LIB


def route(limit, window="1d", zone="Europe/Berlin"):
    return f"""  - name: api
    match: {{ path_prefix: / }}
    upstream: api
    limits:
      - name: quota
        algorithm: fixed_window
        key: header:X-Client
        limit: {limit}
        window: {window}
        align: calendar
        timezone: {zone}
"""


def t_of(r):
    return int(r.header("ratelimit").split(";t=")[1])


def req(g, client="a"):
    return g.request(get("/", extra=f"X-Client: {client}\r\n"))


def utc(at):
    return datetime.datetime.fromisoformat(at).replace(tzinfo=datetime.timezone.utc).timestamp()


def faked(gateway_factory, at, **kw):
    """A gateway whose clock is at `at` (UTC) now and runs on from there: an offset from
    the real clock (libfaketime's absolute "@" form recurses in its own start-up here).
    Returns the gateway and the offset: its clock reads time.time() + offset."""
    offset = round(utc(at) - time.time())
    g = gateway_factory(binary=BIN_SYSTEM_MALLOC, env={"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": f"{offset:+d}",
                                                       "FAKETIME_DONT_FAKE_MONOTONIC": "1"}, **kw)
    return g, offset


@pytest.mark.skipif(SANITIZED, reason="libfaketime cannot be preloaded ahead of the ASan runtime")
def test_a_day_that_dst_shortens_ends_at_its_midnight(gateway_factory):
    # 00:00:05 CET on 2026-03-29; Berlin's clocks go from 02:00 to 03:00 that night, so
    # its midnight comes 23 hours later, less the 5 s: 82,795 s.
    g, offset = faked(gateway_factory, "2026-03-28 23:00:05", routes=route(2))
    r = req(g)
    midnight = utc("2026-03-29 22:00:00")  # (Berlin's, in summer time)
    assert r.status == 200 and abs(t_of(r) - (midnight - (time.time() + offset))) <= 2, r.headers
    assert abs(t_of(r) - 82_795) <= 60, r.headers
    assert r.header("ratelimit-policy") == '"quota";q=2;w=86400'


@pytest.mark.skipif(SANITIZED, reason="libfaketime cannot be preloaded ahead of the ASan runtime")
def test_a_monthly_quota_resets_at_the_months_end(gateway_factory):
    # 10 s before midnight on 2026-03-31 in Berlin (summer time: 22:00 UTC); what
    # Retry-After should say is read from the gateway's clock (the real one + offset),
    # not from when the test hoped it would start.
    g, offset = faked(gateway_factory, "2026-03-31 21:59:50", routes=route(2, "1mo"))
    month_end = utc("2026-03-31 22:00:00")
    assert [req(g).status for _ in range(3)] == [200, 200, 429]
    r = req(g)
    left = month_end - (time.time() + offset)
    assert left > 1, "the gateway took 9 s to start: the month ended before the test could look"
    assert r.status == 429 and left - 2 <= int(r.header("retry-after")) <= left + 2, (left, r.headers)
    deadline = time.monotonic() + left + 10
    while req(g).status == 429:  # (what is tested: the quota resets when April begins there)
        assert time.monotonic() < deadline, "still denied 10 s after the month's end"
        time.sleep(0.1)
    r = req(g, "b")
    # The next window is April, 30 days long: t is (almost) 30 days.
    assert r.status == 200 and abs(t_of(r) - 30 * 86_400) <= 5, r.headers


def next_midnight_ms(zone, months=False):
    now = datetime.datetime.now(ZoneInfo(zone))
    if months:
        first = (now.replace(day=1) + datetime.timedelta(days=32)).replace(day=1)
        end = first.replace(hour=0, minute=0, second=0, microsecond=0)
    else:
        end = (now + datetime.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    # (a wall time of the zone: its offset that day, DST included)
    return int(end.replace(tzinfo=ZoneInfo(zone)).timestamp() * 1000)


@pytest.mark.parametrize("kind", ["redis", "sentinel", "cluster"])
@pytest.mark.parametrize("window,zone", [("1d", "UTC"), ("1mo", "Europe/Berlin"), ("1d", "America/New_York")])
def test_through_redis_the_key_ends_at_the_zones_midnight(kind, window, zone, request, gateway_factory):
    g = store_gateway(kind, request, gateway_factory, routes=route(5, window, zone))
    want = next_midnight_ms(zone, months=window == "1mo")
    r = req(g, "z")
    assert r.status == 200
    assert abs(t_of(r) - (want / 1000 - time.time())) <= 3, (t_of(r), want)
    if kind == "cluster":
        cluster = request.getfixturevalue("shared_cluster")
        clis = [lambda *a, p=m.port: cluster.cli(p, *a) for m in cluster.masters()]
    else:
        servers = [request.getfixturevalue("redis_server")] if kind == "redis" else \
            request.getfixturevalue("redis_sentinel").servers
        clis = [s.cli for s in servers]
    ends = set()
    for cli in clis:
        for key in cli("--scan", "--pattern", "fgtest:*").split():
            ends.add(int(cli("pexpiretime", key)))
    assert ends == {want}, (ends, want)
