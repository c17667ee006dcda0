#!/usr/bin/env bash
# The main job, after scripts/install.sh: the same model under several policies, side by side.
#   1. resnet-tiny trained on the cpu backend (real data) under none, then under nine lossless
#      policies (auto, which picks keep / swap / recompute per tensor by rehearsing plans on the
#      sim; Capuchin, FreeLunch's compress+swap, Zhang et al.'s zero-overhead swap, DeepUM's
#      um-prefetch with 16 KiB pages, the passive lru / lru-recompute, DTR, checkpointing) at 1/2
#      and 1/4 of none's peak: peak on the device, time against none, MiB moved to and from host,
#      ops recomputed, and whether losses and weights are bit-identical to none's;
#   2. one of those runs again with its JSON report and its memory timeline as an HTML page
#      (capuchin at 1/4);
#   3. paper scale on the sim backend: ResNet-50 at batch 256 (21 GiB unmanaged) in a 16 GiB P100.
# Everything lands in demo-out/. About 20 s on two cores after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
out=demo-out
mkdir -p "$out"
vt=build/vtensor

echo "== 1. resnet-tiny, cpu backend, 20 iterations: none, then each policy at 1/2 and 1/4 of none's peak"
$vt sweep --backend cpu --model resnet-tiny --iters 20 --budgets 50%,25% --um-page-size 16KiB \
  --policies auto,capuchin,compress+swap,zero-overhead-swap,um-prefetch,lru,lru-recompute,dtr,checkpoint \
  --out "$out/resnet-tiny.csv"

budget=$(awk -F, '$3 == "capuchin" && $4 == "25%" { print $5 }' "$out/resnet-tiny.csv")
echo
echo "== 2. capuchin at 1/4 of the peak ($budget bytes), with its report and its memory timeline"
$vt train --model resnet-tiny --iters 20 --policy capuchin --budget "$budget" --quiet \
  --report "$out/resnet-tiny.capuchin.report.json" --html "$out/resnet-tiny.capuchin.html" | grep -E '^(done|report|memory)'

echo
echo "== 3. paper scale (sim, predicted times): ResNet-50 at batch 256 in a 16 GiB P100"
$vt sweep --model resnet50 --gpu p100-16g --batches 256 --budgets 16GiB \
  --policies auto,capuchin,dtr,lru-recompute --out "$out/resnet50-p100.csv" | tail -n +2
echo
echo "CSV, the report and the timeline page ($out/resnet-tiny.capuchin.html, open it in a browser) are in $out/;"
echo "every policy side by side at paper scale: docs/results.md"
