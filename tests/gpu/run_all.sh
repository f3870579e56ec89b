#!/usr/bin/env bash
# On a GPU machine: correctness (PASS/FAIL per case), compute-sanitizer memcheck on small cases,
# benchmark + same-run baselines. Builds nothing: it runs a bundle built elsewhere,
#   cmake -S . -B build-cuda && cmake --build build-cuda --target mxserve-gpu-moe-check mxserve-bench-moe-gpu \
#     mxserve-gpu-dense-check
# with the binaries in bundle-cuda/bin, the shared libraries they need that the GPU machine lacks
# in bundle-cuda/lib, and bundle-cuda/env.sh putting those on LD_LIBRARY_PATH (git-ignored:
# /bundle*/). For the bench step's matmul_ogs baseline bring .triton_kernels too (triton_kernels
# v3.6.0, never committed; git-ignored through .git/info/exclude), made from a bare clone of a
# repository that carries the tag (e.g. github.com/yechenzhi/triton) with
#   bench/gpu/get_triton_kernels.sh <the bare git dir>
# Without it the table says "# matmul_ogs not run: ..." and its columns are "-".
# then, on the GPU machine from the repo root: tests/gpu/run_all.sh [STEP]...
# Steps: check (PASS/FAIL per case; CHECK_ONLY="<shape> ..." for some; without CHECK_ONLY the
# dense kernels' check too), dense (the dense kernels against their CPU twins, then PagedAttention's
# timing table), checkdecode (the small shapes
# with each other decode kernel pinned), sanitize (compute-sanitizer
# memcheck on two small shapes and the dense check's small cases), racecheck (fused-k1 fused and unfused, and racecheck_pattern's orderings alone),
# bench (gpt-oss-120b + same-run baselines incl. triton_kernels'
# matmul_ogs: one table),
# paths (each kernel configuration pinned, auto for kAuto; PATH_SHAPE, PATH_TOKENS, PATHS), decode (the decode kernel variants side by side),
# wgmmacfg (the wgmma configurations checked and timed), fused (the one-launch layer at <= 4
# token-slots: checked per configuration, sanitizers, timed against the unfused kernels), stamps
# (its phase timeline per configuration), pairstamps (the paired decode launch's phase
# timeline: PSTAMP_SHAPES), spread (run-to-run
# spread against placement and clocks: SPREAD_PROCS, SPREAD_TRIALS, SPREAD_TOKENS), ss (the weights-through-shared-memory wgmma kernel
# checked and timed), kstcfg (the K-streamed decode kernel's occupancy
# variants checked and timed), ab (this build's bench against another build's, alternating:
# AB_BASE, AB_SHAPES of shape:tokens, AB_ROUNDS; then the medians),
# envab (one MXSERVE_PLAN key's values side by side, alternating: AB_VAR, AB_VALUES,
# AB_SHAPES of shape:tokens, AB_ROUNDS; then the medians), pinab (kAuto against a path pinned per
# count: PINAB of shape:tokens:path, PINAB_ROUNDS),
# pinned (paths outside kAuto checked: PINNED), kernels (ncu: each kernel's time and DRAM bytes
# in one forward, KTOKENS), shapes (20b, Kimi-K2-like, K3-like or SHAPE_NAMES, with matmul_ogs), profile (ncu SpeedOfLight, one token),
# detail (ncu stall/issue/memory sections of one decode kernel), source (its per-instruction stall
# samples), sass (machine code of all kernels; each one's innermost mma loop counted: SASS_KERNELS), stream (the decode kernels' TMA ring without their
# math beside plain loads: bundle build/bin/mxserve-bench-stream too; STREAM_ROWS, STREAM_REPS).
# Carrying .tcache (triton's compile cache, made by a first run) and
#   mkdir -p /tmp/tc && tar xzf .tcache/tcache.tgz -C /tmp/tc && export TRITON_CACHE_DIR=/tmp/tc/tcache
# saves matmul_ogs's compile time.
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
# Every kernel override is one MXSERVE_PLAN=key=value[,key=value] (kernels/cuda/lab/README.md),
# read by the bench's and the check's main only.
# check_pinned KEY "VALUES" "SHAPES" FILE: mxserve-gpu-moe-check on each shape with MXSERVE_PLAN
# KEY=value for each value, the PASS/FAIL lines tagged KEY=value into FILE; prints the counts
# (rc=1 on a FAIL).
check_pinned() {
  local var=$1 v s
  for v in $2; do
    for s in $3; do
      MXSERVE_PLAN="$var=$v" $B/mxserve-gpu-moe-check $s 2>&1 | grep -E "^(PASS|FAIL)" | sed "s/^/$var=$v /"
    done
  done > "$4"
  echo "$(grep -c PASS "$4") PASS, $(grep -c FAIL "$4") FAIL"
  grep FAIL "$4" | head -5 && rc=1
}
# memcheck_pinned KEY VALUE: compute-sanitizer memcheck of the check on half-held with KEY=VALUE.
memcheck_pinned() {
  MXSERVE_PLAN="$1=$2" compute-sanitizer --tool memcheck --error-exitcode 9 $B/mxserve-gpu-moe-check half-held \
    > "$OUT/memcheck_$2.txt" 2>&1 || rc=1
  echo "memcheck $2: $(tail -n 1 "$OUT/memcheck_$2.txt")"
}
# time_pinned KEY "VALUES" "SHAPE:TOKENS ..." [ROUNDS]: the bench with MXSERVE_PLAN KEY=value in
# turn ("default": the code's own), ROUNDS times (2; alternating: drift shows as a difference
# between the rounds), each shape in its own process; each row prefixed by its value, which
# bench/gpu/medians.py reads.
time_pinned() {
  local var=$1 i v
  for i in $(seq ${4:-2}); do
    for v in $2; do
      echo "## $var=$v"
      bench_rows "$v" $B/mxserve-bench-moe-gpu "$3" "MXSERVE_PLAN=$var=$v"
    done
  done
}
# bench_rows LABEL BENCH "SHAPE:TOKENS ..." [VAR=VALUE]...: BENCH on each entry in its own process
# (with the assignments in its environment), its table rows prefixed by LABEL.
bench_rows() {
  local label=$1 bin=$2 shapes=$3 e
  shift 3
  for e in $shapes; do
    env "$@" $bin /tmp/bench_rows.csv ${e%%:*} ${e#*:} 2>&1 | grep "^| ${e%%:*} " | sed "s/^/$label /"
  done
}
for s in $steps; do
  case $s in
    check)
      # CHECK_ONLY: shapes to check, each in its own process (all of them when unset); e.g. the
      # small and kst-heavy ones after a decode-kernel change, when device time is short:
      # CHECK_ONLY="tiny-pad tiny-k1 tiny-skip half-held big-scales gpt-oss-20b".
      for shape in ${CHECK_ONLY:-all}; do
        [ "$shape" = all ] && shape=
        $B/mxserve-gpu-moe-check $shape 2>&1 || echo "FAIL mxserve-gpu-moe-check $shape exited non-zero"
      done | tee "$OUT/check.txt"
      if [ -z "${CHECK_ONLY:-}" ]; then
        $B/mxserve-gpu-dense-check small 2>&1 | tee -a "$OUT/check.txt" ||
          echo "FAIL mxserve-gpu-dense-check small exited non-zero" | tee -a "$OUT/check.txt"
      fi
      grep -q "^FAIL" "$OUT/check.txt" && rc=1 ;;
    dense)
      $B/mxserve-gpu-dense-check 2>&1 | tee "$OUT/dense.txt" ||
        echo "FAIL mxserve-gpu-dense-check exited non-zero" | tee -a "$OUT/dense.txt"
      grep -q "^FAIL" "$OUT/dense.txt" && rc=1 ;;
    checkdecode)
      # The check again with each other decode kernel pinned (the default, kst4, ran in check).
      for D in ${CHECK_DECODE:-kst kst4 bulk ring}; do
        for S in tiny-pad tiny-k1 half-held big-scales gpt-oss-20b; do
          MXSERVE_PLAN=decode=$D $B/mxserve-gpu-moe-check $S 2>&1 | grep -E "^(PASS|FAIL)" | sed "s/^/$D /"
        done
      done 2>&1 | tee "$OUT/checkdecode.txt" | grep -v "PASS" ; grep -c "PASS" "$OUT/checkdecode.txt"
      grep -q FAIL "$OUT/checkdecode.txt" && rc=1 ;;
    sanitize)
      compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 $B/mxserve-gpu-moe-check tiny-pad \
        > "$OUT/memcheck.txt" 2>&1; r=$?
      tail -3 "$OUT/memcheck.txt"; echo "memcheck tiny-pad rc=$r"; [ $r -eq 0 ] || rc=1
      compute-sanitizer --tool memcheck --error-exitcode 9 $B/mxserve-gpu-moe-check half-held \
        > "$OUT/memcheck2.txt" 2>&1; r=$?
      tail -2 "$OUT/memcheck2.txt"; echo "memcheck half-held rc=$r"; [ $r -eq 0 ] || rc=1
      # No leak check: PagedAttention's split workspace lives as long as the process, by design.
      compute-sanitizer --tool memcheck --error-exitcode 9 $B/mxserve-gpu-dense-check small \
        > "$OUT/memcheck_dense.txt" 2>&1; r=$?
      tail -2 "$OUT/memcheck_dense.txt"; echo "memcheck dense small rc=$r"; [ $r -eq 0 ] || rc=1 ;;
    racecheck)
      # racecheck on the fused kernel (host route, kernel route) and the unfused kernels, then on
      # its partial exchange and the kst kernels' stage ring alone (racecheck_pattern.cu: each with
      # a real race beside it).
      for v in fused_host_route=default fused_host_route=off fused=off; do
        f="$OUT/racecheck_$(echo "$v" | tr '=' '_').txt"
        MXSERVE_PLAN="$v" timeout ${RACECHECK_TIMEOUT:-300} compute-sanitizer --tool racecheck --print-limit 4 \
          --error-exitcode 9 $B/mxserve-gpu-moe-check fused-k1 > "$f" 2>&1
        echo "racecheck fused-k1 $v rc=$? $(grep -c '^PASS' "$f") PASS $(grep -c '^FAIL' "$f") FAIL; $(tail -n 1 "$f")"
        grep -o 'moe_cuda_[a-z_]*\.cu:[0-9]*' "$f" | sort | uniq -c | head -8
      done
      for m in atomic barrier none ring ring-all ring-no; do
        timeout 60 compute-sanitizer --tool racecheck --print-limit 2 $B/mxserve-gpu-racecheck-pattern $m \
          > "$OUT/racecheck_pattern_$m.txt" 2>&1
        echo "racecheck pattern $m: $(grep 'sums' "$OUT/racecheck_pattern_$m.txt"); $(tail -n 1 "$OUT/racecheck_pattern_$m.txt")"
      done ;;
    bench)
      $B/mxserve-bench-moe-gpu "$OUT/ours.csv" ${BENCH_SHAPES:-gpt-oss-120b} ${BENCH_TOKENS:-1,4,16,64,256,1024,4096,16384} \
        2>&1 | tee "$OUT/bench.txt" || rc=1
      PYTHONUNBUFFERED=1 PYTHONPATH=.triton_kernels${PYTHONPATH:+:$PYTHONPATH} python3 bench/gpu/baselines.py "$OUT/ours.csv" ${BENCH_SHAPES:-gpt-oss-120b} \
        ${BENCH_TOKENS:-1,4,16,64,256,1024,4096,16384} 2>&1 | tee "$OUT/table.txt" || rc=1 ;;
    paths)
      # The same layer with each kernel configuration pinned (what kAuto's cost model rests on:
      # tests/data/tile_paths); PATH_SHAPE picks the shapes (space-separated). One process per shape: the layer is uploaded once and every path timed on it (the bench
      # skips a path that cannot be close: MXSERVE_BENCH_PATHS in moe_cuda_bench.cc).
      # A PATH_SHAPE entry shape:tokens gives that shape its own token counts (else PATH_TOKENS).
      # bench/gpu/fit_tile_costs.py fits kAuto's costs to the CSVs it writes.
      P=${PATHS:-decode decode16 mid prefill wgmma32 wgmma40 wgmma48 wgmma64 wgmma96 wgmma wgmma192 wgmma256}
      for E in ${PATH_SHAPE:-gpt-oss-120b}; do
        S=${E%%:*}
        T=${PATH_TOKENS:-16,256,1024,4096}
        [ "$E" != "$S" ] && T=${E#*:}
        MXSERVE_BENCH_PATHS=${P// /,} $B/mxserve-bench-moe-gpu "$OUT/paths_$S.csv" $S $T | grep "^| $S "
      done 2>&1 | tee "$OUT/paths.txt" ;;
    envab)
      # kAuto under each value of one MXSERVE_PLAN key (AB_VAR, AB_VALUES), alternating,
      # AB_ROUNDS rounds (time_pinned), AB_SHAPES of shape:tokens entries; then the medians per
      # setting (bench/gpu/medians.py).
      # E.g. AB_VAR=mix AB_VALUES="off default" AB_SHAPES="k3-latent:256,4096".
      time_pinned "${AB_VAR:?}" "${AB_VALUES:?}" "${AB_SHAPES:?}" ${AB_ROUNDS:-2} | tee "$OUT/envab.txt"
      python3 bench/gpu/medians.py "$OUT/envab.txt" | tee "$OUT/envab_medians.txt" ;;
    pinab)
      # kAuto against a configuration pinned at each count, alternating: PINAB entries of
      # shape:tokens:path (e.g. "kimi-k2-like:256:decode16+decode gpt-oss-120b:192:wgmma16": kAuto's
      # previous choice there), PINAB_ROUNDS rounds (2), each run in its own process; then the
      # medians per count (bench/gpu/medians.py; kauto / pinned < 1: kAuto's is faster).
      for i in $(seq ${PINAB_ROUNDS:-2}); do
        for e in ${PINAB:?}; do
          bench_rows kauto $B/mxserve-bench-moe-gpu "${e%:*}"
          bench_rows pinned $B/mxserve-bench-moe-gpu "${e%:*}" "MXSERVE_PLAN=path=${e##*:}" | sed 's/| [^|]* |$/| auto |/'
        done
      done | tee "$OUT/pinab.txt"
      python3 bench/gpu/medians.py "$OUT/pinab.txt" | tee "$OUT/pinab_medians.txt" ;;
    decode)
      # The decode kernels side by side (what the defaults rest on): K-streamed TMA (4- and
      # 2-chunk slices) / bulk / register ring, programmatic dependent launch on and off, ring
      # activations in shared memory or through L1.
      # DECODE_CFGS: kernel:pdl:smem_a entries.
      for cfg in ${DECODE_CFGS:-kst4:1:1 kst4:0:1 kst:1:1 bulk:1:1 bulk:0:1 ring:1:1 ring:1:0}; do
        set -- ${cfg//:/ }
        echo "## MXSERVE_PLAN=decode=$1,pdl=$2,smem_a=$3"
        MXSERVE_PLAN=decode=$1,pdl=$2,smem_a=$3 \
          $B/mxserve-bench-moe-gpu /tmp/decode.csv gpt-oss-120b ${DECODE_TOKENS:-1,4,16,64,256} | grep '^| gpt'
      done 2>&1 | tee "$OUT/decode.txt" ;;
    wgmmacfg)
      # The wgmma kernel's configurations side by side (wgmma_cfg): each checked
      # on three shapes, then timed on the gpt-oss-120b layer.
      for C in ${WGMMA_CFGS:-default ldg nc2 epi nc4}; do
        echo "## MXSERVE_PLAN=wgmma_cfg=$C"
        for S in tiny-pad half-held gpt-oss-120b; do
          MXSERVE_PLAN=wgmma_cfg=$C $B/mxserve-gpu-moe-check $S 2>&1 | grep -E "^(PASS|FAIL)" | sed "s/^/$C /"
        done > "$OUT/check_$C.txt"
        echo "$(grep -c PASS "$OUT/check_$C.txt") PASS, $(grep -c FAIL "$OUT/check_$C.txt") FAIL"
        grep FAIL "$OUT/check_$C.txt" | head -5
        MXSERVE_PLAN=wgmma_cfg=$C $B/mxserve-bench-moe-gpu /tmp/w.csv gpt-oss-120b ${WGMMA_TOKENS:-1024,4096,16384} | grep '^| gpt'
      done 2>&1 | tee "$OUT/wgmmacfg.txt"
      cat "$OUT"/check_*.txt | grep -q FAIL && rc=1 ;;
    fused)
      # The one-launch layer at <= 4 token-slots (moe_cuda_fused.cu; MXSERVE_PLAN=fused=<K parts>x<slots
      # per warp>[w<warps>] or off): the small shapes checked with each configuration (the check also
      # compares it with the unfused kernels), sanitizers, then timed, alternating.
      check_pinned fused "${FUSED_CFGS:-6x2w16 8x2w24 4x1 3x1 4x1w24 6x1w24 6x1w32 3x2w16}" \
        "tiny-pad tiny-k1 tiny-skip fused-even fused-range big-scales gpt-oss-20b" "$OUT/check_fused.txt"
      for T in memcheck racecheck synccheck; do
        compute-sanitizer --tool $T --error-exitcode 9 $B/mxserve-gpu-moe-check tiny-skip > "$OUT/${T}_fused.txt" 2>&1 || rc=1
        echo "$T: $(tail -n 1 "$OUT/${T}_fused.txt")"
      done
      time_pinned fused "${FUSED_CFGS:-6x2w16 8x2w24 4x1 3x1 4x1w24 6x1w24 6x1w32 3x2w16} off" \
        "gpt-oss-120b:1 gpt-oss-20b:1" 2>&1 | tee "$OUT/fused.txt" ;;
    kstcfg)
      # The K-streamed decode kernel's occupancy variants (kst_cfg: w16, x2, x2w8;
      # w12 and w14 at 16- and 24-row tiles, with PINNED paths: see kernels/cuda/README.md): each checked on the
      # small shapes and gpt-oss-20b, then timed, alternating with the default.
      check_pinned kst_cfg "${KST_CFGS:-w16 x2 x2w8}" \
        "tiny-pad tiny-k1 half-held big-scales gpt-oss-20b" "$OUT/check_kst.txt"
      time_pinned kst_cfg "default ${KST_CFGS:-w16 x2 x2w8}" \
        "gpt-oss-120b:${KST_TOKENS:-16,64,256,512}" 2>&1 | tee "$OUT/kstcfg.txt" ;;
    pinned)
      # Paths kAuto may not take (PINNED, default decode24 and mid: the K-streamed decode kernel at
      # 24 and 32 rows) checked with kAuto pinned to each, on the small shapes and gpt-oss-20b, and
      # memcheck on half-held. kst_cfg passes through.
      check_pinned path "${PINNED:-decode24 mid}" \
        "${PINNED_SHAPES:-tiny-pad tiny-k1 tiny-skip half-held big-scales gpt-oss-20b}" "$OUT/check_pinned.txt"
      for v in ${PINNED:-decode24 mid}; do memcheck_pinned path $v; done ;;
    ss)
      # The weights-through-shared-memory wgmma kernel (paths 12-14: MXSERVE_PLAN=path=wgmmass,
      # wgmmass192, wgmmass64; not in kAuto): checked on the small shapes and gpt-oss-20b, memcheck,
      # then timed against the register-A kernel's tiles, alternating.
      check_pinned path "wgmmass wgmmass192 wgmmass64" "tiny-pad tiny-k1 half-held big-scales gpt-oss-20b" \
        "$OUT/check_ss.txt"
      memcheck_pinned path wgmmass
      { time_pinned path "wgmmass64 wgmma48 wgmma64" "gpt-oss-120b:${SS_SMALL_TOKENS:-512,1024,1536}"
        time_pinned path "wgmmass wgmmass192 wgmma wgmma192" "gpt-oss-120b:${SS_TOKENS:-2048,4096,8192,16384}"
      } 2>&1 | tee "$OUT/ss.txt" ;;
    ab)
      # This build against another build's bench (AB_BASE, default bin/mxserve-bench-moe-gpu-base
      # in the bundle: e.g. the previous commit's, copied in before bundling), alternating
      # AB_ROUNDS rounds over AB_SHAPES of shape:tokens entries (each in its own process), rows
      # prefixed new / base; then the medians (bench/gpu/medians.py).
      for i in $(seq ${AB_ROUNDS:-3}); do
        for X in new base; do
          bin=$B/mxserve-bench-moe-gpu
          [ $X = base ] && bin=${AB_BASE:-$B/mxserve-bench-moe-gpu-base}
          echo "## $X $bin"
          bench_rows $X $bin "${AB_SHAPES:-gpt-oss-120b:1,16,64,256,1024}"
        done
      done 2>&1 | tee "$OUT/ab.txt"
      python3 bench/gpu/medians.py "$OUT/ab.txt" | tee "$OUT/ab_medians.txt" ;;
    spread)
      # Run-to-run spread: SPREAD_PROCS processes, each timing SPREAD_TOKENS SPREAD_TRIALS times
      # with a fresh workspace placed elsewhere per trial (MXSERVE_BENCH_TRIALS), every output
      # line stamped with the time, beside nvidia-smi's SM clock, power, temperature and
      # clock-event reasons every 100 ms (smi.txt): placement, clocks or neither.
      nvidia-smi -q -d POWER | grep -iE "limit|draw" | head -12
      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,temperature.gpu,clocks_event_reasons.active \
        --format=csv,noheader -lms 100 > "$OUT/smi.txt" 2>&1 &
      smi=$!
      for i in $(seq ${SPREAD_PROCS:-3}); do
        echo "## process $i"
        MXSERVE_BENCH_TRIALS=${SPREAD_TRIALS:-4} $B/mxserve-bench-moe-gpu /tmp/spread.csv gpt-oss-120b \
          ${SPREAD_TOKENS:-4096,16384} 2>&1 | grep --line-buffered -E '^(\| gpt|# reps)' |
          while IFS= read -r l; do echo "$(date +%T.%3N) $l"; done
      done 2>&1 | tee "$OUT/spread.txt"
      kill $smi
      python3 bench/gpu/smi_summary.py "$OUT/smi.txt" "$OUT/spread.txt" | tee "$OUT/spread_smi.txt" ;;
    stamps)
      # When each phase of the fused one-token layer ends, over the grid (MXSERVE_PLAN=fused_probe=stamps),
      # per configuration.
      for F in ${FUSED_CFGS:-4x2w16 6x2w16 6x2w24}; do
        echo "## MXSERVE_PLAN=fused=$F,fused_probe=stamps"
        MXSERVE_PLAN=fused=$F,fused_probe=stamps $B/mxserve-bench-moe-gpu /tmp/s.csv gpt-oss-120b 1 | grep -E '^(\||# fused plan|# last arrival)' | tail -14
      done 2>&1 | tee "$OUT/stamps.txt" ;;
    pairstamps)
      # Where the paired decode launch's time goes (MXSERVE_PLAN=pair_probe=stamps): each phase's
      # end over its CTAs and the items each took, beside the whole layer's time (the bench row), for
      # PSTAMP_SHAPES entries of shape:tokens (one token count each).
      for e in ${PSTAMP_SHAPES:-gpt-oss-120b:16 gpt-oss-120b:64 kimi-k2-like:16}; do
        echo "## $e"
        MXSERVE_PLAN=pair_probe=stamps $B/mxserve-bench-moe-gpu /tmp/s.csv ${e%%:*} ${e#*:} | grep -E '^(\||# pair|# last)' | tail -16
      done 2>&1 | tee "$OUT/pairstamps.txt" ;;
    shapes)
      # The other layer shapes, with matmul_ogs (no bf16 grouped_mm: it costs too much device time).
      # SHAPE_NAMES picks the shapes.
      SN=${SHAPE_NAMES:-gpt-oss-20b,kimi-k2-like,k3-latent}
      $B/mxserve-bench-moe-gpu "$OUT/shapes.csv" $SN ${SHAPE_TOKENS:-1,16,256,4096} \
        2>&1 | tee "$OUT/shapes.txt" || rc=1
      PYTHONUNBUFFERED=1 PYTHONPATH=.triton_kernels${PYTHONPATH:+:$PYTHONPATH} python3 bench/gpu/baselines.py --no-grouped \
        "$OUT/shapes.csv" $SN ${SHAPE_TOKENS:-1,16,256,4096} 2>&1 | tee "$OUT/table2.txt" || rc=1 ;;
    profile)
      # Per-kernel time, DRAM and SM throughput for the first layers of the 1- and 64-token runs.
      ncu --clock-control none --section SpeedOfLight -k regex:'Gemm|Bulk|Kst|Route|Combine|Gather|Wgmma|Unpermute' -c ${NCU_COUNT:-20} \
        $B/mxserve-bench-moe-gpu /tmp/ncu.csv gpt-oss-120b ${NCU_TOKENS:-1} > "$OUT/ncu.txt" 2>&1
      grep -E "Kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|  [A-Za-z]+Kernel" "$OUT/ncu.txt" | head -60 ;;
    kernels)
      # Each kernel of one forward at each of KTOKENS (default 16,256,1024,16384) of KSHAPE: ncu's
      # duration and DRAM bytes (clocks and caches left alone; ncu serializes the kernels, so
      # programmatic dependent launch does not overlap them), one table per count
      # (bench/gpu/kernel_times.py).
      for T in ${KTOKENS:-16 256 1024 16384}; do
        ncu --clock-control none --cache-control none --csv --print-units base \
          --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
          -k regex:'Count|Scan|Place|Gather|Route|Wgmma|Decode|Kst|Combine|MoeGemm|Fused' -c ${NCU_COUNT:-12} \
          $B/mxserve-bench-moe-gpu /tmp/k.csv ${KSHAPE:-gpt-oss-120b} $T > "$OUT/kernels_$T.csv" 2>&1
        python3 bench/gpu/kernel_times.py "$OUT/kernels_$T.csv" "$T tokens"
      done 2>&1 | tee "$OUT/kernels.txt" ;;
    detail)
      # Where a decode kernel's cycles go: stall reasons, issue rate, memory traffic, for the
      # K-streamed decode kernel's first launches at DETAIL_TOKENS (default 64) tokens of
      # DETAIL_SHAPE (default gpt-oss-120b); DETAIL_SKIP launches of it skipped first (1: the kst
      # down GEMM, whose gate_up launch comes first).
      ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats \
        --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats \
        -k regex:${DETAIL_KERNEL:-DecodeKst} --launch-skip ${DETAIL_SKIP:-0} -c ${NCU_COUNT:-2} \
        --metrics smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_misc_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio \
        $B/mxserve-bench-moe-gpu /tmp/ncu.csv ${DETAIL_SHAPE:-gpt-oss-120b} ${DETAIL_TOKENS:-64} > "$OUT/detail.txt" 2>&1
      grep -vE "^==PROF==|^ +-+ +-+" "$OUT/detail.txt" | grep -E "Kernel|Duration|Throughput|Issue|Eligible|Active Warps|Stall|Warp Cycles|Executed Ipc|Registers|Shared Memory|Bank|Hit Rate|L1|L2|Occupancy|issue_stalled" | head -120 ;;
    source)
      # Per-instruction warp-stall samples (SASS) of one kernel launch (after DETAIL_SKIP): where its cycles go.
      ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:${DETAIL_KERNEL:-DecodeKst} \
        --launch-skip ${DETAIL_SKIP:-0} -c 1 \
        --export /tmp/src --force-overwrite $B/mxserve-bench-moe-gpu /tmp/ncu.csv ${DETAIL_SHAPE:-gpt-oss-120b} ${DETAIL_TOKENS:-64} \
        > "$OUT/source_run.txt" 2>&1
      ncu --import /tmp/src.ncu-rep --page source --print-source sass --csv > "$OUT/source.csv" 2>&1
      head -2 "$OUT/source.csv" | cut -c1-600; wc -l "$OUT/source.csv"; gzip -f "$OUT/source.csv"
      # Its instruction mix per opcode (per k32 block of a warp for the wgmma GEMM: HGMMA / 2).
      python3 bench/gpu/source_mix.py "$OUT/source.csv.gz" ${MIX_UNIT:-HGMMA 2} > "$OUT/source_mix.txt"
      head -30 "$OUT/source_mix.txt" ;;
    stream)
      # How fast the kst kernels' way of streaming weights reads DRAM without their math
      # (bench/gpu/stream_probe.cu): each ring shape beside plain 16-byte loads on the same bytes.
      # STREAM_ROWS=4600: the 53 MB a one-token layer of gpt-oss-120b reads (its floor).
      $B/mxserve-bench-stream ${STREAM_ROWS:-36720} ${STREAM_REPS:-11} 2>&1 | tee "$OUT/stream.txt" || rc=1 ;;
    sass)
      # The decode kernels' machine code (instruction mix of the inner loops), saved under $OUT.
      cuobjdump -sass bundle-cuda/bin/mxserve-bench-moe-gpu > "$OUT/all.sass" 2>&1
      # Each kernel's innermost mma loop: its instructions, and per k32 block of a warp.
      python3 bench/gpu/sass_loops.py "$OUT/all.sass" "${SASS_KERNELS:-Decode|Wgmma}" > "$OUT/sass_loops.txt"
      head -40 "$OUT/sass_loops.txt"; gzip -f "$OUT/all.sass" ;;
  esac
done
exit $rc
