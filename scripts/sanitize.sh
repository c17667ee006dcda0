#!/usr/bin/env bash
# The sanitizer jobs (scripts/test.sh runs them after the tests; clang comes from scripts/install.sh):
#  - ASan + UBSan (LSan included): the unit and e2e tests, built with clang at -O1 into build-asan/
#    (no cuda backend, no Python module, no benchmarks). The same build holds the fuzz targets
#    (scripts/fuzz.sh); only the parsers' sources get libFuzzer's coverage counters (CMakeLists.txt,
#    VTENSOR_FUZZ). Every report (a memory error, undefined behaviour, a leak) is written to
#    build-asan/reports/ and fails the job, also from the `vtensor` processes the e2e tests start.
#    Nothing is excluded; the one death test runs apart (below, with why).
#  - TSan: the cpu backend's stream tests (tests/unit/test_cpu_streams.cpp) built alone, with the
#    backend's sources, into build-tsan/, repeated so the threads interleave differently.
# Each job ends with one line saying what ran and that it was clean (the ASan job then one more: its
# e2e shards' times and slowest tests); any report fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${VTENSOR_SANITIZE_JOBS:-$(nproc)}"
common=(-G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_COMPILER=clang++ -DVTENSOR_CUDA=OFF -DVTENSOR_PYTHON=OFF -DVTENSOR_PCH=ON
        -DVTENSOR_BUILD_BENCH=OFF)

build() {  # dir, targets...: builds quietly; on a failure shows the errors and stops
  local dir=$1; shift
  if ! cmake --build "$dir" -j "$JOBS" --target "$@" >"$dir/build.log" 2>&1; then
    grep -v '^\[' "$dir/build.log" | tail -60 >&2
    echo "sanitizer build in $dir FAILED" >&2
    exit 1
  fi
}
# How many tests a gtest log says ran (a failure has already stopped the script).
summary() { sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' "$1" | tail -1; }

# ---- ASan + UBSan
asan_flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-asan "${common[@]}" -DVTENSOR_FUZZ=ON "-DCMAKE_CXX_FLAGS_SANITIZE=-O1 -g1" \
  "-DCMAKE_CXX_FLAGS=$asan_flags" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" >/dev/null
build build-asan vtensor_unit_tests vtensor_e2e_tests vtensor fuzz_trace fuzz_dtr_log fuzz_gpu_file fuzz_sizes fuzz_cli fuzz_plan fuzz_densities fuzz_view fuzz_weights
rm -rf build-asan/reports && mkdir -p build-asan/reports
# Allocation is most of ASan's cost in the search's rehearsals; three settings cut the e2e job by about
# 15% (595 s -> 498 s wall for its two shards here): a report's allocation and free stacks keep 8 frames (30 by
# default), freed memory waits in a 64 MiB quarantine before reuse (256), and memory is not handed
# back to the OS every 5 s only to fault in again.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:log_path=$PWD/build-asan/reports/asan:malloc_context_size=8:quarantine_size_mb=64:allocator_release_to_os_interval_ms=-1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$PWD/build-asan/reports/ubsan"
export LSAN_OPTIONS="log_path=$PWD/build-asan/reports/lsan"
export OPENBLAS_NUM_THREADS=1
# name, binary, gtest filter, shards: runs them (the shards side by side, gtest's sharding); on a
# failure or any report shows both and stops; else prints how many passed.
asan_run() {
  local name=$1 bin=$2 filter=$3 shards=${4:-1} rc=0 pids=() i n=0
  rm -f "build-asan/$name".*.json
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$bin" --gtest_brief=1 "--gtest_filter=$filter" \
      "--gtest_output=json:build-asan/$name.$i.json" >"build-asan/$name.$i.log" 2>&1 & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  if [ "$rc" -ne 0 ] || [ -n "$(ls build-asan/reports)" ]; then
    {
      for ((i = 0; i < shards; i++)); do tail -40 "build-asan/$name.$i.log"; done
      for f in build-asan/reports/*; do [ -f "$f" ] && { echo "== $f"; head -60 "$f"; }; done
      echo "ASan+UBSan: $name tests FAILED (exit $rc; logs build-asan/$name.*.log, reports in build-asan/reports)"
    } >&2
    exit 1
  fi
  for ((i = 0; i < shards; i++)); do n=$((n + $(summary "build-asan/$name.$i.log"))); done
  echo "$n"
}
# Death tests (one: test_um.cpp, a write to a page off the device must kill the process with
# SIGSEGV) die on purpose in a child process; ASan would write that SEGV up as a report, so
# they run apart with handle_segv=0 (their gtest assertions still check the death).
u1=$(asan_run unit build-asan/vtensor_unit_tests '-*DeathTest*')
u2=$(ASAN_OPTIONS="$ASAN_OPTIONS:handle_segv=0" asan_run unit-death build-asan/vtensor_unit_tests '*DeathTest*')
e=$(asan_run e2e build-asan/vtensor_e2e_tests '*' "$JOBS")
# The e2e label's one test outside gtest: the experiment runner (bench/run.py) driving this vtensor.
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
if ! VTENSOR_BINARY="$PWD/build-asan/vtensor" "$PY" tests/e2e/test_runner.py >build-asan/runner.log 2>&1 ||
    [ -n "$(ls build-asan/reports)" ]; then
  { tail -40 build-asan/runner.log; for f in build-asan/reports/*; do [ -f "$f" ] && head -60 "$f"; done
    echo "ASan+UBSan: the runner test FAILED"; } >&2
  exit 1
fi
unit=$((u1 + ${u2:-0}))
e=$((e + 1))
echo "ASan+UBSan: unit $unit/$unit, e2e $e/$e passed; no sanitizer report (memory errors, undefined behaviour, leaks)"
# Where the e2e job's time went (gtest's JSON per shard): each shard's wall and the slowest tests.
"$PY" - build-asan/e2e.*.json <<'PYEOF' || true
import json, sys
shards, tests = [], []
for f in sys.argv[1:]:
    d = json.load(open(f))
    shards.append(float(d["time"].rstrip("s")))
    tests += [(float(t["time"].rstrip("s")), f"{s['name']}.{t['name']}") for s in d["testsuites"] for t in s["testsuite"]]
tests.sort(reverse=True)
print("ASan+UBSan: e2e shards took " + ", ".join(f"{w:.0f} s" for w in shards) + "; slowest: "
      + ", ".join(f"{n} {t:.0f} s" for t, n in tests[:3]))
PYEOF

# ---- TSan
cmake -S . -B build-tsan "${common[@]}" "-DCMAKE_CXX_FLAGS_SANITIZE=-O1 -g1" \
  -DCMAKE_CXX_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread >/dev/null
build build-tsan vtensor_stream_tests
repeat=20
log=build-tsan/streams.log
if ! TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" build-tsan/vtensor_stream_tests \
    --gtest_brief=1 --gtest_repeat=$repeat >"$log" 2>&1; then
  { tail -80 "$log"; echo "TSan: cpu stream tests FAILED (log $log)"; } >&2
  exit 1
fi
n=$(summary "$log")
echo "TSan: cpu stream tests $n/$n passed x$repeat; no data race reported"
