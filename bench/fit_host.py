#!/usr/bin/env python3
"""Fit the sim's host model (HostModel, vtensor/backend/sim/gpu_specs.h) to recorded GPU runs, and
predict a run's policies table with it.

A recorded run is a folder of docs/gpu-runs/: `cuda_policies.csv` (bench/cuda_policies.py: per
model, policy and budget the iteration time and the host's launch time, with the command), the
per-op kernel times `sim_vs_device_ops_M.csv` (bench/sim_vs_device.py --ops-out) and the link
`swap_bandwidth.csv`. Every row is run again on the sim with the same model, policy and --budget,
each op charged its measured time (`train --op-times`), the link as measured, and a host model.

fit: the host's costs per op class, allocation, copy (with its two events), moved block and policy
action are what the recorded host launch times need. The sim runs every row with the costs so
far; its host waits (the loss read back, host waits on copies) are taken as they come out, and the
costs are the non-negative least squares fit of launch time less wait to the work each row did
(counted by the sim); three rounds. Then the per-copy cost of a queued copy, which the host's
clock cannot see, is the one of QUEUED_US that puts the iteration times nearest. Writes a
--gpu-file entry (the spec's name, base, link, "host") and per row the fit's figures.

predict: every row of a run on a spec, with the host model and without it (the same spec less
"host"): measured and predicted iteration, host launch, swapped MiB, evictions, recomputed ops.

  python3 bench/fit_host.py fit --run docs/gpu-runs/2026-11-27b --base h100-80g --name h100-measured \\
      --out bench/gpus/h100-measured.json
  python3 bench/fit_host.py predict --run docs/gpu-runs/2026-11-30 --gpu-file bench/gpus/h100-measured.json \\
      --gpu h100-measured --json OUT.json
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
import calibrate_gpu
from calibrate_gpu import read_rows
from script_io import write_rows

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(ROOT, "build", "vtensor")
ITERS = 6  # as bench/cuda_policies.py: the median of iterations 2-5
# The op classes the host's cost per op is fitted for: cuDNN's convolutions and normalizations
# (descriptors set per call), cuBLAS's GEMMs, and the rest (one element-wise kernel each).
CLASSES = {
    "conv": {"conv2d", "conv2d_bwd_data", "conv2d_bwd_filter"},
    "norm": {"batchnorm", "batchnorm_bwd"},
    "gemm": {"linear", "linear_bwd", "bmm", "bmm_bwd"},
}
PARAMS = ["conv", "norm", "gemm", "other", "alloc", "copy", "action"]  # fitted to the launch times
QUEUED_US = [0, 5, 10, 20, 40, 80]
WAIT_SHARE = 0.5
STEPS = [0.5, 0.8, 1.25, 2.0]  # the refinement's trial factors per cost


def error(rows, got):
    """What the fit minimises: squared relative iteration error, plus a quarter of the host launch's."""
    e = 0.0
    for r, g in zip(rows, got):
        if "iter_ms" not in g:
            e += 1.0  # a row the sim cannot run counts as far off
            continue
        e += (g["iter_ms"] / r["iter_ms"] - 1) ** 2 + 0.25 * (g["host_launch_ms"] / r["host_launch_ms"] - 1) ** 2
    return e
DENSITIES = {m: os.path.join(ROOT, "bench", "densities", m + ".json") for m in ("resnet50", "vgg16")}


def op_class(kind):
    return next((c for c, kinds in CLASSES.items() if kind in kinds), "other")


def read_csv(path, need, writer):
    return read_rows(path, "--run", need, writer)


def read_run(folder, every_row=False):
    """The rows that trained (every_row: all of them), each with its budget (bytes, from the
    command) and op-times file."""
    rows = []
    need = {"model", "batch", "policy", "fraction", "status", "iter_ms", "host_launch_ms", "cmd"}
    for r in read_csv(os.path.join(folder, "cuda_policies.csv"), need, "bench/cuda_policies.py"):
        if r["status"] != "ok" and not every_row:
            continue
        num = lambda k: float(r[k]) if r.get(k) not in (None, "") else None
        m = re.search(r"--budget (\d+)B", r["cmd"])
        ops = os.path.join(folder, f"sim_vs_device_ops_{r['model']}.csv")
        if not os.path.exists(ops):
            sys.exit(f"fit_host: {folder}: no per-op times for {r['model']} ({ops})")
        rows.append(dict(model=r["model"], batch=int(r["batch"]), policy=r["policy"], fraction=float(r["fraction"]),
                         budget=int(m.group(1)) if m else None, ops=ops, iter_ms=num("iter_ms"), status=r["status"],
                         peak_mib=float(r["peak_alloc_mib"]) if r.get("peak_alloc_mib") else None,
                         compaction_ms=float(r.get("compaction_ms") or 0), blocks=float(r.get("compacted_blocks") or 0),
                         host_launch_ms=num("host_launch_ms"),
                         split={k: float(r[k]) for k in ("host_kernel_ms", "host_alloc_ms", "host_after_op_ms")
                                if r.get(k) not in (None, "")},
                         swapped_mib=num("swapped_out_mib") or 0, evictions=r.get("evictions") or "",
                         recomputed_ops=r.get("recomputed_ops") or ""))
    room_budgets(rows)
    return rows


def room_budgets(rows):
    """Each budget the same fraction of the sim's peak of none as the device's was of its own: the
    device's peak also holds cuDNN's workspaces, which the sim's does not, so the same bytes would
    put less pressure on the sim."""
    for model in {r["model"] for r in rows}:
        none = next((r for r in rows if r["model"] == model and r["policy"] == "none"), None)
        if none is None or none["peak_mib"] is None:
            sys.exit(f"fit_host: the run has no none row with its peak for {model}")
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "none.json")
            p = subprocess.run([BIN, "train", "--backend", "sim", "--gpu", "h100-80g", "--model", model, "--batch",
                                str(none["batch"]), "--policy", "none", "--iters", "1", "--quiet", "--report", report],
                               capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"fit_host: none of {model} on sim: {(p.stderr or p.stdout).strip()}")
            with open(report) as f:
                sim_peak = json.load(f)["iterations"][-1]["peak_allocated_bytes"]
        scale = sim_peak / (none["peak_mib"] * 2**20)
        for r in rows:
            if r["model"] == model and r["budget"] is not None:
                r["device_budget"] = r["budget"]
                r["budget"] = round(r["budget"] * scale)


def read_link(folder):
    """calibrate_gpu.py's: the swap path's one-way figure at the largest size, each direction."""
    link = calibrate_gpu.read_link(os.path.join(folder, "swap_bandwidth.csv"))
    return {d: round(v, 2) for d, v in link.items()}


def kinds_of(ops_csv):
    """{op kind: ops} of the graph the op-times file was measured on."""
    counts = {}
    for r in read_csv(ops_csv, {"op", "kind", "measured_ms"}, "bench/sim_vs_device.py --ops-out"):
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    return counts


def host_json(p, queued_us):
    ops = {"default": round(p["other"], 3)}
    for c, kinds in CLASSES.items():
        for k in sorted(kinds):
            ops[k] = round(p[c], 3)
    return {"op_us": ops, "alloc_us": round(p["alloc"], 3), "copy_us": round(p["copy"], 3), "event_us": 0,
            "move_us": round(p["move"], 3), "action_us": round(p["action"], 3), "queued_copy_us": queued_us}


def simulate(row, spec_path, gpu, tmp, tag):
    report = os.path.join(tmp, f"{tag}_{row['model']}_{row['policy']}_{row['fraction']}.json")
    args = [BIN, "train", "--backend", "sim", "--gpu", gpu, "--gpu-file", spec_path, "--model", row["model"],
            "--batch", str(row["batch"]), "--policy", row["policy"], "--iters", str(ITERS), "--op-times", row["ops"],
            "--quiet", "--report", report]
    if row["budget"] is not None:
        args += ["--budget", f"{row['budget']}B", "--budget-above-gpu"]
    if row["policy"] == "auto" and row["model"] in DENSITIES:
        args += ["--densities", DENSITIES[row["model"]]]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        return dict(error=(p.stderr or p.stdout).strip().splitlines()[-1][:160])
    with open(report) as f:
        rep = json.load(f)
    its = rep["iterations"][2:ITERS]
    last = rep["iterations"][-1]
    med = lambda k: statistics.median(it[k] for it in its)
    out = dict(iter_ms=med("time_ms"), swapped_mib=last["swapped_out_bytes"] / 2**20, evictions=last["evictions"],
               recomputed_ops=last["recomputed_ops"], stall_ms=med("stall_ms"))
    if last.get("host_model"):
        h = last["host_model"]
        out.update(host_launch_ms=med("host_launch_ms"), wait_ms=h["wait_ms"], idle_ms=h["device_idle_ms"])
        work = {c: 0 for c in PARAMS}
        for kind, n in kinds_of(row["ops"]).items():
            work[op_class(kind)] += n
        for k in last.get("recompute_by_kind", []):
            work[op_class(k["kind"])] += k["ops"]
        work.update(alloc=h["allocations"], copy=h["copies"], action=h["actions"])
        out["moved_blocks"] = h["moved_blocks"]
        out["work"] = work
    return out


def simulate_all(rows, spec, gpu, tmp, tag, jobs):
    path = os.path.join(tmp, f"{tag}.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    with ThreadPoolExecutor(jobs) as ex:
        return list(ex.map(lambda r: simulate(r, path, gpu, tmp, tag), rows))


def nnls(a, b, sweeps=4000):
    """min |a x - b| over x >= 0, by cyclic coordinate descent (a few unknowns, Debian's python3 only)."""
    n = len(a[0])
    x = [0.0] * n
    col2 = [sum(r[j] ** 2 for r in a) for j in range(n)]
    res = list(b)  # b - a x
    for _ in range(sweeps):
        for j in range(n):
            if col2[j] == 0:
                continue
            step = sum(a[i][j] * res[i] for i in range(len(a))) / col2[j]
            new = max(0.0, x[j] + step)
            d = new - x[j]
            if d:
                for i in range(len(a)):
                    res[i] -= a[i][j] * d
                x[j] = new
    return x


def fit_split(p, rows, got):
    """Where the run timed the host's parts (host_kernel_ms: the launches; host_alloc_ms and
    host_after_op_ms: allocations, compactions, and the copies and actions of the policy, issued
    from either: the OOM ladder's in an allocation, the planned ones after an op), the launch
    costs are fitted to the first, the rest to the sum of the other two; relative error as in the
    launch fit."""
    use = [(r, g) for r, g in zip(rows, got) if "work" in g]
    parts = {"launch": lambda r: r["split"]["host_kernel_ms"],
             "rest": lambda r: r["split"]["host_alloc_ms"] + r["split"]["host_after_op_ms"]}
    for part, costs in (("launch", ["conv", "norm", "gemm", "other"]), ("rest", ["alloc", "copy", "action"])):
        sel = [(r, g) for r, g in use if parts[part](r) > 0]
        A = [[g["work"][c] / parts[part](r) * 1e-3 for c in costs] for r, g in sel]
        B = [(parts[part](r) - (g["moved_blocks"] * p["move"] * 1e-3 if part == "rest" else 0)) / parts[part](r)
             for r, g in sel]
        p.update(zip(costs, nnls(A, B)))
    print("fit_host: from the host's parts: " + ", ".join(f"{c} {p[c]:.2f} us" for c in [*PARAMS, "move"]), file=sys.stderr)


def fit(a):
    rows = [r for r in read_run(a.run) if r["policy"] in a.policies.split(",")]
    link = read_link(a.run)
    base = {"name": a.name, "base": a.base, "h2d_gbps": link["h2d"], "d2h_gbps": link["d2h"], "link_efficiency": 1}
    if a.memory:
        base["memory"] = a.memory
    p = {c: 10.0 for c in PARAMS}
    # A moved block's host cost: the compaction's time on the host's clock per block, the median
    # over the rows that moved some (all of them, auto's too: that is the runtime's cost, not the plan's).
    per_block = [r["compaction_ms"] / r["blocks"] * 1e3 for r in read_run(a.run) if r["blocks"] >= 5]
    p["move"] = statistics.median(per_block) if per_block else 0.0
    queued = 0
    with tempfile.TemporaryDirectory() as tmp:
        split = all(len(r["split"]) == 3 for r in rows)
        for rnd in range(1 if split else 3):
            got = simulate_all(rows, [{**base, "host": host_json(p, queued)}], a.name, tmp, f"fit{rnd}", a.jobs)
            if split:  # the run timed the host's parts: each fitted to its own, no waits in them
                fit_split(p, rows, got)
                break
            # Rows whose host mostly waits (lru's synchronous swaps) say little of its costs and much of
            # the waits' length, which the sim gets from the device's side: left out of this fit.
            use = [(r, g) for r, g in zip(rows, got) if "work" in g and g["wait_ms"] < WAIT_SHARE * r["host_launch_ms"]]
            # relative error: each row weighs as much as any other
            A = [[g["work"][c] / r["host_launch_ms"] * 1e-3 for c in PARAMS] for r, g in use]
            B = [(r["host_launch_ms"] - g["wait_ms"] - g["moved_blocks"] * p["move"] * 1e-3) / r["host_launch_ms"]
                 for r, g in use]
            p.update(zip(PARAMS, nnls(A, B)))
            print(f"fit_host: round {rnd + 1}: " + ", ".join(f"{c} {p[c]:.2f} us" for c in [*PARAMS, "move"]), file=sys.stderr)
        best = None
        for q in QUEUED_US:
            got = simulate_all(rows, [{**base, "host": host_json(p, q)}], a.name, tmp, f"q{q}", a.jobs)
            err = error(rows, got)
            print(f"fit_host: queued copy {q} us: error {err:.4f}", file=sys.stderr)
            if best is None or err < best[0]:
                best = (err, q, got)
        err, queued, got = best
        # Then each cost in turn scaled while the iteration times come nearer (the launch times
        # above fit the host's work; this fits what the iteration sees of it).
        for sweep in range(a.sweeps):
            moved = False
            for c in [*PARAMS, "move", "queued"]:
                for f in STEPS:
                    trial = dict(p, queued=queued)
                    trial[c] = trial[c] * f if trial[c] > 0 else (1.0 if f > 1 else 0.0)
                    if trial[c] == (p[c] if c != "queued" else queued):
                        continue
                    t_got = simulate_all(rows, [{**base, "host": host_json(trial, trial["queued"])}], a.name, tmp,
                                         "refine", a.jobs)
                    t_err = error(rows, t_got)
                    if t_err < err - 1e-6:
                        err, got, moved = t_err, t_got, True
                        queued = trial.pop("queued")
                        p = trial
                        break
            print(f"fit_host: sweep {sweep + 1}: error {err:.4f}; " + ", ".join(f"{c} {p[c]:.2f}" for c in [*PARAMS, "move"])
                  + f", queued {queued:.2f} us", file=sys.stderr)
            if not moved:
                break
    memory = f" --memory {a.memory}" if a.memory else ""
    spec = {**base, "description": f"{a.base} with the link and a host model fitted to the GPU run in {a.run} "
                                   f"(bench/fit_host.py fit --run {a.run} --base {a.base} --name {a.name}{memory})",
            "host": host_json(p, queued)}
    tmp_out = a.out + ".tmp"
    with open(tmp_out, "w") as f:
        json.dump(spec, f, indent=2)
        f.write("\n")
    os.replace(tmp_out, a.out)
    print(f"fit_host: wrote {a.out}", file=sys.stderr)
    for r, g in zip(rows, got):
        if "iter_ms" in g:
            print(f"  {r['model']:11} {r['policy']:9} {r['fraction']:<5} measured {r['iter_ms']:8.1f} ms, "
                  f"fitted {g['iter_ms']:8.1f} ({g['iter_ms'] / r['iter_ms']:.3f}); host launch {r['host_launch_ms']:7.1f} "
                  f"/ {g['host_launch_ms']:7.1f}", file=sys.stderr)
        else:
            print(f"  {r['model']:11} {r['policy']:9} {r['fraction']:<5} {g['error']}", file=sys.stderr)


def predict(a):
    rows = [r for r in read_run(a.run) if (not a.models or r["model"] in a.models.split(","))
            and (not a.policies or r["policy"] in a.policies.split(","))]
    with open(a.gpu_file) as f:
        specs = json.load(f)
    specs = specs if isinstance(specs, list) else [specs]
    spec = next((s for s in specs if s["name"] == a.gpu), None)
    if spec is None or "host" not in spec:
        sys.exit(f"fit_host: {a.gpu_file} has no entry '{a.gpu}' with a host model")
    bare = {k: v for k, v in spec.items() if k != "host"}
    with tempfile.TemporaryDirectory() as tmp:
        with_host = simulate_all(rows, [spec], a.gpu, tmp, "host", a.jobs)
        without = simulate_all(rows, [bare], a.gpu, tmp, "bare", a.jobs)
    out = []
    for r, h, b in zip(rows, with_host, without):
        o = dict(model=r["model"], batch=r["batch"], policy=r["policy"], budget="—" if r["budget"] is None else
                 f"{round(r['fraction'] * 100)}%", measured_ms=r["iter_ms"], measured_launch_ms=r["host_launch_ms"],
                 measured_swapped_mib=r["swapped_mib"], measured_recomputed=r["recomputed_ops"])
        if "error" in h or "error" in b:
            o["note"] = h.get("error") or b.get("error")
        else:
            o.update(bare_ms=b["iter_ms"], bare_error=b["iter_ms"] / r["iter_ms"] - 1, host_ms=h["iter_ms"],
                     host_error=h["iter_ms"] / r["iter_ms"] - 1, host_launch_ms=h["host_launch_ms"],
                     swapped_mib=h["swapped_mib"], recomputed=h["recomputed_ops"], idle_ms=h["idle_ms"],
                     within=abs(h["iter_ms"] / r["iter_ms"] - 1) <= 0.10)
        out.append(o)
        print(f"  {o['model']:11} {o['policy']:9} {o['budget']:4} measured {r['iter_ms']:8.1f} ms; "
              + (o.get("note") or f"without host {o['bare_ms']:8.1f} ({o['bare_error']:+.1%}), with {o['host_ms']:8.1f} "
                 f"({o['host_error']:+.1%})"), file=sys.stderr)
    write_rows(a.json, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="fit a host model to a recorded run and write a --gpu-file entry")
    f.add_argument("--run", required=True, help="a folder of docs/gpu-runs/ (cuda_policies.csv, per-op times, link)")
    f.add_argument("--base", required=True, help="the GPU spec the entry starts from (e.g. h100-80g)")
    f.add_argument("--name", required=True, help="the entry's name (e.g. h100-measured)")
    f.add_argument("--out", required=True, help="the --gpu-file to write")
    f.add_argument("--sweeps", type=int, default=0,
                   help="refinement sweeps over the costs on the iteration times (default 0: on the H100's run they "
                        "fit its rows closer and predicted the H200's further off)")
    f.add_argument("--memory", help="the device's memory, where the base's is not (e.g. 140GiB)")
    f.add_argument("--policies", default="none,lru,capuchin,dtr",
                   help="the rows fitted to (default none,lru,capuchin,dtr: auto's plans have changed since the "
                        "recorded runs, the others' decisions have not)")
    p = sub.add_parser("predict", help="predict a recorded run's policies table on a spec with a host model")
    p.add_argument("--run", required=True, help="a folder of docs/gpu-runs/")
    p.add_argument("--gpu-file", required=True)
    p.add_argument("--gpu", required=True, help="the entry of --gpu-file to predict with")
    p.add_argument("--json", required=True, help="write the rows here")
    p.add_argument("--models", help="only these models' rows (comma-separated)")
    p.add_argument("--policies", help="only these policies' rows (comma-separated)")
    for s in (f, p):
        s.add_argument("--jobs", type=int, default=2, help="sim runs at once (default 2)")
    a = ap.parse_args()
    if not os.path.isdir(a.run):
        sys.exit(f"fit_host: --run {a.run}: no such folder")
    (fit if a.cmd == "fit" else predict)(a)


if __name__ == "__main__":
    main()
