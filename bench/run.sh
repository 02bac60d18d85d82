#!/usr/bin/env bash
# Benchmark: floodgate vs nginx (plain proxy_pass with upstream keep-alive), both in
# front of the same nginx `return 200` upstream, driven by wrk. wrk is pinned to
# core 0 and every server to core 1 (one of the two redis-servers to core 0, as Redis
# on its own host). Usage: bench/run.sh [seconds-per-run] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh bench
scripts/build.sh release floodgate
exec /usr/bin/python3 bench/bench.py "$@"
