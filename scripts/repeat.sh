#!/usr/bin/env bash
# Runs the integration suite N times in a row, as the test command runs it, and reports
# every failure with its round and test (pytest's "FAILED file::test" lines), so that a
# test that fails once in many is found, not rerun until it passes (docs/testing.md,
# "Repeat runs").
# Usage: scripts/repeat.sh [-n N] [--asan] [--one-core] [-j JOBS] [-R REGEX]
#   -n N        rounds (default 5)
#   --asan      the sanitizer build (build-asan/, with the test command's ASAN/UBSAN options)
#   --one-core  every process on core 0 (taskset -c 0): a slower machine's timing
#   -j JOBS     CTest's parallel test files (default 3, as scripts/test.sh)
#   -R REGEX    the CTest entries to run (default '^integration: ')
# Builds nothing: run scripts/build.sh release|asan first. Exit status 1 if any round failed.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5 dir=build jobs=3 regex='^integration: ' pin=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) rounds="$2"; shift 2 ;;
    --asan) dir=build-asan; shift ;;
    --one-core) pin=(taskset -c 0); shift ;;
    -j) jobs="$2"; shift 2 ;;
    -R) regex="$2"; shift 2 ;;
    *) echo "usage: $0 [-n N] [--asan] [--one-core] [-j JOBS] [-R REGEX]" >&2; exit 2 ;;
  esac
done
[ -f "$dir/CTestTestfile.cmake" ] || { echo "no $dir: run scripts/build.sh ${dir#build-} first" >&2; exit 2; }
if [ "$dir" = build-asan ]; then
  export FG_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-16/bin/llvm-symbolizer}"
fi
logs="$(mktemp -d)"
failures=()
for round in $(seq "$rounds"); do
  start=$SECONDS
  if "${pin[@]}" ctest --test-dir "$dir" -R "$regex" --output-on-failure -j"$jobs" >"$logs/round$round.log" 2>&1; then
    echo "round $round: passed in $((SECONDS - start)) s"
  else
    echo "round $round: FAILED in $((SECONDS - start)) s (log: $logs/round$round.log)"
    while IFS= read -r line; do failures+=("round $round: $line"); done < <(
      grep -E '^(FAILED|ERROR) [a-z_]+\.py::' "$logs/round$round.log" | sort -u
      grep -E '^[[:space:]]+[0-9]+ - .*\((Failed|Timeout|Not Run|SEGFAULT|Exception)' "$logs/round$round.log" |
        sed 's/^[[:space:]]*//'
    )
  fi
done
echo "== $rounds round(s) of '$regex' in $dir${pin:+ on one core}, -j$jobs: ${#failures[@]} failure line(s)"
for f in "${failures[@]}"; do echo "  $f"; done
[ ${#failures[@]} -eq 0 ]
