#!/usr/bin/env bash
# vDNN at paper scale on the sim backend (Titan X, 12 GiB): every table of docs/experiments.md's
# vDNN section. Writes CSVs and markdown tables under OUTDIR; a few seconds.
#   bench/vdnn_sim.sh OUTDIR
set -euo pipefail
out=${1:?usage: bench/vdnn_sim.sh OUTDIR}
here=$(dirname "$0")
mkdir -p "$out"
runs="vgg16:64 vgg16:128 vgg16:256 resnet50:32 resnet50:64 resnet50:128 resnet50:256"
for inplace in "" --inplace-relu-grad; do
  tag=${inplace:+_inplace}
  "$here/vdnn.py" --backend sim --gpu titan-x-12g --budget 12GiB --oracle-budget 64GiB --iters 3 $inplace \
    --layers "$out/layers$tag.csv" $runs > "$out/sim$tag.csv"
  "$here/vdnn_tables.py" runs "$out/sim$tag.csv" > "$out/sim$tag.md"
done
"$here/vdnn_tables.py" layers "$out/layers_inplace.csv" vgg16 256 vdnn-all > "$out/layers_vgg16_256.md"
"$here/vdnn_tables.py" layers "$out/layers_inplace.csv" resnet50 128 vdnn-all > "$out/layers_resnet50_128.md"
"$here/run.py" maxbatch-vdnn --out "$out" > /dev/null
ls "$out"
