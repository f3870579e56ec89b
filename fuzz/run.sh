#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan + coverage) in their own build dir and
# runs each for a bounded time on its seed corpus (fuzz/corpus/<target>) plus the corpus it
# grew on earlier runs (<build>/fuzz-corpus/<target>, kept between runs). Fails on the first
# crash, leak, sanitizer report or timeout, leaving the reproducer in <build>/fuzz-artifacts/.
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (defaults: 60, every target)
#   FUZZ_BUILD=build-fuzz FUZZ_JOBS=2 fuzz/run.sh 20
# Reproduce a finding: <build>/bin/<target> <artifact>   (docs/FUZZING.md)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(fuzz_openai_api fuzz_http_request fuzz_safetensors fuzz_model_config fuzz_tokenizer fuzz_run_experts fuzz_grpc_generate fuzz_harmony_parser fuzz_tokenizer_loader)
build=${FUZZ_BUILD:-build-fuzz}
jobs=${FUZZ_JOBS:-$(nproc)}
if ! command -v clang++ >/dev/null; then
  echo "fuzz/run.sh: clang++ not found (scripts/install-deps.sh installs clang and libclang-rt-dev)" >&2
  exit 1
fi
if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DMXSERVE_NO_CUDA=ON -DMXSERVE_FUZZ=ON >/dev/null
fi
cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$build/fuzz-build.log" 2>&1 ||
  { tail -40 "$build/fuzz-build.log"; echo "fuzz/run.sh: build failed" >&2; exit 1; }
mkdir -p "$build/fuzz-artifacts"
printf '%-20s %10s %8s %8s %s\n' target execs exec/s cov corpus > "$build/fuzz-summary.txt"
status=0
for t in "${targets[@]}"; do
  grown="$build/fuzz-corpus/$t"
  mkdir -p "$grown"
  log="$build/fuzz-$t.log"
  dict=(); [[ -f fuzz/$t.dict ]] && dict=(-dict="fuzz/$t.dict")
  echo "fuzz/run.sh: $t for ${secs}s"
  # ASan's leak check stays on; UBSan aborts on the first report (-fno-sanitize-recover).
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
       "$build/bin/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
       -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" "${dict[@]}" \
       "$grown" "fuzz/corpus/$t" >"$log" 2>&1; then
    echo "fuzz/run.sh: $t FAILED:" >&2
    grep -E "ERROR|SUMMARY|runtime error|Test unit written|deadly signal" "$log" | head -20 >&2
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo ?)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo ?)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo ?)
  n=$(find "$grown" -type f | wc -l)
  printf '%-20s %10s %8s %8s %s\n' "$t" "$execs" "$rate" "$cov" "$n" | tee -a "$build/fuzz-summary.txt"
done
echo "fuzz/run.sh: summary in $build/fuzz-summary.txt"
cat "$build/fuzz-summary.txt"
exit $status
