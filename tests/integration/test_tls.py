"""The TLS listener (tls:): the certificate chosen by SNI (exact names, a wildcard, the
first as the default), TLS 1.2 and 1.3 with ALPN h2 and http/1.1 (a client offering
neither is refused), session resumption, keep-alive, X-Forwarded-Proto from the listener (never
from the client), the handshake bounded in time and in number (a flood of silent
handshakes does not stop the connections already served), certificates read again on a
reload and when their files change (a bad one keeps the old), client certificates
(mTLS: verified against tls.client_ca, each one its own client for a `client_cert`
limit key), and --check reading the files as a start would.

Certificates are made for each test run by the openssl command (ECDSA P-256)."""
import json
import pathlib
import resource
import socket
import ssl
import subprocess
import time

import pytest

from conftest import BIN, SANITIZED, free_port, is_closed, read_response, record, wait_for
from test_admin import with_admin
from test_reload import post_reload
from test_websocket import ws_echo


def make_cert(directory, name, *sans):
    """A self-signed ECDSA P-256 certificate for CN=name with these DNS SANs."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    ext = ["-addext", "subjectAltName=" + ",".join(f"DNS:{s}" for s in sans)] if sans else []
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}", *ext],
                   check=True, capture_output=True)
    return cert, key


@pytest.fixture
def certs(tmp_path):
    d = tmp_path / "tls"
    d.mkdir()
    return {"a": make_cert(d, "a.test", "a.test", "*.wild.test"), "b": make_cert(d, "b.test"),
            "c": make_cert(d, "c.test", "c.test")}


def tls_section(port, certificates, more=""):
    lines = ["tls:", f'  listen: "127.0.0.1:{port}"', "  certificates:"]
    lines += [f'    - {{ cert: "{c}", key: "{k}" }}' for c, k in certificates]
    return "\n".join(lines) + "\n" + more


def start_tls(gateway_factory, certificates, more="", admin=False, **kw):
    port = free_port()
    section = tls_section(port, certificates, more)
    if admin:
        g = with_admin(lambda extra: gateway_factory(extra=extra + section, **kw))
    else:
        g = gateway_factory(extra=section, **kw)
    g.tls_port = port
    wait_for("the TLS listener", lambda: "listening for TLS" in g.log_text(), 10)
    return g


def client_context(alpn=("http/1.1",), version=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    if version:
        ctx.minimum_version = ctx.maximum_version = version
    return ctx


def tls_connect(g, server_name="a.test", ctx=None, session=None):
    raw = socket.create_connection(("127.0.0.1", g.tls_port), timeout=10)
    return (ctx or client_context()).wrap_socket(raw, server_hostname=server_name, session=session)


def subject_cn(s):
    der = s.getpeercert(binary_form=True)
    out = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-subject"], input=der,
                         capture_output=True, check=True).stdout.decode()
    return out.strip().split("CN = ")[-1].split("CN=")[-1]


def echo(s, extra=""):
    s.sendall(f"GET /echo HTTP/1.1\r\nHost: a.test\r\n{extra}\r\n".encode())
    r = read_response(s)
    assert r.status == 200, (r.status, r.body)
    return {k.lower(): v for k, v in json.loads(r.body)["headers"]}


def test_a_body_its_close_delimits_ends_with_close_notify(gateway_factory, certs):
    """An HTTP/1.0 client's response of unknown length ends with the connection: over TLS
    with the gateway's close_notify, so that its end is told from a truncation (a client
    that does not suppress ragged EOFs reads the whole body, then a clean end)."""
    g = start_tls(gateway_factory, [certs["a"]])
    raw = socket.create_connection(("127.0.0.1", g.tls_port), timeout=10)
    with client_context().wrap_socket(raw, server_hostname="a.test", suppress_ragged_eofs=False) as s:
        s.sendall(b"GET /chunked?n=20&size=1000 HTTP/1.0\r\nHost: a.test\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)  # (an end without close_notify raises SSLEOFError)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"content-length" not in head.lower(), head
    assert len(body) == 20_000


def test_sni_chooses_the_certificate_exact_then_wildcard_then_the_default(gateway_factory, certs):
    g = start_tls(gateway_factory, [certs["a"], certs["b"], certs["c"]])
    for name, want in [("a.test", "a.test"), ("b.test", "b.test"), ("C.TEST", "c.test"), ("x.wild.test", "a.test"),
                       ("unknown.example", "a.test"), ("a.b.wild.test", "a.test")]:
        with tls_connect(g, name) as s:
            assert subject_cn(s) == want, (name, subject_cn(s))
    # b.test has no SAN: its CN is its name.
    with tls_connect(g, "b.test") as s:
        assert echo(s)["host"] == "a.test"


def test_tls_versions_alpn_keep_alive_and_forwarded_proto(gateway_factory, certs):
    g = start_tls(gateway_factory, [certs["a"]])
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        with tls_connect(g, ctx=client_context(version=version)) as s:
            assert s.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
            assert s.selected_alpn_protocol() == "http/1.1"
            # Keep-alive: three requests on the connection; the proto is the listener's,
            # whatever an untrusted client claims.
            for _ in range(3):
                h = echo(s, "X-Forwarded-Proto: http\r\n")
                assert h["x-forwarded-proto"] == "https", h
    # HTTP/2 first by ALPN (http2.tls, on by default; test_http2.py speaks it).
    with tls_connect(g, ctx=client_context(alpn=("h2", "http/1.1"))) as s:
        assert s.selected_alpn_protocol() == "h2"
    with tls_connect(g, ctx=client_context(alpn=("h2",))) as s:
        assert s.selected_alpn_protocol() == "h2"
    with tls_connect(g, ctx=client_context(alpn=None)) as s:
        assert s.selected_alpn_protocol() is None
        echo(s)
    with pytest.raises(ssl.SSLError, match="NO_APPLICATION_PROTOCOL|no application protocol"):
        tls_connect(g, ctx=client_context(alpn=("spdy/3", "h3")))
    # The plain listener still speaks plain HTTP, with its own proto.
    with g.connect() as s:
        assert echo(s)["x-forwarded-proto"] == "http"


def test_sessions_resume(gateway_factory, certs):
    g = start_tls(gateway_factory, [certs["a"], certs["b"]], admin=True)
    sessions = {}
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = client_context(version=version)
        with tls_connect(g, ctx=ctx) as s:
            echo(s)  # (a TLS 1.3 ticket comes after the handshake: read something first)
            sessions[version] = (ctx, s.session)
            assert not s.session_reused
        # Each connection resumes with what the one before it was given. A TLS 1.3
        # resumption brings a new ticket: OpenSSL's clients use one ticket once (wrk's
        # and curl's made every other connection a full handshake without it).
        session = sessions[version][1]
        for i in range(3):
            with tls_connect(g, ctx=ctx, session=session) as s:
                assert s.session_reused, (version, i)
                echo(s)
                if version == ssl.TLSVersion.TLSv1_3:
                    assert s.session.id != session.id, ("no new ticket after a resumption", i)
                session = s.session
    # Tickets are the process's, not a configuration's: they outlive a reload.
    assert post_reload(g).status == 200
    for version, (ctx, session) in sessions.items():
        with tls_connect(g, ctx=ctx, session=session) as s:
            assert s.session_reused, ("after a reload", version)
            echo(s)


def test_the_handshake_is_bounded_in_time_and_in_number(gateway_factory, certs):
    g = start_tls(gateway_factory, [certs["a"]], more="  handshake_timeout: 1s\n  max_handshakes: 2\n", workers=1)
    served = tls_connect(g)
    echo(served)
    # Two connections that never say hello hold the two handshakes; a third ends the
    # oldest's (the one worker accepts them in order), and a real client a fourth's.
    silent = [socket.create_connection(("127.0.0.1", g.tls_port), timeout=10) for _ in range(3)]
    assert is_closed(silent[0], 5)
    wait_for("the end logged", lambda: "ended for newer ones (tls.max_handshakes" in g.log_text(), 10)
    with tls_connect(g) as s:
        echo(s)
    assert is_closed(silent[1], 5)
    # The connection already served is not held up.
    echo(served)
    # The silent one left is closed at handshake_timeout.
    assert is_closed(silent[2], 10)
    for s in [served, *silent]:
        s.close()


def test_certificates_are_read_again_on_reload_and_a_bad_one_keeps_the_old(gateway_factory, certs, tmp_path):
    live_cert, live_key = tmp_path / "live.pem", tmp_path / "live.key"
    live_cert.write_bytes(certs["a"][0].read_bytes())
    live_key.write_bytes(certs["a"][1].read_bytes())
    g = start_tls(gateway_factory, [(live_cert, live_key)], admin=True)
    with tls_connect(g, "c.test") as s:
        assert subject_cn(s) == "a.test"
    # A key that is not the certificate's: the reload fails, the old pair serves on.
    live_cert.write_bytes(certs["c"][0].read_bytes())
    r = post_reload(g)
    assert r.status != 200 and b"key values mismatch" in r.body, (r.status, r.body)
    with tls_connect(g, "c.test") as s:
        assert subject_cn(s) == "a.test"
    live_key.write_bytes(certs["c"][1].read_bytes())
    r = post_reload(g)
    assert r.status == 200, (r.status, r.body)
    with tls_connect(g, "c.test") as s:
        assert subject_cn(s) == "c.test"
    # Renewed in place, no reload asked for: the watcher sees the files change. A
    # connection made before keeps its certificate and is served on.
    old = tls_connect(g, "c.test")
    echo(old)
    live_key.write_bytes(certs["b"][1].read_bytes())
    live_cert.write_bytes(certs["b"][0].read_bytes())

    def served():
        with tls_connect(g, "c.test") as s:
            return subject_cn(s) == "b.test"
    wait_for("the renewed certificate served", served, 20)
    assert subject_cn(old) == "c.test"
    echo(old)
    old.close()


def test_check_reads_the_certificates(tmp_path, certs):
    cfg = tmp_path / "check.yaml"
    missing = tmp_path / "missing.pem"
    cfg.write_text(f'listen: "127.0.0.1:8080"\ntls:\n  listen: "127.0.0.1:8443"\n  certificates:\n'
                   f'    - {{ cert: "{missing}", key: "{certs["a"][1]}" }}\n'
                   'upstreams:\n  api:\n    address: "127.0.0.1:9000"\n'
                   'routes:\n  - name: all\n    match: { path_prefix: / }\n    upstream: api\n')
    r = subprocess.run([BIN, "--check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 1, r
    assert f"{cfg}:5: tls certificate cert {missing}:" in r.stderr, r.stderr
    cfg.write_text(cfg.read_text().replace(str(missing), str(certs["a"][0])))
    r = subprocess.run([BIN, "--check", "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # A relative path is the configuration file's folder's.
    rel = tmp_path / "rel.yaml"
    rel.write_text(cfg.read_text().replace(str(tmp_path) + "/", ""))
    r = subprocess.run([BIN, "--check", "--config", str(rel)], capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stderr


def make_ca_and_clients(directory, *names):
    """A CA (ECDSA P-256) and a client certificate signed by it for each CN in names."""
    ca_cert, ca_key = make_cert(directory, "clients-ca")
    out = {}
    for n in names:
        key, csr, cert = directory / f"{n}.key", directory / f"{n}.csr", directory / f"{n}.pem"
        subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", str(key), "-out", str(csr), "-subj", f"/O=Example/CN={n}"],
                       check=True, capture_output=True)
        subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
                        "-CAcreateserial", "-out", str(cert), "-days", "2"], check=True, capture_output=True)
        out[n] = (cert, key)
    return ca_cert, out


MTLS_ROUTES = """  - name: per-cert
    match: { path_prefix: / }
    upstream: api
    limits:
      - name: per-cert
        algorithm: fixed_window
        key: client_cert
        limit: 2
        window: 1h
"""


def client_with_cert(cert=None):
    ctx = client_context()
    if cert:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def statuses(g, ctx, n):
    out = []
    with tls_connect(g, ctx=ctx) as s:
        for _ in range(n):
            s.sendall(b"GET /echo HTTP/1.1\r\nHost: a.test\r\n\r\n")
            out.append(read_response(s).status)
    return out


@pytest.mark.parametrize("mode", ["required", "optional"])
def test_client_certificates_are_verified_and_limit_per_certificate(gateway_factory, certs, tmp_path, mode):
    d = tmp_path / "clients"
    d.mkdir()
    ca, clients = make_ca_and_clients(d, "app-1", "app-2")
    stranger = make_cert(d, "stranger")  # self-signed
    more = f'  client_ca: "{ca}"\n  client_certificates: {mode}\n'
    g = start_tls(gateway_factory, [certs["a"]], more=more, routes=MTLS_ROUTES)
    # Each certificate is its own client: 2 each, then 429.
    assert statuses(g, client_with_cert(clients["app-1"]), 3) == [200, 200, 429]
    assert statuses(g, client_with_cert(clients["app-2"]), 3) == [200, 200, 429]
    # A certificate no listed CA signed never gets through the handshake.
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        statuses(g, client_with_cert(stranger), 1)
    if mode == "required":
        # (TLS 1.3: the refusal comes with the first read after the handshake)
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            statuses(g, client_with_cert(None), 1)
    else:
        # No certificate: the limit's anonymous identity, one for all such clients.
        assert statuses(g, client_with_cert(None), 3) == [200, 200, 429]
        assert statuses(g, client_with_cert(None), 1) == [429]


def test_a_session_does_not_outlive_a_change_of_client_ca(gateway_factory, certs, tmp_path):
    """A resumed session keeps the certificate its first handshake verified, and tickets
    outlive reloads: a reload that changes client_ca makes the old sessions unusable (a
    full handshake, which the old certificate fails)."""
    d = tmp_path / "clients"
    d.mkdir()
    ca, clients = make_ca_and_clients(d, "app-1")
    live_ca = tmp_path / "live-ca.pem"
    live_ca.write_bytes(pathlib.Path(ca).read_bytes())
    g = start_tls(gateway_factory, [certs["a"]], more=f'  client_ca: "{live_ca}"\n', admin=True)
    ctx = client_with_cert(clients["app-1"])
    with tls_connect(g, ctx=ctx) as s:
        echo(s)
        session = s.session
    with tls_connect(g, ctx=ctx, session=session) as s:
        assert s.session_reused
        echo(s)
    other = tmp_path / "other"
    other.mkdir()
    other_ca, _ = make_ca_and_clients(other, "someone")
    live_ca.write_bytes(pathlib.Path(other_ca).read_bytes())
    assert post_reload(g).status == 200
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        with tls_connect(g, ctx=ctx, session=session) as s:
            echo(s)


def test_websockets_through_the_tls_listener(gateway_factory, certs):
    g = start_tls(gateway_factory, [certs["a"]])
    with tls_connect(g) as s:
        ws_echo(s)


@pytest.mark.skipif(SANITIZED, reason="the sanitizer's allocator keeps its own quarantine")
def test_idle_tls_connections_hold_little_memory(gateway_factory, certs):
    # 1,000 TLS connections, each idle after its handshake and one request: parked (no
    # session, no buffers) and OpenSSL's record buffers given back, each holds its SSL
    # object (~12 KiB in OpenSSL 3.0, nginx's too) and a plain connection's ~3 KiB.
    # (Asio's ssl::stream kept ~70 KiB of buffers per connection on top.)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 5000 and hard >= 5000:
        resource.setrlimit(resource.RLIMIT_NOFILE, (5000, hard))
    g = start_tls(gateway_factory, [certs["a"]], http={"idle_timeout": "30s", "max_connections": 10000},
                  upstream_opts={"connect_timeout": "10s"})
    with tls_connect(g) as s:  # the worker's pools and the upstream connection warmed up
        echo(s)
    before = g.rss_kib()
    conns = []
    try:
        for _ in range(1000):
            s = tls_connect(g)
            echo(s)
            conns.append(s)
        deadline, per = time.monotonic() + 5, None
        while time.monotonic() < deadline:  # parked ~100 ms after their last byte
            time.sleep(0.2)
            per = (g.rss_kib() - before) / len(conns)
            if per < 24:
                break
        record(f"idle TLS connection: {per:.1f} KiB each (1,000 open)")
        assert per < 24, per
        for s in conns[:50]:  # and they are served again
            echo(s)
    finally:
        for s in conns:
            s.close()


def test_a_handshake_flood_leaves_established_clients_served(gateway_factory, certs):
    # 3,000 connections that never finish a handshake (half of them send a ClientHello's
    # first bytes, half nothing), on one worker with the default max_handshakes (1024):
    # clients past their handshake are served throughout (each request within the
    # client's 10 s timeout; the slowest is recorded), and a new client gets its
    # handshake while the flood holds on (the oldest handshakes are ended for newer ones).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 5000 and hard >= 5000:
        resource.setrlimit(resource.RLIMIT_NOFILE, (5000, hard))
    g = start_tls(gateway_factory, [certs["a"]], more="  handshake_timeout: 20s\n", workers=1,
                  http={"max_connections": 10000})
    served = [tls_connect(g) for _ in range(4)]
    for s in served:
        echo(s)
    flood, worst = [], 0.0
    try:
        for i in range(3000):
            try:
                c = socket.create_connection(("127.0.0.1", g.tls_port), timeout=10)
            except OSError:
                continue  # (the accept queue full: that is the flood too)
            if i % 2:
                try:
                    c.send(bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]))  # a record header and 1 byte
                except OSError:
                    pass
            flood.append(c)
            if i % 250 == 0:
                for s in served:
                    t0 = time.monotonic()
                    echo(s)
                    worst = max(worst, time.monotonic() - t0)
        for s in served:
            t0 = time.monotonic()
            echo(s)
            worst = max(worst, time.monotonic() - t0)
        record(f"TLS handshake flood: slowest request of an established client {worst:.3f} s")
        wait_for("the ends logged", lambda: "ended for newer ones (tls.max_handshakes" in g.log_text(), 10)
        with tls_connect(g) as s:
            echo(s)
    finally:
        for c in flood:
            c.close()
    # The flood gone, new clients get their handshake again.
    with tls_connect(g) as s:
        echo(s)
    for s in served:
        s.close()


def test_testssl_finds_no_old_protocol_and_no_weak_cipher(gateway_factory, certs, tmp_path):
    # testssl.sh (Debian's) against the listener: protocols and cipher categories, asked
    # for b.test (SNI) at 127.0.0.1. Not its server defaults (-S: the certificate's
    # fields, resumption), which cost it more than a third of its time and which the tests
    # above check themselves (the certificate chosen by SNI and without it, resumption).
    g = start_tls(gateway_factory, [certs["a"], certs["b"]])
    out = tmp_path / "testssl.json"
    r = subprocess.run(["testssl", "--quiet", "--warnings", "off", "--color", "0", "--sneaky", "-p", "-s",
                        "--jsonfile", str(out), "--ip", "127.0.0.1", f"b.test:{g.tls_port}"],
                       capture_output=True, text=True, timeout=300)
    assert out.exists(), (r.returncode, r.stdout[-3000:], r.stderr[-2000:])
    found = {f["id"]: f["finding"] for f in json.loads(out.read_text())}
    for proto in ("SSLv2", "SSLv3", "TLS1", "TLS1_1"):
        assert found[proto] == "not offered", (proto, found[proto])
    assert found["TLS1_2"] == "offered" and found["TLS1_3"].startswith("offered"), found
    for weak in ("cipherlist_NULL", "cipherlist_aNULL", "cipherlist_EXPORT", "cipherlist_LOW", "cipherlist_3DES_IDEA",
                 "cipherlist_AVERAGE"):
        assert found[weak] == "not offered", (weak, found[weak])
    assert found["cipherlist_STRONG"] == "offered"
    assert found["ALPN"] == "http/1.1"
