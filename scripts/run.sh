#!/usr/bin/env bash
# Quick start: installs what is missing, builds, starts the demo upstream on
# 127.0.0.1:9000 and runs floodgate with config/floodgate.yaml (memory store, no Redis).
#   curl -i localhost:8080/hello      (the 4th call within 5 s gets 429)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
scripts/build.sh release floodgate floodgate-demo-upstream
config="${1:-config/floodgate.yaml}"
if ! (exec 3<>/dev/tcp/127.0.0.1/9000) 2>/dev/null; then
  ./build/src/floodgate-demo-upstream 9000 &
  demo=$!
  trap 'kill $demo 2>/dev/null || true' EXIT
fi
./build/src/floodgate --config "$config"
