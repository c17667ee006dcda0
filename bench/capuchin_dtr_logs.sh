#!/usr/bin/env bash
# The DTR artifact's operator logs replayed on the sim backend under capuchin and dtr (and the
# other Capuchin modes and none) at 50% and 25% of each log's unmanaged peak, and the
# Transformer log at 4 GB (DTR's published point: 1.19x). Real replays: every op runs on the
# sim's virtual clock with its logged time; copies run on the GPU model's PCIe link.
# Usage: bench/capuchin_dtr_logs.sh [outdir] [gpu ...]   (needs build/vtensor and the logs)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-capuchin-dtr-logs}; shift || true
gpus=${*:-p100-16g h100-80g}
mkdir -p "$out"
policies=none,capuchin-swap,capuchin-recompute,capuchin,dtr
for gpu in $gpus; do
  for log in densenet121 inceptionv4 lstm resnet32 transformer treelstm unet unroll_gan; do
    build/vtensor sweep --trace "dtr:$log" --gpu "$gpu" --iters 4 --policies "$policies" --budgets 50%,25% \
      --out "$out/${log}_$gpu.csv" > /dev/null
  done
  build/vtensor sweep --trace dtr:transformer --gpu "$gpu" --iters 4 --policies "$policies" --budgets 4GB \
    --out "$out/transformer_4GB_$gpu.csv" > /dev/null
done
# One table: log, gpu, budget, policy, status, overhead against the unmanaged replay.
{
  echo "log,gpu,budget,budget_bytes,unmanaged_peak_bytes,policy,status,peak_allocated_bytes,iteration_ms,overhead,swapped_out_bytes,recomputed_ops,stall_ms"
  for f in "$out"/*_*.csv; do
    b=$(basename "$f" .csv); gpu=${b##*_}
    tail -n +2 "$f" | awk -F, -v gpu="$gpu" -v OFS=, '{print $1,gpu,$4,$5,$6,$3,$7,$8,$10,$11,$12,$14,$15}'
  done
} > "$out/all.csv"
echo "wrote $out/all.csv"
