"""TLS to upstreams (upstreams.<name>.tls): the server's certificate verified against
tls.ca (its name: tls.server_name, else the server's host; an IP address against the
certificate's IP SANs), a failed verification a 502 whose log line names the reason,
verify: false served with a warning at the start, a client certificate for servers
that ask for one, sessions resumed by the next connections, health checks and
WebSockets over TLS, and a reload that changes the CA taking effect at once.

The origins are upstream.py speaking TLS (UPSTREAM_TLS_*), with certificates made for
each test by the openssl command (ECDSA P-256)."""
import json
import subprocess

import pytest

from conftest import BIN, Upstream, get, read_response, wait_for
from test_admin import with_admin
from test_reload import post_reload
from test_websocket import ws_echo


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(d, name):
    cert, key = d / f"{name}.pem", d / f"{name}.key"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
            "-out", str(cert), "-days", "2", "-subj", f"/CN={name}")
    return cert, key


def make_signed(d, ca, name, sans=()):
    """A certificate for CN=name with these subjectAltNames ("DNS:x", "IP:y"), signed by ca."""
    key, csr, cert, ext = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem", d / f"{name}.ext"
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out",
            str(csr), "-subj", f"/CN={name}")
    ext.write_text("subjectAltName=" + ",".join(sans) + "\n" if sans else "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial", "-out",
            str(cert), "-days", "2", "-extfile", str(ext))
    return cert, key


@pytest.fixture
def pki(tmp_path):
    d = tmp_path / "pki"
    d.mkdir()
    ca = make_ca(d, "upstream-ca")
    other_ca = make_ca(d, "other-ca")
    return {"dir": d, "ca": ca, "other_ca": other_ca,
            "server": make_signed(d, ca, "api.test", ["DNS:api.test", "IP:127.0.0.1"]),
            "named_only": make_signed(d, ca, "named.test", ["DNS:named.test"]),
            "client": make_signed(d, ca, "gateway-1")}


@pytest.fixture
def tls_origin(pki):
    u = Upstream(tls=pki["server"])
    yield u
    u.stop()


def tls_opts(**kv):
    return {"tls": "{ " + ", ".join(f'{k}: "{v}"' if isinstance(v, str) else f"{k}: {str(v).lower()}"
                                    for k, v in kv.items()) + " }"}


def echo(g, path="/echo"):
    r = g.request(get(path))
    return r.status, (json.loads(r.body) if r.status == 200 and path == "/echo" else r.body)


def test_verified_against_the_ca_by_ip_san_and_by_server_name(gateway_factory, tls_origin, pki):
    g = gateway_factory(upstream_address=tls_origin.address, upstream_opts=tls_opts(ca=str(pki["ca"][0])))
    status, body = echo(g)
    assert status == 200, body
    assert tls_origin.stats()["tls_handshakes"] >= 1
    g2 = gateway_factory(upstream_address=tls_origin.address,
                         upstream_opts=tls_opts(ca=str(pki["ca"][0]), server_name="api.test"))
    assert echo(g2)[0] == 200
    assert "tls.verify is false" not in g.log_text() + g2.log_text()


@pytest.mark.parametrize("case,reason", [
    ("wrong_ca", "certificate verify failed: unable to get local issuer certificate"),
    ("wrong_name", "certificate verify failed: hostname mismatch"),
    ("no_ip_san", "certificate verify failed: IP address mismatch"),
])
def test_a_certificate_that_fails_verification_is_a_502_naming_the_reason(gateway_factory, pki, case, reason):
    cert = pki["named_only"] if case == "no_ip_san" else pki["server"]
    origin = Upstream(tls=cert)
    try:
        opts = {"wrong_ca": tls_opts(ca=str(pki["other_ca"][0])),
                "wrong_name": tls_opts(ca=str(pki["ca"][0]), server_name="other.test"),
                "no_ip_san": tls_opts(ca=str(pki["ca"][0]))}[case]
        g = gateway_factory(upstream_address=origin.address, upstream_opts=opts)
        status, _ = echo(g)
        assert status == 502
        wait_for("the reason logged", lambda: reason in g.log_text(), 10)
        assert origin.stats()["requests"] == 0
    finally:
        origin.stop()


def test_the_system_store_is_the_default_and_verify_false_is_said_at_the_start(gateway_factory, tls_origin):
    # A private CA is in no system store: verified by default, refused.
    g = gateway_factory(upstream_address=tls_origin.address, upstream_opts={"tls": "{}"})
    assert echo(g)[0] == 502
    wait_for("the reason logged", lambda: "certificate verify failed" in g.log_text(), 10)
    g2 = gateway_factory(upstream_address=tls_origin.address, upstream_opts=tls_opts(verify=False))
    assert echo(g2)[0] == 200
    assert "upstream api: tls.verify is false" in g2.log_text()


def test_a_client_certificate_for_a_server_that_asks(gateway_factory, pki):
    origin = Upstream(tls=(*pki["server"], pki["ca"][0]))
    try:
        without = gateway_factory(upstream_address=origin.address, upstream_opts=tls_opts(ca=str(pki["ca"][0])))
        assert echo(without)[0] == 502
        cert, key = pki["client"]
        g = gateway_factory(upstream_address=origin.address,
                            upstream_opts=tls_opts(ca=str(pki["ca"][0]), client_cert=str(cert), client_key=str(key)))
        assert echo(g)[0] == 200
        assert origin.stats()["tls_client"] == "gateway-1"
    finally:
        origin.stop()


def test_new_connections_resume_the_servers_session(gateway_factory, tls_origin, pki):
    # max_idle 0: every request a new connection to the origin; all but the first resumed.
    g = gateway_factory(upstream_address=tls_origin.address,
                        upstream_opts={**tls_opts(ca=str(pki["ca"][0])), "max_idle": 0})
    for _ in range(5):
        assert echo(g)[0] == 200
    st = tls_origin.stats()
    assert st["tls_handshakes"] == 5 and st["tls_resumed"] >= 3, st


def test_pooled_tls_connections_are_reused(gateway_factory, tls_origin, pki):
    g = gateway_factory(upstream_address=tls_origin.address, upstream_opts=tls_opts(ca=str(pki["ca"][0])))
    with g.connect() as s:
        for _ in range(20):
            s.sendall(get("/echo"))
            assert read_response(s).status == 200
    assert tls_origin.stats()["tls_handshakes"] == 1


def test_bodies_both_ways_and_a_websocket_over_tls(gateway_factory, tls_origin, pki):
    g = gateway_factory(upstream_address=tls_origin.address, upstream_opts=tls_opts(ca=str(pki["ca"][0])))
    body = b"z" * 300_000
    r = g.request(f"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    assert r.status == 200 and json.loads(r.body)["length"] == len(body), r.body
    r = g.request(get("/download?bytes=1000000"))
    assert r.status == 200 and len(r.body) == 1_000_000
    with g.connect() as s:
        ws_echo(s)


def test_a_body_that_its_close_delimits_ends_only_with_close_notify(gateway_factory, tls_origin, pki):
    """A close-delimited body ends with the upstream's close_notify; a close without one
    is a truncation (anyone on the path can send a FIN), never passed on as a whole body:
    the client's chunked response ends without its last chunk."""
    g = gateway_factory(upstream_address=tls_origin.address, upstream_opts=tls_opts(ca=str(pki["ca"][0])))
    with g.connect() as s:
        s.sendall(get("/close-delimited"))
        r = read_response(s)
        assert r.status == 200 and r.body == b"y" * 5000 and r.complete
    with g.connect() as s:
        s.sendall(get("/close-truncated"))
        r = read_response(s)
        assert r.status == 200 and not r.complete, r.body[-20:]


def test_health_checks_speak_tls(gateway_factory, tls_origin, pki):
    opts = {**tls_opts(ca=str(pki["ca"][0])),
            "health": "{ path: /__check, interval: 200ms, timeout: 150ms, rise: 1, fall: 1 }"}
    g = gateway_factory(upstream_address=tls_origin.address, upstream_opts=opts)
    wait_for("checks over TLS", lambda: tls_origin.stats()["health_checks"] >= 2, 10)
    assert echo(g)[0] == 200


def test_a_reload_that_changes_the_ca_takes_effect(gateway_factory, tls_origin, pki):
    g = with_admin(lambda extra: gateway_factory(upstream_address=tls_origin.address, extra=extra,
                                                 upstream_opts=tls_opts(ca=str(pki["other_ca"][0]))))
    assert echo(g)[0] == 502
    g.config.write_text(g.config.read_text().replace(str(pki["other_ca"][0]), str(pki["ca"][0])))
    r = post_reload(g)
    assert r.status == 200, r.body
    assert echo(g)[0] == 200


def test_check_reads_the_ca_and_the_client_certificate(tmp_path, pki):
    cfg = tmp_path / "check.yaml"
    missing = tmp_path / "missing.pem"
    cfg.write_text('listen: "127.0.0.1:8080"\nupstreams:\n  api:\n    address: "127.0.0.1:9000"\n'
                   f'    tls: {{ ca: "{missing}" }}\n'
                   'routes:\n  - name: all\n    match: { path_prefix: / }\n    upstream: api\n')
    r = subprocess.run([BIN, "--check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 1 and f"{cfg}:5: upstream api tls ca {missing}:" in r.stderr, r.stderr
    cfg.write_text(cfg.read_text().replace(f'ca: "{missing}"', f'client_cert: "{pki["client"][0]}"'))
    r = subprocess.run([BIN, "--check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 1 and "tls.client_cert and tls.client_key go together" in r.stderr, r.stderr
    cfg.write_text(cfg.read_text().replace(" }", f', client_key: "{pki["other_ca"][1]}" }}', 1))
    r = subprocess.run([BIN, "--check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 1 and "tls client_key" in r.stderr and "key values mismatch" in r.stderr, r.stderr
