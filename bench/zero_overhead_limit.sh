#!/usr/bin/env bash
# zero-overhead-swap-limit against lru at fractions of the unmanaged peak: the peak each keeps,
# the passive evictions left after planning, the stall and the time against none.
# Usage: [MODELS="resnet-tiny vgg-tiny"] [FRACTIONS="0.8 0.7"] [ITERS=6] bench/zero_overhead_limit.sh [vtensor train args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${VTENSOR:-build/vtensor}
models=${MODELS:-"resnet-tiny vgg-tiny"}
fractions=${FRACTIONS:-"0.8 0.7"}
iters=${ITERS:-6}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "| model | budget | policy | peak allocated | evictions / iter | swapped out / iter | stall / iter | time vs none | final loss |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in $models; do
  "$bin" train --model "$m" --iters "$iters" --quiet "$@" --report "$tmp/none.json" >/dev/null
  peak=$(python3 -c "import json;print(json.load(open('$tmp/none.json'))['summary']['peak_allocated_bytes'])")
  for f in $fractions; do
    budget=$(python3 -c "print(int($peak*$f)//256*256)")
    for p in lru zero-overhead-swap-limit; do
      "$bin" train --model "$m" --iters "$iters" --quiet "$@" --policy "$p" --budget "$budget" --report "$tmp/$p.json" >/dev/null
      python3 - "$tmp" "$m" "$p" "$f" <<'PY'
import json, sys
tmp, m, p, f = sys.argv[1:]
j, n = json.load(open(f"{tmp}/{p}.json")), json.load(open(f"{tmp}/none.json"))
it, itn = j["iterations"][1:], n["iterations"][1:]
med = lambda xs: sorted(xs)[(len(xs) - 1) // 2]
avg = lambda k: sum(x[k] for x in it) / len(it)
print(f'| {m} | {float(f):.0%} ({j["config"]["budget_bytes"] / 2**20:.2f} MiB) | {p} | {max(x["peak_allocated_bytes"] for x in it) / 2**20:.2f} MiB '
      f'| {avg("evictions"):.1f} | {avg("swapped_out_bytes") / 2**20:.2f} MiB | {med([x["stall_ms"] for x in it]):.2f} ms '
      f'| {med([x["time_ms"] for x in it]) / med([x["time_ms"] for x in itn]):.2f} | {j["summary"]["final_loss"]:.6f} |')
PY
    done
  done
done
