#!/usr/bin/env bash
# On a GPU machine: mxserve serving a random-weight model on one GPU, measured by bench_serve.py
# (1,024 input / 1,024 output tokens at each SERVE_CONCURRENCY, 2 x concurrency prompts, greedy)
# and the TTFT of one 8,192-token prompt. Builds nothing: bundle-cuda/ (tests/gpu/run_all.sh says
# how) must hold mxserve-coordinator, mxserve-worker and mxserve-make-model.
#   bench/serve/gpu_serve.sh [inprocess|worker]...   (default: inprocess)
# inprocess: the whole model in the coordinator's process; worker: the experts in one
# mxserve-worker process on the same GPU (--local-workers 1 --worker-devices cuda:0).
# Results: $OUT/serve_<mode>_c<N>.json and $OUT/serve_<mode>_ttft8k.json; logs beside them.
set -uo pipefail
OUT=${OUT:-/tmp/mxserve-gpu}
MODELS=${MODELS:-/tmp/mxserve-models}
MODEL=${SERVE_MODEL:-20b}
PRESET=${SERVE_PRESET:-gpt-oss-20b}
mkdir -p "$OUT" "$MODELS"
source bundle-cuda/env.sh
B=bundle-cuda/bin
[[ -f $MODELS/$MODEL/config.json ]] ||
  $B/mxserve-make-model --preset "$PRESET" --out "$MODELS/$MODEL" --seed 5 >/dev/null 2>&1 || exit 1
rc=0
for mode in ${*:-inprocess}; do
  case $mode in
    inprocess) extra=(--device cuda:0) ;;
    worker) extra=(--device cuda:0 --gpu-memory-utilization 0.5 --local-workers 1
                   --worker-devices cuda:0 --worker-binary "$B/mxserve-worker") ;;
    *) echo "unknown mode $mode"; exit 2 ;;
  esac
  rm -f "$OUT/ports.json"
  $B/mxserve-coordinator --model "$MODELS/$MODEL" --http-port 0 --grpc-port 0 \
    --port-file "$OUT/ports.json" --max-num-seqs ${SERVE_MAX_SEQS:-256} \
    --max-num-batched-tokens 8192 --max-model-len 10240 "${extra[@]}" \
    > "$OUT/coordinator_$mode.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do [[ -f $OUT/ports.json ]] && break; kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  port=$(python3 -c "import json;print(json.load(open('$OUT/ports.json'))['http_port'])" 2>/dev/null)
  if [[ -z $port ]]; then echo "FAIL $mode: the coordinator did not start"; tail -5 "$OUT/coordinator_$mode.log"; rc=1; continue; fi
  grep -E "dense model on|KV cache|worker" "$OUT/coordinator_$mode.log" | head -4
  # Ready (the model loaded, the workers up) before any timing.
  for _ in $(seq 240); do
    curl -sf http://127.0.0.1:$port/health/ready >/dev/null && break; sleep 0.5
  done
  for c in ${SERVE_CONCURRENCY:-64 256}; do
    python3 bench/serve/bench_serve.py --base-url http://127.0.0.1:$port --temperature 0 \
      --random-input-len 1024 --random-output-len 1024 --num-prompts $((2 * c)) \
      --max-concurrency $c --num-warmups 2 --label "$mode c$c" \
      --result-file "$OUT/serve_${mode}_c$c.json" > "$OUT/serve_${mode}_c$c.txt" 2>&1 || rc=1
    grep -E "Output token throughput|Median TPOT|P99 TPOT|Median TTFT|Failed" "$OUT/serve_${mode}_c$c.txt" | sed "s/^/$mode c$c: /"
  done
  python3 bench/serve/bench_serve.py --base-url http://127.0.0.1:$port --temperature 0 \
    --random-input-len 8192 --random-output-len 1 --num-prompts 3 --max-concurrency 1 \
    --num-warmups 1 --label "$mode ttft8k" --result-file "$OUT/serve_${mode}_ttft8k.json" \
    > "$OUT/serve_${mode}_ttft8k.txt" 2>&1 || rc=1
  grep -E "Median TTFT|Failed" "$OUT/serve_${mode}_ttft8k.txt" | sed "s/^/$mode 8k prompt: /"
  kill -TERM $pid; wait $pid
done
exit $rc
