#!/usr/bin/env bash
# Builds the production programs (coordinator, worker, model writer) and their libraries with
# clang, CPU only, in their own build dir. The top CMakeLists turns on -Wthread-safety as an
# error under clang, so a member declared ABSL_GUARDED_BY(mu) that is touched without holding
# mu, or a function called without the locks it requires, fails here.
#   scripts/clang-build.sh [BUILD_DIR]      (default build-clang; JOBS=N, default nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-clang}
jobs=${JOBS:-$(nproc)}
if ! command -v clang++ >/dev/null; then
  echo "clang-build.sh: clang++ not found (scripts/install-deps.sh installs clang)" >&2
  exit 1
fi
if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DMXSERVE_NO_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE=-O0 >/dev/null
fi
if ! cmake --build "$build" -j"$jobs" --target mxserve-coordinator mxserve-worker \
     mxserve-make-model -- -k >"$build/clang-build.log" 2>&1; then
  grep -E "error|warning: .*thread-safety" "$build/clang-build.log" | head -60 >&2
  echo "clang-build.sh: the clang build failed (log: $build/clang-build.log)" >&2
  exit 1
fi
echo "clang-build.sh: built with clang -Wthread-safety, no lock-annotation findings"
