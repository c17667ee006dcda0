#!/usr/bin/env python3
"""Unified memory (um, um-prefetch) against capuchin and dtr on the sim backend, as markdown.

For each GPU and model at its reference batch: `none`'s unmanaged peak, then budgets at 1/1.5,
1/2, 1/3 and 1/4 of it (1.5x / 2x / 3x / 4x oversubscription; 1/2 and 1/4 are 50% and 25%):
each policy's predicted iteration time against `none`'s (the fastest iteration after the
first: um-prefetch learns its table and capuchin measures in the first), and um-prefetch's
prefetch accuracy ((hits + late) / prefetches, last iteration). Then, with --maxbatch, the
largest batch at the GPU's whole memory (`vtensor maxbatch`) for um and um-prefetch.

Usage: bench/um_compare.py [--gpus p100-16g,h100-80g] [--models resnet50:32,vgg16:64,gpt2-small:8,bert-base:32]
           [--policies um,um-prefetch,capuchin,dtr] [--iters 4] [--maxbatch] > out.md
Needs build/vtensor.
"""
import argparse, json, os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "vtensor")
FRACTIONS = [(1 / 1.5, "1/1.5"), (0.5, "1/2 = 50%"), (1 / 3, "1/3"), (0.25, "1/4 = 25%")]


def run(gpu, model, batch, policy, budget, iters, tmp):
    report = os.path.join(tmp, "r.json")
    if os.path.exists(report):
        os.remove(report)
    cmd = [BIN, "train", "--backend", "sim", "--gpu", gpu, "--model", model, "--batch", str(batch), "--policy", policy,
           "--iters", str(iters), "--quiet", "--report", report]
    if model.startswith(("gpt", "bert")):
        cmd += ["--optimizer", "adam"]
    if budget:
        cmd += ["--budget", str(budget)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        if "out of device memory" not in (p.stdout + p.stderr):
            print(f"failed (rc {p.returncode}): {' '.join(cmd)}\n{p.stderr[-400:]}", file=sys.stderr)
        return None
    with open(report) as f:
        return json.load(f)


def fastest(rep):
    its = rep["iterations"][1:] or rep["iterations"]
    return min(i["time_ms"] for i in its)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="p100-16g,h100-80g")
    ap.add_argument("--models", default="resnet50:32,vgg16:64,gpt2-small:8,bert-base:32")
    ap.add_argument("--policies", default="um,um-prefetch,capuchin,dtr")
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--maxbatch", action="store_true")
    ap.add_argument("--maxbatch-policies", default="um,um-prefetch")
    args = ap.parse_args()
    policies = args.policies.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for gpu in args.gpus.split(","):
            print(f"#### {gpu}: time vs `none` at the reference batch (um-prefetch's prefetch accuracy)\n")
            print("| model (batch, none's time, peak) | budget | " + " | ".join(policies) + " | um-prefetch accuracy |")
            print("|---|---|" + "---|" * len(policies) + "---|")
            for mb in args.models.split(","):
                model, batch = mb.split(":")
                base = run(gpu, model, batch, "none", 0, args.iters, tmp)
                if base is None:
                    print(f"| {model} ({batch}) | none does not train at the GPU's memory |")
                    continue
                t0 = fastest(base)
                peak = base["summary"]["peak_allocated_bytes"]
                for frac, label in FRACTIONS:
                    budget = int(peak * frac) // 256 * 256
                    cells, acc = [], "n/a"
                    for pol in policies:
                        rep = run(gpu, model, batch, pol, budget, args.iters, tmp)
                        if rep is None:
                            cells.append("OOM")
                            continue
                        cells.append(f"{fastest(rep) / t0:.2f}×")
                        if pol == "um-prefetch":
                            u = rep["iterations"][-1]["unified_memory"]
                            if u["prefetches"]:
                                acc = f"{(u['prefetch_hits'] + u['prefetch_late']) / u['prefetches']:.2f} ({u['prefetch_late']} late of {u['prefetches']})"
                    print(f"| {model} ({batch}, {t0:.0f} ms, {peak / 2**30:.2f} GiB) | {label} = {budget / 2**30:.2f} GiB | "
                          + " | ".join(cells) + f" | {acc} |")
                sys.stdout.flush()
            print()
            if not args.maxbatch:
                continue
            print(f"#### {gpu}: maximum batch at the GPU's memory (samples/s at that batch, predicted)\n")
            mpols = args.maxbatch_policies.split(",")
            print("| model | " + " | ".join(mpols) + " |")
            print("|---|" + "---|" * len(mpols))
            for mb in args.models.split(","):
                model = mb.split(":")[0]
                cells = []
                for pol in mpols:
                    cmd = [BIN, "maxbatch", "--model", model, "--gpu", gpu, "--policy", pol]
                    if model.startswith(("gpt", "bert")):
                        cmd += ["--optimizer", "adam"]
                    p = subprocess.run(cmd, capture_output=True, text=True)
                    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
                    m = re.search(r"max batch (\d+): peak allocated ([0-9.]+ \w+).*\(([0-9.]+) samples/s\)", last)
                    cells.append(f"{m.group(1)} ({m.group(3)}/s, managed peak {m.group(2)})" if m else (last or f"rc {p.returncode}"))
                print(f"| {model} | " + " | ".join(cells) + " |")
                sys.stdout.flush()
            print()


if __name__ == "__main__":
    main()
