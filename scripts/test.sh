#!/usr/bin/env bash
# Installs what is missing, builds (release and ASan+UBSan), runs every test:
# unit tests and integration tests (the real binary against real upstreams and
# redis-server processes that the tests start on free ports), the image (the
# Dockerfile built and run with buildah, as root), and the fuzz targets' smoke run
# (tests/fuzz: every seed replayed clean, then a few seconds of mutation each).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
export FG_JOBS="${FG_JOBS:-$(nproc)}"

echo "== release build"
scripts/build.sh release
echo "== release: unit + integration tests"
ctest --test-dir build --output-on-failure -j1

echo "== image: the Dockerfile built with buildah and run (tests/docker/test_image.sh)"
tests/docker/test_image.sh

echo "== fuzz targets (clang-16 libFuzzer, ASan+UBSan): built, seed corpora replayed, a short run each"
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-16 >/dev/null
fi
ninja -C build-fuzz -j"$FG_JOBS"
ctest --test-dir build-fuzz --output-on-failure -j1

echo "== sanitizer build (address,undefined)"
scripts/build.sh asan
echo "== sanitizer: unit + integration tests"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
FG_SANITIZED=1 ctest --test-dir build-asan --output-on-failure -j1
