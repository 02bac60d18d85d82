"""What the limits admit while the network between the gateways and Redis misbehaves:
several gateways under load through fault_proxy.py, one fault at a time, then healed.
Used by test_fault_admission.py (each fault with one algorithm, each algorithm with one
fault) and by bench/fault_matrix.py (every algorithm x fault x mode, the table in
docs/redis.md).

Each scenario: K clients (their own X-Client keys, each limited to LIMIT for the rest of
the hour) send through every gateway at a steady pace; after a second the fault is set
on every proxy, held FAULT_S seconds, cleared; the load goes on until every gateway
decides for real again. Every answer is classified by what the client sees: a 200 with
the RateLimit fields (the store admitted it), a 200 without them (on_store_error: allow),
a 429 (denied), a 503 (on_store_error: deny). The bounds (docs/redis.md, "Limits under
network faults"):
- over-admission: the store admits at most LIMIT per client (+1 for a rate whose refill
  the run's seconds could add); all else that passed was on_store_error's allowance;
- under-admission: a client denied (the store counted its limit used) with fewer than
  LIMIT admitted lost no more than its answers the fault cut (LIMIT - admitted <= that
  client's store errors): a call whose answer was lost may have counted;
- concurrency (on_store_error: deny): never more than LIMIT of its requests at the
  origin at once;
- every answer within LATENCY_BOUND_S (no request waits on a dead connection), and real
  decisions on every gateway within RECOVERY_BOUND_S of the heal.
"""
import threading
import time

from conftest import Gateway, Thread, Upstream, get, join_all, read_response, wait_for
from test_admin import READY_REQUIRES_STORE, admin_get, with_admin

LIMIT = 10
CONCURRENCY = 4
# Clients per scenario: enough that each sends about a limit's worth a second, so that
# none is used up (and denied by its worker alone, the deny cache) before the fault.
CLIENTS = 48
FAULT_S = 3.0
LATENCY_BOUND_S = 5.0
RECOVERY_BOUND_S = 15.0
TIMEOUT = "50ms"

ALGORITHMS = ["fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra", "concurrency"]

# Each fault as fault_proxy.py's set() takes it; `new`: new connections get it too.
FAULTS = {
    "latency": {"fault": "latency", "ms": 30, "jitter_ms": 40, "new": True},   # some answers past 50 ms
    "slow": {"fault": "slow", "bytes_per_s": 3000, "new": True},               # a thin link
    "stall": {"fault": "stall", "new": False},                                 # open flows pause, then go on
    "partition": {"fault": "stall", "new": True},                              # nothing passes, then all does
    "blackhole": {"fault": "blackhole", "new": False},                         # open flows dropped for good
    "half_open": {"fault": "half_open", "new": False},                         # the far end gone, no FIN
    "reset_reply": {"fault": "reset_reply", "new": True},                      # replies cut, then RST
}


def numbers(algorithm):
    if algorithm in ("token_bucket", "gcra"):
        return f"rate: {LIMIT}/h\n        burst: {LIMIT}"
    if algorithm == "concurrency":
        return f"limit: {CONCURRENCY}"
    return f"limit: {LIMIT}\n        window: 1h"


def routes():
    out = ""
    for a in ALGORITHMS:
        policy = "deny" if a == "concurrency" else "allow"
        path = "/slow" if a == "concurrency" else f"/a/{a}"
        # (concurrency: one limit for all of a scenario's clients, so that the origin sees
        # what it holds to, and a scenario's own: leases a fault kept do not carry over)
        key = '"header:X-Scenario"' if a == "concurrency" else '"header:X-Client"'
        out += f"""  - name: {a}
    match:
      path_prefix: {path}
    upstream: api
    on_store_error: {policy}
    limits:
      - name: per-client
        algorithm: {a}
        key: {key}
        {numbers(a)}
"""
    return out + """  - name: rest
    match:
      path_prefix: /
    upstream: api
"""


def path_of(algorithm):
    return "/slow?ms=150" if algorithm == "concurrency" else f"/a/{algorithm}"


class Env:
    """`gateways` gateways (one worker each) on one store through `proxies`."""

    def __init__(self, tmp_path, redis, redis_extra, proxies, gateways=3, upstream=None):
        self.proxies = proxies
        self.upstream = upstream or Upstream()
        self.own_upstream = upstream is None
        self.gateways = []
        for i in range(gateways):
            d = tmp_path / f"gw{i}"
            d.mkdir(parents=True, exist_ok=True)
            g = with_admin(lambda extra, d=d: Gateway(
                d, self.upstream.address, store="redis", redis=redis, routes=routes(), extra=extra, workers=1,
                redis_timeout=TIMEOUT, redis_extra=redis_extra,
                upstream_opts={"max_idle": 64, "response_timeout": "5s"}), more=READY_REQUIRES_STORE)
            self.gateways.append(g)
        for g in self.gateways:
            wait_for("the gateway ready on its store", lambda g=g: admin_get(g, "/readyz").status == 200, 30)
        self.scenarios = 0

    def stop(self):
        for g in self.gateways:
            g.stop()
        if self.own_upstream:
            self.upstream.stop()


def classify(resp):
    if resp.status == 200:
        return "admitted" if resp.header("RateLimit") is not None else "error_allowed"
    if resp.status == 429:
        return "denied"
    if resp.status == 503:
        return "error_denied"
    return f"status_{resp.status}"


def decides(g, name, algorithm, scenario=""):
    """Whether the store decides for client `name` on g now: admitted or denied by it (a
    fresh client, so no denial of its own worker's; concurrency's one key may be full)."""
    with g.connect() as s:
        s.sendall(get(path_of(algorithm), extra=f"X-Client: {name}\r\nX-Scenario: {scenario}\r\n"))
        return classify(read_response(s)) in ("admitted", "denied")


class Result:
    def __init__(self, algorithm, fault, mode):
        self.algorithm, self.fault, self.mode = algorithm, fault, mode
        self.per_client = {}
        self.latencies = []
        self.recovery_s = None
        self.in_flight_max = None
        self.gateways = 0
        self.lock = threading.Lock()

    def add(self, client, kind, latency):
        with self.lock:
            c = self.per_client.setdefault(client, {})
            c[kind] = c.get(kind, 0) + 1
            self.latencies.append(latency)

    def totals(self):
        out = {}
        for c in self.per_client.values():
            for k, v in c.items():
                out[k] = out.get(k, 0) + v
        return out

    def percentile(self, q):
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0

    def check(self):
        """Raises AssertionError naming the bound broken."""
        strange = {k for t in self.per_client.values() for k in t if k.startswith("status_")}
        assert not strange, (self.name(), self.totals())
        if self.algorithm == "concurrency":
            assert self.in_flight_max is not None and self.in_flight_max <= CONCURRENCY, \
                (self.name(), f"{self.in_flight_max} in flight at the origin at once, limit {CONCURRENCY}")
        else:
            slack = 1 if self.algorithm in ("token_bucket", "gcra") else 0
            for client, t in self.per_client.items():
                admitted, errors = t.get("admitted", 0), t.get("error_allowed", 0) + t.get("error_denied", 0)
                assert admitted <= LIMIT + slack, (self.name(), client, t, "the store admitted past the limit")
                # A denial says the store counted the limit used: what it admitted short
                # of it was counted for answers the fault lost.
                if t.get("denied", 0):
                    assert LIMIT - admitted <= errors, (self.name(), client, t,
                                                        "refused more than the lost answers explain")
        assert max(self.latencies) <= LATENCY_BOUND_S, (self.name(), f"an answer took {max(self.latencies):.2f} s")
        assert self.recovery_s is not None and self.recovery_s <= RECOVERY_BOUND_S, (self.name(), self.recovery_s)

    def name(self):
        return f"{self.algorithm} x {self.fault} ({self.mode}, {self.gateways} gateways)"

    def line(self):
        t = self.totals()
        over = max((v.get("admitted", 0) - LIMIT for v in self.per_client.values()), default=0)
        under = max((LIMIT - v.get("admitted", 0) for v in self.per_client.values()), default=0)
        extra = f", origin in flight max {self.in_flight_max}/{CONCURRENCY}" if self.algorithm == "concurrency" else \
            f", store admits per client over/under the limit at most {max(over, 0)}/{max(under, 0)}"
        return (f"{self.name()}: {sum(t.values())} answers {t}{extra}; latency p50 {self.percentile(0.5) * 1000:.0f} "
                f"ms p99 {self.percentile(0.99) * 1000:.0f} ms max {max(self.latencies) * 1000:.0f} ms; real "
                f"decisions {self.recovery_s:.2f} s after the heal")


def run(env, algorithm, fault, mode="standalone", clients=CLIENTS, threads_per_gateway=2, pace_s=0.01):
    """One scenario on `env`; returns its Result (call .check())."""
    env.scenarios += 1
    tag = f"s{env.scenarios}-{algorithm}-{fault}"
    names = [f"{tag}-c{i}" for i in range(clients)]
    result = Result(algorithm, fault, mode)
    result.gateways = len(env.gateways)
    stop = threading.Event()
    if algorithm == "concurrency":
        env.upstream.reset()

    def load(g, i):
        n = 0
        s = None
        while not stop.is_set():
            # (each thread walks every client, from its own start)
            name = names[(n + i * 7) % len(names)]
            n += 1
            try:
                if s is None:
                    s = g.connect(timeout=LATENCY_BOUND_S * 2)
                t = time.monotonic()
                s.sendall(get(path_of(algorithm), extra=f"X-Client: {name}\r\nX-Scenario: {tag}\r\n"))
                r = read_response(s)
                result.add(name, classify(r), time.monotonic() - t)
                if r.header("Connection") == "close":
                    s.close()
                    s = None
            except (ConnectionError, EOFError):
                if s is not None:
                    s.close()
                s = None
                raise
            time.sleep(pace_s)
        if s is not None:
            s.close()

    threads = [Thread(target=load, args=(g, k * threads_per_gateway + i)) for k, g in enumerate(env.gateways)
               for i in range(threads_per_gateway)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)  # (what is measured: the load before the fault)
        spec = dict(FAULTS[fault])
        new = spec.pop("new")
        for p in env.proxies:
            p.set(existing=True, new=new, **spec)
        time.sleep(FAULT_S)  # (what is measured: the fault held this long)
        for p in env.proxies:
            p.clear()
        healed = time.monotonic()
        fresh = iter(range(10**6))
        for g in env.gateways:
            wait_for(f"{result.name()}: real decisions again",
                     lambda g=g: decides(g, f"{tag}-probe-{next(fresh)}", algorithm, tag), RECOVERY_BOUND_S)
        result.recovery_s = time.monotonic() - healed
        time.sleep(0.5)  # (what is measured: the load after the heal)
    finally:
        stop.set()
        join_all(threads, 30)
    if algorithm == "concurrency":
        result.in_flight_max = env.upstream.stats()["slow_in_flight_max"]
    # The next scenario starts on a store every gateway can reach.
    for g in env.gateways:
        wait_for("the gateway ready again", lambda g=g: admin_get(g, "/readyz").status == 200, RECOVERY_BOUND_S)
    return result


def announce_through(cluster, make_proxy):
    """Puts a proxy (make_proxy(address)) in front of every node of `cluster` and has the
    node announce the proxy's port (cluster-announce-port), so that slot maps and
    redirections name the proxies; waits until every node sees every other so. Returns
    {node port: proxy}."""
    fronts = {}
    for node in cluster.servers:
        fronts[node.port] = make_proxy(node.address)
        assert cluster.cli(node.port, "config", "set", "cluster-announce-port", fronts[node.port].port) == "OK"
    want = sorted(p.port for p in fronts.values())
    wait_for("every node announcing its proxy's port",
             lambda: all(sorted(n.port for n in cluster.nodes(s.port)) == want for s in cluster.servers), 15)
    return fronts


class Stores:
    """The store of one mode behind fault proxies, for Env: .redis, .redis_extra, .proxies;
    stop() ends what it started. Modes: standalone (one redis-server), sentinel (a master
    and a replica, three sentinels monitoring the master through its proxy; down-after
    60 s, so that the sentinels, whose own links the faults hit too, fail nothing over
    during a run), cluster (three masters, each announcing its proxy's port)."""

    def __init__(self, tmp_path, mode):
        from conftest import RedisCluster, RedisSentinel, RedisServer
        from fault_proxy import FaultProxy
        self.proxies, self.stoppable = [], []

        def make(address):
            p = FaultProxy(address)
            self.proxies.append(p)
            return p

        try:
            if mode == "standalone":
                d = tmp_path / "redis"
                d.mkdir(parents=True, exist_ok=True)
                server = RedisServer(d)
                self.stoppable.append(server)
                self.redis, self.redis_extra = make(server.address).address, ""
                self.servers = [server]
            elif mode == "sentinel":
                s = RedisSentinel(tmp_path / "sentinel", down_after_ms=60000, master_front=make)
                self.stoppable.append(s)
                self.redis = '", "'.join(f"127.0.0.1:{x.port}" for x in s.sentinels)
                self.redis_extra = f"  mode: sentinel\n  master_name: {s.name}\n"
                self.servers = s.servers
            else:
                c = RedisCluster(tmp_path / "cluster", masters=3, replicas=0)
                self.stoppable.append(c)
                fronts = announce_through(c, make)
                self.redis = '", "'.join(p.address for p in fronts.values())
                self.redis_extra = "  mode: cluster\n"
                self.servers = c.servers
        except BaseException:
            self.stop()
            raise

    def stop(self):
        for p in self.proxies:
            p.stop()
        for s in self.stoppable:
            s.stop()
