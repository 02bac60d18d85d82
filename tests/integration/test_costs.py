"""Costs from the request and the response, charged exactly on the memory store, Redis,
Sentinel and a 3-master Cluster: a request header's number (cost: header:X-Cost;
invalid is a 400, 0 takes nothing), the request body's size (cost: body_bytes, an
upload quota in bytes; a chunked body charged once it has been read), and a response
header's number charged after the response (charge: response_header:X-Cost), which may
take the balance past the limit. One worker: a post-charge and the next request go to
Redis on one connection, in that order. Over HTTP/1.1, HTTP/2 on TLS and cleartext HTTP/2
(protocols.py: a chunked upload is an HTTP/2 body without a length)."""
import json
import time

import pytest

from conftest import get, read_response, wait_until
from protocols import over_stores_and_protocols
from stores import KINDS, store_gateway


def route(limit, path="/"):
    return f"""  - name: api
    match: {{ path_prefix: {path} }}
    upstream: api
    limits:
{limit}
"""


def limit(algorithm="fixed_window", numbers="limit: 10\n        window: 1h", **more):
    lines = "".join(f"        {k}: {v}\n" for k, v in more.items())
    return f"""      - name: quota
        algorithm: {algorithm}
        key: header:X-Client
        {numbers}
{lines}"""


def remaining(r):
    v = r.header("ratelimit") or ""
    return int(v.split(";r=")[1].split(";")[0]) if ";r=" in v else None


def req(g, client, path="/echo", extra=""):
    return g.request(get(path, extra=f"X-Client: {client}\r\n{extra}"))


def post(g, client, body, chunked=False):
    if chunked:
        data = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
        head = f"POST /upload HTTP/1.1\r\nHost: x\r\nX-Client: {client}\r\nTransfer-Encoding: chunked\r\n\r\n"
    else:
        data = body
        head = f"POST /upload HTTP/1.1\r\nHost: x\r\nX-Client: {client}\r\nContent-Length: {len(body)}\r\n\r\n"
    return g.request(head.encode() + data)


@over_stores_and_protocols(KINDS)
def test_a_cost_header_is_charged_exactly(kind, request, gateway_factory):
    g = store_gateway(kind, request, gateway_factory, routes=route(limit(cost="header:X-Cost")))
    got = [(r.status, remaining(r)) for r in (req(g, "a", extra=f"X-Cost: {n}\r\n") for n in (4, 4, 3, 2))]
    assert got == [(200, 6), (200, 2), (429, 0), (200, 0)], got  # (a 429 says r=0)
    assert req(g, "b").status == 200 and remaining(req(g, "b")) == 8  # no header: the limit's cost (1)
    r = req(g, "c", extra="X-Cost: lots\r\n")
    assert r.status == 400 and json.loads(r.body)["status"] == 400, r.body
    assert req(g, "c", extra="X-Cost: 99999999999\r\n").status == 400
    assert req(g, "c", extra="X-Cost: -1\r\n").status == 400
    assert req(g, "a", extra="X-Cost: 0\r\n").status == 200  # takes nothing: not checked


@over_stores_and_protocols(KINDS)
def test_an_upload_quota_in_bytes(kind, request, gateway_factory):
    g = store_gateway(kind, request, gateway_factory,
                      routes=route(limit(numbers="limit: 1000\n        window: 1h", cost="body_bytes")))
    r = post(g, "a", b"x" * 600)
    assert r.status == 200 and remaining(r) == 400
    assert r.header("ratelimit-policy") == '"quota";q=1000;w=3600;qu="content-bytes"'
    assert post(g, "a", b"x" * 300).status == 200
    r = post(g, "a", b"x" * 200)
    assert r.status == 429 and remaining(r) == 0
    # A chunked body takes 1 up front and the rest once read, but never more than the
    # quota had left: 500 bytes with 100 left are refused.
    r = post(g, "a", b"y" * 500, chunked=True)
    # (the route's refusal: its body, RateLimit fields and Retry-After, as any 429's)
    assert r.status == 429 and remaining(r) == 0 and int(r.header("retry-after")) >= 1, r.headers
    assert json.loads(r.body)["violated-policies"] == ["quota"], r.body
    assert req(g, "a").status == 200  # a GET has no body: it takes nothing
    # 60 bytes fit: 1 up front, 59 once read.
    assert post(g, "b", b"y" * 60, chunked=True).status == 200
    r = post(g, "b", b"z" * 1)
    assert r.status == 200 and remaining(r) == 1000 - 60 - 1


@over_stores_and_protocols(KINDS)
def test_a_chunked_upload_is_cut_where_it_passes_its_quota(kind, request, gateway_factory, upstream):
    """A chunked body of unknown size may not go past what its byte quota had left: cut
    mid-stream (upstream never gets its last chunk), 429, and charged what was read."""
    g = store_gateway(kind, request, gateway_factory,
                      routes=route(limit(numbers="limit: 100000\n        window: 1h", cost="body_bytes")))
    upstream.reset()
    with g.connect() as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nX-Client: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"8000\r\n" + b"q" * 0x8000 + b"\r\n"
        try:
            for _ in range(8):  # 256 KiB against 100,000 bytes
                s.sendall(chunk)
            s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # (cut: the gateway may close before the rest is sent)
        r = read_response(s)
        assert r.status == 429 and remaining(r) == 0 and int(r.header("retry-after")) >= 1, r.headers
        if g.protocol == "http1":
            assert r.header("connection") == "close"  # (the rest of the body is unread)
    assert upstream.stats()["requests"] == 0
    # What was read is charged (at most the whole quota): the quota is spent. (One
    # worker: the charge reaches the store before the next request does.)
    assert post(g, "a", b"z" * 1000).status == 429
    assert post(g, "b", b"z" * 1000).status == 200


@over_stores_and_protocols(KINDS)
@pytest.mark.parametrize("algorithm,numbers", [("fixed_window", "limit: 10\n        window: 1h"),
                                               ("gcra", "rate: 10/h\n        burst: 10"),
                                               ("token_bucket", "rate: 10/h\n        burst: 10"),
                                               ("sliding_window", "limit: 10\n        window: 1h")])
def test_a_response_header_is_charged_after_the_response(kind, algorithm, numbers, request, gateway_factory):
    if kind in ("sentinel", "cluster") and algorithm != "fixed_window":
        pytest.skip("one algorithm through Sentinel and Cluster: the charge path is the same")
    g = store_gateway(kind, request, gateway_factory,
                      routes=route(limit(algorithm, numbers, charge="response_header:X-Cost")))
    # Each /cost?n=N takes 1 up front and N after its response.
    r = req(g, "a", "/cost?n=3")
    assert r.status == 200 and r.header("x-cost") == "3"
    r = req(g, "a", "/echo")
    assert r.status == 200 and remaining(r) == 5, r.headers  # 10 - (1 + 3) - 1
    assert req(g, "a", "/cost?n=20").status == 200  # admitted (1 fits), then 20 more: past the limit
    assert req(g, "a", "/echo").status == 429


@over_stores_and_protocols(KINDS)
@pytest.mark.parametrize("algorithm", ["token_bucket", "gcra"])
def test_a_charge_reaches_a_key_gone_since_its_request(kind, algorithm, request, gateway_factory):
    """A bucket full again while the response was on its way (its key gone from the
    store) is charged all the same: begun afresh, then charged."""
    g = store_gateway(kind, request, gateway_factory,
                      routes=route(limit(algorithm, "rate: 10/s\n        burst: 20", charge="response_header:X-Cost")))
    # Takes 1 (full again 100 ms later: the key goes), then 15 once answered, 400 ms on.
    # What 10/s refills between the charge and the next request is bounded by the time
    # the client saw pass from the charged response's answer to the next one's.
    assert req(g, "a", "/cost?n=15&ms=400").status == 200
    answered = time.monotonic()
    r = req(g, "a", "/echo")
    refill = 10 * (time.monotonic() - answered)
    # 20 - 15 - 1 = 4, plus the refill (not 19: the charge lost)
    assert r.status == 200 and 4 <= remaining(r) <= 4 + refill + 1, (refill, r.headers)
    # One response cannot sink its client past the whole quota: charged 20, not a
    # million (which 10/s would take a day to refill), so it is admitted again soon.
    assert req(g, "b", "/cost?n=1000000").status == 200
    answered = time.monotonic()
    r = req(g, "b", "/echo")
    refill = 10 * (time.monotonic() - answered)
    assert r.status == 429 or remaining(r) <= refill, (refill, r.status, r.headers)  # (charged: 0 left then)
    assert wait_until(lambda: req(g, "b", "/echo").status == 200, 5)
