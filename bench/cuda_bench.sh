#!/usr/bin/env bash
# Everything the cuda backend must show, on a GPU machine, from the repository root:
#   1. build with CUDA (sm_90 unless VTENSOR_CUDA_ARCHS says otherwise) and run the cuda tests;
#   2. swap bandwidth of the backend's swap path against a plain cudaMemcpyAsync of pinned memory, and
#      what a compaction's device moves cost against the sim's charge (device_moves.csv);
#   3. ResNet-50, VGG-16 and GPT-2 small under policy none in vtensor and in PyTorch eager (fp32);
#   4. lru at 50% of the unmanaged peak bit-identical to none (deterministic cuDNN algorithms);
#   5. lru, capuchin, dtr and auto at 50% and 25% of the unmanaged peak on ResNet-50, VGG-16, GPT-2 small
#      and BERT-base, against none (bench/cuda_policies.py);
#   6. the sim's per-op prediction against the device's op times, per op kind (bench/sim_vs_device.py);
#   7. the Python package's CUDA paths (the pluggable allocator, offload's CUDA store): the module built
#      there with that machine's Python (scripts/device_python.sh), python/tests/test_cuda.py;
#   8. ResNet-50 under capuchin and auto at 50% again with VTENSOR_CUDA_EVENT_POOL=0 (an event created
#      and destroyed per use): what the event pool saves, beside step 5's rows;
#   9. ResNet-50 and BERT-base under auto at 50% with VTENSOR_CUDA_SYNC_TIMING=1: compaction_ms and
#      recompute_ms on the device's clock (the host's enqueueing otherwise).
#  10. only when STEPS names it (auto-repeats): ResNet-50 under auto at 50% six times, each planning
#      anew, their iteration times and codec calls; it fails where a run's summary.replay_ratio is over 2 (the plans that compressed ran 15x slower on the
#      H200 on 2026-11-30, before the bitmask codec ran one block per tile); the guard off (it would
#      switch plans), each run's measured codec rate printed (the report's codec_rate); runs 1-3
#      charge each copy what a queued copy adds (--auto-copy-cost queued, the report's link), 4-6
#      its bytes alone.
#  11. only when STEPS names it (plan-replay): ResNet-50 under auto at 50% saves its plan, and a second
#      run runs it with --auto-plan, without the search (plan_replay.txt).
# Step 2 also times the lossless codecs against a device copy (codecs.csv).
# Results go to $OUT_DIR (default bench-out/): CSV and JSON, and the vtensor reports. Every step runs
# even when one before it failed; the script exits non-zero if any did (bench-out/steps.txt lists them).
# VTENSOR_PREBUILT=1 skips the build and uses build/ as it is (built elsewhere with the same CUDA);
# STEP_TIMEOUT=SECONDS stops a step that runs longer (exit 124 in steps.txt); STEPS=a,b runs only the
# steps named (cuda-tests, swap-bandwidth, cuda-vs-pytorch, lru-identity, policies, sim-vs-device,
# python-cuda, event-pool, sync-timing, auto-repeats, plan-replay).
set -uo pipefail
OUT_DIR=${OUT_DIR:-bench-out}
ARCHS=${VTENSOR_CUDA_ARCHS:-90}
ITERS=${ITERS:-10}
ALL_STEPS=cuda-tests,swap-bandwidth,cuda-vs-pytorch,lru-identity,policies,sim-vs-device,python-cuda,event-pool,sync-timing,auto-repeats,plan-replay
DEFAULT_STEPS=${ALL_STEPS%,auto-repeats,plan-replay}  # auto-repeats and plan-replay run only when named
for s in ${STEPS:+${STEPS//,/ }}; do
  case ",$ALL_STEPS," in *",$s,"*) ;; *) echo "cuda_bench: STEPS: unknown step '$s'; accepted: $ALL_STEPS" >&2; exit 2 ;; esac
done
mkdir -p "$OUT_DIR"
: > "$OUT_DIR/steps.txt"
failed=0
step() {  # step NAME COMMAND...: run, time, record the exit status
  local name=$1 t0=$SECONDS rc
  shift
  case ",${STEPS:-$DEFAULT_STEPS}," in *",$name,"*) ;; *) return 0 ;; esac
  echo "== $name"
  if [ -n "${STEP_TIMEOUT:-}" ]; then timeout "$STEP_TIMEOUT" "$@"; else "$@"; fi
  rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT_DIR/steps.txt"
  [ "$rc" -eq 0 ] || failed=1
}

if [ "${VTENSOR_PREBUILT:-0}" != 1 ]; then
  cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DVTENSOR_CUDA_ARCHS="$ARCHS" -DVTENSOR_BUILD_BENCH=ON || exit 1
  cmake --build build -j"$(nproc)" --target vtensor vtensor_cuda_tests vtensor_cuda_internal_tests vtensor_swap_bandwidth || exit 1
fi

step cuda-tests bash -c "set -o pipefail; ctest --test-dir build -L cuda --output-on-failure 2>&1 | tee '$OUT_DIR/cuda_tests.txt'"
step swap-bandwidth bash -c "set -o pipefail; ./build/bench/vtensor_swap_bandwidth 20 '$OUT_DIR/device_moves.csv' '$OUT_DIR/codecs.csv' | tee '$OUT_DIR/swap_bandwidth.csv'"
step cuda-vs-pytorch python3 bench/cuda_vs_pytorch.py --vtensor build/vtensor --iters "$ITERS" --out "$OUT_DIR/cuda_vs_pytorch"
# lru at half the unmanaged peak against none, deterministic algorithms, same seeds.
lru_identity() {
  local rc=0 model budget
  for model in resnet50 vgg16; do
    ./build/vtensor train --model "$model" --backend cuda --policy none --deterministic --iters 4 --quiet \
      --report "$OUT_DIR/identity_${model}_none.json" || { rc=1; continue; }
    budget=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['summary']['peak_allocated_bytes']//2)" \
      "$OUT_DIR/identity_${model}_none.json")
    ./build/vtensor train --model "$model" --backend cuda --policy lru --deterministic --iters 4 --quiet \
      --budget "$budget" --report "$OUT_DIR/identity_${model}_lru.json" || { rc=1; continue; }
    python3 - "$OUT_DIR/identity_${model}_none.json" "$OUT_DIR/identity_${model}_lru.json" <<'PY' || rc=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
la, lb = [i["loss"] for i in a["iterations"]], [i["loss"] for i in b["iterations"]]
same = la == lb
print(f"{a['config']['model']}: none {la}\n  lru at {b['config']['budget_bytes']} B: {lb}\n  bit-identical losses: {same}, "
      f"lru peak {b['summary']['peak_allocated_bytes']} B, time none {a['summary']['mean_iteration_ms']:.1f} ms, "
      f"lru {b['summary']['mean_iteration_ms']:.1f} ms")
sys.exit(0 if same else 1)
PY
  done
  return $rc
}
step lru-identity bash -c "set -o pipefail; $(declare -f lru_identity); OUT_DIR='$OUT_DIR' lru_identity 2>&1 | tee '$OUT_DIR/lru_identity.txt'"
step policies python3 bench/cuda_policies.py --vtensor build/vtensor --models resnet50,vgg16,gpt2-small,bert-base \
  --fractions 0.5,0.25 --out "$OUT_DIR/cuda_policies"
# The sim's per-op prediction against the device's op times (CUPTI, a measured iteration under
# capuchin), per op kind: what calibrating the h100-80g spec starts from.
sim_vs_device() {
  local rc=0 model
  for model in resnet50 vgg16 gpt2-small bert-base; do
    ./build/vtensor train --model "$model" --backend cuda --policy capuchin --iters 2 --quiet \
      --trace "$OUT_DIR/trace_${model}.jsonl" || { rc=1; continue; }
    python3 bench/sim_vs_device.py --vtensor build/vtensor --trace "$OUT_DIR/trace_${model}.jsonl" --model "$model" \
      --gpu h100-80g --out "$OUT_DIR/sim_vs_device_${model}.csv" --ops-out "$OUT_DIR/sim_vs_device_ops_${model}.csv" || rc=1
  done
  return $rc
}
step sim-vs-device bash -c "set -o pipefail; $(declare -f sim_vs_device); OUT_DIR='$OUT_DIR' sim_vs_device 2>&1 | tee '$OUT_DIR/sim_vs_device.txt'"
step python-cuda bash -c "set -o pipefail; scripts/device_python.sh 2>&1 | tee '$OUT_DIR/python_cuda.txt'"
# The event pool's share of the host's work per swap (cuda_backend.h): the policies step's ResNet-50
# rows again with an event created and destroyed per use; compare iter_ms and host_drain_ms.
step event-pool env VTENSOR_CUDA_EVENT_POOL=0 python3 bench/cuda_policies.py --vtensor build/vtensor --models resnet50 \
  --policies capuchin,auto --fractions 0.5 --out "$OUT_DIR/cuda_policies_no_event_pool"
step sync-timing env VTENSOR_CUDA_SYNC_TIMING=1 python3 bench/cuda_policies.py --vtensor build/vtensor \
  --models resnet50,bert-base --policies auto --fractions 0.5 --out "$OUT_DIR/cuda_policies_sync_timing"
auto_repeats() {
  local rc=0 i
  for i in 1 2 3 4 5 6; do
    # The guard off: the step checks that each chosen plan replays as rehearsed, not the fallback.
    # Runs 4-6 charge each copy its bytes alone (--auto-copy-cost bytes), against 1-3's queued cost.
    local cost=queued
    [ "$i" -gt 3 ] && cost=bytes
    ./build/vtensor train --model resnet50 --backend cuda --policy auto --iters 8 --quiet --budget 1483974400B \
      --auto-replay-guard off --auto-copy-cost "$cost" --report "$OUT_DIR/repeat_resnet50_auto_$i.json" || rc=1
  done
  python3 - "$OUT_DIR" <<'PY' || rc=1
import json, statistics, sys
slow = 0
for i in range(1, 7):
    r = json.load(open(f"{sys.argv[1]}/repeat_resnet50_auto_{i}.json"))
    its = r["iterations"][2:]
    med = lambda k: statistics.median(x.get(k) or 0 for x in its)
    ratio = r["summary"]["replay_ratio"]
    slow += ratio is None or ratio > 2
    print(f"run {i}: {r['policy_report']['chosen']}, predicted {r['policy_report']['predicted_time_ms']:.1f} ms, "
          f"iteration {med('time_ms'):.1f} ms, stall {med('stall_ms'):.1f} ms, compressions {med('compressions'):.0f}, "
          f"predicted stall {r['policy_report']['predicted_stall_ms']:.1f} ms, replay ratio {ratio}, "
          f"link {r['policy_report']['link']}, codec {r['policy_report']['codec_rate']}")
print(f"{slow} of 6 runs over 2x their prediction")
sys.exit(1 if slow else 0)  # the step fails where a plan does not replay
PY
  return $rc
}
step auto-repeats bash -c "set -o pipefail; $(declare -f auto_repeats); OUT_DIR='$OUT_DIR' auto_repeats 2>&1 | tee '$OUT_DIR/auto_repeats.txt'"
# A saved plan on the device (--auto-plan): ResNet-50 under auto at 50% plans and saves its plan in
# its report, then a second run runs that plan without the search. Fails where the second run did
# not run the file's plan or ran it over 1.5x the first's median iteration.
plan_replay() {
  local a="$OUT_DIR/plan_replay_search.json" b="$OUT_DIR/plan_replay_file.json"
  local args=(train --model resnet50 --backend cuda --policy auto --iters 8 --quiet --budget 1483974400B --auto-replay-guard off)
  ./build/vtensor "${args[@]}" --report "$a" || return 1
  ./build/vtensor "${args[@]}" --auto-plan "$a" --report "$b" || return 1
  python3 - "$a" "$b" <<'PY'
import json, statistics, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
med = lambda r, k: statistics.median(x.get(k) or 0 for x in r["iterations"][2:])
for name, r in (("searched", a), ("from the file", b)):
    print(f"{name}: {r['policy_report']['chosen']}, planned from {r['policy_report']['planned_from']}, first iteration "
          f"{r['iterations'][0]['time_ms']:.1f} ms (planning {r['iterations'][0].get('host_plan_ms') or 0:.0f} ms), "
          f"then {med(r, 'time_ms'):.1f} ms, stall {med(r, 'stall_ms'):.1f} ms")
same = a["policy_report"]["saved_plan"]["pins"] == b["policy_report"]["saved_plan"]["pins"]
ok = b["policy_report"]["planned_from"] == "plan file" and same and med(b, "time_ms") <= 1.5 * med(a, "time_ms")
print(f"same pins: {same}; ratio {med(b, 'time_ms') / med(a, 'time_ms'):.3f}; {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
PY
}
step plan-replay bash -c "set -o pipefail; $(declare -f plan_replay); OUT_DIR='$OUT_DIR' plan_replay 2>&1 | tee '$OUT_DIR/plan_replay.txt'"
cat "$OUT_DIR/steps.txt"
exit $failed
