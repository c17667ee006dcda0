#!/usr/bin/env python3
"""vDNN against `none`: peak and mean allocated bytes, bytes offloaded, prefetch stalls and time, as CSV.

For each MODEL:BATCH it runs `none` with the oracle budget (the same GPU with memory enough for
everything: vDNN's "oracle"), then `none`, vdnn-all, vdnn-conv and vdnn-dyn at the budget under
study. A run that does not fit there is a row with status oom and the budget its plan needs,
followed (vdnn-all / vdnn-conv, whose plans do not depend on the budget) by a row measured at the
oracle budget with status over_budget. Time ratios compare runs of this invocation; "mean" is
the allocated bytes after each op averaged over the last iteration (vDNN's average usage);
mean_activations_vs_none leaves the persistent state (weights, optimizer state) out of both.

  bench/vdnn.py --backend cpu resnet-tiny:32 vgg-tiny:32 > vdnn.csv
  bench/vdnn.py --backend sim --gpu titan-x-12g --budget 12GiB --oracle-budget 64GiB vgg16:64 vgg16:256
  --budget: absolute (e.g. 12GiB), or a fraction of none's peak (e.g. 0.9; the default).
  --inplace-relu-grad: every run (none included) writes relu backward's dx over a dying dy.
  --layers FILE: per-layer CSV (offloaded bytes, prefetch stall per iteration) of every vDNN run.
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

POLICIES = ["vdnn-all", "vdnn-conv", "vdnn-dyn"]
COLUMNS = ["model", "batch", "backend", "gpu", "inplace_relu_grad", "policy", "status", "budget_bytes", "fits_budget",
           "peak_allocated_bytes", "peak_vs_none", "predicted_peak_bytes", "mean_allocated_bytes", "mean_vs_none",
           "mean_activations_vs_none", "chosen", "offloaded_layers", "offloaded_bytes_per_iter",
           "swapped_in_bytes_per_iter", "prefetch_stall_ms_per_iter", "stall_ms_per_iter", "mean_iteration_ms",
           "time_vs_none", "final_loss", "loss_equals_none"]


def parse_bytes(text):
    m = re.fullmatch(r"([0-9.]+)\s*([KMGT]?)(i?B)?", text.strip(), re.I)
    if not m:
        raise SystemExit(f"--budget: cannot read '{text}' (e.g. 12GiB, 512MiB, 0.9)")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def train(binary, args, model, batch, policy, budget, report):
    cmd = [binary, "train", "--model", model, "--batch", str(batch), "--policy", policy, "--iters", str(args.iters),
           "--backend", args.backend, "--quiet", "--timeline", "--report", report]
    if args.inplace_relu_grad:
        cmd.append("--inplace-relu-grad")
    if args.gpu:
        cmd += ["--gpu", args.gpu]
    if budget:
        cmd += ["--budget", str(budget)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode == 0:
        with open(report) as f:
            return json.load(f), None
    if p.returncode == 3 or "out of memory" in p.stderr.lower():
        return None, p.stderr.strip()
    raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")


def steady(report, key):
    it = report["iterations"][1:] or report["iterations"]  # the first iteration warms caches
    return sum(x[key] for x in it) / len(it)


def mean_allocated(report):
    points = (report.get("memory_timeline") or {}).get("points") or []
    return sum(p[1] for p in points) / len(points) if points else 0


def row(args, model, batch, policy, budget, rep, err, none, study_budget, status="ok"):
    r = dict.fromkeys(COLUMNS, "")
    r.update(model=model, batch=batch, backend=args.backend, gpu=args.gpu or "", policy=policy, budget_bytes=budget or "",
             inplace_relu_grad=args.inplace_relu_grad)
    if rep is not None and study_budget:
        r["fits_budget"] = rep["summary"]["peak_allocated_bytes"] <= study_budget
    if rep is None:
        r["status"] = "oom"
        m = re.search(r"at least ([0-9.]+ [KMGT]?i?B)", err or "")
        r["chosen"] = f"needs {m.group(1)}" if m else (err or "").splitlines()[-1][:120]
        return r
    s, pr = rep["summary"], rep.get("policy_report") or {}
    r.update(status=status, peak_allocated_bytes=s["peak_allocated_bytes"], mean_allocated_bytes=int(mean_allocated(rep)), mean_iteration_ms=f'{steady(rep, "time_ms"):.2f}',
             stall_ms_per_iter=f'{steady(rep, "stall_ms"):.3f}', swapped_in_bytes_per_iter=int(steady(rep, "swapped_in_bytes")),
             final_loss=f'{s["final_loss"]:.6f}' if s.get("final_loss") is not None else "")
    if pr:
        r.update(predicted_peak_bytes=pr["predicted_peak_bytes"], offloaded_bytes_per_iter=pr["offloaded_bytes_per_iteration"],
                 chosen=f'{pr["offload"]} offload + {pr["conv_algorithm"]} conv',
                 offloaded_layers=sum(1 for l in pr["layers"] if l["offloaded"]),
                 prefetch_stall_ms_per_iter=f'{pr["prefetch_stall_ms"] / max(1, pr["iterations"]):.3f}')
    if none is not None:
        ns = none["summary"]
        r["peak_vs_none"] = f'{s["peak_allocated_bytes"] / ns["peak_allocated_bytes"]:.3f}'
        if mean_allocated(none):
            r["mean_vs_none"] = f'{mean_allocated(rep) / mean_allocated(none):.3f}'
            p = rep["graph"]["persistent_bytes"]  # weights, momentum, buffers: the same in every run
            r["mean_activations_vs_none"] = f'{(mean_allocated(rep) - p) / (mean_allocated(none) - p):.3f}'
        r["time_vs_none"] = f'{steady(rep, "time_ms") / steady(none, "time_ms"):.3f}'
        if s.get("final_loss") is not None:  # the sim backend has no values
            r["loss_equals_none"] = all(a["loss"] == b["loss"] for a, b in zip(rep["iterations"], none["iterations"]))
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="MODEL:BATCH")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--gpu", default="", help="sim: the GPU to model (e.g. titan-x-12g)")
    ap.add_argument("--budget", default="0.9", help="budget for the vdnn runs: bytes, or a fraction of none's peak")
    ap.add_argument("--oracle-budget", default="", help="budget for `none` (default: the backend's)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--inplace-relu-grad", action="store_true", help="relu backward writes dx over a dying dy (all runs)")
    ap.add_argument("--layers", default="", help="write the per-layer report of every vDNN run as CSV to this file")
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "vtensor"))
    args = ap.parse_args()
    w = sys.stdout
    out_csv = csv.writer(w, lineterminator="\n")
    out_csv.writerow(COLUMNS)
    layers = open(args.layers, "w") if args.layers else None
    if layers:
        layers_csv = csv.writer(layers, lineterminator="\n")
        layers_csv.writerow(["model", "batch", "inplace_relu_grad", "policy", "layer", "kind", "offloaded", "offloaded_bytes",
                             "prefetch_after_op", "prefetch_stall_ms_per_iter"])
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.runs:
            model, _, batch = spec.partition(":")
            batch = int(batch or 0)
            rep = os.path.join(tmp, "r.json")
            oracle = parse_bytes(args.oracle_budget) if args.oracle_budget else 0
            none, err = train(args.binary, args, model, batch, "none", oracle, rep)
            try:
                frac = float(args.budget)
            except ValueError:
                frac = None
            if frac is not None and frac <= 1:  # a fraction of none's peak (0: none did not fit, the backend's default)
                budget = int(none["summary"]["peak_allocated_bytes"] * frac) // 256 * 256 if none else 0
            else:
                budget = parse_bytes(args.budget)
            emit = lambda *a, **k: out_csv.writerow(row(args, model, batch, *a, none, budget, **k).values())
            emit("none", oracle, none, err)
            if budget and budget != oracle:
                out, err = train(args.binary, args, model, batch, "none", budget, rep)
                emit("none", budget, out, err)
            for policy in POLICIES:
                out, err = train(args.binary, args, model, batch, policy, budget, rep)
                emit(policy, budget, out, err)
                if out is None and policy != "vdnn-dyn" and oracle and budget != oracle:
                    out, err = train(args.binary, args, model, batch, policy, oracle, rep)
                    emit(policy, oracle, out, err, status="over_budget")
                if out is not None and layers is not None:
                    for l in out["policy_report"]["layers"]:
                        layers_csv.writerow([model, batch, args.inplace_relu_grad, policy, l["layer"], l["kind"], l["offloaded"],
                                             l["offloaded_bytes"], l["prefetch_after_op"],
                                             f'{l["prefetch_stall_ms"] / max(1, out["policy_report"]["iterations"]):.3f}'])
            w.flush()
    if layers:
        layers.close()


if __name__ == "__main__":
    main()
