#!/usr/bin/env python3
"""Memory policies on the cuda backend: each policy at fractions of the unmanaged peak, against `none`.

For each model: trains under `none` (--deterministic), takes its peak allocated bytes, then trains under
each policy at each fraction of that peak with the same seeds. One row per run: status (ok, or the
error's last line), median iteration time over the iterations after the first --skip (policies that
measure use the first ones), overhead against `none`, peak allocated / reserved, swapped and recomputed
work, whether the measured iteration's op times came from the device and (auto) the compute they sum to and
what its rehearsal predicted (time, swapped bytes, evictions, recomputed ops) beside what the run did, and with --deterministic whether the losses are bit-identical to `none`'s (every policy here is
lossless). Without it (the default, what a user runs) cuDNN takes its fastest algorithms, and a
convolution whose fast workspace finds no room under the budget runs its lean algorithm.

Usage (on the GPU machine, from the repository root, after building with CUDA):
  python3 bench/cuda_policies.py --vtensor build/vtensor --out bench-out/cuda_policies
  python3 bench/cuda_policies.py --models gpt2-small --policies auto,dtr --fractions 0.5
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

LOSSLESS = ["lru", "vdnn-conv", "capuchin", "dtr", "checkpoint", "zero-overhead-swap", "auto"]


def train(binary, backend, model, batch, policy, iters, budget, report, timeout, deterministic):
    cmd = [binary, "train", "--model", model, *backend, "--policy", policy, "--iters", str(iters),
           "--quiet", "--report", report]
    if deterministic:
        cmd.append("--deterministic")
    if batch:
        cmd += ["--batch", str(batch)]
    if budget:
        cmd += ["--budget", f"{budget}B"]
    print("+", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return cmd, None, f"timed out after {timeout} s", time.perf_counter() - t0
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        last = (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}").splitlines()[-1]
        return cmd, None, last[:300], wall
    with open(report) as f:
        return cmd, json.load(f), "ok", wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vtensor", default="build/vtensor")
    ap.add_argument("--backend", default="cuda",
                    help="cuda; sim with --gpu: the same rows predicted; cpu: to try the script on tiny models")
    ap.add_argument("--gpu", help="--backend sim: the GPU to model (h100-80g for the H100)")
    ap.add_argument("--models", default="resnet50,gpt2-small", help="comma-separated vtensor models")
    ap.add_argument("--batch", action="append", default=[], help="model=batch (default: the model's preset)")
    ap.add_argument("--policies", default="lru,capuchin,dtr,auto", help=f"comma-separated, from {', '.join(LOSSLESS)}")
    ap.add_argument("--fractions", default="0.5", help="comma-separated fractions of none's peak allocated bytes")
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--skip", type=int, default=2, help="iterations left out of the median")
    ap.add_argument("--timeout", type=int, default=180, help="seconds per run")
    ap.add_argument("--deterministic", action="store_true",
                    help="deterministic cuDNN algorithms (lean convolutions): losses compared bit for bit with none's")
    ap.add_argument("--out", default="bench-out/cuda_policies", help="output prefix (.csv and .json)")
    a = ap.parse_args()
    policies = a.policies.split(",")
    for p in policies:
        if p not in LOSSLESS:
            sys.exit(f"--policies: {p} is not one of {', '.join(LOSSLESS)}")
    try:
        fractions = [float(f) for f in a.fractions.split(",")]
    except ValueError:
        sys.exit(f"--fractions {a.fractions}: expected comma-separated numbers in (0, 1]")
    if any(not 0 < f <= 1 for f in fractions):
        sys.exit(f"--fractions {a.fractions}: each must be in (0, 1]")
    backend = ["--backend", a.backend] + (["--gpu", a.gpu] if a.gpu else [])
    if a.backend == "sim" and not a.gpu:
        sys.exit("--backend sim needs --gpu (e.g. h100-80g)")
    if a.skip >= a.iters:
        sys.exit(f"--skip {a.skip} leaves no iteration of --iters {a.iters}")
    batches = {}
    for b in a.batch:
        k, _, v = b.partition("=")
        if not v.isdigit():
            sys.exit(f"--batch {b}: expected model=batch")
        batches[k] = int(v)
    out_dir = os.path.dirname(a.out) or "."
    # the runs' reports, named after --out: two calls writing beside each other keep their own
    stem = os.path.basename(a.out)
    os.makedirs(out_dir, exist_ok=True)

    def median_ms(r):
        return statistics.median(i["time_ms"] for i in r["iterations"][a.skip:])

    rows = []
    for m in a.models.split(","):
        batch = batches.get(m, 0)
        cmd, base, status, _ = train(a.vtensor, backend, m, batch, "none", a.iters, 0,
                                     os.path.join(out_dir, f"{stem}_{m}_none.json"), a.timeout, a.deterministic)
        if base is None:
            rows.append({"model": m, "policy": "none", "fraction": 1.0, "status": status, "cmd": " ".join(cmd)})
            print(json.dumps(rows[-1]), flush=True)
            continue
        none_ms, none_peak = median_ms(base), base["summary"]["peak_allocated_bytes"]
        none_losses = [i["loss"] for i in base["iterations"]]
        runs = [("none", 1.0, cmd, base, status)]
        for f in fractions:
            for p in policies:
                budget = int(none_peak * f)
                cmd, r, status, _ = train(a.vtensor, backend, m, batch, p, a.iters, budget,
                                          os.path.join(out_dir, f"{stem}_{m}_{p}_{int(f * 100)}.json"), a.timeout,
                                          a.deterministic)
                runs.append((p, f, cmd, r, status))
        for p, f, cmd, r, status in runs:
            row = {"model": m, "batch": base["config"].get("batch"), "policy": p, "fraction": f, "status": status}
            if r is not None:
                its = r["iterations"][a.skip:]
                row.update({
                    "budget_mib": round(r["summary"]["budget_bytes"] / 2**20, 1) if p != "none" else None,
                    "iter_ms": round(median_ms(r), 3),
                    "overhead": round(median_ms(r) / none_ms, 4),
                    "peak_alloc_mib": round(r["summary"]["peak_allocated_bytes"] / 2**20, 1),
                    "peak_reserved_mib": round(r["summary"]["peak_reserved_bytes"] / 2**20, 1),
                    "stall_ms": round(statistics.mean(i["stall_ms"] for i in its), 3),
                    "recompute_ms": round(statistics.mean(i["recompute_ms"] for i in its), 3),
                    # the host's time launching the ops and waiting for the device at the end:
                    # a drain near 0 says the GPU waited for the host
                    "host_launch_ms": (round(statistics.mean(i["host_launch_ms"] for i in its), 3)
                                       if all(i.get("host_launch_ms") is not None for i in its) else None),
                    "host_drain_ms": (round(statistics.mean(i["host_drain_ms"] for i in its), 3)
                                      if all(i.get("host_drain_ms") is not None for i in its) else None),
                    # of the launch: kernels, allocations (the OOM ladder), the policy's after-op actions
                    **{k: (round(statistics.mean(i[k] for i in its), 3) if all(i.get(k) is not None for i in its) else None)
                       for k in ("host_kernel_ms", "host_alloc_ms", "host_after_op_ms")},
                    "swapped_out_mib": round(statistics.mean(i["swapped_out_bytes"] for i in its) / 2**20, 1),
                    # compaction per iteration: bytes, and blocks (one device memcpy or more each)
                    "compacted_mib": round(statistics.mean(i["compacted_bytes"] for i in its) / 2**20, 1),
                    "compaction_ms": round(statistics.mean(i["compaction_ms"] for i in its), 3),
                    "compacted_blocks": (round(statistics.mean(i["compacted_blocks"] for i in its), 1)
                                         if all("compacted_blocks" in i for i in its) else None),
                    "lean_conv_fallbacks": sum(i.get("lean_conv_fallbacks", 0) for i in its),
                    # What the plan was made from: were the measured iteration's op times the
                    # device's, and (auto) the compute they add up to, against none's iteration.
                    "op_times_on_device": any(i.get("op_times_on_device", False) for i in r["iterations"]),
                    "planned_compute_ms": (round(r["policy_report"]["bound"]["compute_ms"], 3)
                                           if isinstance(r.get("policy_report"), dict)
                                           and isinstance(r["policy_report"].get("bound"), dict) else None),
                    "losses_identical": ([i["loss"] for i in r["iterations"]] == none_losses) if a.deterministic else None,
                })
                # auto: what its rehearsal predicted against what the run did (does the plan replay?)
                pr = r.get("policy_report")
                if isinstance(pr, dict) and "predicted_time_ms" in pr:
                    row.update({
                        "predicted_ms": round(pr["predicted_time_ms"], 3),
                        "predicted_swapped_out_mib": round(pr["predicted_swapped_out_bytes"] / 2**20, 1),
                        "predicted_evictions": pr["predicted_evictions"],
                        "evictions": round(statistics.mean(i.get("evictions", 0) for i in its), 1),
                        "predicted_recomputed_ops": pr["predicted_recomputed_ops"],
                        "recomputed_ops": round(statistics.mean(i.get("recomputed_ops", 0) for i in its), 1),
                    })
            row["cmd"] = " ".join(cmd)
            print(json.dumps(row), flush=True)
            rows.append(row)
    with open(a.out + ".json", "w") as f:
        json.dump(rows, f, indent=2)
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(a.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {a.out}.csv and {a.out}.json")
    # Out of device memory at a budget is a result (the row's status says what did not fit); any other
    # error, or losses that differ from none's, fails the run.
    bad = [r for r in rows if (r["status"] != "ok" and "out of device memory" not in r["status"])
           or r.get("losses_identical") is False]
    for r in bad:
        print(f"failed: {r['model']} {r['policy']} at {r['fraction']}: {r['status']}", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
