#!/usr/bin/env bash
# Fuzzes every parser a user feeds (tests/fuzz/targets.h: trace, dtr_log, gpu_file, sizes, cli, plan, densities, view, weights) with
# libFuzzer, each for FUZZ_SECONDS (default 20) from its seeds in tests/fuzz/<target>/, with the
# address and undefined-behaviour sanitizers. Needs the build-asan/ build of scripts/sanitize.sh
# (run it first). What a run adds to the corpus stays in build-asan/fuzz/<target>/ (not committed).
# A finding fails the script and leaves the input in build-asan/fuzz/<target>/: fix the bug and
# add the input to tests/fuzz/<target>/ under a name saying what it found, where the unit test
# FuzzCorpus feeds it to the target from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${FUZZ_SECONDS:-20}"
JOBS="${VTENSOR_SANITIZE_JOBS:-$(nproc)}"
targets=(trace dtr_log gpu_file sizes cli plan densities view weights)
export ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" OPENBLAS_NUM_THREADS=1
for t in "${targets[@]}"; do [ -x "build-asan/fuzz_$t" ] || { echo "fuzz: build-asan/fuzz_$t missing: run scripts/sanitize.sh first" >&2; exit 1; }; done

run_one() {
  local t=$1 dir=build-asan/fuzz/$1
  rm -rf "$dir" && mkdir -p "$dir/corpus"
  # -close_fd_mask=3: the targets' own output (help texts, parse errors) is dropped; libFuzzer's stays.
  "build-asan/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 \
    -dict=tests/fuzz/numbers.dict -print_final_stats=1 -artifact_prefix="$dir/" "$dir/corpus" "tests/fuzz/$t" \
    >"$dir/log" 2>&1
}
pids=()
for t in "${targets[@]}"; do
  run_one "$t" & pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
done
failed=()
for i in "${!targets[@]}"; do wait "${pids[$i]}" || failed+=("${targets[$i]}"); done

total=0
for t in "${targets[@]}"; do
  dir=build-asan/fuzz/$t
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  runs=${runs:-0}
  total=$((total + runs))
  found=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  printf 'fuzz %-8s %9d executions in %ss, corpus %d inputs, %s\n' "$t" "$runs" "$SECONDS_EACH" \
    "$(find "$dir/corpus" tests/fuzz/$t -type f | wc -l)" "$([ "$found" -eq 0 ] && echo 'no crash' || echo "$found FINDINGS")"
done
if [ ${#failed[@]} -gt 0 ]; then
  for t in "${failed[@]}"; do
    echo "== fuzz_$t: tail of build-asan/fuzz/$t/log" >&2
    tail -40 "build-asan/fuzz/$t/log" >&2
  done
  echo "fuzz: FAILED: ${failed[*]} (inputs in build-asan/fuzz/<target>/)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, $total executions, no crash, leak or timeout"
