#!/usr/bin/env python3
"""What auto's search buys and what its planning costs, per row of the headline and DTR-log tables.

For each paper model (reference batch) and DTR log at 50% / 25% of its unmanaged peak (and the
Transformer log at 4 GB), on each GPU: one `vtensor train` / `vtensor replay --policy auto`
with a report; from the report, the best of the planners as they are (capuchin, capuchin-recompute,
capuchin-swap, checkpoint, dtr) against the candidate auto chose (on sim a rehearsal is the run, so
these are the times the run measures), and the planning time (rehearsals, on this machine).

  bench/auto_search.py [--gpus p100-16g,h100-80g] [--what models,logs] > auto_search.md
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(ROOT, "build", "vtensor")
PLAIN = ["capuchin", "capuchin-recompute", "capuchin-swap", "checkpoint", "dtr"]
MODELS = [("resnet50", ["--batch", "32"]), ("vgg16", ["--batch", "64"]),
          ("gpt2-small", ["--batch", "8", "--seq", "1024"]), ("bert-base", ["--batch", "32", "--seq", "128"])]
LOGS = ["densenet121", "inceptionv4", "lstm", "resnet32", "transformer", "treelstm", "unet", "unroll_gan"]


def vt(args):
    p = subprocess.run([BIN, *args], capture_output=True, text=True)
    return p


def budgets(src, gpu, tmp):
    """budget label -> bytes, from a sweep of policy none (it reports the budgets even on OOM)."""
    path = os.path.join(tmp, "b.csv")
    extra = ["50%", "25%"]
    p = vt(["sweep", *src, "--gpu", gpu, "--policies", "none", "--budgets", ",".join(extra), "--iters", "1", "--out", path])
    if p.returncode != 0:
        sys.exit(f"sweep failed: {p.stderr.strip()[-400:]}")
    with open(path) as f:
        return {r["budget"]: int(r["budget_bytes"]) for r in csv.DictReader(f)}


def row(cmd, src, gpu, budget, tmp):
    rep = os.path.join(tmp, "r.json")
    p = vt([cmd, *src, "--gpu", gpu, "--policy", "auto", "--budget", f"{budget}B", "--iters", "2", "--report", rep])
    if p.returncode != 0:
        return None
    with open(rep) as f:
        r = json.load(f)["policy_report"]
    trained = {c["policy"]: c["predicted_time_ms"] for c in r["candidates"] if c.get("trained")}
    plain = {k: v for k, v in trained.items() if k in PLAIN}
    best_plain = min(plain, key=plain.get) if plain else None
    skipped = sum(1 for c in r["candidates"] if "time limit" in c.get("error", ""))
    return {"chosen": r["chosen"], "auto_ms": trained.get(r["chosen"]), "best_plain": best_plain,
            "plain_ms": plain.get(best_plain), "planning_s": r["planning_ms"] / 1e3,
            "rehearsed": len(r["candidates"]) - skipped, "skipped": skipped}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="p100-16g,h100-80g")
    ap.add_argument("--what", default="models,logs")
    a = ap.parse_args()
    work = []
    if "models" in a.what:
        work += [("train", m, ["--model", m, *args], ["50%", "25%"]) for m, args in MODELS]
    if "logs" in a.what:
        work += [("replay", l, ["--trace", f"dtr:{l}"], ["50%", "25%"] + (["4GB"] if l == "transformer" else []))
                 for l in LOGS]
    print("| row | GPU | budget | best planner as it is | auto's choice | search gain | planning (s) | rehearsed / skipped |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for gpu in a.gpus.split(","):
            for cmd, name, src, bl in work:
                sweep_src = src if cmd == "train" else ["--trace", src[1]]
                bb = budgets(sweep_src, gpu, tmp)
                for b in bl:
                    nbytes = bb.get(b, 4_000_000_000 if b == "4GB" else None)
                    r = row(cmd, src, gpu, nbytes, tmp)
                    if not r or r["auto_ms"] is None:
                        print(f"| {name} | {gpu} | {b} | OOM | OOM | | | |", flush=True)
                        continue
                    plain = f"{r['best_plain']} {r['plain_ms']:.1f} ms" if r["best_plain"] else "none trains"
                    gain = f"{(1 - r['auto_ms'] / r['plain_ms']) * 100:.1f}%" if r["plain_ms"] else ""
                    print(f"| {name} | {gpu} | {b} | {plain} | {r['chosen']} {r['auto_ms']:.1f} ms | {gain} | "
                          f"{r['planning_s']:.2f} | {r['rehearsed']} / {r['skipped']} |", flush=True)


if __name__ == "__main__":
    main()
