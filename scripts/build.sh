#!/usr/bin/env bash
# Configures (once) and builds. Usage: scripts/build.sh [release|asan] [targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"; shift || true
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  # The sanitizer build is clang's (scripts/deps.sh test installs clang-16): it compiles this
  # code in less than half gcc's time at -O0 with ASan, and a second compiler's diagnostics
  # and evaluation order (left to right) find what the release build's gcc does not.
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DFG_SANITIZE=ON -DCMAKE_CXX_COMPILER=clang++-16)
        command -v clang++-16 >/dev/null || { echo "$0: the sanitizer build needs clang-16 (scripts/deps.sh test)" >&2; exit 1; } ;;
  *) echo "usage: $0 release|asan [targets...]" >&2; exit 2 ;;
esac
# (a tree configured for another compiler, e.g. a sanitizer build from before it was clang's,
# is configured again from scratch: CMake cannot change a tree's compiler)
if [ "$kind" = asan ] && [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++-16$' "$dir/CMakeCache.txt"; then
  rm -rf "$dir"
fi
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
fi
# ccache skips every file compiled with a precompiled header unless told which checks
# to relax (its manual, "Precompiled headers"): without this it caches nothing here.
# `locale`: LANG and LC_* stay out of its hash (they only translate diagnostics): the
# image's build stage has no LANG, and missed every file the host's build (LANG=C.UTF-8)
# had cached: 0 hits of 82, a whole compile beside the test command's other stages.
# The sanitizer build's ccache takes the headers a file used from the compiler's own list
# (depend mode) instead of running the preprocessor first on a miss: a fresh machine's
# build is all misses (measured: 166 s against 200 s cold, the same hits warm). Not the
# release build's, whose cache the image's build stage reads in ccache's default mode.
[ "$kind" = asan ] && export CCACHE_DEPEND="${CCACHE_DEPEND:-1}"
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime,locale}"
jobs="${FG_JOBS:-$(nproc)}"
ninja -C "$dir" -j"$jobs" "$@"
