"""The runtime's own host work per op, for bench/run.py's host-cost experiment. On the sim backend
no kernel runs, so a run's wall time is the runtime's bookkeeping: the executor and the memory
manager (policy none), and on top of it each policy's decisions and the moves it makes. Per model
and policy: `vtensor train --backend sim --gpu h100-80g --model M --batch B --policy P --budget X`
for 3 and for 103 iterations, X half of none's peak (none at the GPU's memory); the per-iteration
wall time is the difference over 100, so what runs once (building the model, the first iteration's
measurement) cancels, and auto's planning, timed in the report, is taken off each run; the median of --repeats such pairs, over the graph's ops.
`over none` is what the policy adds per op. A regression in the executor, the memory manager or a
policy shows here as microseconds per op.
    python3 bench/host_cost.py --json OUT.json [--repeats 3] [--models resnet50,gpt2-small]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from script_io import policies, write_rows

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(ROOT, "build", "vtensor")
MODELS = {"resnet50": 64, "gpt2-small": 8, "bert-base": 16, "vgg16": 32}
# What sim cannot run without more input (the compress family needs a cpu run's densities).
SKIP = {"compress", "compress+swap", "compress+capuchin"}
SHORT, LONG = 3, 103  # iterations of the two runs whose difference is timed


def run(model, batch, policy, iters, budget, report):
    args = [BIN, "train", "--backend", "sim", "--gpu", "h100-80g", "--model", model, "--batch", str(batch),
            "--policy", policy, "--iters", str(iters), "--report", report, "--quiet"]
    if budget is not None:
        args += ["--budget", str(budget)]
    t = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "VTENSOR_AUTO_WALL_CAP": "0"})
    wall = time.perf_counter() - t
    if p.returncode != 0:
        return None, (p.stderr or p.stdout).strip().splitlines()[-1][:140]
    with open(report) as f:  # auto's planning, whose wall time varies by more than the iterations take
        planning = json.load(f).get("policy_report", {}).get("planning_ms", 0) / 1e3
    return wall - planning, None


def row(model, batch, policy, budget, repeats, tmp):
    per_iter, ops, err = [], 0, None
    for _ in range(repeats):
        short, err = run(model, batch, policy, SHORT, budget, os.path.join(tmp, "a.json"))
        if err:
            break
        long_, err = run(model, batch, policy, LONG, budget, os.path.join(tmp, "b.json"))
        if err:
            break
        per_iter.append((long_ - short) / (LONG - SHORT))
    if err:
        return dict(model=model, policy=policy, note=err)
    with open(os.path.join(tmp, "b.json")) as f:
        rep = json.load(f)
    ops = rep["graph"]["ops"]
    ms = statistics.median(per_iter) * 1e3
    return dict(model=model, batch=batch, policy=policy, ops=ops, wall_ms=ms, us_per_op=ms * 1e3 / ops,
                budget=budget, note="")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="where the rows go (a JSON list)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="resnet50,gpt2-small")
    a = ap.parse_args()
    models = a.models.split(",")
    bad = [m for m in models if m not in MODELS]
    if bad or a.repeats < 1:
        sys.exit(f"host_cost: unknown model {bad} or --repeats < 1; accepted models: {', '.join(MODELS)}")
    if not os.access(BIN, os.X_OK):
        sys.exit(f"host_cost: {BIN} not found: build the project first (scripts/install.sh)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            batch = MODELS[m]
            print(f"host_cost: {m}", flush=True)
            wall, err = run(m, batch, "none", 2, None, os.path.join(tmp, "n.json"))
            if err:
                sys.exit(f"host_cost: {m} under none failed: {err}")
            with open(os.path.join(tmp, "n.json")) as f:
                budget = json.load(f)["summary"]["peak_allocated_bytes"] // 2
            base = None
            for p in policies(BIN):
                if p in SKIP:
                    continue
                r = row(m, batch, p, None if p == "none" else budget, a.repeats, tmp)
                if p == "none":
                    base = r.get("us_per_op")
                if base is not None and "us_per_op" in r:
                    r["over_none"] = r["us_per_op"] - base
                rows.append(r)
    write_rows(a.json, rows)


if __name__ == "__main__":
    main()
