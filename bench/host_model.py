#!/usr/bin/env python3
"""The sim with and without its host model against a recorded GPU run, for bench/run.py's
host-model experiment. Every row of the run's policies table (docs/gpu-runs/RUN/cuda_policies.csv)
is run on the sim (bench/fit_host.py's protocol: the same model, policy and budget fraction, each
op charged its time measured on that device, the link as measured) on three specs: without a host
model, with the host model fitted to another run (held out: `--held-out FILE:NAME`), and with the
one fitted to this run (in sample: `--in-sample FILE:NAME`). Writes per row the measured and the
three predicted iteration times and the held-out host launch time.
    python3 bench/host_model.py --json OUT.json --run docs/gpu-runs/2026-11-30 \\
        --held-out bench/gpus/h100-measured.json:h100-measured --in-sample bench/gpus/h200-measured.json:h200-measured
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fit_host  # noqa: E402
from script_io import write_rows  # noqa: E402


def spec(arg):
    path, _, name = arg.partition(":")
    with open(path) as f:
        specs = json.load(f)
    specs = specs if isinstance(specs, list) else [specs]
    s = next((s for s in specs if s["name"] == name), None)
    if s is None or "host" not in s:
        sys.exit(f"host_model: {path} has no entry '{name}' with a host model")
    return s


def predict_next(a):
    rows = fit_host.read_run(a.run, every_row=True)
    own = spec(a.in_sample)
    with tempfile.TemporaryDirectory() as tmp:
        got = fit_host.simulate_all(rows, [own], own["name"], tmp, "next", a.jobs)
    out = []
    for r, g in zip(rows, got):
        o = dict(model=r["model"], budget="—" if r["budget"] is None else f"{round(r['fraction'] * 100)}%",
                 policy=r["policy"], measured="")
        if "error" in g:
            o["predicted"] = "out of memory" if "out of device memory" in g["error"] else g["error"]
        else:
            o.update(predicted=f"{g['iter_ms']:.1f}", launch=f"{g['host_launch_ms']:.1f}", swapped=f"{g['swapped_mib']:.0f}",
                     recomputed=g["recomputed_ops"])
        out.append(o)
    write_rows(a.json, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--run", required=True, help="a folder of docs/gpu-runs/")
    ap.add_argument("--held-out", required=True, help="FILE:NAME, a host model fitted to another run")
    ap.add_argument("--in-sample", required=True, help="FILE:NAME, the host model fitted to this run")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--next", action="store_true",
                    help="the next run's table instead: every row of the run's policies step (those that did not "
                         "train there too) predicted on --in-sample, the measured column left for that run")
    a = ap.parse_args()
    if a.next:
        return predict_next(a)
    rows = fit_host.read_run(a.run)
    held, own = spec(a.held_out), spec(a.in_sample)
    bare = {k: v for k, v in own.items() if k != "host"}
    bare["name"] += "-no-host"
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key, s in (("bare", bare), ("held", held), ("own", own)):
            print(f"host_model: {len(rows)} rows on {s['name']}", file=sys.stderr, flush=True)
            got[key] = fit_host.simulate_all(rows, [s], s["name"], tmp, key, a.jobs)
    out = []
    for i, r in enumerate(rows):
        o = dict(model=r["model"], budget="—" if r["budget"] is None else f"{round(r['fraction'] * 100)}%",
                 policy=r["policy"], measured_ms=round(r["iter_ms"], 1))
        errors = [g[i].get("error") for g in got.values() if "error" in g[i]]
        if errors:
            o["note"] = errors[0]
            out.append(o)
            continue
        for key, label in (("bare", "no_host"), ("held", "held_out"), ("own", "in_sample")):
            ms = got[key][i]["iter_ms"]
            o[label] = f"{ms:.1f} ({ms / r['iter_ms'] - 1:+.1%})"
            o[label + "_error"] = ms / r["iter_ms"] - 1
        o["launch"] = f"{r['host_launch_ms']:.1f} / {got['held'][i]['host_launch_ms']:.1f}"
        sw = got["held"][i]["swapped_mib"]
        o["swapped"] = f"{r['swapped_mib']:.0f} / {sw:.0f}"
        out.append(o)
    n = sum(1 for o in out if "held_out_error" in o)
    for label in ("no_host", "held_out", "in_sample"):
        k = sum(1 for o in out if abs(o.get(label + "_error", 1)) <= 0.10)
        print(f"host_model: {label}: {k} of {n} rows within ±10%", file=sys.stderr)
    out.append(dict(model="within ±10%", **{label: f"{sum(1 for o in out if abs(o.get(label + '_error', 1)) <= 0.10)} of {n}"
                                           for label in ("no_host", "held_out", "in_sample")}))
    write_rows(a.json, out)


if __name__ == "__main__":
    main()
