#!/usr/bin/env python3
"""The experiment runner: one declarative list of experiments, each run through the vtensor
command (sweep, maxbatch, replay traces through sweep --trace), written as CSV and JSON under an
output folder and rendered as a Markdown table. Debian's python3 only.

  bench/run.py list                       # the experiments and what each runs
  bench/run.py NAME [NAME ...] | all      # run them; results in bench-out/NAME.{csv,json,md}
                                          # (all: every experiment but the runner's own tests, smoke
                                          # and smoke-runs; about 30 minutes on 2 cores)
  bench/run.py NAME --update-docs         # and rewrite NAME's generated tables in docs/**/*.md
  bench/run.py NAME --render-only [--update-docs]   # the tables again from bench-out/NAME.json, no runs
                                          # (a derived table, from its sources' JSON there)
  options: --out DIR (bench-out), --jobs N (parallel maxbatch searches, default 2)

Kinds: grid (`vtensor sweep` per model, then `vtensor maxbatch --budget` per cell), logs (sweeps
of the DTR operator logs), maxbatch (`vtensor maxbatch` per model, GPU and policy), and runs
(any table whose rows come from named `vtensor train / replay / maxbatch / sweep / costs` runs
and their reports, or from a C++ benchmark in build/bench/: see "kind runs" in
bench/vtbench/engine.py).
Three experiments (allocator-bench, vdnn-plan, dtr-logs-p100) call those C++ benchmarks:
configure with -DVTENSOR_BUILD_BENCH=ON.

A generated table in docs/ sits between `<!-- generated: bench/run.py NAME -->` and
`<!-- end generated: NAME -->`; --update-docs replaces what lies between, and the table carries
the command that produced it. Policies: `all` means every policy `vtensor policies` lists, so
a new policy joins the tables on the next run.

This file is the command line; the experiments are declared in bench/vtbench/experiments/, one
module per system (docs/experiments/NAME.md's tables in NAME.py), beside the engine
(bench/vtbench/engine.py), the Markdown (render.py) and --update-docs (docs.py).
"""
import argparse
import json
import os
import sys

from vtbench.docs import update_docs
from vtbench.engine import BIN, RUNNERS
from vtbench.experiments import EXPERIMENTS
from vtbench.helpers import ROOT
from vtbench.render import write_outputs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="+", help="experiment names, 'all', or 'list'")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-out"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--update-docs", action="store_true")
    ap.add_argument("--render-only", action="store_true",
                    help="run nothing: render the tables from the rows of an earlier run (OUT/NAME.json)")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs"), help="folder of the Markdown files to update (searched recursively)")
    a = ap.parse_args()
    if a.names == ["list"]:
        for n, e in EXPERIMENTS.items():
            print(f"{n:26s} {e['about']}")
        return
    names = [n for n, e in EXPERIMENTS.items() if not e.get("test_only")] if a.names == ["all"] else a.names
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        sys.exit(f"unknown experiment {', '.join(unknown)}; accepted: {', '.join(EXPERIMENTS)}, all, list")
    if a.jobs < 1:
        sys.exit("--jobs must be at least 1")
    if not os.access(BIN, os.X_OK):
        sys.exit(f"{BIN} not found: build first (scripts/install.sh)")
    missing = sorted({b for n in names for b in EXPERIMENTS[n].get("needs", [])
                      if not os.access(os.path.join(os.path.dirname(BIN), "bench", b), os.X_OK)})
    if missing and not a.render_only:  # before anything runs, not half-way through `all`
        sys.exit(f"{', '.join(missing)} not built: configure with -DVTENSOR_BUILD_BENCH=ON and build them")
    for n in names:
        exp = EXPERIMENTS[n]
        if a.render_only and exp["kind"] != "derived":  # a derived table runs nothing: derived again
            with open(os.path.join(a.out, n + ".json")) as f:
                rows = json.load(f)["rows"]
        else:
            rows = RUNNERS[exp["kind"]](n, exp, a.out, a.jobs)
        text = write_outputs(n, exp, rows, a.out)
        print(f"[{n}] wrote {os.path.join(a.out, n)}.csv, .json, .md ({len(rows)} rows)")
        if a.update_docs:
            update_docs(n, text, a.docs)


if __name__ == "__main__":
    main()
