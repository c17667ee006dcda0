#!/usr/bin/env bash
# Policy comparison on a tiny model: each lossless policy at a fraction of the unmanaged peak.
# Usage: bench/policies.sh [model] [fraction] [iters] > out.csv   (needs build/vtensor)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-resnet-tiny}; frac=${2:-0.5}; iters=${3:-20}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
build/vtensor train --model "$model" --iters "$iters" --quiet --policy none --report "$tmp/none.json" >/dev/null
peak=$(python3 -c "import json;print(json.load(open('$tmp/none.json'))['summary']['peak_allocated_bytes'])")
budget=$(python3 -c "print(int($peak*$frac)//256*256)")
echo "model,policy,budget_bytes,peak_allocated_bytes,peak_reserved_bytes,mean_iteration_ms,time_vs_none,swapped_out_bytes_per_iter,recomputed_ops_per_iter,stall_ms_per_iter,final_loss"
for p in none lru lru-recompute; do
  b=$budget; [ "$p" = none ] && b=$((8<<30))
  build/vtensor train --model "$model" --iters "$iters" --quiet --policy "$p" --budget "$b" --report "$tmp/$p.json" >/dev/null
  python3 - "$tmp" "$model" "$p" <<'PY'
import json, sys
tmp, model, p = sys.argv[1:]
j = json.load(open(f"{tmp}/{p}.json")); n = json.load(open(f"{tmp}/none.json"))
it = j["iterations"][1:] or j["iterations"]  # the first iteration warms caches
avg = lambda k: sum(x[k] for x in it) / len(it)
ms = avg("time_ms"); ms_none = sum(x["time_ms"] for x in (n["iterations"][1:] or n["iterations"])) / len(it)
s = j["summary"]
print(f'{model},{p},{j["config"]["budget_bytes"]},{s["peak_allocated_bytes"]},{s["peak_reserved_bytes"]},{ms:.2f},{ms/ms_none:.2f},'
      f'{avg("swapped_out_bytes"):.0f},{avg("recomputed_ops"):.1f},{avg("stall_ms"):.2f},{s["final_loss"]:.6f}')
PY
done
