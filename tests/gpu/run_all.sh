#!/usr/bin/env bash
# One device call: correctness (PASS/FAIL per case), compute-sanitizer memcheck on small cases,
# benchmark + same-run baselines. Builds nothing: carry a bundle made with
#   cmake -S . -B build-cuda && cmake --build build-cuda --target mxserve-gpu-moe-check mxserve-bench-moe-gpu
#   ../shared/tools/device-bundle bundle-cuda build-cuda/bin/mxserve-gpu-moe-check build-cuda/bin/mxserve-bench-moe-gpu
# and, for the bench step's matmul_ogs baseline, carry .triton_kernels too (triton_kernels v3.6.0,
# never committed; git-ignored through .git/info/exclude). Make it once with the session's fetch
# tool on github:yechenzhi/triton (the triton-lang/triton snapshot is too large), then
#   bench/gpu/get_triton_kernels.sh <the bare git dir that fetch printed>
# Without it the table says "# matmul_ogs not run: ..." and its columns are "-".
# then, on the GPU machine from the repo root: tests/gpu/run_all.sh [STEP]...
# Steps: check (PASS/FAIL per case; CHECK_ONLY=<shape> for one), sanitize (compute-sanitizer
# memcheck on two small shapes), bench (gpt-oss-120b + same-run baselines incl. triton_kernels'
# matmul_ogs: one table),
# paths (each kernel configuration pinned), smem (decode with activations in shared memory),
# shapes (20b, Kimi-K2-like, K3-like), profile (ncu SpeedOfLight, one token).
# Default: check sanitize bench. Writes logs under $OUT (or /tmp/mxserve-gpu).
set -uo pipefail
OUT=${OUT:-/tmp/mxserve-gpu}
mkdir -p "$OUT"
source bundle-cuda/env.sh
B=bundle-cuda/bin
steps=${*:-check sanitize bench}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/card.txt"
date -u | tee -a "$OUT/card.txt"
rc=0
for s in $steps; do
  case $s in
    check)
      $B/mxserve-gpu-moe-check ${CHECK_ONLY:-} 2>&1 | tee "$OUT/check.txt" || rc=1 ;;
    sanitize)
      compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 $B/mxserve-gpu-moe-check tiny-pad \
        > "$OUT/memcheck.txt" 2>&1; r=$?
      tail -3 "$OUT/memcheck.txt"; echo "memcheck tiny-pad rc=$r"; [ $r -eq 0 ] || rc=1
      compute-sanitizer --tool memcheck --error-exitcode 9 $B/mxserve-gpu-moe-check half-held \
        > "$OUT/memcheck2.txt" 2>&1; r=$?
      tail -2 "$OUT/memcheck2.txt"; echo "memcheck half-held rc=$r"; [ $r -eq 0 ] || rc=1 ;;
    bench)
      $B/mxserve-bench-moe-gpu "$OUT/ours.csv" ${BENCH_SHAPES:-gpt-oss-120b} ${BENCH_TOKENS:-1,4,16,64,256,1024,4096,16384} \
        2>&1 | tee "$OUT/bench.txt" || rc=1
      PYTHONUNBUFFERED=1 PYTHONPATH=.triton_kernels${PYTHONPATH:+:$PYTHONPATH} python3 bench/gpu/baselines.py "$OUT/ours.csv" ${BENCH_SHAPES:-gpt-oss-120b} \
        ${BENCH_TOKENS:-1,4,16,64,256,1024,4096,16384} 2>&1 | tee "$OUT/table.txt" || rc=1 ;;
    paths)
      # The same layer with each kernel configuration pinned (what kAuto's thresholds rest on).
      for P in decode decode16 mid prefill wgmma64 wgmma wgmma256; do
        echo "## path $P"
        MXSERVE_CUDA_MOE_PATH=$P $B/mxserve-bench-moe-gpu "/tmp/paths_$P.csv" gpt-oss-120b ${PATH_TOKENS:-16,256,1024,4096} | grep '^| gpt'
      done 2>&1 | tee "$OUT/paths.txt" ;;
    smem)
      echo "## decode with activations through shared memory (MXSERVE_CUDA_MOE_SMEM_A=1)"
      MXSERVE_CUDA_MOE_SMEM_A=1 $B/mxserve-bench-moe-gpu /tmp/smemoff.csv gpt-oss-120b 1,4,16,64 | grep '^| gpt' | tee -a "$OUT/paths.txt" ;;
    shapes)
      # The other layer shapes (ours only; the python baselines for them cost too much device time).
      $B/mxserve-bench-moe-gpu /tmp/shapes.csv gpt-oss-20b,kimi-k2-like,k3-latent ${SHAPE_TOKENS:-1,16,256,4096} \
        2>&1 | tee "$OUT/shapes.txt" ;;
    profile)
      # Per-kernel time, DRAM and SM throughput for the first layers of the 1- and 64-token runs.
      ncu --clock-control none --section SpeedOfLight -k regex:'Gemm|Route|Combine|Gather' -c ${NCU_COUNT:-20} \
        $B/mxserve-bench-moe-gpu /tmp/ncu.csv gpt-oss-120b ${NCU_TOKENS:-1} > "$OUT/ncu.txt" 2>&1
      grep -E "Kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|  [A-Za-z]+Kernel" "$OUT/ncu.txt" | head -60 ;;
  esac
done
exit $rc
