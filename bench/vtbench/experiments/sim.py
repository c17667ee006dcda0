"""The sim backend's tables (docs/experiments/sim.md): unmanaged peaks and predicted iterations,
maximum batches of the passive policies, the DTR Transformer log swept over budgets, the maximum
batch with the pinned host memory bounded; and docs/benchmarks.md's sim calibrated to the H100
against the sim on its spec."""
import json
import os
import re
import sys

from ..helpers import PAPER_MODELS, ROOT, UNLIMITED, gib, maxbatch, sweep_cell, train
from .auto_options import _lp_cell, _lp_sweep


SIM_MODELS = [("ResNet-50, 224x224", "resnet50", 32), ("ResNet-50, 224x224", "resnet50", 1000),
              ("VGG-16, 224x224", "vgg16", 64), ("VGG-16, 224x224", "vgg16", 256)]


EXPERIMENTS = {
    "sim-peaks": {
        "kind": "runs", "about": "policy none, unlimited budget, 2 iterations; the second iteration's predicted time",
        "defaults": {"backend": "sim", "iters": 2},
        "rows": [{"label": l, "model": m, "batch": b} for l, m, b in SIM_MODELS] +
                [{"label": "DTR Transformer log (recorded on a Titan V)", "trace": "dtr:transformer", "batch": 10}],
        "runs": [(g, lambda r, got, g=g: train({**r, "gpu": g}, *UNLIMITED, "--policy", "none",
                                                cmd="replay" if "trace" in r else "train"))
                 for g in ("p100-16g", "titan-x-12g")],
        "columns": [("workload", lambda c: c.row["label"]), ("batch", lambda c: c.row["batch"]),
                    ("peak allocated", lambda c: gib(c.rep["p100-16g"]["summary"]["peak_allocated_bytes"])),
                    ("peak reserved", lambda c: gib(c.rep["p100-16g"]["summary"]["peak_reserved_bytes"])),
                    ("iteration, p100-16g", lambda c: c.rep["p100-16g"]["iterations"][-1]["time_ms"], "{:.2f} ms"),
                    ("iteration, titan-x-12g", lambda c: c.rep["titan-x-12g"]["iterations"][-1]["time_ms"], "{:.2f} ms")]},
    "sim-maxbatch": {
        "kind": "runs", "about": "`vtensor maxbatch --model M --gpu G --policy P`, budget = the GPU's memory",
        "rows": [{"label": l, "model": m, "gpu": g, "policy": p}
                 for l, m in (("ResNet-50", "resnet50"), ("VGG-16", "vgg16")) for g in ("p100-16g", "titan-x-12g")
                 for p in ("none", "lru", "lru-recompute")],
        "runs": [("mb", lambda r, got: maxbatch(r, "--policy", r["policy"]))],
        "columns": [("model", lambda c: c.row["label"]), ("GPU", lambda c: c.row["gpu"]), ("policy", lambda c: c.row["policy"]),
                    ("max batch", lambda c: c.rep["mb"]["max_batch"]),
                    ("peak allocated", lambda c: gib(c.rep["mb"]["peak_allocated_bytes"])),
                    ("predicted iteration", lambda c: c.rep["mb"]["iteration_ms"], "{:.2f} ms"),
                    ("samples/s", lambda c: 1e3 * c.rep["mb"]["max_batch"] / c.rep["mb"]["iteration_ms"], "{:.1f}"),
                    ("non-monotonic", lambda c: " ".join(map(str, c.rep["mb"]["non_monotonic"])) or "none")]},
}


TRANSFORMER_BUDGETS = ["100%", "75%", "50%", "40%", "30%", "25%", "20%"]
EXPERIMENTS["dtr-transformer-sweep"] = {
    "kind": "runs", "about": "`vtensor sweep --trace dtr:transformer --gpu p100-16g --budgets "
                             f"{','.join(TRANSFORMER_BUDGETS)}` (3 iterations), time against the unmanaged replay",
    "rows": [{"budget": b} for b in TRANSFORMER_BUDGETS],
    "runs": [("sweep", lambda r, got: ["sweep", "--trace", "dtr:transformer", "--gpu", "p100-16g",
                                       "--budgets", ",".join(TRANSFORMER_BUDGETS)])],
    "columns": [("budget", lambda c: c.row["budget"]),
                ("none", lambda c: sweep_cell(c, "none", lambda x: f"{float(x['overhead']):.3f}")),
                ("lru: time vs unmanaged", lambda c: sweep_cell(c, "lru", lambda x: f"{float(x['overhead']):.3f}")),
                ("lru: swapped out / iter", lambda c: sweep_cell(c, "lru", lambda x: f"{int(x['swapped_out_bytes']) / 2**20:.0f} MiB")),
                ("lru: stall", lambda c: sweep_cell(c, "lru", lambda x: f"{float(x['stall_ms']):.1f} ms")),
                ("lru-recompute: time vs unmanaged", lambda c: sweep_cell(c, "lru-recompute", lambda x: f"{float(x['overhead']):.3f}")),
                ("lru-recompute: recomputed ops", lambda c: sweep_cell(c, "lru-recompute", lambda x: x["recomputed_ops"]))]}


def next_batch_ran_out_of(rep):
    """maxbatch: what the batch above the maximum ran out of, from the search's printed probes."""
    m = re.search(r"batch\s+%d\s+out of memory( \(host\))?" % (rep["max_batch"] + 1), rep["_stdout"])
    return ("host" if m.group(1) else "device") if m else "not probed"


EXPERIMENTS["host-budget"] = {
    "kind": "runs",
    "about": "`vtensor maxbatch --model resnet50 --gpu p100-16g --policy P [--host-budget 64GB]`: the maximum batch "
             "with the pinned host memory unlimited or bounded (64 GB = 59.60 GiB); peak host at that batch, cached free "
             "buffers included; what the batch above it ran out of",
    "rows": [{"model": "resnet50", "gpu": "p100-16g", "policy": p, "host": h}
             for p in ("lru", "lru-recompute", "capuchin") for h in ("unlimited", "64GB")],
    "runs": [("mb", lambda r, got: maxbatch(r, "--policy", r["policy"], *(["--host-budget", r["host"]] if r["host"] != "unlimited" else [])))],
    "columns": [("policy", lambda c: c.row["policy"]), ("host budget", lambda c: c.row["host"].replace("GB", " GB")),
                ("max batch", lambda c: c.rep["mb"]["max_batch"]),
                ("peak host", lambda c: gib(c.rep["mb"]["peak_host_bytes"])),
                ("predicted iteration", lambda c: c.rep["mb"]["iteration_ms"], "{:.2f} ms"),
                ("samples/s", lambda c: 1e3 * c.rep["mb"]["max_batch"] / c.rep["mb"]["iteration_ms"], "{:.1f}"),
                ("next batch", lambda c: next_batch_ran_out_of(c.rep["mb"]))]}


# The sim calibrated to the H100 (bench/calibrate_gpu.py, from the op times CUPTI measured there):
# none's iteration and auto's overhead at 50% / 25% on the spec's figures, on the calibrated ones,
# and as measured on the H100 (docs/gpu-runs/2026-11-27/device-waits, budgets from the device's
# own peak of none).
CALIBRATED_GPU = ("h100-80g-cupti", os.path.join("bench", "gpus", "h100-80g-cupti.json"))
H100_RUNS = os.path.join(ROOT, "docs", "gpu-runs", "2026-11-27", "device-waits", "cuda_policies.json")


def _calibrated_sweep(row, gpu, gpu_file=None):
    args = _lp_sweep({**row, "gpu": gpu}, False)
    return args + (["--gpu-file", os.path.join(ROOT, gpu_file)] if gpu_file else [])


def _h100(model, policy, fraction):
    try:
        with open(H100_RUNS) as f:
            runs = json.load(f)
    except OSError as e:
        sys.exit(f"sim-calibrated: {H100_RUNS}: {e.strerror}")
    hit = [r for r in runs if r["model"] == model and r["policy"] == policy and r["fraction"] == fraction]
    return hit[0] if hit else None


def _calibrated_cell(c, budget):
    h = _h100(c.row["model"], "auto", {"50%": 0.5, "25%": 0.25}[budget])
    measured = f"{h['overhead']:.2f}×" if h and h["status"] == "ok" else ("OOM" if h else "not run")
    return f"{_lp_cell(c, 'spec', budget)} → {_lp_cell(c, 'calibrated', budget)} (H100: {measured})"


def _calibrated_none(c):
    t = {k: float(c.rep[k][0]["unmanaged_ms"]) for k in ("spec", "calibrated")}
    h = _h100(c.row["model"], "none", 1.0)
    return f"{t['spec']:.1f} → {t['calibrated']:.1f} ms (H100: {h['iter_ms']:.1f} ms)" if h else ""


EXPERIMENTS["sim-calibrated"] = {
    "kind": "runs", "serial": True,  # auto's planning limit makes its choice depend on the machine's speed
    "about": "the sim on the H100's spec (h100-80g) against the sim calibrated per op kind to the op times measured "
             "on an H100 (h100-80g-cupti: `bench/calibrate_gpu.py`, bench/gpus/h100-80g-cupti.json): `vtensor sweep "
             "--model M --batch B [--seq S] --backend sim --gpu G [--gpu-file bench/gpus/h100-80g-cupti.json] --iters 4 "
             "--policies none,auto --budgets 50%,25% [--densities D]`; in brackets the same run measured on the H100 "
             "(docs/gpu-runs/2026-11-27/device-waits/cuda_policies.json, budgets from the device's peak of none)",
    "rows": [dict(m) for m in PAPER_MODELS],
    "runs": [("spec", lambda r, got: _calibrated_sweep(r, "h100-80g")),
             ("calibrated", lambda r, got: _calibrated_sweep(r, *CALIBRATED_GPU))],
    "columns": [("model", lambda c: c.row["model"]),
                ("none's iteration: spec → calibrated", _calibrated_none),
                ("auto at 50%: spec → calibrated", lambda c: _calibrated_cell(c, "50%")),
                ("auto at 25%: spec → calibrated", lambda c: _calibrated_cell(c, "25%"))]}


EXPERIMENTS["host-model"] = {
    "kind": "torch",
    "about": "the sim with its host model against the H200's run of 2026-11-30 (docs/gpu-runs/2026-11-30/"
             "cuda_policies.csv): every row again on the sim, `vtensor train --backend sim --gpu G --gpu-file F "
             "--op-times docs/gpu-runs/2026-11-30/sim_vs_device_ops_M.csv --model M --batch B --policy P --iters 6 "
             "--budget X` (X the row's fraction of the sim's peak of none; the median of iterations 2-5) on three "
             "specs: the H200's link without a host model; held out, the host model fitted to the H100's run "
             "(bench/gpus/h100-measured.json: `bench/fit_host.py fit --run docs/gpu-runs/2026-11-27b`), which never "
             "saw the H200; in sample, the one fitted to this run (bench/gpus/h200-measured.json); each predicted ms "
             "with its error against the measured; host launch and swapped MiB measured / held-out",
    "script": "bench/host_model.py",
    "args": ["--run", "docs/gpu-runs/2026-11-30", "--held-out", "bench/gpus/h100-measured.json:h100-measured",
             "--in-sample", "bench/gpus/h200-measured.json:h200-measured"],
    "columns": [("model", "model"), ("budget", "budget"), ("policy", "policy"), ("measured ms", "measured_ms"),
                ("no host model", "no_host"), ("held out (H100's fit)", "held_out"), ("in sample (H200's fit)", "in_sample"),
                ("host launch ms, measured / held out", "launch"), ("swapped MiB, measured / held out", "swapped"),
                ("note", "note")],
}


EXPERIMENTS["host-plans"] = {
    "kind": "torch",
    "about": "auto's plans with the host model beside its plans without it, on the spec fitted to the H200's run "
             "(bench/gpus/h200-measured.json), each op charged its time measured there (`--op-times`): per model and "
             "budget (of the sim's peak of none), plan A made on the spec less its host model, plan B on the spec, "
             "then A run again on the spec with `--auto-plan` (no search); a plan as swapped MiB / recomputed ops / "
             "compacted blocks per iteration; ms the median of iterations 2-5; B against A, both on the host model",
    "script": "bench/host_plans.py",
    "columns": [("model", "model"), ("budget", "budget"), ("plan A (no host model)", "plan_a"),
                ("plan B (host model)", "plan_b"), ("A without host ms", "a_bare_ms"), ("A with host ms", "a_host_ms"),
                ("B with host ms", "b_host_ms"), ("B against A", "change"), ("note", "note")],
}


EXPERIMENTS["host-next"] = {
    "kind": "torch",
    "about": "the next GPU run's policies step (`bench/cuda_bench.sh`: bench/cuda_policies.py over resnet50, vgg16, "
             "gpt2-small, bert-base, policies lru, capuchin, dtr, auto, fractions 0.5, 0.25), predicted before it runs "
             "on the spec fitted to the H200's run (bench/gpus/h200-measured.json), as in the host-model experiment: "
             "per row the iteration ms, the host's launch ms, swapped MiB and recomputed ops on the sim; the measured "
             "column is that run's to fill",
    "script": "bench/host_model.py",
    "args": ["--next", "--run", "docs/gpu-runs/2026-11-30", "--held-out", "bench/gpus/h100-measured.json:h100-measured",
             "--in-sample", "bench/gpus/h200-measured.json:h200-measured"],
    "columns": [("model", "model"), ("budget", "budget"), ("policy", "policy"), ("predicted ms", "predicted"),
                ("host launch ms", "launch"), ("swapped MiB", "swapped"), ("recomputed ops", "recomputed"),
                ("measured ms", "measured")],
}


EXPERIMENTS["host-cost"] = {
    "kind": "torch",
    "about": "the runtime's own host work per op on the sim backend, where no kernel runs: per model and policy "
             "`vtensor train --backend sim --gpu h100-80g --model M --batch B --policy P --budget X` for 3 and for "
             "103 iterations, X half of none's peak; the wall-time difference over 100 iterations (auto's planning, "
             "timed in its report, taken off each run), the median of 3 such pairs, per graph op; over none is what "
             "the policy adds to the executor and the memory manager",
    "script": "bench/host_cost.py",
    "args": ["--repeats", "3"],
    "columns": [("model", "model"), ("policy", "policy"), ("ops", "ops"), ("host ms / iteration", "wall_ms", "{:.2f}"),
                ("µs / op", "us_per_op", "{:.2f}"), ("over none, µs / op", "over_none", "{:.2f}"), ("note", "note")],
}
