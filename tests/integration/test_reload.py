"""Hot reload: SIGHUP, POST /reload, an editor's rename over the file and a Kubernetes
ConfigMap's ..data symlink swap each change a route's limit without a restart; a bad
file leaves the old configuration serving and is counted; counters, pooled upstream
connections and requests in flight all survive."""
import os
import re
import select
import shutil
import signal
import threading
import time

from conftest import SANITIZED, Reader, Thread, get, join_all, read_response, wait_until
from test_admin import ADMIN_HOST, ADMIN_POST_HEADER, READY_REQUIRES_STORE, admin_get, admin_request, with_admin
from test_metrics import decisions, scrape, send, value
from test_redis import limit, route


def limited(n, algo="fixed_window", **kw):
    return route(limit(algo, name="per-ip", key="ip", limit=n, window="1h", **kw))



def start(gateway_factory, n=3, **kw):
    # (/readyz then says whether a Redis store a reload brings in is connected: the
    # routes allow on a store error, so without ready_requires_store it would not)
    return with_admin(lambda extra: gateway_factory(routes=limited(n), extra=extra, **kw), more=READY_REQUIRES_STORE)


def rewrite(g, n, path=None, algo="fixed_window"):
    """The gateway's config text with the limit set to n (written to `path` if given)."""
    text = g.config.read_text()
    old = [line for line in text.splitlines() if line.strip().startswith("limit:")][0]
    text = text.replace(old, f"        limit: {n}")
    if path is not None:
        path.write_text(text)
    return text


def post_reload(g):
    raw = (f"POST /reload HTTP/1.1\r\nHost: {ADMIN_HOST}\r\n{ADMIN_POST_HEADER}Content-Length: 0\r\n"
           "Connection: close\r\n\r\n").encode()
    return admin_request(g, raw)


def store_calls(g):
    series, _ = scrape(g)
    return value(series, "floodgate_store_calls_total")


def reloads(g, result):
    series, _ = scrape(g)
    return value(series, "floodgate_config_reloads_total", result=result)



def test_sighup_changes_a_limit_and_keeps_its_count(gateway_factory):
    g = start(gateway_factory)
    assert send(g, "/limited", 2) == [200, 200]
    rewrite(g, 5, g.config)
    g.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: reloads(g, "ok") == 1)
    # 2 of the old limit's 3 were used: the new limit 5 leaves 3, not 5.
    assert send(g, "/limited", 4) == [200, 200, 200, 429]
    # (logged on the reload thread just after the count moved: awaited)
    assert wait_until(lambda: "reload (SIGHUP)" in g.log_text(), 10), g.log_text()[-2000:]


def test_a_reload_reaches_a_keep_alive_connection_s_next_request(gateway_factory):
    """A connection open across a reload: its next request is limited by the new file
    (its checks are built anew, not kept from the request before)."""
    g = start(gateway_factory)
    with g.connect() as s:
        rd = Reader(s)
        for _ in range(2):
            s.sendall(get("/limited"))
            r = read_response(s, reader=rd)
            assert r.status == 200 and r.header("ratelimit-policy") == '"per-ip";q=3;w=3600'
        rewrite(g, 5, g.config)
        assert post_reload(g).status == 200
        got = []
        for _ in range(4):
            s.sendall(get("/limited"))
            r = read_response(s, reader=rd)
            got.append((r.status, r.header("ratelimit-policy")))
    assert got == [(200, '"per-ip";q=5;w=3600')] * 3 + [(429, '"per-ip";q=5;w=3600')]


def test_post_reload_answers_and_takes_effect_at_once(gateway_factory):
    g = start(gateway_factory, workers=2)
    assert send(g, "/limited", 3) == [200, 200, 200]
    assert send(g, "/limited", 1) == [429]
    _, before = scrape(g)
    rewrite(g, 10, g.config)
    r = post_reload(g)
    assert r.status == 200, r.body
    body = r.json()
    assert body["status"] == "reloaded" and body["restart_needed"] == []
    # The answer comes once every worker has the new file: the next request sees it.
    assert send(g, "/limited", 1) == [200]
    _, after = scrape(g)
    assert f'floodgate_config_info{{hash="{body["hash"]}"}} 1' in after
    assert body["hash"] not in before
    cfg = admin_get(g, "/config").json()
    assert cfg["routes"][0]["limits"][0]["limit"] == 10


def test_a_file_renamed_over_the_config_is_picked_up(gateway_factory):
    g = start(gateway_factory)
    assert send(g, "/limited", 3) == [200, 200, 200]
    tmp = g.config.with_name(".floodgate.yaml.swp")
    rewrite(g, 6, tmp)
    os.rename(tmp, g.config)
    assert wait_until(lambda: reloads(g, "ok") == 1)
    assert send(g, "/limited", 4) == [200, 200, 200, 429]
    assert wait_until(lambda: "reload (file changed)" in g.log_text(), 10), g.log_text()[-2000:]


def test_an_edit_in_place_is_picked_up(gateway_factory):
    g = start(gateway_factory)
    rewrite(g, 1, g.config)
    assert wait_until(lambda: reloads(g, "ok") == 1)
    assert send(g, "/limited", 2) == [200, 429]


def test_a_configmap_symlink_swap_is_picked_up(gateway_factory):
    g = start(gateway_factory, configmap=True)
    vol = g.config.parent
    assert g.config.is_symlink()
    assert send(g, "/limited", 3) == [200, 200, 200]
    # kubelet's update: a new timestamped folder, a new ..data link renamed over the
    # old one, the old folder removed.
    (vol / "..v2").mkdir()
    rewrite(g, 5, vol / "..v2" / "floodgate.yaml")
    os.symlink("..v2", vol / "..data_tmp")
    os.rename(vol / "..data_tmp", vol / "..data")
    shutil.rmtree(vol / "..v1")
    assert wait_until(lambda: reloads(g, "ok") == 1)
    assert send(g, "/limited", 3) == [200, 200, 429]
    # And the next swap, from the new folder.
    (vol / "..v3").mkdir()
    rewrite(g, 6, vol / "..v3" / "floodgate.yaml")
    os.symlink("..v3", vol / "..data_tmp")
    os.rename(vol / "..data_tmp", vol / "..data")
    assert wait_until(lambda: reloads(g, "ok") == 2)
    assert send(g, "/limited", 2) == [200, 429]


def test_a_broken_file_is_rejected_and_the_old_config_serves(gateway_factory):
    g = start(gateway_factory)
    assert send(g, "/limited", 2) == [200, 200]
    good = g.config.read_text()
    # Written elsewhere and renamed over: one event, one failed reload.
    tmp = g.config.with_name("next.yaml")
    tmp.write_text(good.replace("        limit: 3", "        limit: many"))
    os.rename(tmp, g.config)
    assert wait_until(lambda: reloads(g, "failed") == 1)
    r = post_reload(g)
    assert r.status == 422
    errors = r.json()["errors"]
    assert any(re.match(rf"{re.escape(str(g.config))}:\d+:\d+: expected an integer", e) for e in errors), errors
    assert reloads(g, "failed") == 2 and reloads(g, "ok") == 0
    # Still the old limit of 3, with its count.
    assert send(g, "/limited", 2) == [200, 429]
    log = g.log_text()
    assert "the configuration in effect is unchanged" in log
    # The good text again: taken (the watcher compares with the last text tried).
    g.config.write_text(good.replace("        limit: 3", "        limit: 4"))
    assert wait_until(lambda: reloads(g, "ok") == 1)
    assert send(g, "/limited", 2) == [200, 429]


def test_listen_and_workers_need_a_restart(gateway_factory):
    g = start(gateway_factory)
    text = g.config.read_text().replace("workers: 1", "workers: 3")
    text = text.replace(f"127.0.0.1:{g.port}", "127.0.0.1:1")
    g.config.write_text(text.replace("        limit: 3", "        limit: 9"))
    r = post_reload(g)
    assert r.status == 200
    assert sorted(r.json()["restart_needed"]) == ["listen", "workers"]
    # The rest took effect; the proxy still listens where it did.
    assert send(g, "/limited", 4) == [200] * 4
    assert "listen changed: it takes effect at the next restart" in g.log_text()
    cfg = admin_get(g, "/config").json()
    assert cfg["workers"] == 1 and cfg["listen"] == f"127.0.0.1:{g.port}"


def test_pooled_upstream_connections_survive_a_reload(gateway_factory, upstream):
    g = start(gateway_factory)
    upstream.reset()
    assert send(g, "/echo", 2) == [200, 200]
    rewrite(g, 7, g.config)
    assert post_reload(g).status == 200
    assert send(g, "/echo", 2) == [200, 200]
    assert upstream.stats()["connections"] == 1


def test_a_streaming_upload_started_before_a_reload_completes_intact(gateway_factory):
    g = start(gateway_factory)
    size = (64 << 20) if SANITIZED else (1 << 30)
    block = os.urandom(1 << 20)
    expected_sum = 0
    with g.connect(timeout=120) as s:
        s.sendall(f"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())
        for i in range(size // len(block)):
            s.sendall(block)
            expected_sum = (expected_sum + sum(block[::4096])) & 0xFFFFFFFF
            if i == 8:
                rewrite(g, 8, g.config)
                assert post_reload(g).status == 200
        r = read_response(s)
    assert r.status == 200
    assert r.json() == {"length": size, "sum": expected_sum}
    assert reloads(g, "ok") == 1


def test_requests_in_flight_across_20_reloads_all_succeed(gateway_factory, upstream):
    g = with_admin(lambda extra: gateway_factory(routes=limited(100000), extra=extra, workers=2))
    clients, each = 50, 20
    results, lock = [], threading.Lock()
    go = threading.Event()

    def client():
        got = []
        with g.connect(timeout=30) as s:
            go.wait()
            for i in range(each):
                s.sendall(get("/limited" if i % 2 else "/slow?ms=20"))
                got.append(read_response(s).status)
        with lock:
            results.extend(got)

    threads = [Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    go.set()
    try:
        for n in range(20):
            rewrite(g, 100000 + n, g.config)
            assert post_reload(g).status == 200
            time.sleep(0.02)  # (spread over the clients' requests: not a synchronisation)
    finally:
        join_all(threads, 60)
    assert len(results) == clients * each
    assert results.count(200) == len(results), {s: results.count(s) for s in set(results)}
    assert reloads(g, "ok") >= 20


def test_changing_the_store_reconnects(gateway_factory, redis_server):
    g = start(gateway_factory)
    assert send(g, "/limited", 1) == [200]
    text = g.config.read_text().replace("store: memory", "store: redis")
    text = text.replace('addresses: ["127.0.0.1:6379"]', f'addresses: ["{redis_server.address}"]')
    g.config.write_text(text)
    assert post_reload(g).status == 200
    # The Redis store is a new one: 3 again, counted in Redis.
    assert wait_until(lambda: admin_get(g, "/readyz").status == 200)
    assert send(g, "/limited", 4) == [200, 200, 200, 429]
    assert redis_server.keys("fgtest:*")


def test_a_new_redis_address_reconnects_and_the_old_server_is_let_go(gateway_factory, redis_server, tmp_path):
    from conftest import RedisServer
    d = tmp_path / "redis-b"
    d.mkdir()
    other = RedisServer(d)
    try:
        g = with_admin(lambda extra: gateway_factory(store="redis", redis=redis_server.address, routes=limited(3),
                                                     extra=extra, workers=2), more=READY_REQUIRES_STORE)
        assert wait_until(lambda: admin_get(g, "/readyz").status == 200)
        assert send(g, "/limited", 2) == [200, 200]
        assert len(redis_server.keys("fgtest:*")) == 1
        text = g.config.read_text().replace(redis_server.address, other.address)
        g.config.write_text(text.replace("        limit: 3", "        limit: 4"))
        r = post_reload(g)
        assert r.status == 200, r.body
        # Answered once the workers use the new server: counted there, from zero.
        assert send(g, "/limited", 5) == [200, 200, 200, 200, 429]
        assert len(other.keys("fgtest:*")) == 1
        assert admin_get(g, "/readyz").status == 200
        # The workers' connections to the old server close a second after their last
        # request (left: the admin's /limits connection, and redis-cli's own).
        def clients(server):
            return int([line for line in server.cli("info", "clients").splitlines()
                        if line.startswith("connected_clients:")][0].split(":")[1])
        assert wait_until(lambda: clients(redis_server) <= 2, timeout=4), clients(redis_server)
    finally:
        other.stop()


def test_an_upstream_moved_by_a_reload_gets_the_next_requests(gateway_factory, upstream):
    from conftest import Upstream
    other = Upstream()
    try:
        g = start(gateway_factory)
        upstream.reset()
        assert send(g, "/echo", 2) == [200, 200]
        assert upstream.stats()["requests"] == 2
        g.config.write_text(g.config.read_text().replace(upstream.address, other.address))
        assert post_reload(g).status == 200
        # The idle connection to the old address is not taken again.
        assert send(g, "/echo", 3) == [200, 200, 200]
        assert upstream.stats()["requests"] == 2
        assert other.stats()["requests"] == 3 and other.stats()["connections"] == 1
    finally:
        other.stop()


def test_a_request_in_flight_reaches_an_upstream_the_reload_removed(gateway_factory, upstream, redis_server):
    # The request waits on Redis for its limits (paused) while a reload renames the
    # upstream: it still goes where its configuration said, not to a 502.
    # (Redis' timeout is longer than the pause: the call is answered, not given up.)
    g = with_admin(lambda extra: gateway_factory(store="redis", redis=redis_server.address, routes=limited(100),
                                                 extra=extra, redis_timeout="10s"), more=READY_REQUIRES_STORE)
    assert wait_until(lambda: admin_get(g, "/readyz").status == 200)
    assert send(g, "/limited/echo", 1) == [200]
    text = g.config.read_text()
    renamed = text.replace("upstreams:\n  api:", "upstreams:\n  api2:").replace("upstream: api\n", "upstream: api2\n")
    assert renamed != text
    got = []
    calls = store_calls(g)
    decided = decisions(g, "r", "per-ip")
    with g.connect() as s:
        redis_server.cli("client", "pause", "4000", "all")
        paused = time.monotonic()
        s.sendall(get("/limited/echo"))
        # Waiting on Redis: its call sent (and held by the pause).
        assert wait_until(lambda: store_calls(g) == calls + 1, 3), (store_calls(g), calls)
        g.config.write_text(renamed)
        assert post_reload(g).status == 200
        # ... and still waiting once the reload is done.
        took = time.monotonic() - paused
        assert select.select([s], [], [], 0)[0] == [], f"answered before the reload was ({took:.2f}s into the pause)"
        got.append(read_response(s).status)
    assert got == [200]
    now = decisions(g, "r", "per-ip")
    assert now["allowed"] - decided["allowed"] == 1 and now["store_error_allowed"] == decided["store_error_allowed"]
    assert send(g, "/limited/echo", 1) == [200]


def test_a_changed_algorithm_is_told_to_rename(gateway_factory):
    g = start(gateway_factory)
    g.config.write_text(g.config.read_text().replace("algorithm: fixed_window", "algorithm: sliding_window"))
    assert post_reload(g).status == 200
    assert "limit r/per-ip changed from fixed_window to sliding_window" in g.log_text()
