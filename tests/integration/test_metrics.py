"""/metrics on the admin listener: counters move by exactly the requests sent, per route,
status class, limit and outcome; labels never name a client."""
import re

from conftest import get, read_response, wait_until
from test_admin import admin_get, with_admin
from test_redis import limit, route


def scrape(g):
    r = admin_get(g, "/metrics")
    assert r.status == 200
    assert r.header("content-type").startswith("text/plain; version=0.0.4")
    series = {}
    for line in r.body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        series[name] = float(value)
    return series, r.body.decode()


def value(series, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for key, v in series.items():
        m = re.fullmatch(r"([a-z_][a-z0-9_]*)(?:\{(.*)\})?", key)
        got = ",".join(sorted((m.group(2) or "").split(","))) if m.group(2) else ""
        if m.group(1) == name and got == want:
            return v
    return 0.0


OUTCOMES = ("allowed", "denied", "shadow_denied", "store_error_allowed", "store_error_denied", "local_fallback",
            "delayed")


def decisions(g, route, limit):
    """{outcome: count} of one limit's decisions, from /metrics."""
    series, _ = scrape(g)
    return {o: value(series, "floodgate_ratelimit_decisions_total", route=route, limit=limit, outcome=o)
            for o in OUTCOMES}


def store_errors(g):
    """The store errors counted so far, all causes."""
    series, _ = scrape(g)
    return sum(value(series, "floodgate_store_errors_total", cause=c)
               for c in ("timeout", "disconnected", "not_connected", "protocol", "other"))


def send(g, path, n):
    statuses = []
    with g.connect() as s:
        for _ in range(n):
            s.sendall(get(path))
            statuses.append(read_response(s).status)
    return statuses


def test_requests_and_decisions_are_counted_exactly(gateway_factory):
    limits = (limit("fixed_window", name="per-ip", key="ip", limit=3, window="1h")
              + limit("fixed_window", name="soft", key="ip", limit=1, window="1h") + "        shadow: true\n")
    g = with_admin(lambda extra: gateway_factory(routes=route(limits), extra=extra, workers=2))
    before, _ = scrape(g)
    assert send(g, "/limited", 5) == [200, 200, 200, 429, 429]
    assert send(g, "/other", 4) == [200] * 4
    # A proxied response is counted once written, so the last one just after the client
    # has it (from the admin's thread, before its worker has counted it): awaited.
    rest = lambda: value(scrape(g)[0], "floodgate_requests_total", route="rest", code="2xx")  # noqa: E731
    assert wait_until(lambda: rest() - value(before, "floodgate_requests_total", route="rest", code="2xx") == 4,
                      10), rest()
    after, text = scrape(g)

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("floodgate_requests_total", route="r", code="2xx") == 3
    assert moved("floodgate_requests_total", route="r", code="4xx") == 2
    assert moved("floodgate_requests_total", route="rest", code="2xx") == 4
    # per-ip: 3 allowed, 2 denied. soft (shadow, limit 1): 1 allowed, then 4 shadow
    # denials (2 while per-ip admits, 2 beside per-ip's denials).
    assert moved("floodgate_ratelimit_decisions_total", route="r", limit="per-ip", outcome="allowed") == 3
    assert moved("floodgate_ratelimit_decisions_total", route="r", limit="per-ip", outcome="denied") == 2
    soft_allowed = moved("floodgate_ratelimit_decisions_total", route="r", limit="soft", outcome="allowed")
    soft_shadow = moved("floodgate_ratelimit_decisions_total", route="r", limit="soft", outcome="shadow_denied")
    assert soft_allowed == 1 and soft_shadow == 4
    # Bounded labels: no client address anywhere (the configured servers' addresses
    # label their own series).
    assert "127.0.0.1" not in without_server_series(text)
    assert value(after, "floodgate_build_info", version=re.search(r'version="([^"]+)"', text).group(1)) == 1


def test_open_downstream_connections_are_counted(gateway_factory):
    g = with_admin(lambda extra: gateway_factory(extra=extra, workers=2))

    def open_now():
        return value(scrape(g)[0], "floodgate_downstream_connections")
    # (a connection closed a moment ago may still be counted until the gateway reads its end)
    assert wait_until(lambda: open_now() == 0, 10), open_now()
    held = [g.connect() for _ in range(3)]
    try:
        for s in held:  # each accepted, and answered: counted
            s.sendall(get("/echo"))
            assert read_response(s).status == 200
        assert open_now() == 3
    finally:
        for s in held:
            s.close()
    assert wait_until(lambda: open_now() == 0, 10), open_now()


def test_store_errors_and_the_deny_cache_are_counted(gateway_factory, redis_server):
    limits = limit("fixed_window", name="per-ip", key="ip", limit=2, window="1h")
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=redis_server.address,
                                                 routes=route(limits, on_error="deny"), extra=extra))
    before, _ = scrape(g)
    assert send(g, "/limited", 6) == [200, 200, 429, 429, 429, 429]
    mid, _ = scrape(g)
    # The first denial comes from Redis, the three after it from the deny cache.
    assert value(mid, "floodgate_deny_cache_hits_total") - value(before, "floodgate_deny_cache_hits_total") == 3
    assert (value(mid, "floodgate_ratelimit_decisions_total", route="r", limit="per-ip", outcome="denied")
            - value(before, "floodgate_ratelimit_decisions_total", route="r", limit="per-ip", outcome="denied")) == 4
    # With Redis gone, the cached denial still answers, and is still counted.
    redis_server.stop()
    assert send(g, "/limited", 3) == [429, 429, 429]
    after, _ = scrape(g)
    assert value(after, "floodgate_deny_cache_hits_total") - value(mid, "floodgate_deny_cache_hits_total") == 3


def test_store_error_outcomes(gateway_factory, redis_server):
    limits = limit("fixed_window", name="per-ip", key="ip", limit=100, window="1h")
    routes = route(limits, on_error="deny") + """  - name: lenient
    match:
      path_prefix: /lenient
    upstream: api
    on_store_error: allow
    limits:
""" + limit("fixed_window", name="per-ip", key="ip", limit=100, window="1h") + """  - name: local
    match:
      path_prefix: /local
    upstream: api
    on_store_error: local
    limits:
""" + limit("fixed_window", name="per-ip", key="ip", limit=100, window="1h")
    # "rest" (from route()) comes before the extra routes: give them paths it does not take first.
    routes = routes.replace("""  - name: rest
    match:
      path_prefix: /
    upstream: api
""", "") + """  - name: rest
    match:
      path_prefix: /
    upstream: api
"""
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=redis_server.address, routes=routes,
                                                 extra=extra))
    redis_server.stop()
    before, _ = scrape(g)
    assert send(g, "/limited", 2) == [503, 503]
    assert send(g, "/lenient", 3) == [200] * 3
    assert send(g, "/local", 4) == [200] * 4
    after, _ = scrape(g)

    def moved(route_name, outcome):
        return (value(after, "floodgate_ratelimit_decisions_total", route=route_name, limit="per-ip", outcome=outcome)
                - value(before, "floodgate_ratelimit_decisions_total", route=route_name, limit="per-ip",
                        outcome=outcome))

    assert moved("r", "store_error_denied") == 2
    assert moved("lenient", "store_error_allowed") == 3
    assert moved("local", "local_fallback") == 4
    assert value(after, "floodgate_requests_total", route="r", code="5xx") - \
        value(before, "floodgate_requests_total", route="r", code="5xx") == 2


def test_store_calls_carry_every_request_and_failures_are_counted_by_cause(gateway_factory, redis_server):
    limits = limit("fixed_window", name="per-ip", key="ip", limit=1000, window="1h")
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=redis_server.address,
                                                 routes=route(limits, on_error="allow"), extra=extra))
    before, _ = scrape(g)
    assert send(g, "/limited", 7) == [200] * 7
    mid, _ = scrape(g)

    def moved(a, b, name, **labels):
        return value(b, name, **labels) - value(a, name, **labels)

    # One request at a time: one call each; every request's limits went in a call.
    assert moved(before, mid, "floodgate_store_call_requests_total") == 7
    assert moved(before, mid, "floodgate_store_calls_total") == 7
    redis_server.stop()
    assert send(g, "/limited", 3) == [200] * 3  # on_store_error: allow (counted below)
    after, text = scrape(g)
    failed = sum(moved(mid, after, "floodgate_store_errors_total", cause=c)
                 for c in ("timeout", "disconnected", "not_connected", "protocol", "other"))
    assert failed == 3, text
    assert moved(mid, after, "floodgate_ratelimit_decisions_total", route="r", limit="per-ip",
                 outcome="store_error_allowed") == 3


def fnv1a64(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def test_pooled_connections_and_the_config_hash(gateway_factory):
    g = with_admin(lambda extra: gateway_factory(extra=extra))
    assert send(g, "/anything", 3) == [200] * 3
    # The requests went one after another over one pooled upstream connection, back in
    # the pool just after the last response was written: awaited.
    assert wait_until(lambda: value(scrape(g)[0], "floodgate_upstream_idle_connections") == 1, 10), scrape(g)[1]
    series, text = scrape(g)
    assert value(series, "floodgate_upstream_idle_connections") == 1, text
    assert value(series, "floodgate_config_info", hash=fnv1a64(g.config.read_bytes())) == 1, text


def test_histograms_count_every_upstream_answer_and_store_call(gateway_factory, redis_server):
    limits = limit("fixed_window", name="per-ip", key="ip", limit=3, window="1h")
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=redis_server.address, routes=route(limits),
                                                 extra=extra, workers=2))
    assert send(g, "/limited", 5) == [200, 200, 200, 429, 429]
    assert send(g, "/slow?ms=300", 2) == [200, 200]
    series, text = scrape(g)
    h = "floodgate_upstream_response_seconds"
    # Denied requests never went upstream.
    assert value(series, h + "_count", route="r") == 3, text
    assert value(series, h + "_count", route="rest") == 2, text
    # Cumulative buckets: the two slow answers take 300 ms at least (the upstream
    # sleeps that long), so none is in the buckets up to 250 ms; and less than 1 s
    # (700 ms for the rest of the round trip, on any machine).
    assert value(series, h + "_bucket", route="rest", le="0.05") == 0, text
    assert value(series, h + "_bucket", route="rest", le="0.25") == 0, text
    assert value(series, h + "_bucket", route="rest", le="1") == 2, text
    assert value(series, h + "_bucket", route="rest", le="+Inf") == 2, text
    # (each under the upstream's response_timeout, 2 s, or it had been a 504)
    assert 0.6 <= value(series, h + "_sum", route="rest") < 4.0, text
    # Every store call has its round trip observed: one call per request (one at a
    # time, over one connection and so one worker), the deny cache answering the second
    # denial: 3 admitted and the first denial.
    calls = value(series, "floodgate_store_calls_total")
    assert calls == 4, text
    assert value(series, "floodgate_store_call_seconds_count") == calls, text
    assert value(series, "floodgate_store_call_seconds_bucket", le="+Inf") == calls, text


def without_server_series(text):
    """The exposition without the per-server series, whose `server` label is a configured
    address (what no other label may carry is a client's)."""
    return "\n".join(l for l in text.splitlines() if "floodgate_upstream_server_" not in l)


def test_metrics_stay_bounded_with_20_routes_of_3_limits(gateway_factory):
    routes = ""
    for i in range(20):
        routes += f"""  - name: route{i}
    match:
      path_prefix: /r{i}/
    upstream: api
    limits:
"""
        routes += limit("fixed_window", name="per-ip", key="ip", limit=1, window="1h")
        routes += limit("fixed_window", name="per-key", key="header:X-Api-Key", limit=100, window="1h")
        routes += limit("token_bucket", name="global", rate="1000/s", burst=1000)
    g = with_admin(lambda extra: gateway_factory(routes=routes, extra=extra))
    for i in range(20):
        # One allowed, one denied by per-ip: two outcomes, two status classes a route.
        assert send(g, f"/r{i}/x", 2) == [200, 429]
    assert send(g, "/nowhere", 1) == [404]
    _, text = scrape(g)
    lines = text.splitlines()
    print(f"/metrics: {len(lines)} lines")
    # (six families a configured server, three lines each for one server)
    assert len(lines) < 320, f"{len(lines)} lines:\n{text}"
    # Bounded labels only: routes, limits, outcomes, status classes, buckets, the
    # configured upstreams and their servers.
    labels = set(re.findall(r'(\w+)="', text))
    assert labels <= {"route", "limit", "outcome", "code", "le", "cause", "result", "hash", "version", "upstream",
                      "server"}, labels
    assert "127.0.0.1" not in without_server_series(text) and "/r0/x" not in text
