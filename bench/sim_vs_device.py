#!/usr/bin/env python3
"""The sim cost model's per-op prediction against measured op times, per op kind.

Reads a vtensor access trace (`vtensor train ... --trace T.jsonl`) and takes the op times of its
first iteration whose times came from the device (on cuda: a policy's measured iteration, timed
with CUPTI; `capuchin` measures its first iteration at any budget). Runs `vtensor costs` for the same
model and GPU spec, joins the two by op index and writes, per op kind and in all: ops, measured
ms, predicted ms and their ratio (measured / predicted), and the median of the per-op ratios. The
kinds whose ratio is far from 1 are where the spec's efficiencies (cost_model.cpp) miss.

Usage (on the GPU machine, after `vtensor train --model resnet50 --backend cuda --policy capuchin
--iters 2 --trace bench-out/trace_resnet50.jsonl`):
  python3 bench/sim_vs_device.py --trace bench-out/trace_resnet50.jsonl --model resnet50 --gpu h100-80g \\
      --out bench-out/sim_vs_device_resnet50.csv
--any-clock takes the first iteration's times whatever clock they came from (to try it on cpu).
--ops-out CSV also writes one row per op (its kind, FLOPs, bytes, measured and predicted ms): what a
calibration by op size needs (bench/calibrate_gpu.py fits one factor per kind from --out).
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile


def measured_op_times(path, any_clock):
    try:
        with open(path) as f:
            header = json.loads(f.readline())
    except OSError as e:
        sys.exit(f"--trace {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"--trace {path}: the first line is not JSON ({e}); expected a trace written by train --trace")
    if header.get("format") != "vtensor-trace" or "op_times" not in header:
        sys.exit(f"--trace {path}: not a vtensor trace (no format 'vtensor-trace' header with op_times)")
    for it in header["op_times"]:
        if it.get("on_device") or any_clock:
            return it["iter"], it["ms"], header.get("ops", [])
    sys.exit(f"--trace {path}: no iteration's op times came from the device (on_device); record it on cuda "
             "under a policy that measures (capuchin, auto), or pass --any-clock")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vtensor", default="build/vtensor")
    ap.add_argument("--trace", required=True)
    ap.add_argument("--model", required=True, help="the model the trace was recorded on")
    ap.add_argument("--batch", type=int, help="its batch, if not the preset")
    ap.add_argument("--gpu", default="h100-80g", help="the sim GPU spec to compare with")
    ap.add_argument("--gpu-file", help="JSON file with more GPUs for --gpu")
    ap.add_argument("--any-clock", action="store_true")
    ap.add_argument("--out", required=True, help="CSV, one row per op kind and one for all")
    ap.add_argument("--ops-out", help="CSV, one row per op")
    a = ap.parse_args()
    it, op_ms, ops = measured_op_times(a.trace, a.any_clock)
    with tempfile.TemporaryDirectory() as tmp:
        costs = os.path.join(tmp, "costs.csv")
        cmd = [a.vtensor, "costs", "--model", a.model, "--gpu", a.gpu, "--out", costs]
        if a.batch:
            cmd += ["--batch", str(a.batch)]
        if a.gpu_file:
            cmd += ["--gpu-file", a.gpu_file]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: {(p.stderr or p.stdout).strip()}")
        with open(costs) as f:
            predicted = list(csv.DictReader(f))
    if len(predicted) != len(op_ms):
        sys.exit(f"--trace has {len(op_ms)} ops, vtensor costs --model {a.model} {len(predicted)}: "
                 "not the same model / batch (pass the trace's --batch)")
    for row, op in zip(predicted, ops):
        if op and op.get("kind") != row["kind"]:
            sys.exit(f"op {row['op']}: the trace's kind {op.get('kind')} is not the model's {row['kind']}: not the same model")
    if a.ops_out:
        os.makedirs(os.path.dirname(a.ops_out) or ".", exist_ok=True)
        with open(a.ops_out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["op", "name", "kind", "flops", "bytes", "measured_ms", "predicted_ms"])
            for row, ms in zip(predicted, op_ms):
                w.writerow([row["op"], row["name"], row["kind"], row["flops"], row["bytes"], round(ms, 6), row["total_ms"]])
    by_kind = {}
    for row, ms in zip(predicted, op_ms):
        pred = float(row["total_ms"])
        if pred <= 0 and ms <= 0:  # views: nothing to time on either side
            continue
        by_kind.setdefault(row["kind"], []).append((ms, pred))
    rows = []
    everything = [x for v in by_kind.values() for x in v]
    for kind, xs in sorted(by_kind.items(), key=lambda kv: -sum(m for m, _ in kv[1])) + [("all", everything)]:
        m, pr = sum(x[0] for x in xs), sum(x[1] for x in xs)
        ratios = [x[0] / x[1] for x in xs if x[1] > 0]
        rows.append({"kind": kind, "ops": len(xs), "measured_ms": round(m, 4), "predicted_ms": round(pr, 4),
                     "ratio": round(m / pr, 4) if pr > 0 else None,
                     "median_op_ratio": round(statistics.median(ratios), 4) if ratios else None})
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"{a.model} on {a.gpu}, iteration {it} of {a.trace}: measured / predicted per op kind")
    for r in rows:
        print(f"  {r['kind']:<22} {r['ops']:>5} ops  {r['measured_ms']:>10.3f} ms  {r['predicted_ms']:>10.3f} ms  "
              f"ratio {r['ratio']}  median per op {r['median_op_ratio']}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
