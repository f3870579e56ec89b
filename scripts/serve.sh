#!/usr/bin/env bash
# Starts the coordinator with local expert workers and prints how to talk to it.
set -euo pipefail
BUILD=$1 MODEL=$2 WORKERS=$3 HOST=$4 HTTP_PORT=$5 GRPC_PORT=$6
name=$(basename "$MODEL")
cat <<MSG
mxserve: serving $MODEL with $WORKERS local expert worker(s)
  OpenAI API : http://localhost:$HTTP_PORT/v1   (model "$name")
  gRPC       : localhost:$GRPC_PORT (mxserve.v1.Inference)
  try        : curl -N http://localhost:$HTTP_PORT/v1/chat/completions -H 'Content-Type: application/json' \\
                 -d '{"model":"$name","messages":[{"role":"user","content":"Hello!"}],"stream":true,"max_tokens":32}'
MSG
exec "$BUILD/bin/mxserve-coordinator" --model "$MODEL" --served-model-name "$name" \
  --local-workers "$WORKERS" --host "$HOST" --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT"
