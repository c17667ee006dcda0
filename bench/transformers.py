#!/usr/bin/env python3
"""GPT-2 small and BERT-base on the sim backend with Adam: unmanaged peaks beside an analytic
accounting, maximum batches per GPU and policy, and the cost model's time per op kind.

  bench/transformers.py OUTDIR        (needs build/vtensor; about ten seconds)

Writes OUTDIR/peaks.csv, OUTDIR/maxbatch.csv, OUTDIR/costs_by_kind.csv and prints them.

Analytic figures (s sequence, b batch, h hidden, a heads, L layers, V vocabulary, P parameters):
  states     16 P        fp32 weights, gradients, Adam m and v (4 bytes each)
  layers     L (64 sbh + 4 a s^2 b)
             Korthikanti et al. 2022 (sbh (34 + 5as/h) bytes per layer in fp16 with dropout), in fp32
             without dropout: no masks, softmax output = attention dropout output, every 2 bytes 4.
  head       8 sbV       fp32 logits kept for the loss (Korthikanti's 4sbv) and their gradient.
  published  states + layers + head.
Our graph's saved activations, counted exactly (the script checks them against the measured
allocation after the last forward op):
  per layer  64 sbh + 4 a s^2 b + 16 sb   (the same tensors as Korthikanti's, plus layer-norm mean/invstd)
  gpt extra  4 (2 sbh + 4 sb + sbV)       final LN in/out and stats, logits, token ids and targets
  bert extra 4 (5 sbh + 6 sb + sbV)       embedding LN input and stats, MLM head (dense in/out, GELU out,
                                          LN out and stats), logits, token ids and targets
"""
import csv
import json
import os
import subprocess
import sys

V = "build/vtensor"
SHAPES = {  # layers, heads, hidden, vocabulary (the zoo's presets)
    "gpt2-small": (12, 12, 768, 50257),
    "bert-base": (12, 12, 768, 30522),
}
PEAKS = [("gpt2-small", 1024, b) for b in (1, 2, 4, 8)] + [("gpt2-small", 512, 8)] + \
        [("bert-base", 128, b) for b in (8, 16, 32, 64)] + [("bert-base", 512, 8)]
MAXBATCH = [("gpt2-small", 1024), ("bert-base", 128)]
GPUS = ["p100-16g", "v100-32g", "a100-80g"]
POLICIES = ["none", "lru", "lru-recompute"]
GIB = float(1 << 30)


def run(args):
    return subprocess.run([V] + args, check=True, capture_output=True, text=True).stdout


def analytic(model, s, b, params):
    L, a, h, vocab = SHAPES[model]
    layers = L * (64 * s * b * h + 4 * a * s * s * b)
    head = 8 * s * b * vocab
    extra = 4 * (2 * s * b * h + 4 * s * b + s * b * vocab) if model.startswith("gpt") else \
        4 * (5 * s * b * h + 6 * s * b + s * b * vocab)
    ours = L * (64 * s * b * h + 4 * a * s * s * b + 16 * s * b) + extra
    return 16 * params, layers, head, ours


def peaks(out):
    rows = []
    for model, s, b in PEAKS:
        rep, costs = os.path.join(out, f"peak_{model}_s{s}_b{b}.json"), os.path.join(out, "costs.csv")
        common = ["--model", model, "--seq", str(s), "--batch", str(b), "--optimizer", "adam", "--gpu", "a100-80g"]
        run(["train"] + common + ["--backend", "sim", "--budget", "1024GiB", "--iters", "2", "--quiet", "--timeline",
                                  "--report", rep])
        run(["costs"] + common + ["--out", costs])
        ops = list(csv.DictReader(open(costs)))
        j = json.load(open(rep))
        params, persistent = j["graph"]["param_bytes"] // 4, j["graph"]["persistent_bytes"]
        points = j["memory_timeline"]["points"]  # allocated after each op of the last iteration
        last_fwd = next(i for i, o in enumerate(ops) if ".bwd" in o["name"]) - 1
        # After op 0 (the data): the persistent tensors as allocated (sizes rounded up by the
        # allocator) and the token ids and targets (8 sb bytes, counted in our formula).
        saved = points[last_fwd][1] - (points[0][1] - 8 * s * b)
        peak, reserved = j["summary"]["peak_allocated_bytes"], j["summary"]["peak_reserved_bytes"]
        states, layers, head, ours = analytic(model, s, b, params)
        published = states + layers + head
        if ours != saved:
            sys.exit(f"{model} s{s} b{b}: our graph's saved activations {saved} != the formula's {ours}")
        rows.append({"model": model, "seq": s, "batch": b, "params": params,
                     "persistent_gib": persistent / GIB, "saved_activations_gib": saved / GIB,
                     "peak_allocated_gib": peak / GIB, "peak_reserved_gib": reserved / GIB,
                     # what backward adds above the end of forward at the peak (the logits' gradient: 4 sbV)
                     "backward_transient_gib": (peak - points[last_fwd][1]) / GIB,
                     "analytic_states_gib": states / GIB, "analytic_layers_gib": layers / GIB,
                     "analytic_head_gib": head / GIB, "analytic_total_gib": published / GIB,
                     "peak_over_analytic": peak / published})
        os.remove(costs)
    return rows


def maxbatch(out):
    rows = []
    for model, s in MAXBATCH:
        for gpu in GPUS:
            for policy in POLICIES:
                rep = os.path.join(out, f"maxbatch_{model}_{gpu}_{policy}.json")
                run(["maxbatch", "--model", model, "--seq", str(s), "--optimizer", "adam", "--gpu", gpu, "--policy",
                     policy, "--report", rep])
                j = json.load(open(rep))
                rows.append({"model": model, "seq": s, "gpu": gpu, "policy": policy, "max_batch": j["max_batch"],
                             "peak_allocated_gib": j["peak_allocated_bytes"] / GIB,
                             "predicted_iteration_ms": j["iteration_ms"],
                             "predicted_samples_per_s": 1e3 * j["max_batch"] / j["iteration_ms"]})
    return rows


def costs_by_kind(out):
    rows = []
    for model, s, b in [("gpt2-small", 1024, 8), ("bert-base", 128, 32)]:
        path = os.path.join(out, f"costs_{model}.csv")
        run(["costs", "--model", model, "--seq", str(s), "--batch", str(b), "--optimizer", "adam", "--gpu",
             "v100-32g", "--out", path])
        ops = list(csv.DictReader(open(path)))
        total = sum(float(o["total_ms"]) for o in ops)
        kinds = {}
        for o in ops:
            k = kinds.setdefault(o["kind"], {"ops": 0, "ms": 0.0, "bound": set()})
            k["ops"] += 1
            k["ms"] += float(o["total_ms"])
            k["bound"].add(o["bound"])
        for kind, k in sorted(kinds.items(), key=lambda kv: -kv[1]["ms"]):
            rows.append({"model": model, "seq": s, "batch": b, "gpu": "v100-32g", "kind": kind, "ops": k["ops"],
                         "predicted_ms": k["ms"], "share": k["ms"] / total, "bound": "/".join(sorted(k["bound"]))})
    return rows


def write(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    print(open(path).read())


def main():
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "transformer-results")
    os.makedirs(out, exist_ok=True)
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # build/vtensor
    write(peaks(out), os.path.join(out, "peaks.csv"))
    write(maxbatch(out), os.path.join(out, "maxbatch.csv"))
    write(costs_by_kind(out), os.path.join(out, "costs_by_kind.csv"))


if __name__ == "__main__":
    main()
