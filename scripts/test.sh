#!/usr/bin/env bash
# Installs what is missing, builds (release and ASan+UBSan), runs every test:
# unit tests and integration tests (the real binary against real upstreams and
# redis-server processes that the tests start on free ports), the image (the
# Dockerfile built and run with buildah, as root), the Debian package (built from the
# release build, linted, installed into a fresh root and run), and the fuzz targets' smoke run
# (tests/fuzz: every seed replayed clean, then a few seconds of mutation each).
#
# Within 30 minutes on a fresh 2-core machine (CONTRIBUTING.md, "The test command's
# budget"), so what waits on the network or the disk overlaps what needs the cores:
# the test-only packages install while release compiles; the image test (debootstrap,
# packages, buildah's copies; its compile answered by the release build's ccache), the
# sanitizer build and the fuzz targets (at lower priorities: the tests' processes come
# first, then the sanitizer build, the fuzz targets, the image) run beside the release
# tests, the image on beside the sanitizer tests; CTest runs the test files in parallel
# (FG_TEST_JOBS, default 3: most of an integration test is waiting), the longest first
# (COST in tests/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
export FG_JOBS="${FG_JOBS:-$(nproc)}"
# clang's sanitizers (the sanitizer build, the fuzz targets) name functions and lines with it
export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-16/bin/llvm-symbolizer}"
jobs="${FG_TEST_JOBS:-3}"
t0=$SECONDS
logs="$(mktemp -d)"
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$logs"
}
trap cleanup EXIT
stage() { echo "== $* (at $((SECONDS - t0))s)"; }
# Waits for background job $1 (a pid) whose output is in $2; prints it; fails with its status.
finish() {
  local status=0
  wait "$1" || status=$?
  cat "$2"
  [ "$status" -eq 0 ] || { echo "FAILED: $3 (exit $status)" >&2; exit "$status"; }
}

stage "packages to build (and the installed ones the build reads at their current versions, as the image's are)"
FG_DEPS_CURRENT=1 scripts/deps.sh build
stage "packages to test (in the background, beside the release build)"
scripts/deps.sh test >"$logs/deps.log" 2>&1 &
deps_pid=$!
bg+=("$deps_pid")

stage "release build"
scripts/build.sh release
finish "$deps_pid" "$logs/deps.log" "scripts/deps.sh test"

stage "image and package: the Dockerfile built with buildah and run, the .deb built, linted and installed (in the background)"
# (tests/docker/test_image.sh, then tests/package/test_package.sh, which reuses its base root)
# (at a lower priority than the tests and the sanitizer build: its packages' installs and
# buildah's layer copies take minutes of CPU, which the tests, whose floors assume the
# gateway and Redis are not kept off the cores for long, and the sanitizer build, which
# the sanitizer tests wait for, need first; its result is awaited last)
{ nice -n 10 tests/docker/test_image.sh && nice -n 10 tests/package/test_package.sh; } >"$logs/image.log" 2>&1 &
image_pid=$!
bg+=("$image_pid")

# The sanitizer build is the longest way to the end (its tests wait for it): it takes what
# the cores have to spare while the release tests wait on sockets, ahead of the fuzz
# targets (whose smoke run is bounded in time, not in work, and can go slower). In two
# parts: the programs its integration tests run first, so that those tests start when
# the release tests end; its unit tests and HTTP/2 fuzz targets then compile beside
# them (at a cold run's end, the rest of the sanitizer build took 287 s with nothing
# else to do while its tests waited).
stage "sanitizer build (address,undefined) and fuzz targets (clang-16 libFuzzer): in the background, at lower priorities"
nice -n 5 scripts/build.sh asan floodgate floodgate-cluster-probe >"$logs/asan-build.log" 2>&1 &
asan_pid=$!
bg+=("$asan_pid")
# (built, its seed corpora replayed, a short run each)
{
  if [ ! -f build-fuzz/build.ninja ]; then
    cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-16 >/dev/null
  fi
  nice -n 15 ninja -C build-fuzz -j"$FG_JOBS" && nice -n 15 ctest --test-dir build-fuzz --output-on-failure -j"$FG_JOBS"
} >"$logs/fuzz.log" 2>&1 &
fuzz_pid=$!
bg+=("$fuzz_pid")

stage "release: unit + integration tests (ctest -j$jobs)"
ctest --test-dir build --output-on-failure -j"$jobs"

stage "fuzz targets' result"
finish "$fuzz_pid" "$logs/fuzz.log" "the fuzz targets (tests/fuzz)"

stage "sanitizer build's result (the programs the integration tests run)"
finish "$asan_pid" "$logs/asan-build.log" "scripts/build.sh asan floodgate floodgate-cluster-probe"

stage "the sanitizer build's rest (unit tests, HTTP/2 fuzz targets): in the background, at a lower priority"
nice -n 5 scripts/build.sh asan >"$logs/asan-rest.log" 2>&1 &
asan_rest_pid=$!
bg+=("$asan_rest_pid")

stage "sanitizer: integration tests (ctest -j$jobs)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
FG_SANITIZED=1 ctest --test-dir build-asan --output-on-failure -j"$jobs" -R '^integration: '

stage "the sanitizer build's rest: result"
finish "$asan_rest_pid" "$logs/asan-rest.log" "scripts/build.sh asan"

stage "sanitizer: the other tests (unit, fuzz smoke, layers, docs, docker files; ctest -j$jobs)"
FG_SANITIZED=1 ctest --test-dir build-asan --output-on-failure -j"$jobs" -E '^integration: '

stage "image and package tests' result"
finish "$image_pid" "$logs/image.log" "tests/docker/test_image.sh, tests/package/test_package.sh"
stage "all passed"
