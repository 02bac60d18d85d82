"""W3C Trace Context for the upstream (tracing:): off by default, a request's traceparent
and tracestate go up as they came; with tracing.propagate every routed request goes up
with a traceparent naming the gateway's span, continuing the request's trace only when
its sender may name one (tracing.trust_incoming: trusted proxies by default) and it is
valid; the trace id is the access log's. Over HTTP/1.1 and both HTTP/2s."""
import json
import re

from conftest import get, wait_for

OVER_EVERY_PROTOCOL = True
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_PARENT = "00-" + CLIENT_TRACE + "-b7ad6b7169203331-01"
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$")


def tracing(propagate=True, trust=None, ratio=None):
    lines = ["tracing:", f"  propagate: {str(propagate).lower()}"]
    if trust:
        lines.append(f"  trust_incoming: {trust}")
    if ratio is not None:
        lines.append(f"  sample_ratio: {ratio}")
    return "\n".join(lines) + "\n"


def upstream_saw(g, extra=""):
    """The traceparent and tracestate fields the upstream was sent for one /echo."""
    r = g.request(get("/echo", extra=extra))
    assert r.status == 200, r.body[:200]
    fields = json.loads(r.body)["headers"]
    return ([v for k, v in fields if k.lower() == "traceparent"], [v for k, v in fields if k.lower() == "tracestate"])


def logged_trace_ids(g, n):
    """The trace_id of the first n access-log lines, once n are written."""
    wait_for(f"{n} access-log lines", lambda: len(g.access_log.read_text().splitlines()) >= n, 5)
    return [json.loads(line)["trace_id"] for line in g.access_log.read_text().splitlines()[:n]]


def with_client_trace(state=True):
    return f"traceparent: {CLIENT_PARENT}\r\n" + ("tracestate: vendor=abc\r\ntracestate: other=1\r\n" if state else "")


def test_off_by_default_the_fields_go_up_as_they_came(gateway_factory):
    g = gateway_factory(access_log="file", log_format="json")
    assert upstream_saw(g, with_client_trace()) == ([CLIENT_PARENT], ["vendor=abc", "other=1"])
    assert upstream_saw(g) == ([], [])
    assert logged_trace_ids(g, 2) == [None, None]


def test_an_untrusted_client_gets_a_new_trace_and_cannot_force_sampling(gateway_factory):
    # (the tests' trusted proxies are 10.0.0.0/8: the client at 127.0.0.1 is not one)
    g = gateway_factory(extra=tracing(ratio=0), access_log="file", log_format="json")
    parents, states = upstream_saw(g, with_client_trace())
    assert len(parents) == 1 and states == [], (parents, states)
    m = TRACEPARENT.match(parents[0])
    assert m and m.group(1) != CLIENT_TRACE and m.group(3) == "00", parents  # not sampled: ratio 0
    fresh, _ = upstream_saw(g)
    m2 = TRACEPARENT.match(fresh[0])
    assert m2 and m2.group(1) not in (CLIENT_TRACE, m.group(1))
    assert logged_trace_ids(g, 2) == [m.group(1), m2.group(1)]


def test_a_trusted_proxy_continues_its_trace_under_the_gateways_span(gateway_factory):
    g = gateway_factory(extra=tracing(ratio=0), trusted="127.0.0.1/32", access_log="file", log_format="json")
    parents, states = upstream_saw(g, with_client_trace())
    m = TRACEPARENT.match(parents[0])
    assert m and m.group(1) == CLIENT_TRACE and m.group(2) != "b7ad6b7169203331" and m.group(3) == "01", parents
    assert states == ["vendor=abc", "other=1"]
    # Invalid (upper case), or two of them: a new trace, and no tracestate.
    for bad in (f"traceparent: {CLIENT_PARENT.upper()}\r\ntracestate: vendor=abc\r\n",
                f"traceparent: {CLIENT_PARENT}\r\ntraceparent: {CLIENT_PARENT}\r\ntracestate: vendor=abc\r\n"):
        parents, states = upstream_saw(g, bad)
        m = TRACEPARENT.match(parents[0])
        assert m and m.group(1) != CLIENT_TRACE and states == [], (bad, parents, states)
    assert logged_trace_ids(g, 1) == [CLIENT_TRACE]


def test_trust_always_and_never(gateway_factory):
    always = gateway_factory(extra=tracing(trust="always"))
    assert TRACEPARENT.match(upstream_saw(always, with_client_trace())[0][0]).group(1) == CLIENT_TRACE
    never = gateway_factory(extra=tracing(trust="never", ratio=1), trusted="127.0.0.1/32")
    parents, states = upstream_saw(never, with_client_trace())
    m = TRACEPARENT.match(parents[0])
    assert m.group(1) != CLIENT_TRACE and m.group(3) == "01" and states == []  # sampled: ratio 1
