#!/usr/bin/env bash
# Configures (once) and builds. Usage: scripts/build.sh [release|asan] [targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"; shift || true
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DFG_SANITIZE=ON) ;;
  *) echo "usage: $0 release|asan [targets...]" >&2; exit 2 ;;
esac
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
fi
# ccache skips every file compiled with a precompiled header unless told which checks
# to relax (its manual, "Precompiled headers"): without this it caches nothing here.
# `locale`: LANG and LC_* stay out of its hash (they only translate diagnostics): the
# image's build stage has no LANG, and missed every file the host's build (LANG=C.UTF-8)
# had cached: 0 hits of 82, a whole compile beside the test command's other stages.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime,locale}"
jobs="${FG_JOBS:-$(nproc)}"
ninja -C "$dir" -j"$jobs" "$@"
