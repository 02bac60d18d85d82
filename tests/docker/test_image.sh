#!/usr/bin/env bash
# The image, built from the real Dockerfile and run, without a Docker engine: buildah
# builds it (as root, chroot isolation, vfs storage, no registry: the debian:bookworm
# base comes from tests/docker/base_image.sh) and runs commands in it. Checks:
#   the image's user is not root; its HEALTHCHECK asks /healthz; `floodgate --check`
#   passes on the image's config with ADMIN_TOKEN given and fails without it; the
#   HEALTHCHECK (read from the image) fails while nothing listens; the gateway, started
#   from the image's ENTRYPOINT and CMD as user floodgate with -e ADMIN_TOKEN, proxies a
#   request to an upstream on loopback and applies the sample route's limit; the probes
#   and /metrics answer without the token, /config and POST /reload only with it as a
#   Bearer token; the HEALTHCHECK then exits 0; SIGTERM ends the gateway with exit 0.
# The image is tagged with the project's version (CMakeLists.txt), the tag that
# docker/k8s/base/kustomization.yaml gives, and `floodgate --version` in it must say so.
# The run happens in a network namespace of its own (unshare --net), so the image's
# fixed ports (8080, 9901) never meet the host's. Prints how long each phase took.
# Usage (root): tests/docker/test_image.sh   (the image stays, as localhost/floodgate:VERSION)
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
b=(buildah --storage-driver vfs)
version="$(sed -n 's/^project(floodgate VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
image="localhost/floodgate:${version:?no project VERSION in CMakeLists.txt}"
cache="${FG_IMAGE_CACHE:-/var/cache/floodgate-image}"
t0=$SECONDS
phase() { echo "== image test: $* (at ${SECONDS}s)"; }
fail() { echo "FAIL (image test): $*" >&2; exit 1; }

# ---- inside the network namespace: run the image ----------------------------------
if [ "${1:-}" = "--run" ]; then
  ctr="$2" config_json="$3"
  ip link set lo up
  mapfile -t entry < <(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print("\n".join(c["Entrypoint"] + c["Cmd"]))' "$config_json")
  mapfile -t health < <(python3 - "$config_json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["Healthcheck"]["Test"]
# Docker's forms: ["CMD", argv...] or ["CMD-SHELL", "command"].
print("\n".join(t[1:] if t[0] == "CMD" else ["/bin/sh", "-c", t[1]]))
PY
)
  # As `docker run -e ADMIN_TOKEN=...` would: the image's config requires it.
  run() { "${b[@]}" run --isolation chroot --user floodgate --env "ADMIN_TOKEN=$admin_token" "$ctr" -- "$@"; }
  run_bare() { "${b[@]}" run --isolation chroot --user floodgate "$ctr" -- "$@"; }
  pids=()
  cleanup_run() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
  trap cleanup_run EXIT

  [ "$(run id -u)" != 0 ] || fail "buildah run --user floodgate runs as root"
  got="$(run "${entry[0]}" --version)"
  [ "$got" = "floodgate $version" ] || fail "the image $image holds $got"
  phase "floodgate --check on the image's config: ${entry[*]:1}"
  run "${entry[0]}" --check "${entry[@]:1}" || fail "the image's config does not pass --check"
  phase "floodgate --check on the image's config without ADMIN_TOKEN (must fail)"
  if run_bare "${entry[0]}" --check "${entry[@]:1}" >"$work/check-bare.out" 2>&1; then
    fail "the image's config passed --check without ADMIN_TOKEN (its admin listens on 0.0.0.0)"
  fi
  grep -q ADMIN_TOKEN "$work/check-bare.out" || { cat "$work/check-bare.out"; fail "--check without ADMIN_TOKEN does not name it"; }

  phase "HEALTHCHECK before the gateway runs (must fail): ${health[*]}"
  if run "${health[@]}" 2>/dev/null; then fail "the HEALTHCHECK passed with nothing listening"; fi

  python3 tests/integration/upstream.py >"$work/upstream.out" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$work/upstream.out" ] && break; sleep 0.05; done
  read -r _ up_port _ <"$work/upstream.out" || fail "the upstream did not start"

  phase "the gateway from the image (${entry[*]}), user floodgate, upstream 127.0.0.1:$up_port"
  # sh prints its pid (chroot isolation: the host's) and becomes the gateway, to be
  # signalled by that pid.
  "${b[@]}" run --isolation chroot --user floodgate --env "FG_UPSTREAM=127.0.0.1:$up_port" \
    --env "ADMIN_TOKEN=$admin_token" "$ctr" -- \
    /bin/sh -c 'echo "pid $$"; exec "$@"' sh "${entry[@]}" >"$work/gateway.log" 2>&1 &
  runner=$!
  pids+=("$runner")
  gw=""
  for _ in $(seq 300); do
    gw="$(sed -n 's/^pid //p' "$work/gateway.log")"
    [ -n "$gw" ] && grep -q "floodgate listening on" "$work/gateway.log" && break
    sleep 0.05
  done
  grep -q "floodgate listening on" "$work/gateway.log" || { cat "$work/gateway.log"; fail "the gateway did not start"; }
  pids=("$gw" "${pids[@]}")
  [ "$(stat -c %u "/proc/$gw")" = "$(run id -u)" ] || fail "the gateway does not run as user floodgate"

  phase "a request through the gateway"
  body="$(curl -sS --max-time 5 -H 'X-Test: image' http://127.0.0.1:8080/echo)" || fail "no answer through the gateway"
  python3 - "$body" <<'PY' || { cat "$work/gateway.log"; fail "the upstream did not get the request: $body"; }
import json, sys
e = json.loads(sys.argv[1])
h = {k.lower(): v for k, v in e["headers"].items()} if isinstance(e["headers"], dict) else {k.lower(): v for k, v in e["headers"]}
assert e["method"] == "GET" and e["target"] == "/echo", e
assert h.get("x-test") == "image" and h.get("x-real-ip") == "127.0.0.1", h
PY
  codes=""
  for _ in 1 2 3 4; do codes+="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 http://127.0.0.1:8080/hello) "; done
  [ "$codes" = "200 200 200 429 " ] || fail "/hello (3 per 5 s per IP) answered $codes"

  phase "the admin listener: probes and /metrics open, /config and POST /reload with the token"
  admin=http://127.0.0.1:9901
  code() { curl -s -o "$work/admin.body" -w '%{http_code}' --max-time 5 "$@"; }
  expect() {  # expect STATUS WHAT curl-args...
    local want="$1" what="$2" got; shift 2
    got="$(code "$@")"
    [ "$got" = "$want" ] || { cat "$work/gateway.log"; fail "$what answered $got, not $want: $(head -c 300 "$work/admin.body")"; }
  }
  expect 200 "/healthz without a token" "$admin/healthz"
  expect 200 "/readyz without a token" "$admin/readyz"
  expect 200 "/metrics without a token" "$admin/metrics"
  expect 401 "/config without a token" "$admin/config"
  expect 401 "/config with a wrong token" -H "Authorization: Bearer wrong-$admin_token" "$admin/config"
  expect 200 "/config with the token" -H "Authorization: Bearer $admin_token" "$admin/config"
  ! grep -qF "$admin_token" "$work/admin.body" || fail "/config shows the admin token"
  expect 401 "POST /reload without a token" -X POST -H 'X-Floodgate-Admin: 1' "$admin/reload"
  expect 200 "POST /reload with the token" --max-time 15 -X POST -H "Authorization: Bearer $admin_token" "$admin/reload"

  phase "HEALTHCHECK with the gateway running (must pass)"
  run "${health[@]}" || { cat "$work/gateway.log"; fail "the HEALTHCHECK failed"; }

  phase "SIGTERM"
  kill -TERM "$gw"
  for _ in $(seq 200); do kill -0 "$gw" 2>/dev/null || break; sleep 0.05; done
  ! kill -0 "$gw" 2>/dev/null || { cat "$work/gateway.log"; fail "the gateway did not exit on SIGTERM"; }
  wait "$runner" || fail "the gateway exited with $?: $(tail -5 "$work/gateway.log")"
  exit 0
fi

# ---- on the host: build, inspect, then the run above in its own network namespace --
[ "$(id -u)" -eq 0 ] || fail "needs root (buildah builds as root here)"
work="$(mktemp -d)"
ctr=""
cleanup() {
  [ -z "$ctr" ] || "${b[@]}" rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

phase "base image"
tests/docker/base_image.sh
echo "   base image ready after $((SECONDS - t0))s"

# The host's ccache, mounted into the build stage at the path the Dockerfile uses;
# the build stage sees the source at this checkout's path, so both builds compile
# the same command lines. Downloaded packages are kept between runs.
ccache_dir="$(ccache -k cache_dir 2>/dev/null || true)"
[ -n "$ccache_dir" ] || ccache_dir="$cache/ccache"
mkdir -p "$ccache_dir" "$cache/apt"
args=(--build-arg "FG_SRC=$root" --build-arg "FG_JOBS=${FG_JOBS:-$(nproc)}")
[ -z "${CCACHE_BASEDIR:-}" ] || args+=(--build-arg "CCACHE_BASEDIR=$CCACHE_BASEDIR")
[ -z "${CCACHE_NOHASHDIR:-}" ] || args+=(--build-arg "CCACHE_NOHASHDIR=$CCACHE_NOHASHDIR")
old="$("${b[@]}" inspect --type image --format '{{.FromImageID}}' "$image" 2>/dev/null || true)"

phase "buildah bud (the Dockerfile; ccache $ccache_dir)"
built=$SECONDS
if ! "${b[@]}" bud --isolation chroot --pull=never --format docker --layers=false -t "$image" "${args[@]}" \
       --volume "$ccache_dir:/ccache" --volume "$cache/apt:/var/cache/apt/archives" \
       -f Dockerfile . >"$cache/build.log" 2>&1; then
  tail -40 "$cache/build.log" >&2
  fail "buildah bud failed"
fi
grep -E '^(g\+\+-12|libc6-dev|linux-libc-dev|libboost1.81-dev)=|^ccache \(this build\)' "$cache/build.log" | sed 's/^/   image: /'
dpkg-query -W -f '   host:  ${Package}=${Version}\n' g++-12 libc6-dev linux-libc-dev libboost1.81-dev 2>/dev/null || true
echo "   built in $((SECONDS - built))s"
new="$("${b[@]}" inspect --type image --format '{{.FromImageID}}' "$image")"
[ -z "$old" ] || [ "$old" = "$new" ] || "${b[@]}" rmi "$old" >/dev/null 2>&1 || true

"${b[@]}" inspect --type image "$image" | python3 -c 'import json,sys; json.dump(json.load(sys.stdin)["Docker"]["config"], sys.stdout)' \
  >"$work/config.json"
python3 - "$work/config.json" <<'PY' || fail "the image's configuration is not what the Dockerfile promises"
import json, sys
c = json.load(open(sys.argv[1]))
user = c.get("User") or ""
assert user.split(":")[0] not in ("", "root", "0"), f"image user {user!r} is root"
assert c["Entrypoint"] == ["floodgate"], c["Entrypoint"]
assert c["Cmd"] == ["--config", "/etc/floodgate/floodgate.yaml"], c["Cmd"]
assert set(c["ExposedPorts"]) == {"8080/tcp", "9901/tcp"}, c["ExposedPorts"]
hc = c.get("Healthcheck") or {}
assert hc.get("Test", [""])[0] in ("CMD", "CMD-SHELL"), f"no HEALTHCHECK: {hc}"
# Liveness: a store outage must not make an orchestrator restart the gateway.
assert any(a.endswith("/healthz") for a in hc["Test"][1:]) and not any("/readyz" in a for a in hc["Test"]), hc["Test"]
print(f"   user {user}, entrypoint {c['Entrypoint']} {c['Cmd']}, healthcheck {hc['Test']}")
PY
"${b[@]}" images --format '   image size: {{.Size}}' "$image" 2>/dev/null || true

ctr="$("${b[@]}" from --pull=never "$image")"
# The admin token the gateway is started with (-e ADMIN_TOKEN), as an operator makes one.
admin_token="$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
export work admin_token
unshare --net -- "$0" --run "$ctr" "$work/config.json"
echo "== image test: passed in $((SECONDS - t0))s"
