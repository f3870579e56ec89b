#!/usr/bin/env bash
# Runs every CPU benchmark and prints their tables. Usage: bench/run_all.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
echo "# mxserve CPU benchmarks — $(date -u +%Y-%m-%dT%H:%MZ) — $(lscpu | sed -n 's/^Model name: *//p') — $(nproc) cores"
MXSERVE_BUILD_DIR="$BUILD" "$HERE/moe_cpu.sh"
"$HERE/rpc.sh" "$BUILD"
"$BUILD/bin/mxserve-bench-router"
"$HERE/tokenizer.sh" "$BUILD"
node "$HERE/e2e_decode.mjs" "$BUILD" 16 256
