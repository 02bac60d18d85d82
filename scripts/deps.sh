#!/usr/bin/env bash
# Installs the Debian 12 packages floodgate needs, only those missing.
# Usage: scripts/deps.sh build|test|bench|runtime|package
# (runtime: only the shared libraries the release binary links, for the image's last stage)
set -euo pipefail
# python3: CMake finds it when it configures the test entries (the tests run with it).
build_pkgs=(g++ cmake ninja-build pkg-config ccache python3 libsystemd-dev libboost1.81-dev libboost-system1.81-dev
            libboost-program-options1.81-dev libboost-url1.81-dev libboost-json1.81-dev libyaml-cpp-dev libspdlog-dev
            libhiredis-dev libc-ares-dev libssl-dev libhowardhinnant-date-dev prometheus-cpp-dev libjemalloc-dev liburing-dev libnghttp2-dev catch2 curl)
# What `ldd build/src/floodgate` needs, by Debian package (libc6, libgcc-s1 and
# libstdc++6 are in every Debian system already).
# ca-certificates: the system's CA store, which upstreams' TLS verifies against by default;
# tzdata: the time zones of calendar windows (align: calendar).
runtime_pkgs=(ca-certificates tzdata libsystemd0 libdate-tz3 libboost-program-options1.81.0 libboost-url1.81.0 libboost-json1.81.0 libyaml-cpp0.7 libspdlog1.10
              libfmt9 libhiredis0.14 libc-ares2 libssl3 libprometheus-cpp-core1.0 libjemalloc2 liburing2 libnghttp2-14)
# buildah, debootstrap and iproute2: the image test (tests/docker/test_image.sh) builds and runs
# the Dockerfile's image without a Docker engine; python3-yaml reads docker/'s files;
# redis-sentinel for the Sentinel fixture (tests/integration/conftest.py, RedisSentinel).
# clang-16, libfuzzer-16-dev and libclang-rt-16-dev: the sanitizer build (scripts/build.sh asan)
# and the fuzz targets (tests/fuzz, scripts/fuzz.sh); llvm-16: llvm-symbolizer, which names
# the functions and lines in their reports.
# wrk: the rate floods of tests/integration/test_accuracy.py (and the benchmarks).
# testssl.sh: test_tls.py checks the TLS listener with it (protocols, ciphers, SNI).
# nghttp2-client (nghttp, h2load) and python3-h2 (frames written by hand): the HTTP/2 tests;
# python3-grpcio: the gRPC tests' real servers and clients (generic handlers, bytes messages).
# kubernetes-client: kubectl 1.20, whose kustomize (v2.0.3) renders docker/k8s/'s overlays
# for tests/docker/test_files.py.
test_pkgs=(redis-server redis-sentinel python3 python3-pytest python3-yaml openssl testssl.sh faketime buildah debootstrap iproute2 wrk
           clang-16 libfuzzer-16-dev libclang-rt-16-dev llvm-16 kubernetes-client nghttp2-client python3-h2 python3-grpcio)
# nghttp2-server (nghttpd): bench/grpc.py's origin, fast enough not to be what saturates.
bench_pkgs=(nginx-light haproxy util-linux procps nghttp2-server)
# The Debian package (scripts/package.sh): dpkg-shlibdeps, help2man for the man page;
# lintian checks it, systemd-analyze scores its unit (tests/package/test_package.sh).
package_pkgs=(dpkg-dev help2man lintian systemd)

want=("${build_pkgs[@]}")
case "${1:-build}" in
  build) ;;
  runtime) want=("${runtime_pkgs[@]}") ;;
  test) want+=("${test_pkgs[@]}" "${package_pkgs[@]}") ;;
  bench) want+=("${test_pkgs[@]}" "${package_pkgs[@]}" "${bench_pkgs[@]}") ;;
  package) want+=("${package_pkgs[@]}") ;;
  *) echo "usage: $0 build|test|bench|runtime|package" >&2; exit 2 ;;
esac

# The packages whose headers the build reads (besides build_pkgs' own -dev packages):
# with FG_DEPS_CURRENT=1 (the test command) the installed ones are brought to the
# archive's current versions. The image's build stage installs the current ones, and
# its compile is answered by the release build's ccache only where every header it
# reads is the same: one older linux-libc-dev on the host (6.1.187 against 6.1.192)
# made every file a miss, a second whole compile beside the test command's tests.
header_pkgs=(g++-12 gcc-12 cpp-12 libstdc++-12-dev libgcc-12-dev libc6-dev linux-libc-dev libfmt-dev libssl-dev)

if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
updated=
if [ "${FG_DEPS_CURRENT:-0}" = 1 ] && [ "${1:-build}" = build ]; then
  current=()
  for p in "${header_pkgs[@]}" "${build_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && current+=("$p")
  done
  if [ ${#current[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    updated=1
    $SUDO apt-get install -y -qq --only-upgrade --no-install-recommends "${current[@]}" >/dev/null
  fi
fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
  # Another package's kubectl (a cloud SDK's) owns /usr/bin/kubectl: dpkg would refuse
  # to overwrite it, and that kubectl renders the overlays too.
  [ "$p" = kubernetes-client ] && dpkg -S /usr/bin/kubectl >/dev/null 2>&1 && continue
  missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
[ -n "$updated" ] || $SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The packaged redis-server, redis-sentinel and haproxy start system instances; tests and
# benchmarks run their own.
for svc in redis-server redis-sentinel haproxy; do
  if printf '%s\n' "${missing[@]}" | grep -qx "$svc"; then
    (systemctl disable --now "$svc" 2>/dev/null || service "$svc" stop 2>/dev/null || true) >/dev/null
  fi
done
