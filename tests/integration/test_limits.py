"""Rate limiting through the real binary, with the embedded memory store, over HTTP/1.1,
HTTP/2 on TLS and cleartext HTTP/2 (protocols.py)."""
import json
from conftest import Thread, get, join_all, read_response, wait_until

OVER_EVERY_PROTOCOL = True


def route(limits, response="", path="/limited", extra=""):
    return f"""  - name: r
    match:
      path_prefix: {path}
    upstream: api
{extra}{response}    limits:
{limits}
  - name: rest
    match:
      path_prefix: /
    upstream: api
"""


PER_IP = """      - name: per-ip
        algorithm: sliding_log
        key: ip
        limit: 3
        window: 5s
"""


def test_each_ip_three_times_in_five_seconds(gateway_factory):
    g = gateway_factory(routes=route(PER_IP))
    seen = []
    for i in range(3):
        r = g.request(get(f"/limited?i={i}"))
        assert r.status == 200
        assert r.header("ratelimit-policy") == '"per-ip";q=3;w=5'
        seen.append(r.header("ratelimit"))
    assert seen == ['"per-ip";r=2;t=5', '"per-ip";r=1;t=5', '"per-ip";r=0;t=5']
    r = g.request(get("/limited"))
    assert r.status == 429
    assert r.header("retry-after") == "5"
    assert r.header("ratelimit") == '"per-ip";r=0;t=5'
    assert r.header("content-type") == "application/problem+json"
    body = json.loads(r.body)
    assert body == {"type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
                    "title": "Request cannot be satisfied as assigned quota has been exceeded", "status": 429,
                    "detail": "limit per-ip of route r: retry in 5 s", "violated-policies": ["per-ip"],
                    "limit": "per-ip", "retry_after": 5}
    # other routes are not limited
    assert g.request(get("/echo")).status == 200


def test_custom_response_and_legacy_headers(gateway_factory):
    resp = """    response:
      status: 503
      body: "slow down: {limit} of {route} in {retry_after} s ({status}) {nope}"
      content_type: text/plain
      headers: legacy
"""
    g = gateway_factory(routes=route(PER_IP, response=resp))
    r = g.request(get("/limited"))
    assert r.status == 200 and r.header("ratelimit") is None
    assert (r.header("x-ratelimit-limit"), r.header("x-ratelimit-remaining"), r.header("x-ratelimit-reset")) == \
        ("3", "2", "5")
    g.request(get("/limited"))
    g.request(get("/limited"))
    r = g.request(get("/limited"))
    assert r.status == 503 and r.header("content-type") == "text/plain"
    assert r.body == b"slow down: per-ip of r in 5 s (503) {nope}"
    assert r.header("x-ratelimit-remaining") == "0" and r.header("retry-after") == "5"


def test_headers_both_and_none(gateway_factory):
    both = gateway_factory(routes=route(PER_IP, response="    response:\n      headers: both\n"))
    r = both.request(get("/limited"))
    assert r.header("ratelimit") and r.header("x-ratelimit-limit") == "3"
    none = gateway_factory(routes=route(PER_IP, response="    response:\n      headers: none\n"))
    r = none.request(get("/limited"))
    assert r.header("ratelimit") is None and r.header("x-ratelimit-limit") is None
    for _ in range(3):
        r = none.request(get("/limited"))
    assert r.status == 429 and r.header("retry-after") == "5" and r.header("ratelimit") is None


def test_whole_endpoint_shared_limit(gateway_factory):
    limits = """      - name: endpoint
        algorithm: fixed_window
        key: global
        limit: 5
        window: 1m
"""
    g = gateway_factory(routes=route(limits))
    statuses = [g.request(get("/limited", extra=f"X-Forwarded-For: 10.9.9.{i}\r\n")).status for i in range(8)]
    assert statuses == [200] * 5 + [429] * 3


def test_denied_by_one_limit_consumes_nothing_from_the_other(gateway_factory):
    limits = """      - name: tight
        algorithm: fixed_window
        key: header:X-User
        limit: 2
        window: 1m
      - name: loose
        algorithm: fixed_window
        key: global
        limit: 4
        window: 1m
"""
    g = gateway_factory(routes=route(limits))
    assert g.request(get("/limited", extra="X-User: a\r\n")).status == 200
    assert g.request(get("/limited", extra="X-User: a\r\n")).status == 200
    for _ in range(5):  # denied by "tight": "loose" must not be charged
        assert g.request(get("/limited", extra="X-User: a\r\n")).status == 429
    r = g.request(get("/limited", extra="X-User: b\r\n"))
    assert r.status == 200
    assert r.header("ratelimit") == '"tight";r=1;t=60, "loose";r=1;t=60'


def test_key_sources_and_missing_key(gateway_factory):
    limits = """      - name: by-key
        algorithm: fixed_window
        key: [header:X-Api-Key, query:tenant]
        limit: 1
        window: 1m
        on_missing_key: skip
"""
    g = gateway_factory(routes=route(limits))
    assert g.request(get("/limited?tenant=t1", extra="X-Api-Key: k1\r\n")).status == 200
    assert g.request(get("/limited?tenant=t1", extra="X-Api-Key: k1\r\n")).status == 429
    # the same value percent-encoded is the same identity
    assert g.request(get("/limited?tenant=t%31", extra="X-Api-Key: k1\r\n")).status == 429
    assert g.request(get("/limited?tenant=t2", extra="X-Api-Key: k1\r\n")).status == 200
    assert g.request(get("/limited?tenant=t1", extra="X-Api-Key: k2\r\n")).status == 200
    # skip: without the header the limit does not apply
    for _ in range(3):
        assert g.request(get("/limited?tenant=t1")).status == 200
    anon = gateway_factory(routes=route(limits.replace("skip", "anonymous")))
    assert anon.request(get("/limited")).status == 200
    assert anon.request(get("/limited")).status == 429  # all key-less clients share one identity


def test_cookie_key(gateway_factory):
    limits = """      - name: session
        algorithm: token_bucket
        key: cookie:sid
        rate: 1/m
        burst: 2
"""
    g = gateway_factory(routes=route(limits))
    codes = [g.request(get("/limited", extra="Cookie: a=1; sid=abc\r\n")).status for _ in range(3)]
    assert codes == [200, 200, 429]
    assert g.request(get("/limited", extra="Cookie: sid=other\r\n")).status == 200


def test_identity_from_trusted_proxy_only(gateway_factory):
    limits = PER_IP.replace("limit: 3", "limit: 1")
    trusted = gateway_factory(routes=route(limits), trusted="127.0.0.1/32")
    assert trusted.request(get("/limited", extra="X-Forwarded-For: 198.51.100.1\r\n")).status == 200
    assert trusted.request(get("/limited", extra="X-Forwarded-For: 198.51.100.2\r\n")).status == 200
    assert trusted.request(get("/limited", extra="X-Forwarded-For: 198.51.100.1\r\n")).status == 429
    untrusted = gateway_factory(routes=route(limits))
    # a client that is not a trusted proxy cannot pick a new identity per request
    assert untrusted.request(get("/limited", extra="X-Forwarded-For: 198.51.100.1\r\n")).status == 200
    assert untrusted.request(get("/limited", extra="X-Forwarded-For: 198.51.100.2\r\n")).status == 429


def test_one_connection_carries_many_identities(gateway_factory):
    """A trusted proxy's one keep-alive connection carries many clients: each request is
    counted under its own client's key (a session keeps a request's checks for the next
    one only while the client, route and config are the same)."""
    limits = PER_IP.replace("limit: 3", "limit: 1")
    g = gateway_factory(routes=route(limits), trusted="127.0.0.1/32")
    with g.connect() as s:
        def status(path, client):
            s.sendall(get(path, extra=f"X-Forwarded-For: {client}\r\n"))
            return read_response(s).status
        assert status("/limited", "198.51.100.1") == 200
        assert status("/limited", "198.51.100.2") == 200
        assert status("/limited", "198.51.100.1") == 429
        assert status("/limited", "198.51.100.3") == 200
        assert status("/other", "198.51.100.4") == 200  # a route without limits between
        assert status("/limited", "198.51.100.3") == 429
        assert status("/limited", "198.51.100.4") == 200
        assert status("/limited", "198.51.100.4") == 429
        assert status("/limited", "198.51.100.2") == 429


def test_shadow_limit_never_denies(gateway_factory):
    limits = PER_IP.replace("limit: 3", "limit: 1") + "        shadow: true\n"
    g = gateway_factory(routes=route(limits))
    assert [g.request(get("/limited")).status for _ in range(4)] == [200] * 4
    g.stop()
    assert "shadow limit r/per-ip would deny" in g.log_text()


def test_denied_request_with_expect_never_uploads(gateway_factory, upstream):
    g = gateway_factory(routes=route(PER_IP.replace("limit: 3", "limit: 1")))
    assert g.request(b"POST /limited HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").status == 200
    with g.connect() as s:
        s.sendall(b"POST /limited HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
        r = read_response(s, skip_informational=False)
        assert r.status == 429  # not 100 Continue


def test_concurrency_limit_and_release(gateway_factory, upstream):
    limits = """      - name: inflight
        algorithm: concurrency
        key: global
        limit: 2
"""
    # (the two slow ones outlast the third's answer on any machine; under the
    # upstream's response timeout)
    g = gateway_factory(routes=route(limits, path="/slow"), upstream_opts={"response_timeout": "20s"})
    upstream.reset()
    results = []

    def call():
        results.append(g.request(get("/slow?ms=5000"), timeout=30).status)

    threads = [Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        # Both hold their lease once the upstream has them.
        assert wait_until(lambda: upstream.stats()["requests"] == 2, 5), upstream.stats()
        third = g.request(get("/slow?ms=1"))
        assert results == [], results  # (answered while the two were still in flight)
    finally:
        join_all(threads, 30)
    assert sorted(results) == [200, 200]
    assert third.status == 429 and third.header("retry-after") == "1"
    # Leases were released when the responses finished: each just after its response is
    # written, so after the client has it (awaited, well within the leases' 60 s
    # lifetime: released, not expired). Two held at once fit only if both went back.
    tries = []

    def two_at_once():
        got = []
        pair = [Thread(target=lambda: got.append(g.request(get("/slow?ms=300"), timeout=30).status))
                for _ in range(2)]
        for t in pair:
            t.start()
        join_all(pair, 30)
        tries.append(sorted(got))
        return tries[-1] == [200, 200]
    assert wait_until(two_at_once, 10), tries


def exact_route(limits, match_extra=""):
    """An exact /limited route with `limits`, then a catch-all without."""
    return f"""  - name: r
    match:
      path: /limited
{match_extra}    upstream: api
    limits:
{limits}  - name: rest
    match:
      path_prefix: /
    upstream: api
"""


def test_path_parameters_cannot_bypass_a_limited_route(gateway_factory):
    # Tomcat and Jetty (the Spring services behind floodgate) serve "/limited;x=1" as
    # "/limited" and "/x/..;/limited" as "/limited": the limit must count them too.
    g = gateway_factory(routes=exact_route(PER_IP))
    for target in ("/limited;x=1", "/x/..;/limited", "/limited;jsessionid=A?q=1"):
        r = g.request(get(target))
        assert r.status == 200 and r.header("ratelimit-policy") == '"per-ip";q=3;w=5', target
    assert g.request(get("/limited;y")).status == 429
    # a literal ";" elsewhere in a segment is no bypass of other routes' matching
    assert g.request(get("/limitedx;y")).status == 200


def test_head_and_a_trailing_slash_count_against_a_get_route(gateway_factory):
    # Spring serves HEAD with the GET handler, and Spring MVC 5 "/limited/" with the
    # "/limited" one: neither may slip past the GET route's limit to the catch-all.
    g = gateway_factory(routes=exact_route(PER_IP, "      methods: [GET]\n"))
    with g.connect() as s:
        s.sendall(b"HEAD /limited HTTP/1.1\r\nHost: example.com\r\n\r\n")
        r = read_response(s, head_request=True)
        assert r.status == 200 and r.header("ratelimit") == '"per-ip";r=2;t=5'
        s.sendall(get("/limited/"))
        assert read_response(s).header("ratelimit") == '"per-ip";r=1;t=5'
        s.sendall(get("/limited"))
        assert read_response(s).status == 200
        # the 429 to a HEAD has its head only, and the connection goes on
        s.sendall(b"HEAD /limited HTTP/1.1\r\nHost: example.com\r\n\r\n")
        r = read_response(s, head_request=True)
        assert r.status == 429 and r.header("retry-after") == "5"
        s.sendall(get("/echo"))
        assert read_response(s).status == 200
    # other methods are not the GET route's
    assert g.request(b"POST /limited HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\n\r\n").status == 200
