#!/usr/bin/env bash
# The CPU MoE kernel table (plain oracle vs fast path; tiny model and a gpt-oss-20b layer at
# 1/16/128 tokens). Builds nothing: build the mxserve-bench-moe-cpu target first.
#   bench/moe_cpu.sh [--threads N] [--reps N] ...   (flags go to the binary)
#   MXSERVE_BUILD_DIR=build-foo bench/moe_cpu.sh     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${MXSERVE_BUILD_DIR:-build}/bin/mxserve-bench-moe-cpu"
if [[ ! -x "$bin" ]]; then
  echo "missing $bin: cmake --build ${MXSERVE_BUILD_DIR:-build} --target mxserve-bench-moe-cpu" >&2
  exit 1
fi
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
"$bin" "$@"
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
