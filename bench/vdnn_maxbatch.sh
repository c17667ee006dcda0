#!/usr/bin/env bash
# Largest batch that trains in a Titan X's 12 GiB (sim backend) under none and the vDNN
# policies, with and without the in-place relu backward. Writes OUTDIR/maxbatch.csv.
#   bench/vdnn_maxbatch.sh OUTDIR [GPU]
set -euo pipefail
out=${1:?usage: bench/vdnn_maxbatch.sh OUTDIR [GPU]}
gpu=${2:-titan-x-12g}
bin=$(dirname "$0")/../build/vtensor
mkdir -p "$out"
echo "model,gpu,inplace_relu_grad,policy,max_batch,peak_allocated_bytes,iteration_ms" > "$out/maxbatch.csv"
for model in vgg16 resnet50; do
  for inplace in "" --inplace-relu-grad; do
    for policy in none vdnn-conv vdnn-all vdnn-dyn; do
      rep="$out/maxbatch_${model}_${policy}${inplace:+_inplace}.json"
      "$bin" maxbatch --model "$model" --gpu "$gpu" --policy "$policy" $inplace --report "$rep" > /dev/null
      python3 - "$rep" "$model" "$gpu" "${inplace:+true}" "$policy" >> "$out/maxbatch.csv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
best = r
print(",".join(str(x) for x in [sys.argv[2], sys.argv[3], sys.argv[4] == "true", sys.argv[5], r.get("max_batch"),
                                best.get("peak_allocated_bytes", ""), best.get("iteration_ms", "")]))
PY
    done
  done
done
cat "$out/maxbatch.csv"
