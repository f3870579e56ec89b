#!/usr/bin/env bash
# Starts a coordinator (tiny random-weight model, 2 local workers) on free ports and runs the
# structured-output client tests (Ajv validates every constrained output).
# Usage: run_structured_output_tests.sh BIN_DIR     exit 77 = skipped (npm packages unavailable)
set -euo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
cleanup() { [[ -n "${PID:-}" ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
if [[ ! -d "$HERE/node_modules/ajv" ]]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error) || {
    echo "SKIP: npm could not install ajv"; exit 77; }
fi
"$BIN/mxserve-make-model" --preset tiny --out "$TMP/tiny" --seed 3 >"$TMP/make.log" 2>&1
"$BIN/mxserve-coordinator" --model "$TMP/tiny" --host 127.0.0.1 --http-port 0 --grpc-port 0 \
  --port-file "$TMP/ports.json" --local-workers 2 >"$TMP/coordinator.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do
  if [[ -s "$TMP/ports.json" ]]; then
    PORT=$(node -e "console.log(JSON.parse(require('fs').readFileSync('$TMP/ports.json')).http_port)")
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  fi
  kill -0 "$PID" 2>/dev/null || { cat "$TMP/coordinator.log"; exit 1; }
  sleep 0.1
done
MXSERVE_BASE_URL="http://127.0.0.1:$PORT/v1" MXSERVE_MODEL=tiny \
  node --test "$HERE/structured_output.test.mjs" ||
  { echo "--- coordinator log"; tail -50 "$TMP/coordinator.log"; exit 1; }
