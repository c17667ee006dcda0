#!/usr/bin/env bash
# Planned pool and zero-overhead swap (Zhang et al.) over the model zoo: for each model and batch,
# arena / lower bound for the caching and the planned allocator, and the peak that
# zero-overhead-swap reaches with its measured overhead. Prints a markdown table.
# Usage: [MODELS="resnet-tiny vgg-tiny"] [BATCHES="8 16"] [ITERS=4] bench/planned.sh [vtensor train args...]
#   e.g. MODELS="vgg16 resnet50" BATCHES="64 128" bench/planned.sh --backend sim --gpu p100-16g
# A batch of 0 means the model's preset. Extra arguments go to every `vtensor train` unchanged.
#
# Paper scale, end to end on the sim backend: bench/planned.sh paper OUTDIR
#   [GPU=p100-16g] [POOL="model:batch,batch ..."] [ZOS="model:batch,batch ..."] [FRACTIONS="0.9 0.8 0.7"]
# writes OUTDIR/pool.csv (arena / lower bound, every model of the zoo at several batches),
# OUTDIR/zos.csv (zero-overhead-swap and -limit against none with an unlimited budget, and lru at
# the same budgets), OUTDIR/zos_gpus.csv (zero-overhead-swap on several GPUs, GPUS="..."),
# OUTDIR/json/ (every run's report) and prints them as markdown tables. ITERS (default 5): the
# last iteration is reported (the first is the measured one; stick-to-limit may plan twice more).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${VTENSOR:-build/vtensor}
if [ "${1:-}" = paper ]; then
  out=${2:?usage: bench/planned.sh paper OUTDIR}
  exec python3 bench/planned_paper.py "$bin" "$out"
fi
models=${MODELS:-"mlp-tiny vgg-tiny resnet-tiny"}
batches=${BATCHES:-0}
iters=${ITERS:-4}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Planned columns: the default planner (greedy-size), then `best` (the planner that won).
# Times: medians over the iterations after the measured first one.
echo "| model | batch | lower bound | caching arena | caching / LB | planned / LB (greedy-size) | planned / LB (best) | best planner | fallbacks | none peak | zero-overhead-swap peak | saved | time vs none | stall / iter |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for m in $models; do
  for b in $batches; do
    args=(--model "$m" --iters "$iters" --quiet "$@")
    [ "$b" != 0 ] && args+=(--batch "$b")
    "$bin" train "${args[@]}" --allocator caching --report "$tmp/c.json" >/dev/null
    "$bin" train "${args[@]}" --allocator planned --report "$tmp/p.json" >/dev/null
    "$bin" train "${args[@]}" --allocator planned --planner best --report "$tmp/b.json" >/dev/null
    "$bin" train "${args[@]}" --policy zero-overhead-swap --report "$tmp/z.json" >/dev/null
    python3 - "$tmp" "$m" "$b" <<'PY'
import json, sys
tmp, m, b = sys.argv[1:]
c, p, bst, z = (json.load(open(f"{tmp}/{x}.json")) for x in "cpbz")
mib = lambda x: f"{x / 2**20:.2f} MiB"
ca, pa, ba = c["allocator_report"], p["allocator_report"], bst["allocator_report"]
steady = lambda j: j["iterations"][1:] or j["iterations"]  # after the measured iteration
def median(j, k):
    v = sorted(i[k] for i in steady(j))
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2
none_peak = max(i["peak_allocated_bytes"] for i in steady(c))
zos_peak = max(i["peak_allocated_bytes"] for i in steady(z))
made_by = ba.get("plan", {}).get("made_by", "-")
print(f'| {m} | {c["config"]["batch"]} | {mib(pa["lower_bound_bytes"])} | {mib(ca["arena_bytes"])} | {ca["arena_over_lower_bound"]:.4f} '
      f'| {pa["arena_over_lower_bound"]:.4f} | {ba["arena_over_lower_bound"]:.4f} | {made_by} | {pa["fallback_requests"] + ba["fallback_requests"]} '
      f'| {mib(none_peak)} | {mib(zos_peak)} | {1 - zos_peak / none_peak:.1%} | {median(z, "time_ms") / median(c, "time_ms"):.2f} '
      f'| {median(z, "stall_ms"):.2f} ms |')
PY
  done
done
