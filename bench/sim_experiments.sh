#!/usr/bin/env bash
# The sim-backend tables of docs/experiments.md: unmanaged peaks, maximum batches and the DTR
# Transformer budget sweep. Usage: bench/sim_experiments.sh [outdir]   (needs build/vtensor)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-sim-results}; mkdir -p "$out"
v=build/vtensor
for gpu in p100-16g titan-x-12g; do
  for mb in "resnet50 1000" "resnet50 32" "vgg16 256" "vgg16 64"; do
    set -- $mb
    $v train --model "$1" --batch "$2" --backend sim --gpu "$gpu" --budget 1024GiB --policy none --iters 2 --quiet \
      --report "$out/peak_$1_$2_$gpu.json" | grep '^done'
  done
  for model in resnet50 vgg16; do
    for policy in none lru lru-recompute; do
      $v maxbatch --model "$model" --gpu "$gpu" --policy "$policy" --report "$out/maxbatch_${model}_${gpu}_${policy}.json" | grep "^max batch"
    done
  done
  $v sweep --trace dtr:transformer --gpu "$gpu" --budgets 100%,75%,50%,40%,30%,25%,20% --out "$out/dtr_transformer_$gpu.csv" | tail -1
  for policy in none lru lru-recompute; do
    $v replay --trace dtr:transformer --gpu "$gpu" --policy "$policy" --quiet | tail -1
  done
done
