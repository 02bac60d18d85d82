#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang-16, ASan+UBSan) and runs each for
# [seconds] (default 60), or until [runs] executions when FG_FUZZ_RUNS is set. Inputs that
# find new coverage go to build-fuzz/corpus/<target> (not committed: copy a finding's
# reproducer into tests/fuzz/corpus/<target>/ with the fix). A crash stops the run and
# leaves its input in build-fuzz/findings/<target>/.
# Usage: scripts/fuzz.sh [seconds] [target...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"; shift || true
scripts/deps.sh test
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-16 >/dev/null
fi
ninja -C build-fuzz -j"${FG_JOBS:-$(nproc)}"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(http_head http_response client_ip config redis_reply cluster_map limits_query keys h2_connection h2_upstream)
# (h2_connection runs the whole request path, h2_upstream the upstream's HTTP/2 session:
# the sanitizer build has them, tests/fuzz/README.md)
case " ${targets[*]} " in *" h2_connection "*) scripts/build.sh asan fuzz_h2_connection ;; esac
case " ${targets[*]} " in *" h2_upstream "*) scripts/build.sh asan fuzz_h2_upstream ;; esac
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-16/bin/llvm-symbolizer}"
status=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/findings/$t"
  limit=(-max_total_time="$seconds")
  [ -n "${FG_FUZZ_RUNS:-}" ] && limit+=(-runs="$FG_FUZZ_RUNS")
  echo "== fuzz_$t (${seconds}s${FG_FUZZ_RUNS:+ or $FG_FUZZ_RUNS runs})"
  bin="build-fuzz/fuzz_$t"
  case "$t" in h2_connection|h2_upstream) bin="build-asan/tests/fuzz_$t" ;; esac
  if ! "$bin" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="build-fuzz/findings/$t/" "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" \
       2> "build-fuzz/findings/$t/log"; then
    status=1
    echo "fuzz_$t: FINDING (build-fuzz/findings/$t/)"
  fi
  grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)" "build-fuzz/findings/$t/log" || true
  grep -oE "cov: [0-9]+ ft: [0-9]+" "build-fuzz/findings/$t/log" | tail -1 || true
done
exit $status
