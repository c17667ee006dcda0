#!/usr/bin/env bash
# Maximum batch at the whole GPU's memory (sim backend) under gradient checkpointing against
# none, Capuchin, DTR and lru-recompute, with the predicted time per sample at that batch: the
# setting of Capuchin's BERT anchor (7x TensorFlow's batch, 2.1x gradient checkpointing's).
# Transformers train with Adam (its m and v counted), the CNNs with SGD + momentum.
# Writes OUTDIR/maxbatch.csv (one row per model, GPU and policy), OUTDIR/table.md (the table of
# docs/experiments.md, with the anchor's ratios) and one search report per run.
# Usage: bench/checkpoint_maxbatch.sh OUTDIR [gpu ...]   (default gpus: p100-16g h100-80g; needs build/vtensor)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: $0 OUTDIR [gpu ...]" >&2
  exit 2
fi
out=$1; shift
gpus=${*:-p100-16g h100-80g}
models=${MODELS:-bert-base gpt2-small resnet50 vgg16}
policies="none checkpoint capuchin capuchin-recompute dtr lru-recompute"
mkdir -p "$out"
for gpu in $gpus; do
  for model in $models; do
    case $model in bert-*|gpt*) opt=adam ;; *) opt=sgd ;; esac
    for policy in $policies; do
      build/vtensor maxbatch --model "$model" --gpu "$gpu" --policy "$policy" --optimizer "$opt" \
        --report "$out/${model}_${gpu}_${policy}.json" > "$out/${model}_${gpu}_${policy}.log"
      tail -n 1 "$out/${model}_${gpu}_${policy}.log"
    done
  done
done
python3 - "$out" "$gpus" "$models" "$policies" <<'EOF'
import json, sys
out, gpus, models, policies = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
rows = {}
with open(f"{out}/maxbatch.csv", "w") as f:
    f.write("model,gpu,policy,optimizer,max_batch,peak_allocated_bytes,iteration_ms,ms_per_sample\n")
    for gpu in gpus:
        for model in models:
            for policy in policies:
                r = json.load(open(f"{out}/{model}_{gpu}_{policy}.json"))
                b, ms = r["max_batch"], r["iteration_ms"]
                per = ms / b if b else 0.0
                rows[model, gpu, policy] = (b, per)
                opt = "adam" if model.startswith(("bert", "gpt")) else "sgd"
                f.write(f"{model},{gpu},{policy},{opt},{b},{r['peak_allocated_bytes']},{ms:.2f},{per:.3f}\n")
with open(f"{out}/table.md", "w") as f:
    f.write("| model | GPU | " + " | ".join(policies) + " | capuchin / checkpoint | capuchin / none |\n")
    f.write("|---" * (len(policies) + 4) + "|\n")
    for gpu in gpus:
        for model in models:
            cells = [f"{rows[model, gpu, p][0]} ({rows[model, gpu, p][1]:.2f} ms)" for p in policies]
            cap, ck, no = (rows[model, gpu, p][0] for p in ("capuchin", "checkpoint", "none"))
            ratio = lambda a, b: f"{a / b:.2f}x" if b else "-"
            f.write(f"| {model} | {gpu} | " + " | ".join(cells) + f" | {ratio(cap, ck)} | {ratio(cap, no)} |\n")
print(f"wrote {out}/maxbatch.csv and {out}/table.md")
EOF
