"""Forwarding behaviour: headers, keep-alive, pipelining, framing both ways."""
import json
import socket
import time

from conftest import Reader, get, is_closed, read_response, wait_until


def test_forwards_and_rewrites_headers(gateway):
    r = gateway.request(b"GET /echo?x=1 HTTP/1.1\r\nHost: api.example.com\r\nX-Forwarded-For: 203.0.113.9\r\n"
                        b"X-Forwarded-Proto: https\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\n"
                        b"Keep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Authorization: Basic x\r\n"
                        b"Connection: close\r\n\r\n")
    assert r.status == 200
    seen = r.json()
    names = [k.lower() for k, _ in seen["headers"]]
    hdr = {k.lower(): v for k, v in seen["headers"]}
    assert seen["target"] == "/echo?x=1" and seen["version"] == "HTTP/1.1"
    # hop-by-hop and Connection-named headers never reach the upstream
    for gone in ("connection", "keep-alive", "te", "proxy-authorization", "x-secret"):
        assert gone not in names, gone
    assert hdr["host"] == "api.example.com"
    # peer 127.0.0.1 is not a trusted proxy: its XFF is dropped (the upstream sees the
    # peer alone, the client floodgate limited), and its X-Forwarded-Proto is not believed
    assert hdr["x-forwarded-for"] == "127.0.0.1"
    assert hdr["x-real-ip"] == "127.0.0.1"
    assert hdr["x-forwarded-proto"] == "http"
    assert hdr["x-forwarded-host"] == "api.example.com"
    assert len(hdr["x-request-id"]) == 32
    # the response's hop-by-hop headers are removed too, the id is echoed
    assert r.header("x-upstream") == "yes"
    assert r.header("x-hop") is None and r.header("keep-alive") is None
    assert r.header("connection") == "close"


def test_empty_response_body_is_relayed_at_once(gateway_factory):
    """A response of Content-Length: 0 is complete with its head: relayed at once, not
    after waiting on the upstream connection for a body that never comes (until the
    response timeout, 20 s here: at once is well before)."""
    gateway = gateway_factory(upstream_opts={"response_timeout": "20s"})
    with gateway.connect(timeout=30) as s:
        rd = Reader(s)
        for _ in range(3):
            start = time.monotonic()
            s.sendall(get("/download?bytes=0"))
            r = read_response(s, reader=rd)
            took = time.monotonic() - start
            assert r.status == 200 and r.body == b""
            assert took < 5, f"relayed after {took:.2f}s"


def test_request_id_kept_when_present(gateway):
    r = gateway.request(get("/echo", extra="X-Request-Id: abc-123\r\n"))
    hdr = {k.lower(): v for k, v in r.json()["headers"]}
    assert hdr["x-request-id"] == "abc-123"


def test_access_log_line(gateway_factory):
    g = gateway_factory(access_log="file")
    r = g.request(get("/echo", extra="X-Request-Id: log-me-42\r\n"))
    assert r.status == 200
    g.stop()
    line = g.access_log.read_text().strip().splitlines()[-1]
    assert "log-me-42" in line and '"GET /echo"' in line and " 200 " in line and "127.0.0.1" in line


def test_keep_alive_reuses_one_upstream_connection(gateway, upstream):
    upstream.reset()
    with gateway.connect() as s:
        rd = Reader(s)
        for i in range(50):
            s.sendall(get(f"/echo?i={i}"))
            r = read_response(s, reader=rd)
            assert r.status == 200
            assert r.json()["target"] == f"/echo?i={i}"
    st = upstream.stats()
    assert st["requests"] == 50
    assert st["connections"] == 1


def test_many_clients_share_pooled_connections(gateway, upstream):
    upstream.reset()
    for i in range(20):
        r = gateway.request(get(f"/echo?c={i}", extra="Connection: close\r\n"))
        assert r.status == 200
    assert upstream.stats()["connections"] == 1


def test_pipelined_requests_answered_in_order(gateway):
    with gateway.connect() as s:
        s.sendall(b"".join(get(f"/echo?n={i}") for i in range(10)) +
                  b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + get("/echo?n=last"))
        rd = Reader(s)
        for i in range(10):
            assert read_response(s, reader=rd).json()["target"] == f"/echo?n={i}"
        assert read_response(s, reader=rd).json()["length"] == 5
        assert read_response(s, reader=rd).json()["target"] == "/echo?n=last"


def test_no_route_is_404_json(gateway_factory):
    g = gateway_factory(routes="""  - name: only
    match:
      path: /only
      methods: [GET]
      host: api.example.com
    upstream: api
""")
    r = g.request(get("/other", host="api.example.com"))
    assert r.status == 404 and r.header("content-type") == "application/json"
    assert b"no route" in r.body
    assert g.request(get("/only", host="API.example.com:8080")).status == 200
    assert g.request(get("/only", host="other.example.com")).status == 404
    assert g.request(b"POST /only HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 0\r\n\r\n").status == 404
    # dot segments and encoded characters cannot dodge a route
    assert g.request(get("/x/../only", host="api.example.com")).status == 200
    assert g.request(get("/%6Fnly", host="api.example.com")).status == 200


def test_chunked_request_body_is_streamed(gateway):
    with gateway.connect() as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(20):
            s.sendall(b"400\r\n" + b"z" * 1024 + b"\r\n")
        s.sendall(b"0\r\n\r\n")
        r = read_response(s)
        assert r.status == 200 and r.json()["length"] == 20 * 1024


def test_chunked_response_passes_through(gateway):
    with gateway.connect() as s:
        s.sendall(get("/chunked?n=50&size=1000"))
        r = read_response(s)
        assert r.status == 200 and r.header("transfer-encoding") == "chunked"
        assert r.body == b"".join(bytes([97 + i % 26]) * 1000 for i in range(50))
        # connection still usable afterwards
        s.sendall(get("/echo"))
        assert read_response(s).status == 200


def test_close_delimited_response_becomes_chunked(gateway):
    with gateway.connect() as s:
        s.sendall(get("/close-delimited"))
        r = read_response(s)
        assert r.status == 200 and r.header("transfer-encoding") == "chunked"
        assert r.body == b"y" * 5000 and r.complete
        s.sendall(get("/echo"))
        assert read_response(s).status == 200


def test_small_bodies_are_relayed_whole_however_they_arrive(gateway):
    """A small Content-Length body read with its head goes down in one buffer with it
    (up to 1024 bytes); one that arrives after its head, or a larger one, through the
    body window. Around that bound, on one connection, every byte arrives, in order."""
    pattern = bytes(range(256)) * 16
    with gateway.connect() as s:
        rd = Reader(s)
        for n in (1, 2, 1023, 1024, 1025, 4096):
            for how in ("together=1", "pause_ms=30", "together=0"):
                s.sendall(get(f"/download?bytes={n}&{how}"))
                r = read_response(s, reader=rd)
                assert r.status == 200 and r.header("content-length") == str(n), (n, how)
                assert r.body == pattern[:n], (n, how)
        s.sendall(b"HEAD /download?bytes=10&together=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        r = read_response(s, reader=rd, head_request=True)
        assert r.status == 200 and r.header("content-length") == "10" and r.body == b""
        s.sendall(get("/echo"))
        assert read_response(s, reader=rd).json()["method"] == "GET"


def test_http10_client(gateway):
    r = gateway.request(b"GET /echo HTTP/1.0\r\n\r\n")
    assert r.version == "HTTP/1.0" and r.status == 200
    assert r.json()["version"] == "HTTP/1.1"


def test_head_request(gateway):
    with gateway.connect() as s:
        s.sendall(b"HEAD /download?bytes=1234 HTTP/1.1\r\nHost: x\r\n\r\n")
        r = read_response(s, head_request=True)
        assert r.status == 200 and r.header("content-length") == "1234"
        s.sendall(get("/echo"))
        assert read_response(s).status == 200


def test_expect_100_continue(gateway):
    with gateway.connect() as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n")
        rd = Reader(s)
        interim = read_response(s, reader=rd, skip_informational=False)
        assert interim.status == 100
        s.sendall(b"hello world")
        r = read_response(s, reader=rd)
        assert r.status == 200 and r.json()["length"] == 11


def test_upstream_interim_answers_are_read_past_up_to_a_bound(gateway):
    """An upstream's 1xx (103 Early Hints here) are read past, not relayed; more than 8
    before a response is a 502, so that 1xx alone never hold a request."""
    with gateway.connect() as s:
        s.sendall(get("/interim?n=8"))
        r = read_response(s, skip_informational=False)
        assert r.status == 200 and r.body == b"after interim"
        s.sendall(get("/interim?n=9"))
        assert read_response(s, skip_informational=False).status == 502
    assert "bad status" in gateway.log_text()


def test_an_upstream_status_below_100_is_502(gateway):
    """Beast's parser reads any three digits as a status; one below 100 is none (RFC 9110
    §15 has 100-599): a 502, as nginx answers it, not a status line the client cannot read."""
    for code in ("000", "099"):
        assert gateway.request(get(f"/status?code={code}")).status == 502, code
    assert gateway.request(get("/status?code=599")).status == 599
    assert "bad status" in gateway.log_text()


def test_a_response_coded_other_than_chunked_is_502(gateway):
    """A response's transfer coding other than chunked (gzip, or gzip then chunked) would
    reach the client undone and unnamed, the body being framed anew: 502, as nginx."""
    r = gateway.request(get("/te?v=chunked"))
    assert r.status == 200 and r.body == b"coded"
    for v in ("gzip", "gzip,%20chunked", "gzip|chunked"):
        assert gateway.request(get(f"/te?v={v}")).status == 502, v
    assert "Transfer-Encoding other than chunked" in gateway.log_text()


def test_expect_other_is_417(gateway):
    r = gateway.request(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nExpect: magic\r\n\r\nx")
    assert r.status == 417


def test_upstream_status_and_reason_pass_through(gateway):
    r = gateway.request(get("/status?code=418"))
    assert r.status == 418 and r.reason == "Whatever"


def test_absolute_form_target_is_rewritten(gateway_factory):
    g = gateway_factory(routes="""  - name: only-api
    match:
      path_prefix: /
      host: api.example.com
    upstream: api
""")
    # The authority of an absolute-form target is the host, for routing and upstream alike.
    r = g.request(b"GET http://api.example.com/echo?q=1 HTTP/1.1\r\nHost: other.example.com\r\n\r\n")
    assert r.status == 200
    seen = r.json()
    hdr = {k.lower(): v for k, v in seen["headers"]}
    assert seen["target"] == "/echo?q=1" and hdr["host"] == "api.example.com"
    r = g.request(b"GET http://other.example.com/echo HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
    assert r.status == 404


def test_access_log_json(gateway_factory):
    import json
    g = gateway_factory(access_log="file", log_format="json")
    assert g.request(get("/echo?j=1", extra="X-Request-Id: json-7\r\n")).status == 200
    g.stop()
    rec = json.loads(g.access_log.read_text().strip().splitlines()[-1])
    assert rec["request_id"] == "json-7" and rec["status"] == 200 and rec["target"] == "/echo?j=1"
    assert rec["method"] == "GET" and rec["client_ip"] == "127.0.0.1" and rec["route"] == "all"
    assert rec["upstream_ms"] >= 0 and rec["bytes_out"] > 0


def test_pooled_connection_the_upstream_closed_while_idle_is_not_used(gateway, upstream):
    """A pooled connection the origin closed while it idled is seen closed when it is
    next wanted, however soon: a request of any method goes out on a new one."""
    upstream.reset()
    with gateway.connect() as s:
        rd = Reader(s)
        s.sendall(get("/close-after?ms=50"))
        assert read_response(s, reader=rd).body == b"bye"
        assert wait_until(lambda: upstream.stats()["closed"] == 1, 5), upstream.stats()
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        r = read_response(s, reader=rd)
        assert r.status == 200 and r.json()["length"] == 3
    assert upstream.stats()["connections"] == 2


def test_stale_pooled_connection_is_retried_for_idempotent_requests(gateway, upstream):
    """A pooled connection the origin closes as the request arrives (its keep-alive ran
    out then): an idempotent request without a body is sent again on a new one."""
    upstream.reset()
    with gateway.connect() as s:
        rd = Reader(s)
        s.sendall(get("/drop-next"))
        assert read_response(s, reader=rd).body == b"armed"
        s.sendall(get("/echo?after=stale"))
        r = read_response(s, reader=rd)
        assert r.status == 200 and r.json()["target"] == "/echo?after=stale"
    st = upstream.stats()
    assert st["connections"] == 2 and st["dropped"] == 1, st


def test_idle_pooled_connection_is_closed_after_idle_timeout(gateway_factory, upstream):
    """upstreams.<name>.idle_timeout: the gateway closes a pooled connection idle that
    long, before an origin with a shorter keep-alive closes it under a request."""
    g = gateway_factory(upstream_opts={"idle_timeout": "1s"})
    upstream.reset()
    assert g.request(get("/echo?n=1")).status == 200
    assert upstream.stats()["connections"] == 1
    # (the sweeper looks every second: closed within about two seconds of its last use)
    assert wait_until(lambda: upstream.stats()["closed"] == 1, 10), upstream.stats()
    assert g.request(get("/echo?n=2")).status == 200
    assert upstream.stats()["connections"] == 2


def test_response_an_idle_pooled_connection_was_sent_unasked_reaches_nobody(gateway, upstream):
    """Bytes an upstream sends on a pooled connection while it is idle (here a whole
    second response, sent 50 ms after the first) are not the next request's answer:
    the connection is closed and the next request goes out on another, however soon it
    comes (nginx drops such a connection at once)."""
    upstream.reset()
    r = gateway.request(get("/late-extra?ms=50"))
    assert r.status == 200 and r.body == b"asked"
    assert wait_until(lambda: upstream.stats()["late_sent"] == 1, 5), upstream.stats()
    for n in range(3):
        r = gateway.request(get(f"/echo?n={n}"))
        assert r.status == 200 and b"not asked" not in r.body, r.body
        assert r.header("X-Unasked") is None
        assert json.loads(r.body)["target"] == f"/echo?n={n}"
    assert upstream.stats()["connections"] == 2


def test_stale_pooled_connection_is_not_retried_for_post(gateway, upstream):
    upstream.reset()
    with gateway.connect() as s:
        rd = Reader(s)
        s.sendall(get("/drop-next"))
        assert read_response(s, reader=rd).status == 200
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        # a POST may have had effects upstream: never replayed, answered 502
        assert read_response(s, reader=rd).status == 502
    assert upstream.stats()["dropped"] == 1
