#!/usr/bin/env bash
# Starts the coordinator with local expert workers and prints how to talk to it. The dense model
# runs on DEVICE (--device: auto, the first GPU if there is one; cpu; cuda:N). The workers run on
# WORKER_DEVICES (--worker-devices) when it is set, else on the coordinator's default: the GPUs
# of this host other than its own, or the CPU when there is none.
set -euo pipefail
BUILD=$1 MODEL=$2 WORKERS=$3 HOST=$4 HTTP_PORT=$5 GRPC_PORT=$6 WORKER_DEVICES=${7:-} DEVICE=${8:-auto}
name=$(basename "$MODEL")
devices=() where="the default devices (GPUs other than the coordinator's, else CPU; see its log)"
if [[ -n $WORKER_DEVICES ]]; then
  devices=(--worker-devices "$WORKER_DEVICES") where=$WORKER_DEVICES
fi
cat <<MSG
mxserve: serving $MODEL, the dense model on --device $DEVICE (the log says which), with
  $WORKERS local expert worker(s) on $where
  OpenAI API : http://localhost:$HTTP_PORT/v1   (model "$name")
  gRPC       : localhost:$GRPC_PORT (mxserve.v1.Inference)
  try        : curl -N http://localhost:$HTTP_PORT/v1/chat/completions -H 'Content-Type: application/json' \\
                 -d '{"model":"$name","messages":[{"role":"user","content":"Hello!"}],"stream":true,"max_tokens":32}'
MSG
exec "$BUILD/bin/mxserve-coordinator" --model "$MODEL" --served-model-name "$name" --device "$DEVICE" \
  --local-workers "$WORKERS" "${devices[@]}" --host "$HOST" --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT"
