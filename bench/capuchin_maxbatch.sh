#!/usr/bin/env bash
# Maximum batch at the whole GPU's memory (sim backend), Capuchin against DTR, vDNN and none:
# the setting of Capuchin's "7x TensorFlow's BERT batch". One CSV row per model, GPU and policy.
# Usage: bench/capuchin_maxbatch.sh [outdir] [gpu ...]   (needs build/vtensor)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-capuchin-maxbatch}; shift || true
gpus=${*:-p100-16g}
mkdir -p "$out"
echo "model,gpu,policy,max_batch,line" > "$out/maxbatch.csv"
for gpu in $gpus; do
  for model in resnet50 vgg16 bert-base gpt2-small; do
    for policy in none capuchin-swap capuchin-recompute capuchin dtr vdnn-conv lru-recompute; do
      line=$(build/vtensor maxbatch --model "$model" --gpu "$gpu" --policy "$policy" \
               --report "$out/${model}_${gpu}_${policy}.json" | grep '^max batch' || echo "max batch 0")
      b=$(echo "$line" | sed -E 's/^max batch ([0-9]+).*/\1/')
      echo "$model,$gpu,$policy,$b,\"$line\"" >> "$out/maxbatch.csv"
    done
  done
done
echo "wrote $out/maxbatch.csv"
