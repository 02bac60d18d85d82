"""docker/'s files: compose and Kubernetes YAML parse and hang together, every kustomize
overlay under docker/k8s/overlays/ renders (`kubectl kustomize`) into pods with probes on
the admin port, resources, a locked-down security context, the admin token from a
Secret and the image at the project's version, every floodgate config they use or embed
passes `floodgate --check` (with the environment they give it) and is refused without
its admin token, no file holds a placeholder secret, each overlay's NetworkPolicy admits
the admin port only from the monitoring namespace, the image's HEALTHCHECK asks for
liveness (and passes while Redis is down), and the Grafana dashboard asks only for
metrics that /metrics documents."""
import functools
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DOCKER = ROOT / "docker"
K8S = DOCKER / "k8s"
# Every overlay is rendered and checked: a new one needs no change here.
OVERLAYS = sorted(p.parent.name for p in (K8S / "overlays").glob("*/kustomization.yaml"))
# The image's tag in every overlay (images: in docker/k8s/base/kustomization.yaml).
VERSION = re.search(r"^project\(floodgate VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text(), re.M)[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from conftest import BIN, Gateway, RedisServer, Upstream, free_port, read_response, record  # noqa: E402
import socket  # noqa: E402

# Shown only with redis.mode sentinel (tests/integration/test_sentinel.py checks it there).
SENTINEL_ONLY = {"floodgate_redis_sentinel_events_total"}

# What an operator exports before `docker compose up` (docs/docker.md, "Compose").
SHELL = {"REDIS_PASSWORD": "a-redis-password-from-the-test", "ADMIN_TOKEN": "an-admin-token-from-the-test-0123456789"}
# The values a Secret's keys hold in the overlays' tests (the Secret is the operator's).
SECRET_VALUE = "a-value-from-the-secret-{key}"


def run_check(config_text, tmp_path, env, name="floodgate.yaml"):
    path = tmp_path / name
    path.write_text(config_text)
    # Only the variables the file's user gives it, so a reference nobody sets fails.
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    return subprocess.run([BIN, "--check", "--config", str(path)], env=dict(base, **env), capture_output=True, text=True)


def check(config_text, tmp_path, env, name="floodgate.yaml"):
    p = run_check(config_text, tmp_path, env, name)
    assert p.returncode == 0, p.stderr
    return yaml.safe_load(config_text)


def refused(config_text, tmp_path, env, name="floodgate.yaml"):
    """--check's stderr for a file it must refuse (exit 1)."""
    p = run_check(config_text, tmp_path, env, name)
    assert p.returncode == 1, f"--check accepted it (exit {p.returncode}): {p.stdout}{p.stderr}"
    return p.stderr


class ComposeError(Exception):
    pass


def compose_value(v, shell):
    """Compose's own interpolation, for the forms used here: ${VAR}, ${VAR:-default},
    ${VAR-default}, ${VAR:?message}, ${VAR?message} and $$, from `shell` (the
    environment `docker compose` runs in). A required variable missing raises, as
    compose stops before it starts anything."""
    def one(m):
        if m[0] == "$$":
            return "$"
        name, op, arg = m[1], m[2] or "", m[3] or ""
        value = shell.get(name)
        missing = value is None or (op.startswith(":") and value == "")
        if op.endswith("?") and missing:
            raise ComposeError(f"required variable {name} is missing a value: {arg}")
        if op.endswith("-") and missing:
            return arg
        return value or ""
    return re.sub(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}", one, str(v))


def port_of(listen):
    return int(listen.rsplit(":", 1)[1])


def kubectl():
    path = shutil.which("kubectl")
    if not path:
        pytest.skip("no kubectl to render docker/k8s/ (scripts/deps.sh test installs kubernetes-client)")
    return path


@functools.cache
def rendered(overlay):
    """Every document of an overlay, as `kubectl apply -k docker/k8s/overlays/OVERLAY`
    would apply them."""
    p = subprocess.run([kubectl(), "kustomize", str(K8S / "overlays" / overlay)], capture_output=True, text=True)
    assert p.returncode == 0, f"kubectl kustomize {overlay}: {p.stderr}"
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def image_name(image):
    """`registry/path/floodgate:1.2.3` -> ("floodgate", "1.2.3"); no tag -> (name, "")."""
    name, _, tag = image.rpartition("/")[2].partition(":")
    return name, tag


def floodgate_pod(docs):
    """The Deployment that runs floodgate's image, its pod spec and floodgate's container."""
    found = [(d, c) for d in docs if d["kind"] == "Deployment"
             for c in d["spec"]["template"]["spec"]["containers"] if image_name(c["image"])[0] == "floodgate"]
    assert len(found) == 1, f"{len(found)} floodgate containers"
    (deployment, fg), = found
    return deployment, deployment["spec"]["template"]["spec"], fg


def pod_env(container):
    """A container's environment, a Secret's key standing for its value."""
    env = {}
    for e in container.get("env", []):
        env[e["name"]] = e["value"] if "value" in e else SECRET_VALUE.format(key=e["valueFrom"]["secretKeyRef"]["key"])
    return env


def healthcheck_argv():
    """The Dockerfile's HEALTHCHECK command, as the exec-form list it gives."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    (line,) = [l for l in text.splitlines() if l.startswith("HEALTHCHECK")]
    m = re.search(r"\bCMD\s+(\[.*\])\s*$", line)
    assert m, f"HEALTHCHECK not in exec form: {line}"
    return json.loads(m[1])


# ---- the three configs and the environment each is given --------------------------

def image_config():
    """The image's /etc/floodgate/floodgate.yaml and what `docker run -e ADMIN_TOKEN=...`
    gives it (FG_UPSTREAM has a default)."""
    return (DOCKER / "floodgate.yaml").read_text(), {"ADMIN_TOKEN": SHELL["ADMIN_TOKEN"]}


def compose_config():
    doc = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    fg = doc["services"]["floodgate"]
    mounts = [v.split(":") for v in fg["volumes"]]
    (host, target, *_), = [m for m in mounts if m[1] == "/etc/floodgate"]
    env = {k: compose_value(v, SHELL) for k, v in fg["environment"].items()}
    return (DOCKER / host / "floodgate.yaml").read_text(), env


def overlay_config(overlay):
    """The config floodgate's container reads (--config, in the ConfigMap mounted there)
    and its environment."""
    docs = rendered(overlay)
    _, pod, fg = floodgate_pod(docs)
    config_path = fg["args"][fg["args"].index("--config") + 1]
    mount = next(m for m in fg["volumeMounts"] if m["mountPath"] == os.path.dirname(config_path))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == volume["configMap"]["name"]]
    return cm["data"][os.path.basename(config_path)], pod_env(fg)


CONFIGS = {"image": image_config, "compose": compose_config,
           **{overlay: functools.partial(overlay_config, overlay) for overlay in OVERLAYS}}


def gateway_on_redis(tmp_path, upstream, redis, on_store_error=None):
    """A gateway on `redis` with an admin port and one limited route; (gateway, admin port)."""
    policy = f"    on_store_error: {on_store_error}\n" if on_store_error else ""
    routes = f"""  - name: r
    match:
      path_prefix: /
    upstream: api
{policy}    limits:
      - name: per-ip
        algorithm: fixed_window
        key: ip
        limit: 1000
        window: 1h
"""
    for _ in range(3):
        port = free_port()
        try:
            return Gateway(tmp_path, upstream.address, extra=f'admin:\n  listen: "127.0.0.1:{port}"\n',
                           store="redis", redis=redis.address, routes=routes), port
        except RuntimeError:
            continue
    raise RuntimeError("no free admin port")


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_each_config_passes_check_with_its_environment(which, tmp_path):
    text, env = CONFIGS[which]()
    cfg = check(text, tmp_path, env)
    # Each puts the admin where the probes and scrapers reach it, so a token is needed.
    assert port_of(cfg["admin"]["listen"]) == 9901 and cfg["admin"]["listen"].startswith("0.0.0.0:")
    assert cfg["admin"]["token"] == "${ADMIN_TOKEN}", "the admin token is written in the file"
    assert env.get("ADMIN_TOKEN")


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_a_non_loopback_admin_without_a_token_is_refused(which, tmp_path):
    text, env = CONFIGS[which]()
    without = {k: v for k, v in env.items() if k != "ADMIN_TOKEN"}
    # ADMIN_TOKEN unset, or set but empty: ${ADMIN_TOKEN} is an error at its line.
    for given in (without, dict(without, ADMIN_TOKEN="")):
        err = refused(text, tmp_path, given)
        assert "environment variable ADMIN_TOKEN is not set" in err, err
    # A token that is empty, expands to nothing (${ADMIN_TOKEN:-} with the variable
    # unset), or is not there at all, on 0.0.0.0: refused, and the error says how.
    cfg = yaml.safe_load(text)
    for token in ("", "${ADMIN_TOKEN:-}", None):
        changed = json.loads(json.dumps(cfg))
        if token is None:
            del changed["admin"]["token"]
        else:
            changed["admin"]["token"] = token
        err = refused(yaml.safe_dump(changed), tmp_path, without)
        assert "admin.token" in err and "0.0.0.0:9901" in err, err
    # A token too short to be a secret (under 16 characters) is refused too.
    err = refused(text, tmp_path, dict(without, ADMIN_TOKEN="short"))
    assert "admin.token" in err, err
    # What makes the difference is the address: on loopback, no token is needed.
    changed = json.loads(json.dumps(cfg))
    del changed["admin"]["token"]
    changed["admin"]["listen"] = "127.0.0.1:9901"
    check(yaml.safe_dump(changed), tmp_path, without)


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_trusted_proxies_are_narrow(which, tmp_path):
    # A range as wide as a cluster's whole pod network (10.0.0.0/8) lets any pod in it
    # send X-Forwarded-For and choose its own rate-limit identity.
    cfg = yaml.safe_load(CONFIGS[which]()[0])
    for entry in (cfg.get("client_ip") or {}).get("trusted_proxies") or []:
        net = ipaddress.ip_network(entry, strict=False)
        assert net.prefixlen >= (16 if net.version == 4 else 48), f"{which}: trusted_proxies {entry} is too wide"


def docker_files():
    yield ROOT / "Dockerfile"
    yield from (p for p in sorted(DOCKER.rglob("*")) if p.is_file())


def test_no_placeholder_secrets():
    files = list(docker_files())
    assert len(files) >= 6
    for path in files:
        text = path.read_text(errors="replace").lower()
        for word in ("change-me", "changeme", "change_me"):
            assert word not in text, f"{path.relative_to(ROOT)} has '{word}'"


def test_the_image_config_and_healthcheck(tmp_path):
    text, env = image_config()
    cfg = check(text, tmp_path, env)
    assert port_of(cfg["listen"]) == 8080 and cfg["listen"].startswith("0.0.0.0:")
    assert cfg["store"] == "memory"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY docker/floodgate.yaml /etc/floodgate/floodgate.yaml" in dockerfile
    # Liveness, on the admin listener's port: never /readyz, which a store outage may fail.
    assert healthcheck_argv() == ["floodgate", "--health-check", f"http://127.0.0.1:{port_of(cfg['admin']['listen'])}/healthz"]
    assert "ADMIN_TOKEN" in dockerfile, "the Dockerfile's docker run example gives no ADMIN_TOKEN"


def test_the_healthcheck_passes_while_redis_is_down(tmp_path):
    """The HEALTHCHECK's command, against a gateway whose Redis is stopped and whose
    route denies on a store error: /readyz fails (the instance cannot serve), the
    HEALTHCHECK does not (an orchestrator must not restart it)."""
    argv = healthcheck_argv()
    u = Upstream()
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")
    try:
        g, port = gateway_on_redis(tmp_path, u, redis, "deny")
        try:
            def probe(path):
                url = re.sub(r"^http://127\.0\.0\.1:\d+/\w+$", f"http://127.0.0.1:{port}{path}", argv[2])
                return subprocess.run([BIN, *argv[1:2], url], capture_output=True, text=True)
            assert probe("/readyz").returncode == 0, probe("/readyz").stderr
            redis.stop()
            deadline = time.monotonic() + 10
            while (r := probe("/readyz")).returncode == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert r.returncode == 1 and "503" in r.stderr, f"/readyz with Redis stopped: {r.returncode} {r.stderr}"
            h = probe(re.search(r"/\w+$", argv[2])[0])
            assert h.returncode == 0, f"the HEALTHCHECK failed with Redis stopped: {h.stderr}"
        finally:
            assert g.stop() == 0, g.log_text()
    finally:
        u.stop()
        redis.stop()


def test_compose(tmp_path):
    raw = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = raw["services"]
    assert {"floodgate", "redis", "upstream"} <= set(services)
    fg = services["floodgate"]
    assert (DOCKER / fg["build"]["context"] / fg["build"].get("dockerfile", "Dockerfile")).is_file()
    # The secrets have no default: compose stops at once without them.
    assert str(fg["environment"]["REDIS_PASSWORD"]).startswith("${REDIS_PASSWORD:?")
    assert str(fg["environment"]["ADMIN_TOKEN"]).startswith("${ADMIN_TOKEN:?")
    assert str(services["redis"]["environment"]["REDIS_PASSWORD"]).startswith("${REDIS_PASSWORD:?")
    for name in ("REDIS_PASSWORD", "ADMIN_TOKEN"):
        for service in ("floodgate", "redis"):
            v = services[service]["environment"].get(name)
            if v is None:
                continue
            for shell in ({k: x for k, x in SHELL.items() if k != name}, dict(SHELL, **{name: ""})):
                with pytest.raises(ComposeError):
                    compose_value(v, shell)
    # The admin port on the host's loopback only; the proxy port published.
    ports = [str(p) for p in fg["ports"]]
    assert "127.0.0.1:9901:9901" in ports
    assert not [p for p in ports if p.endswith(":9901") and not p.startswith("127.0.0.1:")]
    assert any(p.endswith("8080:8080") for p in ports)
    # The config comes from a mounted directory, as /etc/floodgate/floodgate.yaml.
    mounts = [v.split(":") for v in fg["volumes"]]
    (host, target, *_), = [m for m in mounts if m[1] == "/etc/floodgate"]
    assert (DOCKER / host / "floodgate.yaml").is_file()
    text, env = compose_config()
    cfg = check(text, tmp_path, env)
    assert cfg["store"] == "redis"
    assert cfg["redis"]["password"].startswith("${"), "the Redis password is in the file"
    assert env["ADMIN_TOKEN"] == SHELL["ADMIN_TOKEN"] and env["REDIS_PASSWORD"] == SHELL["REDIS_PASSWORD"]
    # It points at the compose services by name.
    redis_host = env["REDIS_ADDRESS"].split(":")[0]
    assert redis_host in services
    assert cfg["upstreams"]["api"]["address"].split(":")[0] in services
    # Redis wants the same password the gateway gets.
    assert compose_value(services["redis"]["environment"]["REDIS_PASSWORD"], SHELL) == env["REDIS_PASSWORD"]
    # The classic rules (docs/limits.md, "Limits on a route"): per IP, and per endpoint.
    limits = {l["key"] for r in cfg["routes"] for l in r.get("limits", [])}
    assert {"ip", "global"} <= limits


def secret_command(text):
    """The Secret's name and keys in a `kubectl create secret generic NAME
    --from-literal=KEY=... ...` command: its line and the lines a trailing backslash
    continues it on (in comments, or in a shell block)."""
    lines = text.splitlines()
    at = next((i for i, l in enumerate(lines) if "kubectl create secret generic " in l), None)
    assert at is not None, "no `kubectl create secret generic NAME --from-literal=KEY=...` command"
    command = [lines[at]]
    while command[-1].rstrip().endswith("\\") and at + len(command) < len(lines):
        command.append(lines[at + len(command)])
    command = " ".join(re.sub(r"^\s*#?", "", l).rstrip().rstrip("\\") for l in command)
    name = re.search(r"kubectl create secret generic ([\w.-]+)", command)[1]
    return name, set(re.findall(r"--from-literal=([\w.-]+)=", command))


def test_every_overlay_renders():
    assert {"sidecar", "standalone"} <= set(OVERLAYS)
    version = json.loads(subprocess.run([kubectl(), "version", "--client", "-o", "json"], capture_output=True,
                                        text=True, check=True).stdout)["clientVersion"]["gitVersion"]
    record(f"kubectl {version} rendered {', '.join(OVERLAYS)}")
    for overlay in OVERLAYS:
        assert rendered(overlay)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_pods(overlay, tmp_path):
    docs = rendered(overlay)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ConfigMap", "Service", "NetworkPolicy"} <= kinds
    # No Secret ships with a value: the operator creates it (docs/docker.md, "Kubernetes").
    assert "Secret" not in kinds
    deployment, pod, fg = floodgate_pod(docs)
    config_path = fg["args"][fg["args"].index("--config") + 1]

    # The image by the project's version, never a moving tag.
    assert image_name(fg["image"]) == ("floodgate", VERSION), fg["image"]
    for c in pod["containers"]:
        assert image_name(c["image"])[1] not in ("", "latest"), f"{c['name']}: {c['image']}"
        # Every container: requests and limits; no root, no privilege, no capability,
        # nothing written to its image, seccomp's RuntimeDefault (its own or the pod's).
        for which in ("requests", "limits"):
            assert {"cpu", "memory"} <= set((c.get("resources") or {}).get(which) or {}), f"{c['name']}: {which}"
        own = c.get("securityContext") or {}
        context = dict(pod.get("securityContext") or {}, **own)
        assert context.get("runAsNonRoot") is True, c["name"]
        assert context.get("seccompProfile") == {"type": "RuntimeDefault"}, c["name"]
        assert own.get("readOnlyRootFilesystem") is True, c["name"]
        assert own.get("allowPrivilegeEscalation") is False, c["name"]
        assert "ALL" in (own.get("capabilities") or {}).get("drop", []), c["name"]
    # Non-root, as the image's numeric user.
    assert fg["securityContext"]["runAsUser"] == 10001

    # The ConfigMap is mounted as the config's directory (not by subPath, which never
    # sees an update), under a fixed name: a hashed name (a generator without
    # disableNameSuffixHash) would restart every pod on a change instead of a reload.
    mount = next(m for m in fg["volumeMounts"] if m["mountPath"] == os.path.dirname(config_path))
    assert "subPath" not in mount
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == "floodgate-config"
    # The config passes --check with the pod's environment, and so does any other
    # ConfigMap's file of that name.
    text, env = overlay_config(overlay)
    cfg = check(text, tmp_path, env)
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        for key, other in cm["data"].items():
            if key == os.path.basename(config_path):
                check(other, tmp_path, env, name=f"{cm['metadata']['name']}-{key}")

    # The Redis password and the admin token from a Secret the documented command makes,
    # in the base's comments and in docs/docker.md alike.
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in fg["env"] if "valueFrom" in e}
    assert {"REDIS_PASSWORD", "ADMIN_TOKEN"} <= set(refs)
    assert cfg["admin"]["token"] == "${ADMIN_TOKEN}" and cfg["redis"]["password"] == "${REDIS_PASSWORD}"
    for where in (K8S / "base" / "deployment.yaml", ROOT / "docs" / "docker.md"):
        name, keys = secret_command(where.read_text())
        assert {r["name"] for r in refs.values()} == {name}, f"{where.name}: the Secret is {name}, the pod uses {refs}"
        assert {r["key"] for r in refs.values()} <= keys, f"{where.name}: the command makes {keys}, the pod uses {refs}"
    # Without the Secret's variables the file is refused.
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
    # A Redis outage leaves the pods ready: no route denies on a store error, and the
    # store is not required (else one outage empties the Service).
    assert cfg["admin"].get("ready_requires_store", False) is False
    assert not [r["name"] for r in cfg["routes"] if r.get("limits") and r.get("on_store_error", "allow") == "deny"]
    # Traffic goes to the proxy port: a Service with a virtual IP never exposes the admin port.
    for service in (d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") != "None"):
        assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"], service["metadata"]["name"]

    # Several replicas count in one Redis: a memory store each would multiply every limit.
    hpas = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"
            and d["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]]
    if hpas or deployment["spec"].get("replicas", 1) > 1:
        assert cfg["store"] == "redis"
    # The autoscaler owns the count: replicas in the Deployment would undo it on each apply.
    if hpas:
        assert "replicas" not in deployment["spec"]


def test_sidecar(tmp_path):
    docs = rendered("sidecar")
    _, pod, fg = floodgate_pod(docs)
    assert len(pod["containers"]) >= 2, "floodgate beside an app container"
    cfg = yaml.safe_load(overlay_config("sidecar")[0])
    # The app is reached on the pod's loopback, and listens there only.
    address = cfg["upstreams"]["app"]["address"]
    assert address.startswith("127.0.0.1:")
    (app,) = [c for c in pod["containers"] if c is not fg]
    assert [a for a in app["args"] if a.endswith(address)]
    # trusted_proxies names the ingress controller's range, not the whole pod network.
    assert cfg["client_ip"]["trusted_proxies"]


def test_standalone():
    docs = rendered("standalone")
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    assert {"Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceMonitor", "NetworkPolicy"} <= set(by_kind)
    deployment, pod, fg = floodgate_pod(docs)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    cfg = yaml.safe_load(overlay_config("standalone")[0])
    # Behind an autoscaler: the counters in Redis, the app elsewhere than the pod.
    assert cfg["store"] == "redis"
    assert not cfg["upstreams"]["app"]["address"].startswith(("127.", "localhost"))
    (pdb,) = by_kind["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "maxUnavailable" in pdb["spec"] or "minAvailable" in pdb["spec"]
    (hpa,) = by_kind["HorizontalPodAutoscaler"]
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert 2 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    # The ServiceMonitor finds the pods' admin port through a Service, and asks /metrics.
    (monitor,) = by_kind["ServiceMonitor"]
    wanted = monitor["spec"]["selector"]["matchLabels"]
    services = [s for s in by_kind["Service"] if wanted.items() <= s["metadata"].get("labels", {}).items()]
    assert len(services) == 1, f"the ServiceMonitor selects {len(services)} Services"
    (service,) = services
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {p["name"]: p["containerPort"] for p in fg["ports"]}
    by_name = {p["name"]: p for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        target = by_name[endpoint["port"]]["targetPort"]
        assert ports.get(target, target) == ports["admin"] == port_of(cfg["admin"]["listen"])
        assert endpoint["path"] == "/metrics"


def test_the_image_test_builds_the_overlays_tag():
    # The image test tags what it builds with the version it reads (the tag the overlays run).
    script = (HERE / "test_image.sh").read_text()
    (line,) = [l for l in script.splitlines() if l.startswith("version=")]
    got = subprocess.run(["bash", "-c", f'{line}\necho "$version"'], cwd=ROOT, capture_output=True, text=True, check=True)
    assert got.stdout.strip() == VERSION
    assert re.search(r'^image="localhost/floodgate:\$\{version[:}]', script, re.M)


MONITORING = {"kubernetes.io/metadata.name": "monitoring"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policy(overlay):
    docs = rendered(overlay)
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    deployment, _, fg = floodgate_pod(docs)
    pod = deployment["spec"]["template"]
    named = {p["name"]: p["containerPort"] for p in fg["ports"]}
    spec = policy["spec"]
    # It selects the Deployment's pods, and isolates them for ingress.
    selector = spec["podSelector"]["matchLabels"]
    assert selector and selector.items() <= pod["metadata"]["labels"].items()
    assert "Ingress" in spec["policyTypes"]
    rules = spec.get("ingress") or []

    def admits(rule, port):
        if not rule.get("ports"):
            return True  # a rule without ports admits every port
        return any(named.get(p.get("port"), p.get("port")) == port and p.get("protocol", "TCP") == "TCP"
                   for p in rule["ports"])

    admin = [r for r in rules if admits(r, named["admin"])]
    assert admin, "nothing admits the admin port (Prometheus could not scrape)"
    for rule in admin:
        peers = rule.get("from")
        assert peers, f"the admin port is open to every source: {rule}"
        for peer in peers:
            # The monitoring namespace (a podSelector beside it narrows further); no
            # ipBlock, no podSelector alone (this namespace's pods).
            assert set(peer) <= {"namespaceSelector", "podSelector"} and "namespaceSelector" in peer, peer
            ns = peer["namespaceSelector"]
            assert ns.get("matchLabels") == MONITORING and not ns.get("matchExpressions"), peer
    # The proxy port stays open to the ingress controller.
    assert [r for r in rules if admits(r, named["http"])], "nothing admits the proxy port"
    # The kubelet's probes are explained (they come from the node, not a pod).
    assert "kubelet" in (K8S / "base" / "networkpolicy.yaml").read_text()


def metrics_documented(tmp_path):
    """The metric families a running gateway's /metrics documents (# TYPE lines). A family
    shows once it has counted something, so the gateway uses the Redis store, two
    requests are allowed and one meets a stopped Redis: every family appears."""
    u = Upstream()
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")
    try:
        g, port = gateway_on_redis(tmp_path, u, redis)
        try:
            for stop_first in (False, False, True):
                if stop_first:
                    redis.stop()
                g.request(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                # The admin answers only Host names of its own (DNS rebinding): an address is one.
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
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
    unknown = used - set(types) - SENTINEL_ONLY
    assert not unknown, f"the dashboard asks for metrics /metrics does not have: {sorted(unknown)}"
    # Every documented family has a panel, so the dashboard keeps up with /metrics.
    assert not set(types) - used, f"metrics without a panel: {sorted(set(types) - used)}"
