#!/usr/bin/env bash
# FreeLunch (compress, compress+swap) at paper scale on the sim backend, beside capuchin, dtr
# and vdnn-conv, with the ablation, sized by densities measured on the cpu backend.
#   bench/compress_compare.sh OUTDIR [GPU ...]      (default GPUs: p100-16g h100-80g)
# 1. The cpu backend trains ResNet-50 and VGG-16 at 224x224, batch 2, one iteration under
#    `compress`, and writes the non-zero count of every ReLU / max-pool output it measured
#    (bench/densities/MODEL.json, unless already there). GPT-2 small and BERT-base have no
#    ReLU: nothing to measure.
# 2. bench/capuchin_compare.py on the sim backend at 50% and 25% of the unmanaged peak, per GPU.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: bench/compress_compare.sh OUTDIR [GPU ...]}
shift
GPUS=${*:-p100-16g h100-80g}
mkdir -p "$OUT" "$ROOT/bench/densities"
for m in resnet50 vgg16; do
  f="$ROOT/bench/densities/$m.json"
  [ -f "$f" ] || "$ROOT/build/vtensor" train --model "$m" --batch 2 --iters 1 --policy compress --densities-out "$f" --quiet
done
POLICIES=none,compress,compress+swap,capuchin,dtr,vdnn-conv,compress@no-sliding-workspace,compress@no-persistent-buffers,compress@compress-on-compute-stream
for g in $GPUS; do
  "$ROOT/bench/capuchin_compare.py" --models resnet50,vgg16,gpt2-small,bert-base --backend sim --gpu "$g" --iters 4 \
    --precision 0.02 --policies "$POLICIES" --densities "$ROOT/bench/densities" > "$OUT/$g.csv"
done
