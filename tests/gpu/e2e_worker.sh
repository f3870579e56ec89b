#!/usr/bin/env bash
# End to end on one GPU: writes a random-weight gpt-oss-120b-shaped expert set
# (NUM_LAYERS layers, never committed) with mxserve-make-model, starts mxserve-worker on cuda:0,
# and runs mxserve-gpu-worker-e2e against it (PASS/FAIL per layer and token count, and the
# per-layer time including the gRPC hop; PRESET and DEVICE pick another shape and device: a
# CPU rehearsal of the script). Runs a bundle laid out as run_all.sh's (bundle-e2e/bin, lib,
# env.sh) with mxserve-make-model, mxserve-worker and mxserve-gpu-worker-e2e.
set -uo pipefail
BUNDLE=${BUNDLE:-bundle-e2e}
source "$BUNDLE/env.sh"
B=$BUNDLE/bin
OUT=${OUT:-/tmp/mxserve-gpu}
M=${MODEL_DIR:-/tmp/mxserve-120b}
mkdir -p "$OUT"
t0=$(date +%s)
$B/mxserve-make-model --preset ${PRESET:-gpt-oss-120b} --num-layers ${NUM_LAYERS:-1} --out "$M" --threads "$(nproc)" \
  > "$OUT/make_model.txt" 2>&1 || { tail -5 "$OUT/make_model.txt"; exit 1; }
echo "model written in $(( $(date +%s) - t0 )) s: $(du -sh "$M" | cut -f1)"
# Each transport (E2E_TRANSPORTS: bytes = F32 in the gRPC messages, shm = through /dev/shm with
# the worker page-locking the objects (--pin_shared_memory, the default), shm-nopin = through
# /dev/shm, copies through the worker's staging buffers (a second worker, started for it),
# shm-1copy = shm with the client copying the tensors on its calling thread alone instead of a
# pool of one thread per core (--copy_threads 1); a -bf16 suffix (bytes-bf16, shm-bf16) puts
# BF16 on the wire instead of F32: the worker converts on the GPU).
start_worker() {  # extra worker flags
  rm -f /tmp/w.port
  $B/mxserve-worker --model "$M" --device ${DEVICE:-cuda:0} --port 0 --port-file /tmp/w.port --allow_shared_memory "$@" \
    >> "$OUT/worker.txt" 2>&1 &
  wpid=$!
  for i in $(seq 1 600); do [ -s /tmp/w.port ] && break; sleep 0.1; done
}
stop_worker() { kill -TERM $wpid; wait $wpid; echo "worker exit $?"; }
rc=0
# E2E_IN_PROCESS=1: after the first transport's table, the same layer through the worker's
# GpuExecutor in the client's process (no gRPC, no client copies; --in_process).
extra=$([ -n "${E2E_IN_PROCESS:-}" ] && echo "--in_process 1")
start_worker
for tr in ${E2E_TRANSPORTS:-bytes shm shm-nopin}; do
  echo "## transport $tr"
  if [ "$tr" = shm-nopin ]; then stop_worker; start_worker --pin_shared_memory=false; fi
  t=${tr%-bf16}
  wire=$([ "$t" = "$tr" ] && echo f32 || echo bf16)
  t=${t%-nopin}
  $B/mxserve-gpu-worker-e2e --model "$M" --address "127.0.0.1:$(cat /tmp/w.port)" --tokens ${E2E_TOKENS:-1,64,1024} \
    --transport "${t%-1copy}" --wire $wire --copy_threads $([ "$t" = shm-1copy ] && echo 1 || echo 0) $extra 2>&1 |
    tee -a "$OUT/e2e.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  extra=""
done
stop_worker
grep -E "page-locked|SERVING|weights on" "$OUT/worker.txt" | tail -4
exit $rc
