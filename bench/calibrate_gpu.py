#!/usr/bin/env python3
"""Fit the sim cost model to op times measured on a GPU: one factor per op kind.

Reads the per-kind CSVs bench/sim_vs_device.py wrote on the device (measured and predicted ms per
op kind, one model each), checks that the cost model here still predicts what those CSVs say it
did, and writes a --gpu-file entry: the base GPU's figures and, per op kind, the pooled
measured / predicted time over all the models given (GpuSpec::kind_scale; the cost model then
multiplies each op of that kind by it). Then it says how well that fits: per model, the measured
iteration against the prediction before and after, in sample (fitted on all the models) and
left out (fitted on the others only; a kind no other model has keeps factor 1).

One factor per kind cannot follow size: ResNet-50's small convolutions and VGG-16's large ones
share "conv2d" (docs/benchmarks.md, "The sim against the device").
--link CSV (build/bench/vtensor_swap_bandwidth's output on the same device) also sets the host link
to the bandwidth vtensor's swap path measured one way at the largest size, each direction
("h2d_gbps", "d2h_gbps", with "link_efficiency" 1). Both ways at once the device gave less (about
100 GB/s in all against 2 x 55 on the H100): the sim's two copy lanes do not share the link.

Usage:
  python3 bench/calibrate_gpu.py --base h100-80g --name h100-80g-cupti --out bench/gpus/h100-80g-cupti.json \\
      --run resnet50=docs/gpu-runs/2026-11-27/host-waits/sim_vs_device_resnet50.csv --run vgg16=... \\
      [--link docs/gpu-runs/2026-11-27/host-waits/swap_bandwidth.csv] [--check-out bench-out/calibration.csv]
--run MODEL[:BATCH]=CSV: the model (and batch, if not its preset) the CSV was measured on.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile


def read_rows(path, flag, need, writer):
    """The rows of a CSV that must have the columns `need` (written by `writer`), or exit naming it."""
    try:
        with open(path) as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"{flag}: {path}: {e.strerror}")
    if not rows or not need <= set(rows[0]):
        sys.exit(f"{flag}: {path}: not a CSV of {writer} (columns {', '.join(sorted(need))})")
    return rows


def read_kinds(path):
    """{kind: (measured_ms, predicted_ms)} and the 'all' row's measured ms."""
    rows = read_rows(path, "--run", {"kind", "measured_ms", "predicted_ms"}, "bench/sim_vs_device.py")
    kinds, total = {}, None
    for r in rows:
        try:
            m, p = float(r["measured_ms"]), float(r["predicted_ms"])
        except ValueError:
            sys.exit(f"--run: {path}: row {r['kind']}: measured_ms / predicted_ms are not numbers")
        if r["kind"] == "all":
            total = m
        else:
            kinds[r["kind"]] = (m, p)
    if total is None:
        sys.exit(f"--run: {path}: no 'all' row")
    return kinds, total


def read_link(path):
    """{"h2d": GB/s, "d2h": GB/s}: the swap path's one-way figure at the largest size measured."""
    rows = read_rows(path, "--link", {"size_mib", "direction", "vtensor_gbps"}, "build/bench/vtensor_swap_bandwidth")
    link = {}
    for d in ("h2d", "d2h"):
        at = [r for r in rows if r["direction"] == d]
        if not at:
            sys.exit(f"--link: {path}: no {d} row")
        try:
            link[d] = float(max(at, key=lambda r: float(r["size_mib"]))["vtensor_gbps"])
        except ValueError:
            sys.exit(f"--link: {path}: size_mib / vtensor_gbps of a {d} row are not numbers")
        if not link[d] > 0:
            sys.exit(f"--link: {path}: the {d} bandwidth is not positive")
    return link


def costs_by_kind(vtensor, model, batch, gpu, gpu_file=None):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "costs.csv")
        cmd = [vtensor, "costs", "--model", model, "--gpu", gpu, "--out", out]
        if batch:
            cmd += ["--batch", str(batch)]
        if gpu_file:
            cmd += ["--gpu-file", gpu_file]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: {(p.stderr or p.stdout).strip()}")
        by_kind = {}
        with open(out) as f:
            for r in csv.DictReader(f):
                by_kind[r["kind"]] = by_kind.get(r["kind"], 0.0) + float(r["total_ms"])
        return by_kind


def fit(runs):
    """Per kind: pooled measured / predicted over the runs."""
    m, p = {}, {}
    for r in runs:
        for k, (mk, pk) in r["kinds"].items():
            m[k] = m.get(k, 0.0) + mk
            p[k] = p.get(k, 0.0) + pk
    return {k: m[k] / p[k] for k in sorted(m) if p[k] > 0 and m[k] > 0}


def predicted(run, scale):
    return sum(pk * scale.get(k, 1.0) for k, (_, pk) in run["kinds"].items())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vtensor", default="build/vtensor")
    ap.add_argument("--base", required=True, help="the sim GPU the CSVs were predicted for (e.g. h100-80g)")
    ap.add_argument("--name", required=True, help="the calibrated GPU's name")
    ap.add_argument("--run", action="append", required=True, metavar="MODEL[:BATCH]=CSV")
    ap.add_argument("--out", required=True, help="the --gpu-file JSON to write")
    ap.add_argument("--link", help="CSV of build/bench/vtensor_swap_bandwidth on the same device: the host link's figures")
    ap.add_argument("--check-out", help="CSV: per model, measured against predicted before and after")
    a = ap.parse_args()
    if not os.access(a.vtensor, os.X_OK):
        sys.exit(f"--vtensor {a.vtensor}: not an executable (build first: scripts/install.sh)")
    runs = []
    for spec in a.run:
        if "=" not in spec:
            sys.exit(f"--run {spec}: expected MODEL[:BATCH]=CSV")
        who, path = spec.split("=", 1)
        model, _, batch = who.partition(":")
        if batch and not batch.isdigit():
            sys.exit(f"--run {spec}: the batch '{batch}' is not a positive integer")
        kinds, total = read_kinds(path)
        here = costs_by_kind(a.vtensor, model, batch, a.base)
        for k, (_, pk) in kinds.items():
            if abs(here.get(k, 0.0) - pk) > 1e-3 * max(pk, 1e-3) + 1e-4:
                sys.exit(f"--run {spec}: the cost model here predicts {here.get(k, 0.0):.4f} ms for {k} on {a.base}, "
                         f"the CSV {pk:.4f} ms: it changed since the measurement (rerun bench/sim_vs_device.py "
                         "on the device), or the model / batch is not the CSV's")
        runs.append({"model": model, "batch": batch, "csv": path, "kinds": kinds, "measured": total})
    scale = fit(runs)
    spec = {"name": a.name, "base": a.base,
            "description": f"{a.base} calibrated per op kind to op times measured on the device "
                           f"({', '.join(r['model'] for r in runs)}; bench/calibrate_gpu.py)",
            "kind_scale": {k: round(v, 4) for k, v in scale.items()}}
    if a.link:
        link = read_link(a.link)
        spec.update({"h2d_gbps": link["h2d"], "d2h_gbps": link["d2h"], "link_efficiency": 1})
        spec["description"] += f"; host link as measured one way, {link['h2d']} / {link['d2h']} GB/s"
    tmp = a.out + ".tmp"
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(tmp, "w") as f:
        json.dump(spec, f, indent=2)
        f.write("\n")
    rows = []
    try:  # the spec is written only once vtensor has read it back
        for r in runs:
            after = sum(costs_by_kind(a.vtensor, r["model"], r["batch"], a.name, tmp).values())
            others = fit([x for x in runs if x is not r])
            rows.append({"model": r["model"], "measured_ms": round(r["measured"], 3),
                         "predicted_ms": round(predicted(r, {}), 3), "calibrated_ms": round(after, 3),
                         "left_out_ms": round(predicted(r, others), 3) if len(runs) > 1 else None})
    except BaseException:
        os.remove(tmp)
        raise
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {a.name} = {a.base} with {len(scale)} op kinds scaled")
    print(f"{'model':<12} {'measured':>9} {'predicted':>10} {'ratio':>6} {'calibrated':>11} {'ratio':>6} {'left out':>9} {'ratio':>6}")
    for x in rows:
        lo = x["left_out_ms"]
        print(f"{x['model']:<12} {x['measured_ms']:>9.2f} {x['predicted_ms']:>10.2f} {x['measured_ms'] / x['predicted_ms']:>6.2f} "
              f"{x['calibrated_ms']:>11.2f} {x['measured_ms'] / x['calibrated_ms']:>6.2f} "
              + (f"{lo:>9.2f} {x['measured_ms'] / lo:>6.2f}" if lo else f"{'-':>9} {'-':>6}"))
    if a.check_out:
        os.makedirs(os.path.dirname(a.check_out) or ".", exist_ok=True)
        with open(a.check_out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {a.check_out}")


if __name__ == "__main__":
    main()
