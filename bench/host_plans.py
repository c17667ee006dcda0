#!/usr/bin/env python3
"""`auto`'s plans with the sim's host model beside its plans without it, for bench/run.py's
host-plans experiment. Per model of the H200's run and budget (50%, 25% of the sim's peak of
none), on the spec fitted to that run (bench/gpus/h200-measured.json) with each op charged its
measured time (`--op-times`): auto plans on the spec without its host model (plan A) and on the
spec with it (plan B); plan A is then run again on the spec with the host model (`--auto-plan`,
no search), so both plans are timed on the same model of the device and its host. Writes per row
what each plan moves (swapped MiB, recomputed ops, compacted blocks), A's and B's iteration on the
host model and B against A.
    python3 bench/host_plans.py --json OUT.json [--models resnet50,gpt2-small]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_io import write_rows  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(ROOT, "build", "vtensor")
RUN = os.path.join("docs", "gpu-runs", "2026-11-30")
SPEC_FILE, SPEC = os.path.join("bench", "gpus", "h200-measured.json"), "h200-measured"
MODELS = {"resnet50": 32, "vgg16": 64, "gpt2-small": 8, "bert-base": 32}  # the run's batches
FRACTIONS = {"resnet50": (0.5, 0.25), "vgg16": (0.5,), "gpt2-small": (0.5, 0.25), "bert-base": (0.5, 0.25)}
DENSITIES = {m: os.path.join("bench", "densities", m + ".json") for m in ("resnet50", "vgg16")}


def train(model, gpu, spec_file, report, budget=None, plan=None, policy="auto", iters=6):
    args = [BIN, "train", "--backend", "sim", "--gpu-file", spec_file, "--gpu", gpu, "--model", model, "--batch",
            str(MODELS[model]), "--policy", policy, "--iters", str(iters), "--quiet", "--report", report,
            "--op-times", os.path.join(RUN, f"sim_vs_device_ops_{model}.csv")]
    if budget:
        args += ["--budget", f"{budget}B"]
    if policy == "auto" and model in DENSITIES:
        args += ["--densities", DENSITIES[model]]
    if plan:
        args += ["--auto-plan", plan]
    p = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        return None, (p.stderr or p.stdout).strip().splitlines()[-1][:160]
    with open(report) as f:
        rep = json.load(f)
    its = rep["iterations"][2:] if len(rep["iterations"]) > 2 else rep["iterations"][-1:]
    last = rep["iterations"][-1]
    return dict(ms=statistics.median(it["time_ms"] for it in its), swapped=last["swapped_out_bytes"] / 2**20,
                recomputed=last["recomputed_ops"], blocks=last["compacted_blocks"],
                peak=last["peak_allocated_bytes"]), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    with open(os.path.join(ROOT, SPEC_FILE)) as f:
        spec = json.load(f)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        bare = {k: v for k, v in spec.items() if k != "host"}
        bare["name"] = SPEC + "-no-host"
        specs = os.path.join(tmp, "specs.json")
        with open(specs, "w") as f:
            json.dump([spec, bare], f)
        for model in a.models.split(","):
            none, err = train(model, SPEC, specs, os.path.join(tmp, "none.json"), policy="none", iters=1)
            if err:
                sys.exit(f"host_plans: none of {model}: {err}")
            for fr in FRACTIONS[model]:
                budget = round(none["peak"] * fr)
                row = dict(model=model, budget=f"{round(fr * 100)}%")
                ra, rb = os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")
                print(f"host_plans: {model} at {row['budget']}", file=sys.stderr, flush=True)
                pa, err = train(model, bare["name"], specs, ra, budget)
                pb, err_b = (None, None) if err else train(model, SPEC, specs, rb, budget)
                pa_host, err_c = (None, None) if err or err_b else train(model, SPEC, specs,
                                                                          os.path.join(tmp, "c.json"), budget, plan=ra)
                if err or err_b or err_c:
                    row["note"] = err or err_b or err_c
                    out.append(row)
                    continue
                same = (round(pa["swapped"]), pa["recomputed"], pa["blocks"]) == (round(pb["swapped"]), pb["recomputed"],
                                                                                  pb["blocks"])
                row.update(plan_a=f"{pa['swapped']:.0f} / {pa['recomputed']} / {pa['blocks']}",
                           plan_b=f"{pb['swapped']:.0f} / {pb['recomputed']} / {pb['blocks']}",
                           a_bare_ms=round(pa["ms"], 1), a_host_ms=round(pa_host["ms"], 1), b_host_ms=round(pb["ms"], 1),
                           change="same plan" if same else f"{pb['ms'] / pa_host['ms'] - 1:+.1%}")
                out.append(row)
    write_rows(a.json, out)


if __name__ == "__main__":
    main()
