"""W3C Trace Context for the upstream (tracing:): off by default, a request's traceparent
and tracestate go up as they came; with tracing.propagate every routed request goes up
with a traceparent naming the gateway's span, continuing the request's trace only when
its sender may name one (tracing.trust_incoming: trusted proxies by default) and it is
valid; the trace id is the access log's. With tracing.export, spans go to a collector
(a receiver here that decodes them): a request's, and a child per upstream try whose id
is the parent the upstream was told of; denials whatever the sampling; a collector that
is silent or gone costs no request, and what it drops is counted. Over HTTP/1.1 and
both HTTP/2s."""
import http.server
import json
import re
import socket
import threading
import time

import pytest

from conftest import Thread, get, wait_for
from test_admin import with_admin
from test_metrics import scrape, value

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


# --- spans exported (tracing.export) ---------------------------------------------------

class Collector:
    """An OTLP/HTTP receiver: decodes each export's JSON body and keeps its spans, by
    span id. `silent`: takes each export and never answers (until stop())."""

    def __init__(self, silent=False):
        self.spans, self.errors, self.exports = {}, [], 0
        self.lock = threading.Lock()  # (the server's threads add, the test reads)
        self.silent = silent
        self.release = threading.Event()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                try:
                    body = self.rfile.read(int(self.headers["Content-Length"]))
                    assert self.path == "/v1/traces", self.path
                    assert self.headers["Content-Type"] == "application/json", self.headers["Content-Type"]
                    doc = json.loads(body)
                    got = {}
                    for rs in doc["resourceSpans"]:
                        service = {a["key"]: a["value"]["stringValue"] for a in rs["resource"]["attributes"]}
                        for ss in rs["scopeSpans"]:
                            for s in ss["spans"]:
                                s["service"] = service["service.name"]
                                s["attrs"] = {a["key"]: next(iter(a["value"].values())) for a in s["attributes"]}
                                got[s["spanId"]] = s
                    with collector.lock:  # (an export's spans all at once: a request's come together)
                        collector.spans.update(got)
                        collector.exports += 1
                except Exception as e:  # (a helper thread's failure is the test's: checked by the test)
                    collector.errors.append(repr(e))
                if collector.silent:
                    collector.release.wait(60)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = Thread(target=self.server.serve_forever)
        self.thread.start()

    def where(self):
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def all(self):
        with self.lock:
            return list(self.spans.values())

    def requests_spans(self):
        return [s for s in self.all() if s["kind"] == 2]

    def children(self, parent):
        return sorted((s for s in self.all() if s.get("parentSpanId") == parent["spanId"] and s["kind"] == 3),
                      key=lambda s: int(s["attrs"]["floodgate.try"]))

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
        assert not self.errors, self.errors


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.stop()


LIMITED_ROUTES = """  - name: limited
    match:
      path_prefix: /limited
    upstream: api
    limits:
      - name: two_a_minute
        key: global
        algorithm: fixed_window
        limit: 2
        window: 1m
  - name: all
    match:
      path_prefix: /
    upstream: api
"""


def exporting(where, ratio=1, more=""):
    return (tracing(ratio=ratio) + f"  export:\n    endpoint: {where}\n    interval: 50ms\n    service_name: edge\n"
            + more)


def test_spans_name_their_parents_the_decision_and_the_try_the_upstream_saw(gateway_factory, collector, protocol):
    g = gateway_factory(extra=exporting(collector.where()), trusted="127.0.0.1/32", routes=LIMITED_ROUTES)
    # A trusted proxy's trace, continued: the gateway's span is a child of the proxy's.
    parents, _ = upstream_saw(g, with_client_trace(False))
    m = TRACEPARENT.match(parents[0])
    assert m and m.group(1) == CLIENT_TRACE, parents
    statuses = [g.request(get("/limited")).status for _ in range(3)]
    assert statuses == [200, 200, 429], statuses
    spans = wait_for("4 request spans", lambda: len(collector.requests_spans()) >= 4 and collector.requests_spans(), 10)
    echo = next(s for s in spans if s["attrs"]["url.path"] == "/echo")
    assert echo["traceId"] == CLIENT_TRACE and echo["parentSpanId"] == "b7ad6b7169203331", echo
    assert echo["service"] == "edge" and echo["name"] == "GET all", echo
    assert echo["attrs"]["http.response.status_code"] == "200" and echo["attrs"]["floodgate.decision"] == "none"
    assert echo["attrs"]["network.protocol.version"] == ("1.1" if protocol == "http1" else "2"), echo
    assert int(echo["startTimeUnixNano"]) <= int(echo["endTimeUnixNano"])
    # Its one try: a child of the request's span, and the parent the upstream was told of.
    (attempt,) = wait_for("the try's span", lambda: collector.children(echo), 10)
    assert attempt["spanId"] == m.group(2) and attempt["traceId"] == CLIENT_TRACE, (attempt, parents)
    assert attempt["attrs"]["http.response.status_code"] == "200" and attempt["attrs"]["floodgate.upstream"] == "api"
    assert "status" not in attempt or not attempt["status"].get("code"), attempt
    limited = sorted((s for s in spans if s["attrs"]["url.path"] == "/limited"), key=lambda s: s["startTimeUnixNano"])
    assert [s["attrs"]["floodgate.decision"] for s in limited] == ["allowed", "allowed", "denied"], limited
    denied = limited[2]
    assert denied["attrs"]["http.response.status_code"] == "429" and denied["attrs"]["floodgate.limit"] == "two_a_minute"
    assert "floodgate.store_us" in denied["attrs"] and "parentSpanId" not in denied, denied  # (a new trace: a root)
    assert collector.children(denied) == []  # (never sent upstream)


def test_a_failed_try_is_a_span_of_its_own_and_the_retry_another(gateway_factory, collector, upstream):
    # One worker, round robin, never ejected: a refused connect is every other first try.
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    try:
        section = (f"  api:\n    servers:\n      - \"127.0.0.1:{dead.getsockname()[1]}\"\n      - \"{upstream.address}\"\n"
                   "    connect_timeout: 2s\n    response_timeout: 10s\n    retries: 1\n    eject: { failures: 0 }\n")
        g = gateway_factory(upstreams=section, extra=exporting(collector.where()))
        assert [g.request(get("/echo")).status for _ in range(2)] == [200, 200]
        # (two requests, three tries: one refused and retried, one straight through)
        wait_for("5 spans", lambda: len(collector.all()) >= 5, 10)
        tries = [collector.children(s) for s in collector.requests_spans()]
        assert sorted(len(t) for t in tries) == [1, 2], tries
    finally:
        dead.close()
    retried = next(t for t in tries if len(t) == 2)
    first, second = retried
    assert first["status"]["code"] == 2 and "connect" in first["status"]["message"], first
    assert "http.response.status_code" not in first["attrs"]
    assert second["attrs"]["http.response.status_code"] == "200" and second["attrs"]["floodgate.try"] == "2"
    assert second["attrs"]["server.address"] == upstream.address, second
    assert int(first["endTimeUnixNano"]) <= int(second["startTimeUnixNano"])


def test_a_denied_request_is_exported_whatever_the_sampling_unless_told_not(gateway_factory, collector):
    g = gateway_factory(extra=exporting(collector.where(), ratio=0), routes=LIMITED_ROUTES)
    assert [g.request(get("/limited")).status for _ in range(3)] == [200, 200, 429]
    (denied,) = wait_for("the denial's span", lambda: collector.requests_spans(), 10)
    assert denied["attrs"]["floodgate.decision"] == "denied"
    # (the allowed ones went before it, unsampled: none came)
    assert len(collector.all()) == 1, collector.all()
    quiet = gateway_factory(extra=exporting(collector.where(), ratio=0, more="    denied_per_second: 0\n"), routes=LIMITED_ROUTES,
                            trusted="127.0.0.1/32")
    assert [quiet.request(get("/limited")).status for _ in range(3)] == [200, 200, 429]
    # A sampled request after them: once its span is in, nothing before it was sent.
    sampled = quiet.request(get("/echo", extra=f"traceparent: {CLIENT_PARENT}\r\n"))
    assert sampled.status == 200
    wait_for("the sampled request's span", lambda: any(s["attrs"]["url.path"] == "/echo"
                                                       for s in collector.requests_spans()), 10)
    limited = [s for s in collector.requests_spans() if s["attrs"]["url.path"] == "/limited"]
    assert limited == [denied], limited  # (the first gateway's alone)


def test_unsampled_denials_are_sent_a_few_a_second_at_most(gateway_factory, collector):
    g = gateway_factory(extra=exporting(collector.where(), ratio=0, more="    denied_per_second: 3\n"),
                        routes=LIMITED_ROUTES, trusted="127.0.0.1/32")
    # (the gateway's steady clock and time.monotonic() are one clock, CLOCK_MONOTONIC:
    # the seconds the denials fell in are known)
    began = time.monotonic()
    statuses = [g.request(get("/limited")).status for _ in range(20)]
    ended = time.monotonic()
    assert statuses == [200, 200] + [429] * 18, statuses
    seconds = int(ended) - int(began) + 1
    # A sampled request after them: once its span is in, every denial's that was sent is.
    assert g.request(get("/echo", extra=f"traceparent: {CLIENT_PARENT}\r\n")).status == 200
    wait_for("the sampled request's span", lambda: any(s["attrs"]["url.path"] == "/echo"
                                                       for s in collector.requests_spans()), 10)
    denials = [s for s in collector.requests_spans() if s["attrs"]["url.path"] == "/limited"]
    assert all(s["attrs"]["floodgate.decision"] == "denied" for s in denials), denials
    assert 3 <= len(denials) <= 3 * seconds, (len(denials), seconds)


def test_a_silent_collector_costs_no_request_and_what_it_drops_is_counted(gateway_factory):
    silent = Collector(silent=True)
    try:
        more = "    queue: 4\n    batch: 4\n    timeout: 30s\n"
        g = with_admin(lambda extra: gateway_factory(extra=exporting(silent.where(), more=more) + extra))
        # Each export waits 30 s for an answer that never comes; the requests do not wait
        # for it (each would time out at 10 s here if they did).
        assert [g.request(get("/echo"), timeout=10).status for _ in range(20)] == [200] * 20
        series, _ = scrape(g)
        dropped = value(series, "floodgate_trace_spans_dropped_total", reason="queue_full")
        # two spans a request (its own, its try's): at most 4 in the export that hangs
        # and 4 queued behind it
        assert dropped >= 40 - 8, series
        assert value(series, "floodgate_trace_spans_exported_total") == 0
    finally:
        silent.stop()


def test_a_collector_that_refuses_connections_drops_its_batches_counted(gateway_factory):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    try:
        where = f"http://127.0.0.1:{dead.getsockname()[1]}/v1/traces"
        g = with_admin(lambda extra: gateway_factory(extra=exporting(where) + extra))
        assert [g.request(get("/echo")).status for _ in range(5)] == [200] * 5
        failed = wait_for("the failed exports counted", lambda: value(scrape(g)[0], "floodgate_trace_spans_dropped_total",
                                                                       reason="export_failed") >= 10, 10)
        assert failed
        assert "tracing.export: the collector at" in g.log_text()
    finally:
        dead.close()
