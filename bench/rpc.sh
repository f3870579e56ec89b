#!/usr/bin/env bash
# RunExperts round trip over loopback gRPC vs raw TCP, gpt-oss-20b-shaped payloads.
# Usage: bench/rpc.sh [BUILD_DIR] [SECONDS_PER_ROW]   (builds mxserve-bench-rpc if missing)
set -euo pipefail
BUILD=${1:-build}
SECS=${2:-1}
if [[ ! -x "$BUILD/bin/mxserve-bench-rpc" ]]; then
  cmake --build "$BUILD" -j"$(nproc)" --target mxserve-bench-rpc >&2
fi
echo "# mxserve RPC benchmark — $(date -u +%Y-%m-%dT%H:%M:%SZ) — $(lscpu | sed -n 's/^Model name: *//p') — $(nproc) cores"
echo
"$BUILD/bin/mxserve-bench-rpc" "$SECS"
