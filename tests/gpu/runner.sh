#!/usr/bin/env bash
# On a GPU machine: the GPU model runner's correctness (PASS/FAIL per case) and its decode
# benchmark. Builds nothing: it runs a bundle (bundle-cuda/, as tests/gpu/run_all.sh explains)
# holding mxserve-gpu-dense-check, mxserve-gpu-runner-check, mxserve-bench-runner and
# mxserve-make-model. Models are written under $MODELS (default /tmp/mxserve-models).
#   tests/gpu/runner.sh [STEP]...      steps: dense check sanitize bench chaos profile
#                                      (default: dense check sanitize bench)
# dense: the dense kernels against their CPU twins. check: the runner against HF's golden logits
# (tests/data/golden) and against the CPU runner on a 2-layer gpt-oss-20b-shaped model, experts
# in-process and behind the router. sanitize: compute-sanitizer memcheck of the golden check.
# bench: decode tok/s beside the memory-read floor, gpt-oss-20b-shaped (BENCH_BATCHES,
# BENCH_CONTEXT, BENCH_STEPS); CSV rows go to $OUT/runner_bench.csv.
set -uo pipefail
OUT=${OUT:-/tmp/mxserve-gpu}
MODELS=${MODELS:-/tmp/mxserve-models}
mkdir -p "$OUT" "$MODELS"
source bundle-cuda/env.sh
B=bundle-cuda/bin
steps=${*:-dense check sanitize bench}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
rc=0
golden=()
for g in tests/data/golden/*/; do golden+=(--golden "${g%/}"); done
make_model() {  # make_model NAME PRESET [LAYERS]
  [[ -f $MODELS/$1/config.json ]] && return 0
  local layers=(); [[ -n ${3:-} ]] && layers=(--num-layers "$3")
  $B/mxserve-make-model --preset "$2" --out "$MODELS/$1" --seed 5 "${layers[@]}" >/dev/null 2>&1
}
for step in $steps; do
  echo "== $step"
  case $step in
    dense)
      $B/mxserve-gpu-dense-check 2>&1 | tee "$OUT/dense.txt" | grep -vE "^PASS" ; grep -c "^PASS" "$OUT/dense.txt"
      grep -q "^FAIL" "$OUT/dense.txt" && rc=1 ;;
    check)
      make_model 20b-2l gpt-oss-20b 2 || { echo "FAIL make-model"; rc=1; }
      $B/mxserve-gpu-runner-check "${golden[@]}" --model "$MODELS/20b-2l" --workers-moe 2>&1 |
        tee "$OUT/runner_check.txt" || rc=1 ;;
    sanitize)
      compute-sanitizer --tool memcheck --error-exitcode 9 $B/mxserve-gpu-runner-check \
        --golden tests/data/golden/top4_4l > "$OUT/sanitize.txt" 2>&1
      s=$?; tail -3 "$OUT/sanitize.txt"; [[ $s -eq 0 ]] && echo "PASS memcheck" || { echo "FAIL memcheck ($s)"; rc=1; } ;;
    bench)
      make_model 20b gpt-oss-20b || { echo "FAIL make-model"; rc=1; }
      $B/mxserve-bench-runner --model "$MODELS/20b" --batches ${BENCH_BATCHES:-1,8,64} \
        --context ${BENCH_CONTEXT:-1024} --steps ${BENCH_STEPS:-64} --csv 2>&1 | tee "$OUT/runner_bench.txt"
      grep "^CSV," "$OUT/runner_bench.txt" | sed 's/^CSV,//' > "$OUT/runner_bench.csv" ;;
    chaos)
      # The CPU suite's chaos test run here: --device auto puts each coordinator's dense model
      # on cuda:0 and its local workers share that GPU (their default with one GPU), so these
      # are GPU workers with --expert-replicas 2 SIGKILLed and SIGSTOPped under 24 concurrent
      # greedy streams, every output equal to the fault-free GPU run. The bundle needs
      # chaos_test, mxserve-coordinator, mxserve-worker and mxserve-make-model.
      mkdir -p "$OUT/chaos"
      TMPDIR="$OUT/chaos" MXSERVE_KEEP_TEST_DIRS=1 $B/chaos_test 2>&1 | tee "$OUT/chaos.txt" |
        grep -E "^\[ *(OK|FAILED|PASSED) " || rc=1
      grep -q "FAILED" "$OUT/chaos.txt" && rc=1
      echo "coordinators on: $(grep -rhoE "dense model on [^ ]+" "$OUT/chaos" | sort | uniq -c | tr '\n' ' ')"
      echo "workers on: $(grep -rhoE "local workers .*on [^ ]+" "$OUT/chaos" | sort | uniq -c | tr '\n' ' ')" ;;
    profile)
      # Where a batch-1 decode step's time goes: kernel time totals over PROFILE_STEPS eager
      # steps (nsys; ncu's per-kernel duration of one step when nsys is absent).
      make_model 20b gpt-oss-20b || { echo "FAIL make-model"; rc=1; }
      run=($B/mxserve-bench-runner --model "$MODELS/20b" --batches 1 --context 1024 --eager)
      if command -v nsys >/dev/null; then
        nsys profile -o "$OUT/prof" --force-overwrite true "${run[@]}" --steps ${PROFILE_STEPS:-200} > "$OUT/prof_run.txt" 2>&1
        nsys stats --report cuda_gpu_kern_sum --format csv "$OUT/prof.nsys-rep" > "$OUT/kern_sum.csv" 2>/dev/null
        python3 -c "
import csv,sys
rows=[r for r in csv.reader(open('$OUT/kern_sum.csv')) if len(r)>8]
h=rows[0]; rows=rows[1:]
ti=h.index('Total Time (ns)'); ni=h.index('Name'); ci=h.index('Instances')
tot=sum(float(r[ti]) for r in rows)
for r in sorted(rows,key=lambda r:-float(r[ti]))[:25]:
  print('%6.1f%% %8d %10.1f us/inst  %s'%(100*float(r[ti])/tot,int(r[ci]),float(r[ti])/int(r[ci])/1e3,r[ni][:110]))
"
      else
        ncu --metrics gpu__time_duration.sum --csv --launch-skip ${PROFILE_SKIP:-3000} -c ${PROFILE_COUNT:-400} \
          "${run[@]}" --steps 30 > "$OUT/ncu_kern.csv" 2>&1
        python3 -c "
import csv,collections
t=collections.Counter();n=collections.Counter()
for r in csv.reader(l for l in open('$OUT/ncu_kern.csv') if l.startswith('\"')):
  if len(r)>14 and r[-3]=='gpu__time_duration.sum':
    k=r[4][:100]; v=float(r[-1].replace(',','')); t[k]+=v; n[k]+=1
tot=sum(t.values())
for k,v in t.most_common(25): print('%6.1f%% %6d %10.2f us/inst %s'%(100*v/tot,n[k],v/n[k]/1e3,k))
"
      fi ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
exit $rc
