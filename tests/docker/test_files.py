"""docker/'s files: compose and Kubernetes YAML parse and hang together, every floodgate
config they use or embed passes `floodgate --check` (with the environment they give it),
and the Grafana dashboard asks only for metrics that /metrics documents."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DOCKER = ROOT / "docker"
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from conftest import BIN, Gateway, RedisServer, Upstream, free_port, read_response  # noqa: E402
import socket  # noqa: E402

# Histograms and a counter being added to /metrics now (issue 13): the dashboard may
# use them before the binary documents them.
COMING = set()  # metrics the dashboard may ask for before the binary has them
# Shown only with redis.mode sentinel (tests/integration/test_sentinel.py checks it there).
SENTINEL_ONLY = {"floodgate_redis_sentinel_events_total"}


def check(config_text, tmp_path, env, name="floodgate.yaml"):
    path = tmp_path / name
    path.write_text(config_text)
    # Only the variables the file's user gives it, so a reference nobody sets fails.
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    p = subprocess.run([BIN, "--check", "--config", str(path)], env=dict(base, **env), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return yaml.safe_load(config_text)


def compose_value(v):
    """Compose's own interpolation, for the forms used here: ${VAR:-default} and $$."""
    v = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}", lambda m: os.environ.get(m[1]) or m[2], str(v))
    return v.replace("$$", "$")


def port_of(listen):
    return int(listen.rsplit(":", 1)[1])


def test_the_image_config_passes_check(tmp_path):
    # The image's FG_UPSTREAM has a default: no variable needed.
    cfg = check((DOCKER / "floodgate.yaml").read_text(), tmp_path, {})
    assert port_of(cfg["listen"]) == 8080 and cfg["listen"].startswith("0.0.0.0:")
    assert cfg["admin"]["listen"] == "0.0.0.0:9901"
    assert cfg["store"] == "memory"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY docker/floodgate.yaml /etc/floodgate/floodgate.yaml" in dockerfile
    assert 'HEALTHCHECK' in dockerfile and "http://127.0.0.1:9901/readyz" in dockerfile


def test_compose(tmp_path):
    doc = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = doc["services"]
    assert {"floodgate", "redis", "upstream"} <= set(services)
    fg = services["floodgate"]
    assert (DOCKER / fg["build"]["context"] / fg["build"].get("dockerfile", "Dockerfile")).is_file()
    # The admin port on the host's loopback only; the proxy port published.
    ports = [str(p) for p in fg["ports"]]
    assert "127.0.0.1:9901:9901" in ports
    assert not [p for p in ports if p.endswith(":9901") and not p.startswith("127.0.0.1:")]
    assert any(p.endswith("8080:8080") for p in ports)
    # The config comes from a mounted directory, as /etc/floodgate/floodgate.yaml.
    mounts = [v.split(":") for v in fg["volumes"]]
    (host, target, *_), = [m for m in mounts if m[1] == "/etc/floodgate"]
    config_file = (DOCKER / host / "floodgate.yaml")
    assert config_file.is_file()
    env = {k: compose_value(v) for k, v in fg["environment"].items()}
    cfg = check(config_file.read_text(), tmp_path, env)
    assert cfg["store"] == "redis"
    assert cfg["redis"]["password"].startswith("${"), "the Redis password is in the file"
    # It points at the compose services by name.
    redis_host = env["REDIS_ADDRESS"].split(":")[0]
    assert redis_host in services
    assert cfg["upstreams"]["api"]["address"].split(":")[0] in services
    # Redis wants the same password the gateway gets.
    assert compose_value(services["redis"]["environment"]["REDIS_PASSWORD"]) == env["REDIS_PASSWORD"]
    # The README's classic rules: per IP, and per endpoint.
    limits = {l["key"] for r in cfg["routes"] for l in r.get("limits", [])}
    assert {"ip", "global"} <= limits


def test_sidecar(tmp_path):
    docs = list(yaml.safe_load_all((DOCKER / "sidecar" / "floodgate.yaml").read_text()))
    by_kind = {d["kind"]: d for d in docs}
    assert {"ConfigMap", "Secret", "Deployment", "Service"} <= set(by_kind)
    pod = by_kind["Deployment"]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert len(containers) >= 2, "floodgate beside an app container"
    fg = containers["floodgate"]
    config_path = fg["args"][fg["args"].index("--config") + 1]

    # The ConfigMap is mounted as the config's directory (not by subPath, which never
    # sees an update), and its key is the config's file name.
    volume = next(v for v in pod["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == by_kind["ConfigMap"]["metadata"]["name"]
    mount = next(m for m in fg["volumeMounts"] if m["name"] == volume["name"])
    assert "subPath" not in mount
    assert mount["mountPath"] == os.path.dirname(config_path)
    embedded = by_kind["ConfigMap"]["data"][os.path.basename(config_path)]

    # Redis from env, the password from the Secret.
    env = {}
    for e in fg["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            assert ref["name"] == by_kind["Secret"]["metadata"]["name"]
            assert ref["key"] in by_kind["Secret"]["stringData"]
            env[e["name"]] = by_kind["Secret"]["stringData"][ref["key"]]
    assert "REDIS_PASSWORD" in env and "valueFrom" in next(e for e in fg["env"] if e["name"] == "REDIS_PASSWORD")
    cfg = check(embedded, tmp_path, env)
    assert cfg["redis"]["password"] == "${REDIS_PASSWORD}"
    # Without the Secret's variable the file is refused.
    p = subprocess.run([BIN, "--check", "--config", str(tmp_path / "floodgate.yaml")], env={"PATH": "/usr/bin"},
                       capture_output=True, text=True)
    assert p.returncode == 1 and "environment variable" in p.stderr

    # Probes on the admin port: alive on /healthz, ready on /readyz.
    ports = {p["name"]: p["containerPort"] for p in fg["ports"]}
    assert ports["admin"] == port_of(cfg["admin"]["listen"])
    assert ports["http"] == port_of(cfg["listen"])
    assert fg["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert fg["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        port = fg[probe]["httpGet"]["port"]
        assert ports.get(port, port) == ports["admin"]
    # The app is reached on the pod's loopback, and the Service sends traffic to floodgate.
    assert cfg["upstreams"]["app"]["address"].startswith("127.0.0.1:")
    assert [p["targetPort"] for p in by_kind["Service"]["spec"]["ports"]] == ["http"]
    # Non-root, as the image's numeric user.
    assert fg["securityContext"]["runAsUser"] == 10001


def metrics_documented(tmp_path):
    """The metric families a running gateway's /metrics documents (# TYPE lines). A family
    shows once it has counted something, so the gateway uses the Redis store, two
    requests are allowed and one meets a stopped Redis: every family appears."""
    u = Upstream()
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")
    routes = """  - name: r
    match:
      path_prefix: /
    upstream: api
    limits:
      - name: per-ip
        algorithm: fixed_window
        key: ip
        limit: 1000
        window: 1h
"""
    try:
        for _ in range(3):
            port = free_port()
            try:
                g = Gateway(tmp_path, u.address, extra=f'admin:\n  listen: "127.0.0.1:{port}"\n', store="redis",
                            redis=redis.address, routes=routes)
                break
            except RuntimeError:
                continue
        try:
            for stop_first in (False, False, True):
                if stop_first:
                    redis.stop()
                g.request(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                r = read_response(s)
            assert r.status == 200
            text = r.body.decode()
        finally:
            assert g.stop() == 0, g.log_text()
    finally:
        u.stop()
        redis.stop()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert types, text
    return types


def test_grafana_dashboard_uses_only_real_metrics(tmp_path):
    dash = json.loads((DOCKER / "grafana" / "floodgate.json").read_text())
    exprs = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("expr", "definition") and isinstance(v, str):
                    exprs.append(v)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(dash)
    assert len(exprs) >= 10
    types = metrics_documented(tmp_path)
    used = set()
    for e in exprs:
        for name in re.findall(r"\bfloodgate_[a-z0-9_]+", e):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            # A histogram's series: _bucket/_sum/_count of a histogram family.
            if base != name and base in types:
                assert types[base] == "histogram", f"{name}: {base} is a {types[base]}"
            used.add(base if base != name else name)
    unknown = used - set(types) - COMING - SENTINEL_ONLY
    assert not unknown, f"the dashboard asks for metrics /metrics does not have: {sorted(unknown)}"
    # Every documented family has a panel, so the dashboard keeps up with /metrics.
    assert not set(types) - used, f"metrics without a panel: {sorted(set(types) - used)}"
