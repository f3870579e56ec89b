#!/usr/bin/env bash
# Hostile model folders and hostile JSON against the real binaries (issue 56, items 2, 3, 7, 8).
#   bench/hostile/config_probe.sh [BIN_DIR]     (default build/bin; needs mxserve-coordinator,
#                                                mxserve-worker, mxserve-make-model)
# 1. config.json / checkpoint / tokenizer edits: each binary's exit status (78 = EX_CONFIG, not
#    restarted by the systemd units), wall time, peak RSS and the error line.
# 2. A coordinator with --api-key and --worker-token as flags and 2 local workers: the token is
#    not on any worker's command line, then bench/hostile/json_probe.py.
set -euo pipefail
bin=${1:-build/bin}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/mxserve-hostile-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

"$bin/mxserve-make-model" --preset tiny --out "$work/tiny" --seed 7 >/dev/null

variant() {  # name python-edit-of-config(j) [file-edit]
  local name=$1 edit=$2
  cp -r "$work/tiny" "$work/$name"
  python3 - "$work/$name/config.json" "$edit" <<'PY'
import json, sys
p, edit = sys.argv[1], sys.argv[2]
j = json.load(open(p))
exec(edit)
json.dump(j, open(p, "w"))
PY
}

run() {  # label binary args...
  local label=$1; shift
  local log="$work/run.log"
  local t0=$(date +%s.%N)
  set +e
  /usr/bin/time -f "%M" -o "$work/rss" "$@" >"$log" 2>&1
  local rc=$?
  set -e
  local t1=$(date +%s.%N)
  local line=$(grep -m1 -E "error|mxserve-coordinator: [A-Z]" "$log" | cut -c1-150)
  printf '%-34s exit %3d  %6.2f s  %7d KiB  %s\n' "$label" "$rc" "$(echo "$t1 - $t0" | bc)" \
    "$(tail -1 "$work/rss")" "$line"
}

variant vocab 'j["vocab_size"] = 2**31 - 1'
variant experts 'j["num_local_experts"] = 2**31 - 1'
variant heads 'j["num_attention_heads"] = 2**30; j["head_dim"] = 2**30'
variant layers 'j["num_hidden_layers"] = 10**6; j.pop("layer_types", None)'
variant small_vocab 'j["vocab_size"] = 300; j.pop("eos_token_id", None); j.pop("pad_token_id", None)'
cp -r "$work/tiny" "$work/deep_config"  # 100,000 levels: built as text (Python's json recurses)
python3 - "$work/deep_config/config.json" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read().rstrip().rstrip("}")
open(p, "w").write(s + ', "extra": ' + "[" * 100000 + "]" * 100000 + "}")
PY
cp -r "$work/tiny" "$work/corrupt"
for f in "$work"/corrupt/*.safetensors; do printf '\xff\xff\xff\xff\xff\xff\x00\x00' | dd of="$f" conv=notrunc 2>/dev/null; done
cp -r "$work/tiny" "$work/dup_id"
python3 - "$work/dup_id/tokenizer.json" <<'PY'
import json, sys
p = sys.argv[1]; t = json.load(open(p)); v = t["model"]["vocab"]; v["zzzz-new"] = v["a"]
json.dump(t, open(p, "w"))
PY

coord_args=(--host 127.0.0.1 --http-port 0 --grpc-port 0)
echo "== load and config errors (coordinator: --local-workers 0 and 2; worker alone)"
for v in vocab experts heads layers small_vocab deep_config corrupt dup_id; do
  run "coordinator $v" "$bin/mxserve-coordinator" --model "$work/$v" "${coord_args[@]}" --local-workers 0
  run "coordinator $v (2 local workers)" "$bin/mxserve-coordinator" --model "$work/$v" "${coord_args[@]}" --local-workers 2
  [[ $v == small_vocab || $v == dup_id ]] || run "worker $v" "$bin/mxserve-worker" --model "$work/$v" --port 0
done

echo "== --api-key and --worker-token as flags, 2 local workers"
"$bin/mxserve-coordinator" --model "$work/tiny" "${coord_args[@]}" --local-workers 2 \
  --api-key probe-key --worker-token probe-worker-token --port-file "$work/ports.json" \
  >"$work/coord.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do [[ -s "$work/ports.json" ]] && break; sleep 0.1; done
http_port=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['http_port'])" "$work/ports.json")
for _ in $(seq 300); do
  python3 -c "import http.client as h,sys; c=h.HTTPConnection('127.0.0.1',$http_port,timeout=2); c.request('GET','/health/ready'); sys.exit(c.getresponse().status!=200)" 2>/dev/null && break
  sleep 0.1
done
for wpid in $(grep -oE 'local worker pid [0-9]+' "$work/coord.log" | awk '{print $4}'); do
  if tr '\0' ' ' <"/proc/$wpid/cmdline" | grep -q probe-worker-token; then
    echo "worker $wpid: token ON its command line"
  else
    echo "worker $wpid: token not on its command line; in its environment: $(tr '\0' '\n' <"/proc/$wpid/environ" | grep -c '^MXSERVE_WORKER_TOKEN=probe-worker-token$')"
  fi
done
python3 "$here/json_probe.py" --port "$http_port" --api-key probe-key
