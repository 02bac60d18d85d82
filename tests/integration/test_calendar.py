"""Calendar quotas (window: 1d | 1w | 1mo, align: calendar, timezone): the window ends
at midnight in its zone, with DST and month lengths right. On the memory store under a
faked clock (libfaketime in the gateway): a day 23 hours long when Berlin moves to
summer time, a quota that resets at a month's end. Through Redis, Sentinel and a
3-master Cluster (whose clocks cannot be faked: Debian's redis-server is built with
jemalloc, which libfaketime cannot start beside): the key ends exactly at the next
midnight in its zone, and RateLimit's t counts the seconds to it; Redis' side of the
boundary, a window that starts past the gateway's period end, is test_script's."""
import datetime
import os
import shutil
import subprocess
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from conftest import BIN_SYSTEM_MALLOC, SANITIZED, get, wait_for
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
            request.getfixturevalue("shared_sentinel").servers
        clis = [s.cli for s in servers]
    ends = set()
    for cli in clis:
        for key in cli("--scan", "--pattern", "fgtest:*").split():
            ends.add(int(cli("pexpiretime", key)))
    assert ends == {want}, (ends, want)


ZONEINFO = Path("/usr/share/zoneinfo")


def hms(seconds):
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    return f"{sign}{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


@pytest.fixture
def zone_with_a_short_day():
    """A time zone of the test's own (compiled with zic into the system's database, where
    the gateway reads zones, and removed after), in which a local midnight comes 15 s
    from now at the end of a day that DST shortened to 23 hours: the clocks went forward
    an hour two hours earlier. Yields (its name, that midnight as a UTC timestamp)."""
    if not os.access(ZONEINFO, os.W_OK) or not shutil.which("zic"):
        pytest.skip("needs root and zic, to put a zone of its own in the system's zone database")
    midnight = int(time.time()) + 15
    after = (-midnight) % 86400
    after = after - 86400 if after > 43200 else after  # (within a day of UTC)
    before = after - 3600
    change = datetime.datetime.fromtimestamp(midnight - 7200, datetime.timezone.utc)
    name = f"Floodgate-test/ShortDay{os.getpid()}x{midnight}"
    src = Path(f"/tmp/{name.replace('/', '-')}.zi")
    src.write_text(f"Zone {name} {hms(before)} - FGA {change:%Y %b %d %H:%M:%S}u\n"
                   f"    {hms(after)} - FGB\n")
    subprocess.run(["zic", "-d", str(ZONEINFO), str(src)], check=True, capture_output=True)
    try:
        yield name, midnight
    finally:
        (ZONEINFO / name).unlink(missing_ok=True)
        try:
            (ZONEINFO / name).parent.rmdir()
        except OSError:  # (another test's zone is there too)
            pass
        src.unlink(missing_ok=True)


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_a_quota_resets_at_the_midnight_that_ends_a_day_dst_shortened(kind, request, gateway_factory,
                                                                     zone_with_a_short_day):
    """Observed, not computed: a daily quota used up before a local midnight that ends a
    23-hour day is refused until that midnight and admitted from it on (an hour before
    the day's start + 24 h), on the memory store (the gateway's clock) and on Redis
    (Redis' clock, the key's expiry)."""
    zone, midnight = zone_with_a_short_day
    g = store_gateway(kind, request, gateway_factory, routes=route(2, "1d", zone))
    assert [req(g).status for _ in range(3)] == [200, 200, 429]
    r = req(g)
    left = midnight - time.time()
    assert left > 1, "the gateway took 14 s to start: the day ended before the test could look"
    assert r.status == 429 and left - 2 <= int(r.header("retry-after")) <= left + 2, (left, r.headers)
    if kind == "redis":
        server = request.getfixturevalue("redis_server")
        ends = {int(server.cli("pexpiretime", k)) for k in server.keys("fgtest:*")}
        assert ends == {midnight * 1000}, (ends, midnight)
    # (what is tested: the reset comes at the zone's midnight; polled, a deadline past it)
    while req(g).status == 429:
        assert time.time() < midnight + 5, "still refused 5 s after the short day's midnight"
        time.sleep(0.05)
    assert time.time() >= midnight - 1, "admitted before the day ended"
    r = req(g, "b")
    # The next day is a whole one: t is (almost) 24 hours.
    assert r.status == 200 and abs(t_of(r) - 86_400) <= 5, r.headers
