#!/usr/bin/env bash
# Unmanaged peak memory (policy none) of transformer shapes, one iteration each, as CSV.
# Usage: bench/transformer_peaks.sh [backend] [optimizer] "model batch seq" ... > out.csv
#   e.g. bench/transformer_peaks.sh cpu adam "gpt-tiny 8 32" "gpt2-small 1 128"
# (needs build/vtensor; paper-scale shapes want a backend that runs no kernels: sim, GPU=NAME to pick one)
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${1:-cpu}; opt=${2:-adam}; shift 2 || true
gpu=(); [[ $backend == sim ]] && gpu=(--gpu "${GPU:-a100-80g}")  # memory figures do not depend on the GPU
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "model,batch,seq,backend,optimizer,params,persistent_bytes,peak_allocated_bytes,peak_reserved_bytes,first_loss"
for spec in "$@"; do
  read -r model batch seq <<<"$spec"
  build/vtensor train --model "$model" --batch "$batch" --seq "$seq" --iters 1 --quiet --backend "$backend" \
    "${gpu[@]}" --optimizer "$opt" --budget 64GiB --report "$tmp/r.json" >/dev/null
  python3 - "$tmp/r.json" "$model" "$batch" "$seq" "$backend" "$opt" <<'PY'
import json, sys
path, model, batch, seq, backend, opt = sys.argv[1:]
j = json.load(open(path)); g = j["graph"]; s = j["summary"]
print(f'{model},{batch},{seq},{backend},{opt},{g["param_bytes"] // 4},{g["persistent_bytes"]},'
      f'{s["peak_allocated_bytes"]},{s["peak_reserved_bytes"]},'
      + ('' if s["first_loss"] is None else f'{s["first_loss"]:.5f}'))  # sim: no values, no loss
PY
done
