#!/usr/bin/env bash
# o200k_harmony encode throughput: mxserve's tokenizer vs npm tiktoken (WASM, OpenAI's Rust
# core) and js-tiktoken, on the same generated corpus, in one run (the exactness test's corpus:
# prose, code, numbers, whitespace, CJK, Arabic, Devanagari, emoji, specials).
# Usage: bench/tokenizer.sh [BUILD_DIR] [COUNT]
set -euo pipefail
BUILD=${1:-build}
COUNT=${2:-6000}
HERE=$(cd "$(dirname "$0")" && pwd)
out=$("$HERE/../tests/client/tokenizer/run_o200k_exactness.sh" "$BUILD/bin" "$COUNT" 2>&1)
ours=$(sed -n 's/.*encode \([0-9.]*\) MB\/s.*/\1/p' <<<"$out" | head -1)
js=$(sed -n 's/.*js-tiktoken \([0-9.]*\) MB\/s.*/\1/p' <<<"$out" | head -1)
wasm=$(sed -n 's/.*tiktoken (WASM) \([0-9.]*\) MB\/s.*/\1/p' <<<"$out" | head -1)
echo "# o200k_harmony encode throughput, $COUNT generated strings — $(date -u +%Y-%m-%d) — $(lscpu | sed -n 's/^Model name: *//p')"
echo "| tokenizer | MB/s |"
echo "| --- | --- |"
echo "| mxserve (C++, PCRE2 JIT, rank BPE) | ${ours:-?} |"
echo "| tiktoken 1.0.22 (npm, WASM) | ${wasm:-?} |"
echo "| js-tiktoken 1.0.21 (npm, pure JS) | ${js:-?} |"
grep -E "mismatches" <<<"$out" | head -2
