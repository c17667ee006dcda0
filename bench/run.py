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
and their reports, or from a C++ benchmark in build/bench/: see "kind runs" below).
Three experiments (allocator-bench, vdnn-plan, dtr-logs-p100) call those C++ benchmarks:
configure with -DVTENSOR_BUILD_BENCH=ON.

A generated table in docs/ sits between `<!-- generated: bench/run.py NAME -->` and
`<!-- end generated: NAME -->`; --update-docs replaces what lies between, and the table carries
the command that produced it. Policies: `all` means every policy `vtensor policies` lists, so
a new policy joins the tables on the next run.
"""
import argparse
import csv
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(ROOT, "build", "vtensor")
# auto's wall cap off, so that every table reproduces from its command on any machine (the plan is
# then a function of the command alone); the cap's own effect is the auto-wall-cap experiment.
os.environ.setdefault("VTENSOR_AUTO_WALL_CAP", "0")

# The reference batches of docs/experiments/capuchin.md, "Method" (FP32, SGD with momentum; CNNs at 224x224).
PAPER_MODELS = [
    {"model": "resnet50", "batch": 32},
    {"model": "vgg16", "batch": 64},
    {"model": "gpt2-small", "batch": 8, "seq": 1024},
    {"model": "bert-base", "batch": 32, "seq": 128},
]
TINY_MODELS = [{"model": m} for m in ("resnet-tiny", "vgg-tiny", "gpt-tiny", "bert-tiny")]
PAPER_MODELS_ADAM = [  # docs/experiments/checkpoint.md's setting: transformers with Adam (m and v counted)
    {"model": "bert-base", "seq": 128, "optimizer": "adam"},
    {"model": "gpt2-small", "seq": 1024, "optimizer": "adam"},
    {"model": "resnet50"},
    {"model": "vgg16"},
]
DTR_LOGS = ["densenet121", "inceptionv4", "lstm", "resnet32", "transformer", "treelstm", "unet", "unroll_gan"]

# kind grid: `vtensor sweep` per model over policies x budgets (overhead against none at the
# reference batch), then, with maxbatch, `vtensor maxbatch --budget` per budget and policy.
# kind logs: `vtensor sweep --trace dtr:LOG` per log and GPU.
# kind maxbatch: `vtensor maxbatch` at the whole GPU's memory per model, GPU and policy; each cell
# the batch and the predicted time per sample at it.
EXPERIMENTS = {
    "headline-p100": {"kind": "grid", "backend": "sim", "gpu": "p100-16g", "models": PAPER_MODELS,
                      "policies": "all", "budgets": ["50%", "25%"], "iters": 4, "maxbatch": True,
                      "about": "every policy x 4 paper models x {50%, 25%} of the unmanaged peak, p100-16g: "
                               "overhead against none at the reference batch / maximum batch in the budget"},
    "headline-h100": {"kind": "grid", "backend": "sim", "gpu": "h100-80g", "models": PAPER_MODELS,
                      "policies": "all", "budgets": ["50%", "25%"], "iters": 4, "maxbatch": True,
                      "about": "the same on h100-80g"},
    "dtr-logs": {"kind": "logs", "gpus": ["p100-16g", "h100-80g"], "logs": DTR_LOGS,
                 "policies": ["capuchin-swap", "capuchin-recompute", "capuchin", "dtr", "checkpoint", "auto"],
                 "budgets": ["50%", "25%"], "extra_budgets": {"transformer": ["4GB"]}, "iters": 4,
                 "about": "the DTR artifact's operator logs replayed at 50% / 25% of each log's unmanaged peak"},
    "maxbatch-gpu": {"kind": "maxbatch", "gpus": ["p100-16g", "h100-80g"],
                     "models": [{"model": m["model"], **({"seq": m["seq"]} if "seq" in m else {})} for m in PAPER_MODELS],
                     "policies": ["none", "capuchin-swap", "capuchin-recompute", "capuchin", "dtr", "vdnn-conv",
                                  "lru-recompute", "auto"],
                     "ratios": [["capuchin", "none"], ["auto", "none"]],
                     "about": "maximum batch at the whole GPU's memory, SGD with momentum (Capuchin's 7x setting)"},
    "maxbatch-adam": {"kind": "maxbatch", "gpus": ["p100-16g", "h100-80g"], "models": PAPER_MODELS_ADAM,
                      "policies": ["none", "checkpoint", "capuchin", "capuchin-recompute", "dtr", "lru-recompute"],
                      "ratios": [["capuchin", "checkpoint"], ["capuchin", "none"]],
                      "about": "maximum batch at the whole GPU's memory, transformers with Adam "
                               "(Capuchin's anchor against gradient checkpointing)"},
    "maxbatch-vdnn": {"kind": "maxbatch", "gpus": ["titan-x-12g"],
                      "models": [{"model": "vgg16"}, {"model": "vgg16", "flags": ["--inplace-relu-grad"]},
                                 {"model": "resnet50"}, {"model": "resnet50", "flags": ["--inplace-relu-grad"]}],
                      "policies": ["none", "vdnn-conv", "vdnn-all", "vdnn-dyn"], "ratios": [],
                      "about": "maximum batch in a Titan X's 12 GiB under vDNN, with and without the in-place ReLU backward"},
    "smoke": {"kind": "grid", "backend": "sim", "gpu": "p100-16g", "models": [{"model": "mlp-tiny", "batch": 16}],
              "policies": ["lru", "capuchin"], "budgets": ["50%"], "iters": 3, "maxbatch": True,
              "about": "the runner's own test: mlp-tiny on sim, two policies, one budget", "test_only": True},
    "tiny-cpu": {"kind": "grid", "backend": "cpu", "models": TINY_MODELS, "policies": "all",
                 "budgets": ["50%", "25%"], "iters": 20, "maxbatch": False,
                 "sweep_args": ["--um-page-size", "16KiB"],  # the default 2 MiB page is larger than these models
                 "about": "the tiny presets trained for real on the cpu backend: every policy at 50% / 25%, "
                          "bit-identity to none checked per row; um pages of 16 KiB"},
}


def vt(args, check=True):
    p = subprocess.run([BIN, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"vtensor {' '.join(args)} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-500:]}")
    return p


def policies_of(exp):
    if exp["policies"] != "all":
        return exp["policies"]
    names = [line.split()[0] for line in vt(["policies"]).stdout.splitlines() if line.strip()]
    return [n for n in names if n != "none"]


def model_args(m):
    a = ["--model", m["model"]]
    if "batch" in m:
        a += ["--batch", str(m["batch"])]
    if "seq" in m:
        a += ["--seq", str(m["seq"])]
    if "optimizer" in m:
        a += ["--optimizer", m["optimizer"]]
    return a + m.get("flags", [])


def model_label(m):
    extra = [f"seq {m['seq']}"] if "seq" in m else []
    extra += [m["optimizer"]] if "optimizer" in m else []
    extra += [f.lstrip("-") for f in m.get("flags", [])]
    return m["model"] + (f" ({', '.join(extra)})" if extra else "")


def densities(m):
    """The non-zero counts a cpu run measured for this model (bench/densities/MODEL.json): what
    sizes the compress policies' tensors on sim. None for a model without ReLU / max-pool."""
    path = os.path.join(ROOT, "bench", "densities", m["model"] + ".json")
    return path if os.path.exists(path) else None


def takes_densities(policy):
    """The policies that read --densities: the compress ones, and auto (its compression candidates)."""
    return policy.startswith("compress") or policy == "auto"


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def run_grid(name, exp, out, jobs):
    pols = policies_of(exp)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in exp["models"]:
            sweep_csv = os.path.join(tmp, "sweep.csv")
            a = ["sweep", *model_args(m), "--backend", exp["backend"], "--iters", str(exp["iters"]),
                 "--policies", ",".join(pols), "--budgets", ",".join(exp["budgets"]), "--out", sweep_csv,
                 *exp.get("sweep_args", [])]
            if exp["backend"] == "sim":
                a += ["--gpu", exp["gpu"]]
                if densities(m):
                    a += ["--densities", densities(m)]
            print(f"[{name}] {m['model']}: sweep over {len(pols)} policies x {len(exp['budgets'])} budgets", flush=True)
            vt(a)
            part = read_csv(sweep_csv)
            if exp.get("maxbatch"):
                budgets = {r["budget"]: r["budget_bytes"] for r in part}
                work = [(b, p) for b in exp["budgets"] for p in ["none", *pols]]
                print(f"[{name}] {m['model']}: {len(work)} maximum-batch searches", flush=True)

                def search(bp, m=m):
                    b, p = bp
                    rep = os.path.join(tmp, f"mb_{b.rstrip('%')}_{p}.json")
                    mb = model_args({k: v for k, v in m.items() if k != "batch"})  # the search chooses the batch
                    d = ["--densities", densities(m)] if takes_densities(p) and densities(m) else []
                    vt(["maxbatch", *mb, "--gpu", exp["gpu"], *ABOVE_GPU, "--policy", p, "--budget", budgets[b], "--report", rep,
                        *d])
                    with open(rep) as f:
                        return bp, json.load(f)["max_batch"]

                with ThreadPoolExecutor(max_workers=jobs) as ex:
                    found = dict(ex.map(search, work))
                for r in part:
                    r["max_batch"] = found[(r["budget"], r["policy"])]
                    r["none_max_batch"] = found[(r["budget"], "none")]
            for r in part:
                r["gpu"] = exp.get("gpu", "")
            rows += part
    return rows


def run_logs(name, exp, out, jobs):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = [(g, log) for g in exp["gpus"] for log in exp["logs"]]

        def one(gl):
            g, log = gl
            path = os.path.join(tmp, f"{g}_{log}.csv")
            budgets = exp["budgets"] + exp.get("extra_budgets", {}).get(log, [])
            vt(["sweep", "--trace", f"dtr:{log}", "--gpu", g, "--iters", str(exp["iters"]),
                "--policies", ",".join(policies_of(exp)), "--budgets", ",".join(budgets), "--out", path])
            part = read_csv(path)
            for r in part:
                r.update(gpu=g, model=log)
            return part

        print(f"[{name}] {len(work)} replays", flush=True)
        with ThreadPoolExecutor(max_workers=jobs) as ex:
            for part in ex.map(one, work):
                rows += part
    return rows


def run_maxbatch(name, exp, out, jobs):
    work = [(g, i, p) for g in exp["gpus"] for i in range(len(exp["models"])) for p in exp["policies"]]
    print(f"[{name}] {len(work)} maximum-batch searches", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        def search(w):
            g, i, p = w
            m = exp["models"][i]
            rep = os.path.join(tmp, f"{g}_{i}_{p}.json")
            d = ["--densities", densities(m)] if takes_densities(p) and densities(m) else []
            vt(["maxbatch", *model_args(m), "--gpu", g, "--policy", p, "--report", rep, *d])
            with open(rep) as f:
                r = json.load(f)
            b, ms = r["max_batch"], r["iteration_ms"]
            return {"model": model_label(m), "gpu": g, "policy": p, "max_batch": b,
                    "peak_allocated_bytes": r["peak_allocated_bytes"], "iteration_ms": round(ms, 3),
                    "ms_per_sample": round(ms / b, 4) if b else "", "non_monotonic": ";".join(map(str, r["non_monotonic"]))}

        with ThreadPoolExecutor(max_workers=jobs) as ex:
            return list(ex.map(search, work))



# kind runs: a table whose every row comes from named `vtensor` runs and what they report. Each
# row is a dict (model, batch, seq, optimizer, flags, backend, gpu, iters and whatever the
# columns read; the experiment's "defaults" fill in what a row leaves out). "runs" lists
# (name, function(row, got) -> argument list) in order: `got` holds the reports of the row's
# earlier runs (None where a run ran out of memory), so a budget can be a fraction of an
# earlier run's peak. The arguments start with the subcommand: train and replay write their JSON
# report (--report), maxbatch its search, sweep and costs their CSV rows (--out); "bench:NAME ..." runs the
# C++ benchmark build/bench/NAME (built with -DVTENSOR_BUILD_BENCH=ON) and reads the CSV it
# prints. A function returning None skips that run. Identical runs within an experiment run
# once, so rows share their baseline. "columns" lists (header, function(c)[, format]): c.row is
# the row, c.rep[name] a run's report (None: out of memory, c.err[name] says why); the CSV holds
# the values, the Markdown the formatted ones. A run function may instead return a batch search,
# {"search": function(batch) -> arguments, "start": batch[, "precision", "limit"]} (search_batch). "serial": rows one at a time (cpu timings).
# Optional "keep": function(c) -> False drops the row; "each": function(c) -> items makes one
# table row per item (c.item), e.g. per layer of a report.

class Ctx:
    def __init__(self, row, rep, err):
        self.row, self.rep, self.err = row, rep, err


class Memo:
    """Runs each distinct command once; threads asking for one being run wait for it."""

    def __init__(self):
        self.lock, self.slots = threading.Lock(), {}

    def get(self, key, fn):
        with self.lock:
            slot = self.slots.get(key)
            mine = slot is None
            if mine:
                slot = self.slots[key] = [threading.Event(), None]
        if mine:
            try:
                slot[1] = fn()
            finally:
                slot[0].set()
        slot[0].wait()
        return slot[1]


def run_one(args, tmp):
    """One run: (its report, None), or (None, the error) when it ran out of memory."""
    fd, path = tempfile.mkstemp(dir=tmp)
    os.close(fd)
    if args[0].startswith("bench:"):
        exe = os.path.join(os.path.dirname(BIN), "bench", args[0][len("bench:"):])
        if not os.access(exe, os.X_OK):
            sys.exit(f"{exe} not found: configure with -DVTENSOR_BUILD_BENCH=ON and build it")
        p = subprocess.run([exe, *args[1:]], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{' '.join([exe, *args[1:]])} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
        return list(csv.DictReader(p.stdout.splitlines())), None
    if args[0] in ("sweep", "costs"):  # they write CSV
        path += ".csv"
        vt([*args, "--out", path])
        return read_csv(path), None
    p = vt([*args, "--report", path], check=False)
    if p.returncode == 3:  # out of device (or host) memory
        return None, (p.stderr or p.stdout).strip()
    if p.returncode != 0:
        sys.exit(f"vtensor {' '.join(args)} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-500:]}")
    with open(path) as f:
        rep = json.load(f)
    if isinstance(rep, dict):
        rep["_stdout"] = p.stdout  # what the report leaves out (maxbatch: which memory a failed probe ran out of)
    return rep, None


def run_runs(name, exp, out, jobs):
    memo = Memo()
    rows = [{**exp.get("defaults", {}), **r} for r in exp["rows"]]
    print(f"[{name}] {len(rows)} rows", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        def one(row):
            rep, err = {}, {}
            for run_name, fn in exp["runs"]:
                args = fn(row, rep)
                if args is None:
                    continue
                if isinstance(args, dict) and "repeat" in args:  # the same command once more: {"args": [...], "repeat": k}
                    a = [str(x) for x in args["args"]]
                    rep[run_name], err[run_name] = memo.get((*a, f"#repeat {args['repeat']}"), lambda: run_one(a, tmp))
                    continue
                if isinstance(args, dict):  # a batch search: {"search": function(batch) -> arguments, "start": batch}
                    key = ("search", *map(str, args["search"](0)), args.get("precision", 0))
                    rep[run_name], err[run_name] = memo.get(key, lambda: (search_batch(args, memo, tmp), None))
                    continue
                args = [str(a) for a in args]
                rep[run_name], err[run_name] = memo.get(tuple(args), lambda: run_one(args, tmp))
            c = Ctx(row, rep, err)
            if not exp.get("keep", lambda c: True)(c):
                return []
            out_rows = []
            for item in exp["each"](c) if "each" in exp else [None]:
                c.item, vals = item, {}
                for col in exp["columns"]:
                    v = col[1](c)
                    vals[col[0]] = "" if v is None else v
                out_rows.append(vals)
            return out_rows

        with ThreadPoolExecutor(max_workers=1 if exp.get("serial") else jobs) as ex:
            return [r for part in ex.map(one, rows) for r in part]


def search_batch(spec, memo, tmp):
    """The largest batch whose run fits, from spec["start"]: doubling while it trains (or halving
    until it does), then bisection until hi - lo <= max(1, precision * lo). For what `vtensor
    maxbatch` cannot search (a train flag it does not take: the compress ablation)."""
    def fits(b):
        args = [str(a) for a in spec["search"](b)]
        return memo.get(tuple(args), lambda: run_one(args, tmp))[0] is not None

    limit, lo = spec.get("limit", 1 << 16), max(1, spec["start"])
    if fits(lo):
        hi = lo * 2
        while hi <= limit and fits(hi):
            lo, hi = hi, hi * 2
        if hi > limit:
            return {"max_batch": lo}
    else:
        hi, lo = lo, lo // 2
        while lo >= 1 and not fits(lo):
            hi, lo = lo, lo // 2
        if lo < 1:
            return {"max_batch": 0}
    while hi - lo > max(1, int(spec.get("precision", 0) * lo)):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return {"max_batch": lo}


def md_runs(name, exp, rows):
    cols = exp["columns"]
    lines = ["| " + " | ".join(c[0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r[c[0]]
            cells.append(c[2].format(v) if len(c) > 2 and v != "" else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# Helpers for the runs' arguments and the columns.

def train(row, *extra, cmd="train"):
    """`vtensor train` (or replay) of a row: its model, backend, GPU and iterations, and extra."""
    if cmd == "replay":
        a = ["replay", "--trace", row["trace"], "--gpu", row["gpu"], *ABOVE_GPU]
    else:
        a = ["train", *model_args(row), "--backend", row.get("backend", "cpu")]
        if row.get("backend") == "sim":
            a += ["--gpu", row["gpu"], *ABOVE_GPU]
    return [*a, "--iters", row.get("iters", 3), "--quiet", *row.get("train_args", []), *extra]


def maxbatch(row, *extra):
    """`vtensor maxbatch` of a row's model (the search chooses the batch) on its GPU."""
    return ["maxbatch", *model_args({k: v for k, v in row.items() if k != "batch"}), "--gpu", row["gpu"], *ABOVE_GPU,
            *extra]


def fraction_of_peak(rep, f, align=256):
    """A budget: the fraction f of a report's peak allocated bytes, rounded down to align."""
    return int(rep["summary"]["peak_allocated_bytes"] * f) // align * align


def steady(rep):
    """The iterations after the first (the measured one for the planning policies)."""
    return rep["iterations"][1:] or rep["iterations"]


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def gib(b):
    return f"{b / 2**30:.2f} GiB"


def mib(b):
    return f"{b / 2**20:.2f} MiB"



# ---- the experiments of kind runs (the tables of the pages under docs/experiments/)

UNLIMITED = ["--budget", "1024GiB"]
# The experiments compare policies at fractions of a peak and measure unlimited runs, budgets the
# simulated GPU need not hold.
ABOVE_GPU = ["--budget-above-gpu"]
SIM_MODELS = [("ResNet-50, 224x224", "resnet50", 32), ("ResNet-50, 224x224", "resnet50", 1000),
              ("VGG-16, 224x224", "vgg16", 64), ("VGG-16, 224x224", "vgg16", 256)]

EXPERIMENTS.update({
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
})


def sweep_row(c, policy):
    """The row of a sweep's CSV (run "sweep") at the row's budget under policy."""
    return next(x for x in c.rep["sweep"] if (x["budget"], x["policy"]) == (c.row["budget"], policy))


def sweep_cell(c, policy, fn):
    x = sweep_row(c, policy)
    return fn(x) if x["status"] == "ok" else "oom"


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



# vDNN (docs/experiments/vdnn.md): none at the oracle budget, then none and each vDNN
# policy at the budget under study; vdnn-all / vdnn-conv, whose plans do not depend on the
# budget, measured again at the oracle budget where they do not fit (status over_budget).

VDNN = ["vdnn-all", "vdnn-conv", "vdnn-dyn"]


def mean_allocated(rep):
    points = (rep.get("memory_timeline") or {}).get("points") or []
    return sum(p[1] for p in points) / len(points) if points else 0


def steady_mean(rep, key):
    it = steady(rep)
    return sum(x[key] for x in it) / len(it)


def vdnn_budget(r, got):
    f = r["budget"]
    return fraction_of_peak(got["oracle"], f) if isinstance(f, float) else f


def needs(err):
    m = re.search(r"at least ([0-9.]+ [KMGT]?i?B)", err or "")
    return f"needs {m.group(1)}" if m else ""


def vdnn_chose(pr):
    return f"{pr['offload']} offload, {pr['conv_algorithm']} conv"


def vdnn_rows(specs, at_budget_none=True):
    rows = []
    for s in specs:
        rows.append({**s, "policy": "none", "at": "oracle"})
        if at_budget_none:
            rows.append({**s, "policy": "none", "at": "budget"})
        for p in VDNN:
            rows.append({**s, "policy": p, "at": "budget"})
            if p != "vdnn-dyn":
                rows.append({**s, "policy": p, "at": "fallback"})
    return rows


def vdnn_runs(timeline):
    tl = ["--timeline"] if timeline else []
    return [("oracle", lambda r, got: train(r, "--policy", "none", "--budget", r["oracle"], *tl)),
            ("none-budget", lambda r, got: train(r, "--policy", "none", "--budget", vdnn_budget(r, got), *tl)),
            ("budget", lambda r, got: None if r["at"] == "oracle" else
             train(r, "--policy", r["policy"], "--budget", vdnn_budget(r, got), *tl)),
            ("fallback", lambda r, got: train(r, "--policy", r["policy"], "--budget", r["oracle"], *tl)
             if r["at"] == "fallback" and got["budget"] is None else None)]


def vdnn_run(c):
    """The report a row shows: the oracle run, the run at the budget, or the fallback."""
    return c.rep[{"oracle": "oracle", "budget": "budget", "fallback": "fallback"}[c.row["at"]]] \
        if c.row["policy"] != "none" or c.row["at"] == "oracle" else c.rep["none-budget"]


def vdnn_cpu_status(c):
    rep = vdnn_run(c)
    if c.row["at"] == "fallback":
        return "over_budget"
    if rep is None:
        n = needs(c.err["budget" if c.row["policy"] != "none" else "none-budget"])
        return f"oom ({n})" if n and c.row["policy"] != "none" else "oom"
    return "ok"


def vdnn_if_ok(fn):
    return lambda c: fn(c, vdnn_run(c)) if vdnn_run(c) is not None else None


def loss_equals_none(rep, none):
    return "yes" if all(a["loss"] == b["loss"] for a, b in zip(rep["iterations"], none["iterations"])) else "no"


VDNN_CPU = [{"model": "resnet-tiny", "batch": 32, "budget": 0.9}, {"model": "vgg-tiny", "batch": 32, "budget": 0.95},
            {"model": "resnet-tiny", "batch": 2, "budget": 0.98},
            {"model": "vgg-tiny", "batch": 32, "budget": 0.95, "flags": ["--inplace-relu-grad"]},
            {"model": "resnet-tiny", "batch": 32, "budget": 0.95, "flags": ["--inplace-relu-grad"]}]
EXPERIMENTS["vdnn-cpu"] = {
    "kind": "runs", "serial": True,
    "about": "cpu backend, 20 iterations: none at the 8 GiB oracle budget, every other run at the given fraction of "
             "none's peak (rounded down to 256 bytes); a vdnn-all / vdnn-conv run that does not fit there measured "
             "again at 8 GiB (over_budget)",
    "defaults": {"backend": "cpu", "iters": 20, "oracle": "8GiB"},
    "rows": vdnn_rows(VDNN_CPU), "runs": vdnn_runs(False),
    "keep": lambda c: c.row["at"] != "fallback" or c.rep.get("fallback") is not None,
    "columns": [
        ("model:batch", lambda c: f"{c.row['model']}:{c.row['batch']}"),
        ("in-place relu bwd", lambda c: "yes" if c.row.get("flags") else "no"),
        ("policy", lambda c: c.row["policy"]),
        ("budget", lambda c: "8 GiB (oracle)" if c.row["at"] == "oracle" else "8 GiB" if c.row["at"] == "fallback"
         else f"{c.row['budget']} = {mib(vdnn_budget(c.row, c.rep))}"),
        ("status", vdnn_cpu_status),
        ("peak allocated", vdnn_if_ok(lambda c, r: mib(r["summary"]["peak_allocated_bytes"]))),
        ("vs none", vdnn_if_ok(lambda c, r: r["summary"]["peak_allocated_bytes"] /
                                            c.rep["oracle"]["summary"]["peak_allocated_bytes"]), "{:.3f}"),
        ("offloaded / iter", vdnn_if_ok(lambda c, r: mib((r.get("policy_report") or {}).get("offloaded_bytes_per_iteration", 0)))),
        ("dyn chose", vdnn_if_ok(lambda c, r: vdnn_chose(r["policy_report"]) if c.row["policy"] == "vdnn-dyn" else "")),
        ("every loss = none", vdnn_if_ok(lambda c, r: loss_equals_none(r, c.rep["oracle"]))),
    ]}


def vdnn_sim_trains(c):
    if c.row["policy"] == "none":
        return "yes" if c.rep["none-budget"] is not None else "no"
    if c.rep["budget"] is None:
        return f"no ({needs(c.err['budget'])})"
    return "yes" + (f": {vdnn_chose(c.rep['budget']['policy_report'])}" if c.row["policy"] == "vdnn-dyn" else "")


def vdnn_sim_shown(c):
    return c.rep["oracle"] if c.row["policy"] == "none" else c.rep["budget"] or c.rep.get("fallback")


def vdnn_sim_col(fn):
    return lambda c: fn(c, vdnn_sim_shown(c), c.rep["oracle"]) if vdnn_sim_shown(c) is not None else None


def vdnn_sim(inplace):
    flags = ["--inplace-relu-grad"] if inplace else []
    return {
        "kind": "runs",
        "about": "sim backend, titan-x-12g, 3 iterations" + (", --inplace-relu-grad in every run" if inplace else "") +
                 ": none with a 64 GiB budget (the oracle), each vDNN policy in 12 GiB; a row that does not fit shows "
                 "the same run at 64 GiB",
        "defaults": {"backend": "sim", "gpu": "titan-x-12g", "iters": 3, "oracle": "64GiB", "budget": "12GiB",
                     "flags": flags},
        "rows": [r for r in vdnn_rows([{"model": m, "batch": b} for m, b in
                                       [("vgg16", 64), ("vgg16", 128), ("vgg16", 256), ("resnet50", 32), ("resnet50", 64),
                                        ("resnet50", 128), ("resnet50", 256)]]) if r["at"] != "fallback"],
        "runs": [*vdnn_runs(True)[:3],
                 ("fallback", lambda r, got: train(r, "--policy", r["policy"], "--budget", r["oracle"], "--timeline")
                  if r["policy"] not in ("none", "vdnn-dyn") and got["budget"] is None else None)],
        "keep": lambda c: c.row["policy"] != "none" or c.row["at"] == "oracle",
        "columns": [
            ("model", lambda c: c.row["model"]), ("batch", lambda c: c.row["batch"]),
            ("policy", lambda c: "none (oracle)" if c.row["policy"] == "none" else c.row["policy"]),
            ("trains in 12 GiB", vdnn_sim_trains),
            ("peak GiB", vdnn_sim_col(lambda c, r, o: r["summary"]["peak_allocated_bytes"] / 2**30), "{:.2f}"),
            ("peak vs none", vdnn_sim_col(lambda c, r, o: r["summary"]["peak_allocated_bytes"] /
                                                          o["summary"]["peak_allocated_bytes"]), "{:.3f}"),
            ("mean vs none", vdnn_sim_col(lambda c, r, o: mean_allocated(r) / mean_allocated(o)), "{:.3f}"),
            ("mean (no persistent) vs none", vdnn_sim_col(
                lambda c, r, o: (mean_allocated(r) - r["graph"]["persistent_bytes"]) /
                                (mean_allocated(o) - o["graph"]["persistent_bytes"])), "{:.3f}"),
            ("offloaded GiB / iter", vdnn_sim_col(lambda c, r, o: (r.get("policy_report") or {}).get(
                "offloaded_bytes_per_iteration", 0) / 2**30), "{:.2f}"),
            ("prefetch stall ms / iter", vdnn_sim_col(lambda c, r, o: r["policy_report"]["prefetch_stall_ms"] / max(
                1, r["policy_report"]["iterations"]) if r.get("policy_report") else 0), "{:.1f}"),
            ("all copy stalls ms / iter", vdnn_sim_col(lambda c, r, o: steady_mean(r, "stall_ms")), "{:.1f}"),
            ("time vs oracle", vdnn_sim_col(lambda c, r, o: steady_mean(r, "time_ms") / steady_mean(o, "time_ms")), "{:.3f}"),
        ]}


EXPERIMENTS["vdnn-sim"] = vdnn_sim(False)
EXPERIMENTS["vdnn-sim-inplace"] = vdnn_sim(True)


def vdnn_layers(model, batch):
    return {
        "kind": "runs",
        "about": f"the per-layer report (policy_report.layers) of {model} at batch {batch} under vdnn-all, sim "
                 "titan-x-12g, 12 GiB, --inplace-relu-grad, 3 iterations",
        "rows": [{"model": model, "batch": batch, "backend": "sim", "gpu": "titan-x-12g", "iters": 3,
                  "flags": ["--inplace-relu-grad"]}],
        "runs": [("run", lambda r, got: train(r, "--policy", "vdnn-all", "--budget", "12GiB"))],
        "each": lambda c: c.rep["run"]["policy_report"]["layers"],
        "columns": [("layer", lambda c: c.item["layer"]), ("kind", lambda c: c.item["kind"]),
                    ("offloaded", lambda c: "yes" if c.item["offloaded"] else "no"),
                    ("offloaded MiB", lambda c: c.item["offloaded_bytes"] / 2**20, "{:.0f}"),
                    ("prefetch after op", lambda c: c.item["prefetch_after_op"]),
                    ("prefetch stall ms / iter", lambda c: c.item["prefetch_stall_ms"] / max(
                        1, c.rep["run"]["policy_report"]["iterations"]), "{:.3f}")]}


EXPERIMENTS["vdnn-layers-vgg16"] = vdnn_layers("vgg16", 256)
EXPERIMENTS["vdnn-layers-resnet50"] = vdnn_layers("resnet50", 128)



# Planned pool and zero-overhead swap (Zhang et al.): arena / lower bound per allocator, and the
# zero-overhead-swap policies against none and lru. Per-iteration figures of the sim tables are
# the last iteration's (the first is the measured, passive one).

def spec_rows(spec):
    """"model:batch,batch ..." -> rows."""
    return [{"model": m, "batch": int(b)} for item in spec.split() for m, bs in [item.split(":")] for b in bs.split(",")]


POOL_SIM = ("mlp-tiny:16,64 vgg-tiny:32,64 resnet-tiny:32,64 gpt-tiny:8,32 bert-tiny:8,32 mlp:128,512 vgg11:32,64 "
            "vgg16:32,64 resnet18:64,128 resnet34:64,128 resnet50:32,64,128 gpt2-small:4,8 gpt2-medium:2,4 "
            "gpt2-large:1,2 bert-base:16,32 bert-large:8,16")
ZOS_SIM = "resnet50:32,64,128 vgg16:32,64 gpt2-small:4,8"
POOL_RUNS = [("caching", lambda r, got: train(r, *r.get("budget_args", []))),
             ("planned", lambda r, got: train(r, *r.get("budget_args", []), "--allocator", "planned")),
             ("best", lambda r, got: train(r, *r.get("budget_args", []), "--allocator", "planned", "--planner", "best"))]


def alloc(c, run):
    return c.rep[run]["allocator_report"]


POOL_COLUMNS = [
    ("model", lambda c: c.row["model"]), ("batch", lambda c: c.rep["caching"]["config"]["batch"]),
    ("lower bound", lambda c: mib(alloc(c, "planned")["lower_bound_bytes"])),
    ("caching arena", lambda c: mib(alloc(c, "caching")["arena_bytes"])),
    ("caching / LB", lambda c: alloc(c, "caching")["arena_over_lower_bound"], "{:.4f}"),
    ("planned / LB (greedy-size)", lambda c: alloc(c, "planned")["arena_over_lower_bound"], "{:.4f}"),
    ("planned / LB (best)", lambda c: alloc(c, "best")["arena_over_lower_bound"], "{:.4f}"),
    ("best planner", lambda c: alloc(c, "best").get("plan", {}).get("made_by", "-")),
    ("fallbacks", lambda c: alloc(c, "planned")["fallback_requests"] + alloc(c, "best")["fallback_requests"])]

EXPERIMENTS["pool-sim"] = {
    "kind": "runs", "about": "arena / lower bound of the caching allocator and the planned pool (default planner "
                             "greedy-size, and --planner best), policy none, unlimited budget, sim p100-16g, the last of "
                             "5 iterations",
    "defaults": {"backend": "sim", "gpu": "p100-16g", "iters": 5, "budget_args": UNLIMITED},
    "rows": spec_rows(POOL_SIM), "runs": POOL_RUNS,
    "columns": POOL_COLUMNS[:5] + [("caching frag. at peak", lambda c: f"{alloc(c, 'caching')['fragmentation_at_peak']:.2%}")] +
               POOL_COLUMNS[5:]}


def peak_after_first(rep):
    return max(i["peak_allocated_bytes"] for i in steady(rep))


def pool_cpu(spec, iters):
    return {
        "kind": "runs", "serial": True,
        "about": f"cpu backend, {iters} iterations: arena / lower bound (caching, planned, planned with --planner "
                 "best) and zero-overhead-swap's peak (no budget) against none's; time and stall: medians over the "
                 "iterations after the first",
        "defaults": {"backend": "cpu", "iters": iters}, "rows": spec_rows(spec),
        "runs": POOL_RUNS + [("zos", lambda r, got: train(r, "--policy", "zero-overhead-swap"))],
        "columns": POOL_COLUMNS + [
            ("none peak", lambda c: mib(peak_after_first(c.rep["caching"]))),
            ("zero-overhead-swap peak", lambda c: mib(peak_after_first(c.rep["zos"]))),
            ("saved", lambda c: f"{1 - peak_after_first(c.rep['zos']) / peak_after_first(c.rep['caching']):.1%}"),
            ("time vs none", lambda c: median(i["time_ms"] for i in steady(c.rep["zos"])) /
                                       median(i["time_ms"] for i in steady(c.rep["caching"])), "{:.2f}"),
            ("stall / iter", lambda c: median(i["stall_ms"] for i in steady(c.rep["zos"])), "{:.2f} ms")]}


EXPERIMENTS["pool-tiny-cpu"] = pool_cpu("mlp-tiny:8,32,64 vgg-tiny:8,32,64 resnet-tiny:8,32,64", 6)
EXPERIMENTS["pool-zoo-cpu"] = pool_cpu("mlp:1,2 vgg11:1,2 vgg16:1,2 resnet18:1,2 resnet34:1,2 resnet50:1,2", 4)


def zos_run(r, got):
    policy, _, allocator = r["policy"].partition("+")
    budget = UNLIMITED if r["fraction"] is None else ["--budget", fraction_of_peak(got["none"], r["fraction"])]
    return train(r, *budget, "--policy", policy, *(["--allocator", allocator] if allocator else []))


def zos_col(fn):
    return lambda c: fn(c, c.rep["run"]["iterations"][-1], c.rep["none"]) if c.rep["run"] is not None else \
        ("oom" if fn is ZOS_PEAK else None)


def ZOS_PEAK(c, last, none):
    return f"{last['peak_allocated_bytes'] / 2**20:.0f} MiB"


def zos_experiment(fractions, policies, about):
    return {
        "kind": "runs", "about": about,
        "defaults": {"backend": "sim", "gpu": "p100-16g", "iters": 5},
        "rows": [{**r, "policy": p, "fraction": f} for r in spec_rows(ZOS_SIM) for f in fractions for p in policies],
        "runs": [("none", lambda r, got: train(r, *UNLIMITED)), ("run", zos_run)],
        "columns": [
            ("model", lambda c: c.row["model"]), ("batch", lambda c: c.row["batch"]), ("policy", lambda c: c.row["policy"]),
            ("budget", lambda c: "unlimited" if c.row["fraction"] is None else
             f"{c.row['fraction']:.0%} ({fraction_of_peak(c.rep['none'], c.row['fraction']) / 2**20:.0f} MiB)"),
            ("peak allocated", zos_col(ZOS_PEAK)),
            ("saved vs none", zos_col(lambda c, l, n: f"{1 - l['peak_allocated_bytes'] / n['summary']['peak_allocated_bytes']:.1%}")),
            ("arena (saved vs none)", zos_col(lambda c, l, n: "{:.0f} MiB ({:.1%})".format(
                c.rep["run"]["allocator_report"]["arena_bytes"] / 2**20,
                1 - c.rep["run"]["allocator_report"]["arena_bytes"] / n["allocator_report"]["arena_bytes"]))),
            ("time vs none", zos_col(lambda c, l, n: f"{l['time_ms'] / n['iterations'][-1]['time_ms']:.3f}")),
            ("stall / iter", zos_col(lambda c, l, n: f"{l['stall_ms']:.2f} ms")),
            ("swapped out / iter", zos_col(lambda c, l, n: f"{l['swapped_out_bytes'] / 2**20:.0f} MiB")),
            ("planned swaps (stalling)", zos_col(lambda c, l, n: "-" if c.row["policy"] == "lru" else "{} ({})".format(
                len((c.rep["run"].get("policy_report") or {}).get("chosen", [])),
                sum(not x["hidden"] for x in (c.rep["run"].get("policy_report") or {}).get("chosen", []))))),
            ("passive evictions / iter", zos_col(lambda c, l, n: l["evictions"]))]}


EXPERIMENTS["zos-sim"] = zos_experiment(
    [None], ["zero-overhead-swap", "zero-overhead-swap+planned"],
    "zero-overhead-swap with no budget (its peak is the smallest budget it needs), on the caching allocator and the "
    "planned pool, against none with an unlimited budget; sim p100-16g, the last of 5 iterations")
EXPERIMENTS["zos-limit-sim"] = zos_experiment(
    [0.9, 0.8, 0.7], ["zero-overhead-swap-limit", "lru"],
    "zero-overhead-swap-limit and lru at 90 / 80 / 70% of none's peak; sim p100-16g, the last of 5 iterations")
EXPERIMENTS["zos-gpus"] = {
    "kind": "runs", "about": "zero-overhead-swap (no budget) across GPUs against none (unlimited budget), sim, the last "
                             "of 5 iterations",
    "defaults": {"backend": "sim", "iters": 5},
    "rows": [{**r, "gpu": g} for r in spec_rows("resnet50:32 vgg16:64 gpt2-small:8")
             for g in ("titan-x-12g", "p100-16g", "v100-16g", "a100-40g", "h100-80g")],
    "runs": [("none", lambda r, got: train(r, *UNLIMITED)),
             ("zos", lambda r, got: train(r, *UNLIMITED, "--policy", "zero-overhead-swap"))],
    "columns": [("model", lambda c: c.row["model"]), ("batch", lambda c: c.row["batch"]), ("GPU", lambda c: c.row["gpu"]),
                ("none iteration", lambda c: c.rep["none"]["iterations"][-1]["time_ms"], "{:.1f} ms"),
                ("saved vs none", lambda c: f"{1 - c.rep['zos']['iterations'][-1]['peak_allocated_bytes'] / max(i['peak_allocated_bytes'] for i in c.rep['none']['iterations']):.1%}"),
                ("time vs none", lambda c: c.rep["zos"]["iterations"][-1]["time_ms"] / c.rep["none"]["iterations"][-1]["time_ms"], "{:.3f}"),
                ("stall / iter", lambda c: c.rep["zos"]["iterations"][-1]["stall_ms"], "{:.2f} ms"),
                ("swapped out / iter", lambda c: c.rep["zos"]["iterations"][-1]["swapped_out_bytes"] / 2**20, "{:.0f} MiB")]}

EXPERIMENTS["zos-limit-cpu"] = {
    "kind": "runs", "serial": True,
    "about": "lru and zero-overhead-swap-limit at 80% / 70% of none's peak, cpu backend, 6 iterations; per-iteration "
             "figures exclude the measured first iteration (stall and time: medians)",
    "defaults": {"backend": "cpu", "iters": 6},
    "rows": [{"model": m, "fraction": f, "policy": p} for m in ("resnet-tiny", "vgg-tiny") for f in (0.8, 0.7)
             for p in ("lru", "zero-overhead-swap-limit")],
    "runs": [("none", lambda r, got: train(r)),
             ("run", lambda r, got: train(r, "--policy", r["policy"], "--budget", fraction_of_peak(got["none"], r["fraction"])))],
    "columns": [
        ("model", lambda c: c.row["model"]),
        ("budget", lambda c: f"{c.row['fraction']:.0%} ({mib(fraction_of_peak(c.rep['none'], c.row['fraction']))})"),
        ("policy", lambda c: c.row["policy"]),
        ("peak allocated", lambda c: mib(peak_after_first(c.rep["run"]))),
        ("evictions / iter", lambda c: steady_mean(c.rep["run"], "evictions"), "{:.1f}"),
        ("swapped out / iter", lambda c: mib(steady_mean(c.rep["run"], "swapped_out_bytes"))),
        ("stall / iter", lambda c: median(i["stall_ms"] for i in steady(c.rep["run"])), "{:.2f} ms"),
        ("time vs none", lambda c: median(i["time_ms"] for i in steady(c.rep["run"])) /
                                   median(i["time_ms"] for i in steady(c.rep["none"])), "{:.2f}"),
        ("final loss", lambda c: c.rep["run"]["summary"]["final_loss"], "{:.6f}"),
        ("losses = none", lambda c: loss_equals_none(c.rep["run"], c.rep["none"]))]}

EXPERIMENTS["zos-planned-pool"] = {
    "kind": "runs", "serial": True,
    "about": "zero-overhead-swap on the planned pool against none on the caching allocator, cpu backend, the last of "
             "4 iterations' arena (allocator_report.arena_bytes)",
    "defaults": {"backend": "cpu", "iters": 4},
    "rows": spec_rows("mlp-tiny:16 vgg-tiny:32 resnet-tiny:32 resnet18:2 resnet50:2 vgg16:2"),
    "runs": [("none", lambda r, got: train(r)),
             ("zos", lambda r, got: train(r, "--allocator", "planned", "--policy", "zero-overhead-swap"))],
    "columns": [("model", lambda c: c.row["model"]), ("batch", lambda c: c.row["batch"]),
                ("none + caching arena", lambda c: mib(alloc(c, "none")["arena_bytes"])),
                ("zero-overhead-swap + planned arena", lambda c: mib(alloc(c, "zos")["arena_bytes"])),
                ("saved", lambda c: f"{1 - alloc(c, 'zos')['arena_bytes'] / alloc(c, 'none')['arena_bytes']:.1%}"),
                ("planned / LB", lambda c: alloc(c, "zos")["arena_over_lower_bound"], "{:.4f}")]}



# Transformers (GPT-2 small, BERT-base) with Adam on the sim backend: unmanaged peaks beside an
# analytic accounting, maximum batches, and the cost model's time per op kind. Analytic figures
# (s sequence, b batch, h hidden, a heads, L layers, V vocabulary, P parameters):
#   states 16 P (fp32 weights, gradients, Adam m and v); layers L (64 sbh + 4 a s^2 b)
#   (Korthikanti et al. 2022, fp32, no dropout); head 8 sbV (the logits and their gradient).
# Our graph's saved activations, exactly: L (64 sbh + 4 a s^2 b + 16 sb) plus
#   4 (2 sbh + 4 sb + sbV) for gpt, 4 (5 sbh + 6 sb + sbV) for bert;
# the column "formula = measured" compares them with the allocation after the last forward op.

TRANSFORMER_SHAPES = {"gpt2-small": (12, 12, 768, 50257), "bert-base": (12, 12, 768, 30522)}  # L, a, h, V


def transformer_analytic(row, params):
    L, a, h, vocab = TRANSFORMER_SHAPES[row["model"]]
    s, b = row["seq"], row["batch"]
    layers = L * (64 * s * b * h + 4 * a * s * s * b)
    head = 8 * s * b * vocab
    extra = 4 * (2 * s * b * h + 4 * s * b + s * b * vocab) if row["model"].startswith("gpt") else \
        4 * (5 * s * b * h + 6 * s * b + s * b * vocab)
    ours = L * (64 * s * b * h + 4 * a * s * s * b + 16 * s * b) + extra
    return {"states": 16 * params, "layers": layers, "head": head, "ours": ours, "total": 16 * params + layers + head}


def transformer_peak(c):
    """What the peaks table reads from a row's report and costs: saved activations, the peak."""
    j = c.rep["train"]
    s, b = c.row["seq"], c.row["batch"]
    points = j["memory_timeline"]["points"]  # allocated after each op of the last iteration
    last_fwd = next(i for i, o in enumerate(c.rep["costs"]) if ".bwd" in o["name"]) - 1
    # After op 0 (the data): the persistent tensors as allocated and the token ids and targets (8 sb).
    saved = points[last_fwd][1] - (points[0][1] - 8 * s * b)
    params = j["graph"]["param_bytes"] // 4
    return {"saved": saved, "after_forward": points[last_fwd][1], "params": params,
            "peak": j["summary"]["peak_allocated_bytes"], "reserved": j["summary"]["peak_reserved_bytes"],
            "persistent": j["graph"]["persistent_bytes"], **transformer_analytic(c.row, params)}


def tp(key, scale=2**30):
    return lambda c: transformer_peak(c)[key] / scale


EXPERIMENTS["transformer-peaks"] = {
    "kind": "runs",
    "about": "policy none, Adam, sim a100-80g, unlimited budget, 2 iterations with the timeline; all in GiB; "
             "`vtensor costs` of the same shape finds the last forward op",
    "defaults": {"backend": "sim", "gpu": "a100-80g", "iters": 2, "optimizer": "adam"},
    "rows": [{"model": "gpt2-small", "seq": 1024, "batch": b} for b in (1, 2, 4, 8)] +
            [{"model": "gpt2-small", "seq": 512, "batch": 8}] +
            [{"model": "bert-base", "seq": 128, "batch": b} for b in (8, 16, 32, 64)] +
            [{"model": "bert-base", "seq": 512, "batch": 8}],
    "runs": [("train", lambda r, got: train(r, *UNLIMITED, "--timeline")),
             ("costs", lambda r, got: ["costs", *model_args(r), "--gpu", r["gpu"]])],
    "columns": [("model", lambda c: c.row["model"]), ("seq", lambda c: c.row["seq"]), ("batch", lambda c: c.row["batch"]),
                ("persistent (12P)", tp("persistent"), "{:.2f}"), ("saved activations", tp("saved"), "{:.2f}"),
                ("backward adds", lambda c: (transformer_peak(c)["peak"] - transformer_peak(c)["after_forward"]) / 2**30, "{:.2f}"),
                ("peak allocated", tp("peak"), "{:.2f}"), ("peak reserved", tp("reserved"), "{:.2f}"),
                ("16P", tp("states"), "{:.2f}"), ("L x (64sbh + 4as^2b)", tp("layers"), "{:.2f}"), ("8sbV", tp("head"), "{:.2f}"),
                ("analytic", tp("total"), "{:.2f}"), ("peak / analytic", lambda c: transformer_peak(c)["peak"] / transformer_peak(c)["total"], "{:.3f}"),
                ("formula = measured", lambda c: "yes" if transformer_peak(c)["saved"] == transformer_peak(c)["ours"] else
                 f"no ({transformer_peak(c)['ours']} formula)")]}

EXPERIMENTS["transformer-maxbatch"] = {
    "kind": "runs", "about": "`vtensor maxbatch --model M --seq S --optimizer adam --gpu G --policy P` (3 iterations per "
                             "probe; predicted time: mean of iterations 2 and 3)",
    "rows": [{"model": m, "seq": s, "optimizer": "adam", "gpu": g, "policy": p}
             for m, s in (("gpt2-small", 1024), ("bert-base", 128)) for g in ("p100-16g", "v100-32g", "a100-80g")
             for p in ("none", "lru", "lru-recompute")],
    "runs": [("mb", lambda r, got: maxbatch(r, "--policy", r["policy"]))],
    "columns": [("model", lambda c: f"{c.row['model']}, seq {c.row['seq']}"), ("GPU", lambda c: c.row["gpu"]),
                ("policy", lambda c: c.row["policy"]), ("max batch", lambda c: c.rep["mb"]["max_batch"]),
                ("peak allocated", lambda c: gib(c.rep["mb"]["peak_allocated_bytes"])),
                ("predicted iteration", lambda c: c.rep["mb"]["iteration_ms"], "{:.1f} ms"),
                ("samples/s", lambda c: 1e3 * c.rep["mb"]["max_batch"] / c.rep["mb"]["iteration_ms"], "{:.1f}")]}


def kind_costs(rows):
    """Per op kind: ops, predicted ms, bounds; and the total."""
    kinds = {}
    for o in rows:
        k = kinds.setdefault(o["kind"], {"ops": 0, "ms": 0.0})
        k["ops"] += 1
        k["ms"] += float(o["total_ms"])
    return kinds


def costs_items(c):
    g, b = kind_costs(c.rep["gpt"]), kind_costs(c.rep["bert"])
    order = sorted(set(g) | set(b), key=lambda k: -(g.get(k, {}).get("ms", 0) + b.get(k, {}).get("ms", 0)))
    total = lambda d: {"ops": sum(x["ops"] for x in d.values()), "ms": sum(x["ms"] for x in d.values())}
    return [{"kind": k, "gpt": g.get(k), "bert": b.get(k), "gpt_total": total(g)["ms"], "bert_total": total(b)["ms"]}
            for k in order] + [{"kind": "total", "gpt": total(g), "bert": total(b), "gpt_total": 0, "bert_total": 0}]


def costs_col(model, what):
    def f(c):
        x = c.item[model]
        if x is None:
            return ""
        if what == "share":
            return f"{x['ms'] / c.item[model + '_total']:.1%}" if c.item[model + "_total"] else ""
        return x["ops"] if what == "ops" else f"{x['ms']:.2f}"
    return f


EXPERIMENTS["transformer-costs"] = {
    "kind": "runs", "about": "`vtensor costs --model M --seq S --batch B --optimizer adam --gpu v100-32g`: the predicted "
                             "time of one training iteration per op kind, FP32",
    "rows": [{"gpu": "v100-32g"}],
    "runs": [("gpt", lambda r, got: ["costs", *model_args({"model": "gpt2-small", "seq": 1024, "batch": 8, "optimizer": "adam"}),
                                     "--gpu", r["gpu"]]),
             ("bert", lambda r, got: ["costs", *model_args({"model": "bert-base", "seq": 128, "batch": 32, "optimizer": "adam"}),
                                      "--gpu", r["gpu"]])],
    "each": costs_items,
    "columns": [("op kind", lambda c: c.item["kind"]),
                ("GPT-2 small, seq 1024, batch 8: ops", costs_col("gpt", "ops")), ("ms", costs_col("gpt", "ms")),
                ("share", costs_col("gpt", "share")),
                ("BERT-base, seq 128, batch 32: ops", costs_col("bert", "ops")), ("ms ", costs_col("bert", "ms")),
                ("share ", costs_col("bert", "share"))]}

EXPERIMENTS["transformer-peaks-cpu"] = {
    "kind": "runs", "serial": True,
    "about": "policy none, cpu backend (real kernels), caching allocator, one iteration; 1 GB = 10^9 bytes",
    "defaults": {"backend": "cpu", "iters": 1},
    "rows": [{"model": m, "batch": 8, "seq": 32, "optimizer": o} for m in ("gpt-tiny", "bert-tiny") for o in ("sgd", "adam")] +
            [{"model": "gpt2-small", "batch": b, "seq": 128, "optimizer": "adam"} for b in (1, 4, 8)] +
            [{"model": "gpt2-small", "batch": 8, "seq": 128, "optimizer": "sgd"},
             {"model": "gpt2-small", "batch": 1, "seq": 1024, "optimizer": "adam"}] +
            [{"model": "bert-base", "batch": b, "seq": 128, "optimizer": "adam"} for b in (1, 8, 16)] +
            [{"model": "bert-base", "batch": 16, "seq": 128, "optimizer": "sgd"},
             {"model": "bert-base", "batch": 32, "seq": 128, "optimizer": "adam"}],
    "runs": [("train", lambda r, got: train(r, "--budget", "64GiB"))],
    "columns": [("model", lambda c: c.row["model"]), ("batch", lambda c: c.row["batch"]), ("seq", lambda c: c.row["seq"]),
                ("optimizer", lambda c: c.row["optimizer"]),
                ("params", lambda c: (lambda n: f"{n:,}" if n < 10**6 else f"{n / 1e6:.2f}M")(c.rep["train"]["graph"]["param_bytes"] // 4)),
                ("persistent", lambda c: (lambda n: f"{n / 1e6:.2f} MB" if n < 10**8 else f"{n / 1e9:.3f} GB")(c.rep["train"]["graph"]["persistent_bytes"])),
                ("peak allocated", lambda c: (lambda n: f"{n / 1e6:.2f} MB" if n < 10**8 else f"{n / 1e9:.3f} GB")(c.rep["train"]["summary"]["peak_allocated_bytes"])),
                ("16 B/param (fp32 Adam model states)", lambda c: "" if c.row["optimizer"] != "adam" else
                 (lambda n: f"{n / 1e6:.2f} MB" if n < 10**8 else f"{n / 1e9:.3f} GB")(16 * (c.rep["train"]["graph"]["param_bytes"] // 4)))]}



# Unified memory (um, um-prefetch) against capuchin and dtr on the sim backend: budgets at
# 1/1.5, 1/2, 1/3 and 1/4 of none's peak at the reference batch; time against none's (the
# fastest iteration after the first), um-prefetch's prefetch accuracy (last iteration).

UM_MODELS = [{"model": "resnet50", "batch": 32}, {"model": "vgg16", "batch": 64},
             {"model": "gpt2-small", "batch": 8, "optimizer": "adam"}, {"model": "bert-base", "batch": 32, "optimizer": "adam"}]
UM_FRACTIONS = [(1 / 1.5, "1/1.5"), (0.5, "1/2 = 50%"), (1 / 3, "1/3"), (0.25, "1/4 = 25%")]
UM_POLICIES = ["um", "um-prefetch", "capuchin", "dtr"]


def fastest(rep):
    return min(i["time_ms"] for i in steady(rep))


def um_accuracy(rep):
    if rep is None:
        return "n/a"
    u = rep["iterations"][-1]["unified_memory"]
    if not u["prefetches"]:
        return "n/a"
    return f"{(u['prefetch_hits'] + u['prefetch_late']) / u['prefetches']:.2f} ({u['prefetch_late']} late of {u['prefetches']})"


def um_sim(gpu):
    return {
        "kind": "runs",
        "about": f"sim {gpu}, 4 iterations, reference batch (Adam for the transformers): each policy at 1/1.5 ... 1/4 "
                 "of none's peak, the fastest iteration after the first against none's",
        "defaults": {"backend": "sim", "gpu": gpu, "iters": 4},
        "rows": [{**m, "fraction": f, "label": l} for m in UM_MODELS for f, l in UM_FRACTIONS],
        "runs": [("none", lambda r, got: train(r, "--policy", "none"))] +
                [(p, lambda r, got, p=p: train(r, "--policy", p, "--budget", fraction_of_peak(got["none"], r["fraction"])))
                 for p in UM_POLICIES],
        "columns": [("model (batch, none's time, peak)", lambda c: "{} ({}, {:.0f} ms, {:.2f} GiB)".format(
                        c.row["model"], c.row["batch"], fastest(c.rep["none"]), c.rep["none"]["summary"]["peak_allocated_bytes"] / 2**30)),
                    ("budget", lambda c: f"{c.row['label']} = {fraction_of_peak(c.rep['none'], c.row['fraction']) / 2**30:.2f} GiB")] +
                   [(p, lambda c, p=p: f"{fastest(c.rep[p]) / fastest(c.rep['none']):.2f}×" if c.rep[p] else "OOM")
                    for p in UM_POLICIES] +
                   [("um-prefetch accuracy", lambda c: um_accuracy(c.rep["um-prefetch"]))]}


def um_maxbatch(gpu):
    return {
        "kind": "runs", "about": f"`vtensor maxbatch --model M --gpu {gpu} --policy P` (Adam for the transformers), "
                                 "budget = the GPU's memory; samples/s predicted at that batch; managed peak: the bytes "
                                 "the batch's tensors occupy in the managed range",
        "rows": [{**{k: v for k, v in m.items() if k != "batch"}, "gpu": gpu} for m in UM_MODELS],
        "runs": [(p, lambda r, got, p=p: maxbatch(r, "--policy", p)) for p in ("um", "um-prefetch")],
        "columns": [("model", lambda c: c.row["model"])] +
                   [(p, lambda c, p=p: "{} ({:.1f}/s, managed peak {})".format(
                       c.rep[p]["max_batch"], 1e3 * c.rep[p]["max_batch"] / c.rep[p]["iteration_ms"],
                       gib(c.rep[p]["peak_allocated_bytes"]))) for p in ("um", "um-prefetch")]}


EXPERIMENTS["um-sim-p100"] = um_sim("p100-16g")
EXPERIMENTS["um-sim-h100"] = um_sim("h100-80g")
EXPERIMENTS["um-maxbatch-p100"] = um_maxbatch("p100-16g")
EXPERIMENTS["um-maxbatch-h100"] = um_maxbatch("h100-80g")



# FreeLunch's ablation: compress with each switch off, at the reference batch and 50% / 25% of
# none's peak; each cell the time against none's (fastest iteration after the first), the
# maximum batch in that budget (searched by the runner with train runs, to within 2%: `vtensor
# maxbatch` does not take the ablation switches), and the GiB swapped and compressed per
# iteration (medians after the first) with the compression ratio.

ABLATION = [("compress", []), ("compress@no-sliding-workspace", ["--no-sliding-workspace"]),
            ("compress@no-persistent-buffers", ["--no-persistent-buffers"]),
            ("compress@compress-on-compute-stream", ["--compress-on-compute-stream"])]


def densities_args(row):
    d = densities(row)
    return ["--densities", d] if d else []


def ablation_cell(c, name):
    r, mb = c.rep[name], c.rep[name + " max batch"]["max_batch"]
    if r is None:
        return f"OOM / {mb}"
    cb = median(i.get("compressed_bytes", 0) for i in steady(r))
    ca = median(i.get("compressed_to_bytes", 0) for i in steady(r))
    return "{:.2f}× / {}; swap {:.2f}, compr. {:.2f} ({})".format(
        fastest(r) / fastest(c.rep["none"]), mb, median(i["swapped_out_bytes"] for i in steady(r)) / 2**30, cb / 2**30,
        f"{ca / cb:.3f}" if cb else "-")


def compress_ablation(gpu):
    def budget(r, got):
        return fraction_of_peak(got["none"], r["fraction"])
    runs = [("none", lambda r, got: train(r, *UNLIMITED))]
    for name, flags in ABLATION:
        runs.append((name, lambda r, got, f=flags: train(r, "--policy", "compress", "--budget", budget(r, got), *f,
                                                        *densities_args(r))))
        runs.append((name + " max batch", lambda r, got, f=flags: {
            "start": r["batch"], "precision": 0.02,
            "search": lambda b, r=r, B=budget(r, got): train({**r, "batch": b, "iters": 3}, "--policy", "compress",
                                                             "--budget", B, *f, *densities_args(r))}))
    return {
        "kind": "runs",
        "about": f"compress with each ablation switch, sim {gpu}, reference batch, 4 iterations (3 per max-batch probe), "
                 "densities from bench/densities/; each cell: time vs none / max batch in the budget (to within 2%); "
                 "GiB swapped and compressed per iteration (ratio)",
        "defaults": {"backend": "sim", "gpu": gpu, "iters": 4},
        "rows": [{"model": m, "batch": b, "fraction": f} for m, b in (("resnet50", 32), ("vgg16", 64)) for f in (0.5, 0.25)],
        "runs": runs,
        "columns": [("model", lambda c: c.row["model"]), ("budget", lambda c: f"{c.row['fraction']:.2f} = {gib(fraction_of_peak(c.rep['none'], c.row['fraction']))}")] +
                   [(name, lambda c, n=name: ablation_cell(c, n)) for name, _ in ABLATION]}


EXPERIMENTS["compress-ablation-p100"] = compress_ablation("p100-16g")
EXPERIMENTS["compress-ablation-h100"] = compress_ablation("h100-80g")



# The DTR artifact's operator logs replayed under the Capuchin modes and dtr, one table per GPU,
# with (p100-16g) Capuchin's own prediction for its hybrid plan: the C++ benchmark
# vtensor_dtr_log_plan (12 GB/s assumed, stalls summed, not executed), which the CLI cannot give.

DTR_LOG_POLICIES = ["capuchin-swap", "capuchin-recompute", "capuchin", "dtr"]


def dtr_log_budgets(log):
    return ["50%", "25%"] + (["4GB"] if log == "transformer" else [])


def dtr_log_prediction(c):
    b = c.row["budget"]
    for x in c.rep["plan"]:
        if x["mode"] != "capuchin":
            continue
        if (b.endswith("%") and abs(float(x["budget_fraction"]) - float(b[:-1]) / 100) < 1e-3) or \
                (b == "4GB" and int(x["budget_bytes"]) == 4000000000):
            return f"{float(x['predicted_overhead']):.2f}×" + ("" if x["fits"] == "1" else " (does not fit)")
    return ""


def dtr_logs_gpu(gpu, prediction):
    runs = [("sweep", lambda r, got: ["sweep", "--trace", f"dtr:{r['log']}", "--gpu", gpu, "--iters", 4,
                                      "--policies", ",".join(DTR_LOG_POLICIES), "--budgets", ",".join(dtr_log_budgets(r["log"]))])]
    cols = [("log", lambda c: c.row["log"]),
            ("budget", lambda c: "{} = {:.2f} GB of {:.2f}".format(c.row["budget"], int(sweep_row(c, "capuchin")["budget_bytes"]) / 1e9,
                                                                   int(sweep_row(c, "capuchin")["unmanaged_peak_bytes"]) / 1e9))] + \
           [(p, lambda c, p=p: sweep_cell(c, p, lambda x: f"{float(x['overhead']):.2f}×")) for p in DTR_LOG_POLICIES]
    if prediction:
        runs.append(("plan", lambda r, got: ["bench:vtensor_dtr_log_plan", f"dtr:{r['log']}", "--fractions", "0.5,0.25",
                                             *(["--budgets", "4000000000"] if r["log"] == "transformer" else [])]))
        cols.append(("capuchin, planner's prediction", dtr_log_prediction))
    return {"kind": "runs", "needs": ["vtensor_dtr_log_plan"] if prediction else [],
            "about": f"`vtensor sweep --trace dtr:LOG --gpu {gpu} --iters 4` at 50% / 25% of each log's unmanaged peak (and "
                     "4 GB for the Transformer); time against the log's unmanaged replay" +
                     ("; the last column from build/bench/vtensor_dtr_log_plan (-DVTENSOR_BUILD_BENCH=ON)" if prediction else ""),
            "rows": [{"log": log, "budget": b} for log in DTR_LOGS for b in dtr_log_budgets(log)],
            "runs": runs, "columns": cols}


EXPERIMENTS["dtr-logs-p100"] = dtr_logs_gpu("p100-16g", True)
EXPERIMENTS["dtr-logs-h100"] = dtr_logs_gpu("h100-80g", False)



# Capuchin, DTR and the passive baselines on the cpu backend (tiny presets, real data): per
# budget (a fraction of none's peak at batch 32) and policy, the run at batch 32 (16
# iterations; time: the fastest after the first, other figures medians after the first) and the
# largest batch that trains in that budget (the runner's exact search with 3-iteration train
# runs: `vtensor maxbatch` runs on sim only).

CAPUCHIN_CPU_POLICIES = ["none", "capuchin-swap", "capuchin-recompute", "capuchin", "dtr", "vdnn-conv", "lru", "lru-recompute"]


def capuchin_cpu(model, fractions):
    def budget(r, got):
        return fraction_of_peak(got["unbounded"], r["fraction"])

    def ok(fn):
        return lambda c: fn(c.rep["run"]) if c.rep["run"] is not None else "–"

    def mb_vs_none(c):
        n, m = c.rep["none max batch"]["max_batch"], c.rep["max batch"]["max_batch"]
        return f"{m / n:.2f}" if n else "– (none: 0)"

    return {
        "kind": "runs", "serial": True,
        "about": f"{model} on the cpu backend at batch 32, 16 iterations, budget = the fraction of none's peak; max "
                 "batch: the largest batch that trains in the budget (3 iterations per probe, up to 1024); "
                 "time ratios on a shared 2-core machine are noisy",
        "defaults": {"backend": "cpu", "iters": 16, "batch": 32, "model": model},
        "rows": [{"fraction": f, "policy": p} for f in fractions for p in CAPUCHIN_CPU_POLICIES],
        "runs": [("unbounded", lambda r, got: train(r)),
                 ("run", lambda r, got: train(r, "--policy", r["policy"], "--budget", budget(r, got))),
                 ("max batch", lambda r, got: {"start": 32, "limit": 1024, "search": lambda b, r=r, B=budget(r, got): train(
                     {**r, "batch": b, "iters": 3}, "--policy", r["policy"], "--budget", B)}),
                 ("none max batch", lambda r, got: {"start": 32, "limit": 1024, "search": lambda b, r=r, B=budget(r, got): train(
                     {**r, "batch": b, "iters": 3}, "--policy", "none", "--budget", B)})],
        "columns": [
            ("budget", lambda c: "{} × peak = {} (none: {:.2f} ms)".format(
                c.row["fraction"], mib(budget(c.row, c.rep)), fastest(c.rep["unbounded"]))),
            ("policy", lambda c: c.row["policy"]),
            ("peak allocated", lambda c: mib(c.rep["run"]["summary"]["peak_allocated_bytes"]) if c.rep["run"] else
             "OOM" if c.row["policy"] == "none" else "OOM at batch 32"),
            ("time vs none", lambda c: f"{fastest(c.rep['run']) / fastest(c.rep['unbounded']):.2f}" if c.rep["run"] else "–"),
            ("swapped out / iter", ok(lambda r: mib(median(i["swapped_out_bytes"] for i in steady(r))))),
            ("recomputed ops / iter", ok(lambda r: f"{median(i['recomputed_ops'] for i in steady(r)):.1f}")),
            ("stall / iter", ok(lambda r: f"{median(i['stall_ms'] for i in steady(r)):.2f} ms")),
            ("max batch", lambda c: c.rep["max batch"]["max_batch"]),
            ("max batch vs none", mb_vs_none)]}


EXPERIMENTS["capuchin-cpu-resnet-tiny"] = capuchin_cpu("resnet-tiny", [0.5, 0.25])
EXPERIMENTS["capuchin-cpu-vgg-tiny"] = capuchin_cpu("vgg-tiny", [0.62, 0.5, 0.25])



# Unified memory on the cpu backend (tiny presets, real paging): the last iteration's
# unified_memory counters of `vtensor train --iters 4 --policy um|um-prefetch --budget B --um-page-size S`.

def um_cpu_col(fn):
    return lambda c: fn(c.rep["run"]["iterations"][-1]["unified_memory"])


EXPERIMENTS["um-cpu"] = {
    "kind": "runs", "serial": True,
    "about": "`vtensor train --model M --iters 4 --policy P --budget B --um-page-size S [--optimizer adam]` on the cpu "
             "backend, the last iteration's unified_memory counters",
    "defaults": {"backend": "cpu", "iters": 4},
    "rows": [{"model": m, "budget": b, "page": pg, "policy": p, **({"optimizer": "adam"} if m == "gpt-tiny" else {})}
             for m, b, pg in (("resnet-tiny", "1856KiB", "64KiB"), ("vgg-tiny", "1000KiB", "16KiB"), ("gpt-tiny", "1984KiB", "64KiB"))
             for p in ("um", "um-prefetch")],
    "runs": [("none", lambda r, got: train(r)),
             ("run", lambda r, got: train(r, "--policy", r["policy"], "--budget", r["budget"], "--um-page-size", r["page"]))],
    "columns": [
        ("model", lambda c: f"{c.row['model']} (peak {mib(c.rep['none']['summary']['peak_allocated_bytes'])})"
         if c.row["policy"] == "um" else c.row["model"]),
        ("policy", lambda c: c.row["policy"]), ("budget / page", lambda c: f"{c.row['budget']} / {c.row['page']}"),
        ("final loss", lambda c: c.rep["run"]["summary"]["final_loss"], "{:.5f}"),
        ("losses = none", lambda c: loss_equals_none(c.rep["run"], c.rep["none"])),
        ("faults / batches", um_cpu_col(lambda u: f"{u['faults']} / {u['fault_batches']}")),
        ("pages in / out", um_cpu_col(lambda u: f"{u['pages_in']} / {u['pages_out']}")),
        ("prefetched (late)", um_cpu_col(lambda u: f"{u['prefetches']} ({u['prefetch_late']} late)")),
        ("pre-evicted", um_cpu_col(lambda u: u["pre_evictions"])),
        ("invalidated", um_cpu_col(lambda u: u["invalidated_pages"])),
        ("dead pages copied out", um_cpu_col(lambda u: u["dead_pages_out"])),
        ("device peak", um_cpu_col(lambda u: mib(u["peak_device_bytes"])))]}


# FreeLunch on the cpu backend (real codecs): the last of 5 iterations.

def last_it(c, key):
    return c.rep["run"]["iterations"][-1][key]


EXPERIMENTS["compress-cpu"] = {
    "kind": "runs", "serial": True,
    "about": "`vtensor train --model M --policy P --budget B --iters 5` on the cpu backend, the last iteration",
    "defaults": {"backend": "cpu", "iters": 5},
    "rows": [{"model": m, "budget": b, "policy": p, "flags_": fl} for m, bs in (("resnet-tiny", ("1280KiB", "2560KiB")),
                                                                             ("vgg-tiny", ("830KiB",)))
             for b in bs for p, fl in (("lru", []), ("compress", []), ("compress+swap", []),
                                       ("compress", ["--no-persistent-buffers"]))],
    "runs": [("none", lambda r, got: train(r)),
             ("run", lambda r, got: train(r, "--policy", r["policy"], "--budget", r["budget"], *r["flags_"]))],
    "columns": [("model", lambda c: c.row["model"]), ("budget", lambda c: c.row["budget"]),
                ("policy", lambda c: " ".join([c.row["policy"], *c.row["flags_"]])),
                ("final loss", lambda c: c.rep["run"]["summary"]["final_loss"], "{:.4f}"),
                ("losses = none", lambda c: loss_equals_none(c.rep["run"], c.rep["none"])),
                ("peak MiB", lambda c: last_it(c, "peak_allocated_bytes") / 2**20, "{:.2f}"),
                ("swapped out MiB", lambda c: last_it(c, "swapped_out_bytes") / 2**20, "{:.2f}"),
                ("compressed MiB", lambda c: last_it(c, "compressed_bytes") / 2**20, "{:.2f}"),
                ("ratio", lambda c: f"{last_it(c, 'compression_ratio'):.3f}" if last_it(c, "compression_ratio") else "-")]}


# The opt-in lossy codecs: loss drift against none (cpu, real data), compress at a fraction of
# none's peak without --lossy and with each lossy mode.

LOSSY_MODES = [("(lossless)", []), ("--no-persistent-buffers", ["--no-persistent-buffers"]),
               ("bf16", ["--lossy", "bf16", "--no-persistent-buffers"]), ("fp16", ["--lossy", "fp16", "--no-persistent-buffers"]),
               ("int8", ["--lossy", "int8", "--no-persistent-buffers"])]

EXPERIMENTS["lossy-drift"] = {
    "kind": "runs", "serial": True,
    "about": "cpu backend, 20 iterations: none, then compress at the fraction of its peak (rounded down to 512 bytes) "
             "without --lossy and with each lossy mode; the largest |loss - none's loss| over the iterations, the last "
             "iteration's compressed MiB and ratio, the codecs the run used",
    "defaults": {"backend": "cpu", "iters": 20},
    "rows": [{"model": m, "fraction": f, "mode": label, "mode_args": a}
             for m, f in (("resnet-tiny", 0.35), ("vgg-tiny", 0.62)) for label, a in LOSSY_MODES],
    "runs": [("none", lambda r, got: train(r)),
             ("run", lambda r, got: train(r, "--policy", "compress", "--budget",
                                          fraction_of_peak(got["none"], r["fraction"], 512), *r["mode_args"]))],
    "columns": [("model", lambda c: c.row["model"]), ("budget", lambda c: c.row["fraction"]), ("lossy", lambda c: c.row["mode"]),
                ("max abs loss drift", lambda c: max(abs(x["loss"] - y["loss"]) for x, y in
                                                     zip(c.rep["none"]["iterations"], c.rep["run"]["iterations"])), "{:.2e}"),
                ("final loss (none)", lambda c: c.rep["none"]["summary"]["final_loss"], "{:.5f}"),
                ("final loss", lambda c: c.rep["run"]["summary"]["final_loss"], "{:.5f}"),
                ("compressed MiB", lambda c: last_it(c, "compressed_bytes") / 2**20, "{:.2f}"),
                ("ratio", lambda c: f"{last_it(c, 'compression_ratio'):.3f}" if last_it(c, "compression_ratio") else "-"),
                ("codecs", lambda c: ", ".join(sorted({t["codec"] for t in c.rep["run"].get("compression", [])})))]}



# The C++ benchmarks that measure what the CLI cannot (built with -DVTENSOR_BUILD_BENCH=ON):
# the caching allocator's throughput (google benchmark) and vDNN's planned memory per rung.

def gbench_experiment(filt, about, first, label, fmt):
    """A google benchmark of vtensor_bench_allocator (--benchmark_filter=filt): a row per benchmark argument."""
    return {
        "kind": "runs", "needs": ["vtensor_bench_allocator"],
        "about": f"build/bench/vtensor_bench_allocator --benchmark_filter={filt} --benchmark_format=csv: {about}",
        "rows": [{}],
        "runs": [("bench", lambda r, got: ["bench:vtensor_bench_allocator", f"--benchmark_filter={filt}",
                                           "--benchmark_format=csv"])],
        "each": lambda c: c.rep["bench"],
        "columns": [(first, lambda c: c.item["name"].rsplit("/", 1)[1]),
                    (f"{label}, wall", lambda c: float(c.item["real_time"]), fmt),
                    (f"{label}, cpu", lambda c: float(c.item["cpu_time"]), fmt)]}


EXPERIMENTS["allocator-bench"] = gbench_experiment(
    "BM_Caching", "the caching allocator under a training-like pattern of allocations and frees (random sizes, a fixed "
    "number of live blocks)", "live blocks", "alloc-or-free", "{:.0f} ns")
EXPERIMENTS["planner-bench"] = gbench_experiment(
    "BM_Plan", "greedy-size (the planned pool's default planner) on a training-like iteration of N blocks (a quarter "
    "persistent and fixed, half activations alive until their backward, a quarter temporaries)", "blocks", "plan",
    "{:.2f} ms")

EXPERIMENTS["vdnn-plan"] = {
    "kind": "runs", "needs": ["vtensor_vdnn_plan"], "about": "build/bench/vtensor_vdnn_plan vgg16:256 resnet50:128 --inplace-relu-grad vgg16:256 "
                             "resnet50:128: the planned peak and mean of one iteration under each vDNN rung, and the op "
                             "at the peak (planned = measured, asserted in the e2e tests)",
    "rows": [{}],
    "runs": [("plan", lambda r, got: ["bench:vtensor_vdnn_plan", "vgg16:256", "resnet50:128", "--inplace-relu-grad",
                                      "vgg16:256", "resnet50:128"])],
    "each": lambda c: [dict(x, inplace="no" if i < 10 else "yes") for i, x in enumerate(c.rep["plan"])],
    "columns": [("model", lambda c: c.item["model"]), ("batch", lambda c: c.item["batch"]),
                ("in-place relu bwd", lambda c: c.item["inplace"]), ("offload", lambda c: c.item["offload"]),
                ("conv algorithm", lambda c: c.item["conv_algorithm"]),
                ("offloaded GiB", lambda c: int(c.item["offloaded_bytes"]) / 2**30, "{:.2f}"),
                ("peak GiB", lambda c: int(c.item["peak_bytes"]) / 2**30, "{:.2f}"),
                ("peak vs none", lambda c: c.item["peak_vs_none"]), ("mean vs none", lambda c: c.item["mean_vs_none"]),
                ("peak at op", lambda c: c.item["peak_op"])]}



EXPERIMENTS["smoke-runs"] = {
    "kind": "runs", "test_only": True,
    "about": "the runner's own test of kind runs: mlp-tiny on sim, none unbounded, then two policies at half its peak "
             "and the largest batch each trains there",
    "defaults": {"model": "mlp-tiny", "batch": 16, "backend": "sim", "gpu": "p100-16g", "iters": 3},
    "rows": [{"policy": "lru"}, {"policy": "capuchin"}],
    "runs": [("none", lambda r, got: train(r)),
             ("run", lambda r, got: train(r, "--policy", r["policy"], "--budget", fraction_of_peak(got["none"], 0.5))),
             ("max batch", lambda r, got: {"start": r["batch"], "limit": 256, "search": lambda b, r=r, B=fraction_of_peak(
                 got["none"], 0.5): train({**r, "batch": b}, "--policy", r["policy"], "--budget", B)})],
    "columns": [("policy", lambda c: c.row["policy"]),
                ("budget bytes", lambda c: fraction_of_peak(c.rep["none"], 0.5)),
                ("none peak bytes", lambda c: c.rep["none"]["summary"]["peak_allocated_bytes"]),
                ("peak bytes", lambda c: c.rep["run"]["summary"]["peak_allocated_bytes"]),
                ("time vs none", lambda c: steady_mean(c.rep["run"], "time_ms") / steady_mean(c.rep["none"], "time_ms"), "{:.2f}×"),
                ("max batch", lambda c: c.rep["max batch"]["max_batch"])]}



EXPERIMENTS["um-lookahead"] = {
    "kind": "runs",
    "about": "um-prefetch's lookahead: `vtensor train --backend sim --gpu p100-16g --model resnet50 --batch 32 --iters 4 "
             "--policy um-prefetch --budget 1466503936 --um-lookahead D` (50% of none's peak), the last iteration",
    "rows": [{"d": d} for d in (1, 4, 8, 16, 32, 64)],
    "runs": [("run", lambda r, got: train({"model": "resnet50", "batch": 32, "backend": "sim", "gpu": "p100-16g", "iters": 4},
                                          "--policy", "um-prefetch", "--budget", 1466503936, "--um-lookahead", r["d"]))],
    "columns": [("d", lambda c: f"{c.row['d']}" + (" (default)" if c.row["d"] == 4 else "")),
                ("iteration", lambda c: c.rep["run"]["iterations"][-1]["time_ms"], "{:.1f} ms"),
                ("faults", um_cpu_col(lambda u: u["faults"])),
                ("pages in / out", um_cpu_col(lambda u: f"{u['pages_in']} / {u['pages_out']}")),
                ("late prefetches", um_cpu_col(lambda u: u["prefetch_late"])),
                ("stall", um_cpu_col(lambda u: f"{u['stall_ms']:.1f} ms"))]}



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



# Gradient checkpointing's plan at its maximum batch (p100-16g; Adam for the transformers):
# `vtensor maxbatch --policy checkpoint`, then one training run at that batch and its
# policy_report.

def ckpt(c, key):
    return c.rep["run"]["policy_report"][key]


EXPERIMENTS["checkpoint-plan"] = {
    "kind": "runs",
    "about": "`vtensor maxbatch --model M --gpu p100-16g --policy checkpoint`, then `vtensor train --model M --batch "
             "MAX --backend sim --gpu p100-16g --policy checkpoint --iters 2`: its policy_report and last iteration",
    "defaults": {"backend": "sim", "gpu": "p100-16g", "iters": 2},
    "rows": PAPER_MODELS_ADAM,
    "runs": [("mb", lambda r, got: maxbatch(r, "--policy", "checkpoint")),
             ("run", lambda r, got: train({**r, "batch": got["mb"]["max_batch"]}, "--policy", "checkpoint"))],
    "columns": [
        ("model, batch", lambda c: f"{c.row['model']}, {c.rep['mb']['max_batch']}"),
        ("segments / layers (plan kept)", lambda c: f"{ckpt(c, 'segments')} / {ckpt(c, 'layers')} ({ckpt(c, 'rule')})"),
        ("checkpoints", lambda c: f"{ckpt(c, 'checkpoints')}, {gib(ckpt(c, 'checkpoint_bytes'))}"),
        ("dropped per iteration", lambda c: gib(ckpt(c, "dropped_bytes_per_iteration"))),
        ("recomputed ops (plan / measured)", lambda c: "{} / {}".format(
            ckpt(c, "expected_recomputed_ops_per_iteration"), c.rep["run"]["iterations"][-1]["recomputed_ops"])),
        ("Chen's re-run of the segments", lambda c: ckpt(c, "segment_recompute_ops_per_iteration")),
        ("forward ops", lambda c: ckpt(c, "forward_ops")),
        ("recompute / iteration", lambda c: "{:.0f} / {:.0f} ms".format(c.rep["run"]["iterations"][-1]["recompute_ms"],
                                                                         c.rep["run"]["iterations"][-1]["time_ms"])),
        ("planned peak (measured)", lambda c: "{} ({})".format(gib(ckpt(c, "planned_peak_bytes")),
                                                               gib(c.rep["run"]["summary"]["peak_allocated_bytes"]))),
        ("sqrt(L) plan's peak", lambda c: gib(ckpt(c, "sqrt_plan_peak_bytes")))]}


# ---- Markdown

def ratio(r):
    return f"{float(r['overhead']):.2f}×" if r["status"] == "ok" else "OOM"


def md_grid(name, exp, rows):
    pols = []
    for r in rows:
        if r["policy"] not in pols:
            pols.append(r["policy"])
    if exp.get("maxbatch"):
        head = ["model (batch, none's time)", "budget", "none: max batch", *pols]
    else:
        head = ["model (batch)", "budget", "policy", "peak on device MiB", "time vs none", "MiB moved", "recomputed ops",
                "bit-identical"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = []
    for r in rows:
        k = (r["model"], r["batch"], r["budget"])
        if k not in keys:
            keys.append(k)
    for model, batch, budget in keys:
        sel = [r for r in rows if (r["model"], r["batch"], r["budget"]) == (model, batch, budget)]
        budget_text = f"{budget} ({int(sel[0]['budget_bytes']) / 2**30:.2f} GiB)" if exp["backend"] == "sim" else \
            f"{budget} ({int(sel[0]['budget_bytes']) / 2**20:.2f} MiB)"
        if exp.get("maxbatch"):
            cells = {r["policy"]: f"{ratio(r)} / {r['max_batch']}" for r in sel}
            none_ms = float(sel[0]["unmanaged_ms"])
            lines.append("| " + " | ".join([f"{model} ({batch}, {none_ms:.0f} ms)", budget_text, str(sel[0]["none_max_batch"]),
                                            *[cells.get(p, "") for p in pols]]) + " |")
        else:
            for r in sel:
                ok = r["status"] == "ok"
                moved = (int(r["swapped_out_bytes"] or 0) + int(r["swapped_in_bytes"] or 0)) / 2**20
                lines.append("| " + " | ".join([
                    f"{model} ({batch})", budget_text, r["policy"],
                    f"{int(r['peak_device_bytes']) / 2**20:.2f}" if ok else "OOM", ratio(r),
                    f"{moved:.1f}" if ok else "", r["recomputed_ops"] if ok else "",
                    r.get("bit_identical", "") if ok else ""]) + " |")
    return "\n".join(lines)


def md_logs(name, exp, rows):
    pols = exp["policies"]
    head = ["log", "budget", *[f"{p} ({g})" for g in exp["gpus"] for p in pols]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for log in exp["logs"]:
        for b in exp["budgets"] + exp.get("extra_budgets", {}).get(log, []):
            cells = []
            for g in exp["gpus"]:
                for p in pols:
                    r = next((x for x in rows if (x["model"], x["gpu"], x["budget"], x["policy"]) == (log, g, b, p)), None)
                    cells.append(ratio(r) if r else "")
            lines.append("| " + " | ".join([log, b, *cells]) + " |")
    return "\n".join(lines)


def md_maxbatch(name, exp, rows):
    pols = exp["policies"]
    head = ["model", "GPU", *pols, *[f"{a} / {b}" for a, b in exp["ratios"]]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in exp["gpus"]:
        for m in exp["models"]:
            label = model_label(m)
            got = {r["policy"]: r for r in rows if (r["model"], r["gpu"]) == (label, g)}
            cells = [f"{got[p]['max_batch']} ({got[p]['ms_per_sample']:.2f} ms)" if got[p]["max_batch"] else "0"
                     for p in pols]
            for a, b in exp["ratios"]:
                x, y = got[a]["max_batch"], got[b]["max_batch"]
                cells.append(f"{x / y:.2f}×" if y else "–")
            lines.append("| " + " | ".join([label, g, *cells]) + " |")
    return "\n".join(lines)


RUNNERS = {"grid": run_grid, "logs": run_logs, "maxbatch": run_maxbatch}
RENDER = {"grid": md_grid, "logs": md_logs, "maxbatch": md_maxbatch}
RUNNERS["runs"], RENDER["runs"] = run_runs, md_runs


# auto (docs/experiments/auto.md). auto-vs-best and auto-vs-best-logs are derived from
# the rows of headline-p100 / headline-h100 and dtr-logs (run them first, into the same --out);
# auto-search runs `auto` once per row with a report and reads, from its rehearsals, the best of
# the planners as they are against the candidate auto chose, the breakdown of its time and the
# planning time (on this machine: that column is a timing, the others are the sim's).
def run_derived(name, exp, out, jobs):
    src = {}
    for n in exp["from"]:
        path = os.path.join(out, n + ".json")
        if not os.path.exists(path):
            sys.exit(f"[{name}] needs the rows of {n} in {out}: run `bench/run.py {n}` first (or `all`)")
        with open(path) as f:
            src[n] = json.load(f)["rows"]
    return exp["derive"](src)


RUNNERS["derived"], RENDER["derived"] = run_derived, md_runs


# kind torch: a script of the Python package's, run in the project's environment (.venv, made by
# scripts/install.sh), writes its rows as JSON; the columns name them: (header, key, format).
TORCH_PY = os.path.join(ROOT, ".venv", "bin", "python")


def run_torch(name, exp, out, jobs):
    if not os.access(TORCH_PY, os.X_OK):
        sys.exit(f"{TORCH_PY} not found: scripts/install.sh makes the Python environment")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.json")
        cmd = [TORCH_PY, os.path.join(ROOT, exp["script"]), "--json", path, *exp.get("args", [])]
        print(f"[{name}] {' '.join(cmd[1:])}", flush=True)
        if subprocess.run(cmd).returncode != 0:
            sys.exit(f"[{name}] {exp['script']} failed")
        with open(path) as f:
            rows = json.load(f)
    return [{c[0]: r.get(c[1], "") for c in exp["columns"]} for r in rows]


RUNNERS["torch"], RENDER["torch"] = run_torch, md_runs

EXPERIMENTS["torch-policies"] = {
    "kind": "torch",
    "about": "vtensor.torch's policies on CPU torch 2.11, one AdamW step: plain, offload (capuchin, swap) at 50% / 25% "
             "of plain's saved bytes on the device, compress, auto_checkpoint with the saved part of the real peak at "
             "50% / 25%, torch's checkpoint on every block; time is the median of 5 steps against plain's; peak is the "
             "step's real peak above its start (malloc's bytes at op boundaries); on CPU offload's device and host are "
             "one memory, so its real peak does not fall",
    "script": "bench/torch_policies.py",
    "args": ["--steps", "5"],
    "columns": [("model", "model"), ("policy", "policy"), ("budget", "budget"), ("time vs plain", "ratio", "{:.2f}x"),
                ("real peak MiB", "peak", "{:.2f}"), ("saved held MiB", "held", "{:.2f}"),
                ("bit-identical", "identical"), ("what it did", "note")],
}
AUTO_PLAIN = ["capuchin", "capuchin-recompute", "capuchin-swap", "checkpoint", "dtr", "lru-recompute"]


def _ov(r):
    return float(r["overhead"]) if r["status"] == "ok" else None


def _x(v):
    return f"{v:.2f}×" if v is not None else "OOM"


def auto_vs_best(src):
    rows = []
    for n in ("headline-p100", "headline-h100"):
        keys = list(dict.fromkeys((r["model"], r["budget"]) for r in src[n]))
        for m, b in keys:
            sel = {r["policy"]: r for r in src[n] if (r["model"], r["budget"]) == (m, b)}
            if "auto" not in sel:
                continue
            ok = {p: _ov(r) for p, r in sel.items() if _ov(r) is not None and p not in ("auto", "none")}
            best = min(ok, key=ok.get) if ok else None
            a, av = sel["auto"], _ov(sel["auto"])
            target = 1.05 if b == "50%" else 1.15
            rows.append({"model": m, "GPU": a["gpu"], "budget": b, "auto": _x(av),
                         "best other policy": f"{best} {_x(ok[best])}" if best else "none trains",
                         "target": "" if av is None else ("met" if av <= target else "missed"),
                         "auto's max batch": a["max_batch"],
                         "best other's max batch": max((int(r["max_batch"] or 0) for p, r in sel.items()
                                                        if p not in ("auto", "none")), default=0)})
    return rows


def auto_vs_best_logs(src):
    rows, logs = [], src["dtr-logs"]
    for m, g, b in dict.fromkeys((r["model"], r["gpu"], r["budget"]) for r in logs):
        sel = {r["policy"]: r for r in logs if (r["model"], r["gpu"], r["budget"]) == (m, g, b)}
        if "auto" not in sel:
            continue
        ov = {p: _ov(r) for p, r in sel.items() if _ov(r) is not None and p != "none"}
        others = {p: v for p, v in ov.items() if p != "auto"}
        best = min(others, key=others.get) if others else None

        def extra(p):
            return f"{(ov[p] - 1) * 100:.0f}%" if p in ov else "OOM"
        rows.append({"log": m, "GPU": g, "budget": b, "auto": _x(ov.get("auto")),
                     "best other policy": f"{best} {_x(others[best])}" if best else "none trains",
                     "auto's extra": extra("auto"), "dtr's extra": extra("dtr"), "capuchin's extra": extra("capuchin")})
    return rows


def _cols(names):
    return [(k, (lambda k: lambda c: c.row[k])(k)) for k in names]


EXPERIMENTS["auto-vs-best"] = {
    "kind": "derived", "from": ["headline-p100", "headline-h100"], "derive": auto_vs_best,
    "about": "from the rows of headline-p100 and headline-h100: auto beside the fastest other policy per row; "
             "target 1.05x at 50%, 1.15x at 25%; maximum batch in the same budget",
    "columns": _cols(["model", "GPU", "budget", "auto", "best other policy", "target", "auto's max batch",
                      "best other's max batch"])}
EXPERIMENTS["auto-vs-best-logs"] = {
    "kind": "derived", "from": ["dtr-logs"], "derive": auto_vs_best_logs,
    "about": "from the rows of dtr-logs: auto beside the fastest other policy per log, GPU and budget; "
             "extra time = overhead - 1",
    "columns": _cols(["log", "GPU", "budget", "auto", "best other policy", "auto's extra", "dtr's extra",
                      "capuchin's extra"])}


def _auto_src(row):
    return ["--model", row["name"], *row["args"]] if row["cmd"] == "train" else ["--trace", f"dtr:{row['name']}"]


def _auto_budget(row, got):
    if row["budget"] == "4GB":
        return 4_000_000_000
    sw = got.get("budgets")
    hit = [r for r in (sw or []) if r["budget"] == row["budget"]]
    return int(hit[0]["budget_bytes"]) if hit else None


def _none_sweep(row, got):
    """The row's budgets: a sweep of none at 50% and 25% (its unmanaged time and budget bytes)."""
    return ["sweep", *_auto_src(row), "--gpu", row["gpu"], "--policies", "none", "--budgets", "50%,25%", "--iters", "1"]


def _auto_run(row, got, *extra, iters=2):
    b = _auto_budget(row, got)
    if b is None:
        return None
    d = densities({"model": row["name"]}) if row["cmd"] == "train" else None
    return [row["cmd"], *_auto_src(row), *(["--backend", "sim"] if row["cmd"] == "train" else []), "--gpu", row["gpu"],
            "--policy", "auto", "--budget", f"{b}B", "--iters", str(iters), *(["--densities", d] if d else []), *extra]


def _auto(c):
    """From auto's report: its candidate against the best plain planner, what the per-gap search
    added, and where its time goes."""
    rep = c.rep.get("auto")
    if not rep:
        return None
    r = rep["policy_report"]
    trained = {x["policy"]: x["predicted_time_ms"] for x in r["candidates"] if x.get("trained")}
    plain = {k: v for k, v in trained.items() if k in AUTO_PLAIN}
    best = min(plain, key=plain.get) if plain else None
    skipped = sum(1 for x in r["candidates"] if "time limit" in x.get("error", ""))
    unmanaged = float(c.rep["budgets"][0]["unmanaged_ms"])
    search = r.get("search", {})
    start = search.get("start_policy") or r["chosen"]  # the candidate the kept climb started from
    cand = trained.get(start)
    # the search started from the LP's rounded plan (timed: its prefetch times) pinned on that
    # candidate, or from the candidate planned for another fraction of the budget / swap weight
    # The start's label: its origin, then what it was rehearsed again with (vtensor/policy/auto/starts.cpp): ",restored"
    # (the climb rehearsed restored start states), ",compact" (the compacting fallback where the
    # plan does not fit), ",large-wraps" (no wrap swap under the floor); a twin's time is its own.
    origin, *twins = search.get("start", "").split(",")
    lp_start = {"lp": "LP on ", "lp-timed": "LP timed on ", "lp-whole": "LP whole on ",
                "lp-whole-capped": "LP whole capped on ", "lp-rec": "LP recomputations on ",
                "headroom": "headroom "}.get(origin, "")
    if "restored" in twins:
        lp_start = "restored " + lp_start
    twin = ", ".join({"compact": "compacting", "large-wraps": "large wraps"}[t] for t in twins if t != "restored")
    twin = f" [{twin}]" if twin else ""
    if lp_start or twin or (cand is None and "candidate_time_ms" in search):  # or a start with ",edf" toggled
        cand = search["candidate_time_ms"]
    if cand is None or "predicted_time_ms" not in r:
        return None
    ms = r["predicted_time_ms"]
    stall, rec = r.get("predicted_stall_ms", 0), r.get("predicted_recompute_ms", 0)
    compact = r.get("predicted_compaction_ms", 0)
    searched = search.get("time_ms", ms)  # the search's end; the run's start state may differ
    climbed = search.get("climbed_time_ms", searched)
    window = search.get("window", {}).get("rehearsals", 0)
    state = (r.get("start_state") or {}).get("state", "packed")
    warm = (r.get("warm_start") or {}).get("variant")
    order = r.get("need_order") or {}
    need = order.get("variant") if order.get("won") else None
    high = (r.get("placement") or {}).get("high_from_bytes", 0)
    then = (f"; {state} start" if state != "packed" else "") + (f"; warm ({warm})" if warm else "") + \
        (f"; issue order ({need})" if need else "") + (f"; placed high (≥ {high / 2**20:.0f} MiB)" if high else "")
    return {"best": f"{best} {plain[best]:.1f} ms" if best else "none trains",
            "choice": f"{lp_start}{start}{twin} {cand:.1f} ms" + (f" (plan: {r['chosen']})" if r["chosen"] != start else ""),
            "searched": f"{climbed:.1f} → {searched:.1f} ms ({len(r.get('pins', []))} pinned)"
                        + (f"{then} {ms:.1f} ms" if then else ""),
            "gain": f"{(1 - cand / plain[best]) * 100:.1f}% + {(1 - climbed / cand) * 100:.1f}% + "
                    f"{(1 - searched / climbed) * 100:.1f}%" if best else "",
            "parts": f"{unmanaged:.1f} + {stall:.1f} + {rec:.1f} + {compact:.1f} + {_tenth(ms - unmanaged - stall - rec - compact)}",
            "swapped": f"{r.get('predicted_swapped_out_bytes', 0) / 2**30:.2f}",
            "planning": f"{r['planning_ms'] / 1e3:.2f}",
            "tried": f"{len(r['candidates']) - skipped} / {skipped} / {search.get('rehearsals', 0) - window} + {window}",
            "bound": _bound(r.get("bound"), unmanaged), "lp": _lp(r.get("lp"), unmanaged)}


def _tenth(x):
    """x to 0.1, without a "-0.0" for what rounds to nothing."""
    return f"{x:.1f}" if abs(x) >= 0.05 else "0.0"


def _lp(lp, unmanaged):
    """The linear program's optimum (lp.h) against the unmanaged iteration, and its solve time."""
    if not lp:
        return ""
    if lp["status"] == "working set":
        return "no plan (working set)"
    if lp["time_ms"] is None:
        return f"not solved ({lp['status']}, {lp['wall_ms'] / 1e3:.2f} s)"
    return f"{lp['time_ms'] / unmanaged:.3f}× ({lp['wall_ms'] / 1e3:.2f} s)"


def _bound(b, unmanaged):
    """The lower bound on swap / recompute plans (bound.h), against the unmanaged iteration."""
    if not b:
        return ""
    if not b["feasible"]:
        return "no plan (working set)"
    return f"{b['time_ms'] / unmanaged:.3f}× ({b['binds']})"


def _auto_col(key):
    return lambda c: (_auto(c) or {}).get(key, "OOM" if key in ("best", "choice") else "")


def auto_search(rows, what):
    return {
        "kind": "runs", "serial": True,  # the planning column is a timing
        "about": f"{what}: per row `vtensor {rows[0]['cmd']} ... --policy auto --budget B --iters 2 --report R` on sim "
                 "(B from a sweep of none); from the report, the best planner as it is, the "
                 "time of the candidate auto chose, after its per-gap climb and after its window search (decisions "
                 "pinned), the gain of each step, the breakdown of auto's time (unmanaged + stall on copies + "
                 "recompute + compaction moves (their waits for copies are stall) + the rest: the extra ops' launches, "
                 "codecs), and the planning time on this machine "
                 "(candidates rehearsed / cut by the time limit / the climb's + the window's rehearsals), and "
                 "the report's lower bounds on any swap / recompute plan over the unmanaged time: bound.h's per op, "
                 "and the linear program's over the whole iteration (lp.h; its solve time). 'LP on X': the search "
                 "started from the LP's rounded plan pinned on candidate X ('LP timed on X': with the LP's prefetch times; "
                 "'LP whole on X': with those moved earlier for the whole tensor's copy; 'LP whole capped on X': "
                 "and only the swaps whose bytes the LP's own cover; 'LP recomputations on X': only the LP's "
                 "recomputations pinned, the swaps left to the greedy); "
                 "'headroom X': from X, a candidate planned for another fraction of the budget or swap weight; "
                 "',edf' in X: planned with the D2H queue in deadline order; 'restored ...': that start's climb "
                 "rehearsed restored start states (StartState); 'X [compacting]': that start rehearsed with the "
                 "compacting fallback where its plan does not fit (compact_unfit); 'X [large wraps]': with no wrap "
                 "swap of a persistent tensor under the floor (min_wrap_bytes); '; S start': the start state S that runs, where not "
                 "packed, '; warm (V)': the warm start that runs (the steady layout, the feedback's trigger moves, "
                 "or both: AutoPolicy::warm_start), '; issue order (V)': then planned for the H2D stream's issue order "
                 "(AutoPolicy::need_order; V: 'need', one op's prefetches issued in the order their tensors are "
                 "needed, ',need' in the plan; 'fifo', the H2D queue planned in issue order, ',fifo'; or both), "
                 "'; placed high (≥ N MiB)': then the device allocator's requests of N MiB or more placed at the top "
                 "of their free block (AutoPolicy::placement), "
                 "then the prediction; "
                 "'(plan: Y)': the climb's headroom moves ended at Y",
        "rows": rows,
        "runs": [("budgets", _none_sweep), ("auto", _auto_run)],
        "columns": [("row", lambda c: c.row["name"]), ("GPU", lambda c: c.row["gpu"]),
                    ("budget", lambda c: c.row["budget"]),
                    ("best planner as it is", _auto_col("best")), ("auto's candidate", _auto_col("choice")),
                    ("after the climb → the window search", _auto_col("searched")),
                    ("gain: candidate + climb + window", _auto_col("gain")),
                    ("auto's time: unmanaged + stall + recompute + compaction + rest (ms)", _auto_col("parts")),
                    ("GiB swapped out", _auto_col("swapped")), ("planning (s)", _auto_col("planning")),
                    ("candidates rehearsed / skipped / climb + window rehearsals", _auto_col("tried")),
                    ("no swap / recompute plan below (× unmanaged; what binds)", _auto_col("bound")),
                    ("LP bound (× unmanaged; solve)", _auto_col("lp"))]}


def _recompute(c):
    """What auto's guided iteration recomputed (by op kind) and swapped, beside what the LP's
    optimum recomputes and swaps."""
    rep = c.rep.get("auto")
    if not rep:
        return None
    it, r = rep["iterations"][-1], rep["policy_report"]
    unmanaged = float(c.rep["budgets"][0]["unmanaged_ms"])
    kinds = it.get("recompute_by_kind") or []
    repeats = sum(k["repeats"] for k in kinds)
    repeat_ms = sum(k["repeat_ms"] for k in kinds)
    lp = r.get("lp") or {}
    has_lp = lp.get("time_ms") is not None
    return {"time": f"{r['predicted_time_ms'] / unmanaged:.3f}×",
            "re-run": f"{it['recomputed_ops']} in {it['recompute_ms']:.2f} ms" + (f" ({repeats} repeats, {repeat_ms:.2f} ms)" if repeats else ""),
            "kinds": ", ".join(f"{k['kind']} {k['ops']} ({k['ms']:.2f})" for k in kinds[:3]) or "none",
            "restored": f"{sum(k['restored_bytes'] for k in kinds) / 2**30:.2f}",
            "swapped": f"{it['swapped_out_bytes'] / 2**30:.2f}",
            "chain": _longest_chain(it.get("recompute_chains") or []),
            "lp": f"{lp['recompute_ms']:.2f} ms, {lp['recomputed_bytes'] / 2**30:.2f} / {lp['swapped_bytes'] / 2**30:.2f}"
                  if has_lp else ""}


def _longest_chain(chains):
    """The restore that re-ran most ops: ops, ms and GiB restored, and the op that needed it."""
    if not chains:
        return ""
    c = max(chains, key=lambda c: (c["ops"], c["ms"]))
    return f"{c['ops']} op{'s' if c['ops'] != 1 else ''}, {c['ms']:.2f} ms, {c['restored_bytes'] / 2**30:.2f} GiB at {c['op_name']}"


def _recompute_col(key):
    return lambda c: (_recompute(c) or {}).get(key, "OOM" if key == "time" else "")


EXPERIMENTS["auto-recompute"] = {
    "kind": "runs", "serial": True,
    "about": "the paper models: per row `vtensor train ... --policy auto --budget B --iters 2 --report R` on sim "
             "(B from a sweep of none); from the report, the plan's predicted time over the unmanaged iteration "
             "(as in auto-vs-best), and from its guided iteration the "
             "ops it re-ran and their time (of them the repeats: an op re-run again in the same iteration), the "
             "three op kinds that took most of it (ops, ms), the GiB those recomputations restored (transient "
             "intermediates of a chain included), the longest chain (the restore that re-ran most ops with its "
             "dropped sources: ops, ms, GiB restored, and the op that needed it) and the GiB swapped out; beside them the linear program's "
             "optimum (lp.h, the report's lp): its recomputation time, GiB recomputed / GiB swapped",
    "rows": None,  # set below: the rows of auto-search-models
    "runs": [("budgets", _none_sweep), ("auto", _auto_run)],
    "columns": [("row", lambda c: c.row["name"]), ("GPU", lambda c: c.row["gpu"]),
                ("budget", lambda c: c.row["budget"]), ("auto's plan (× unmanaged)", _recompute_col("time")),
                ("ops re-run (repeats)", _recompute_col("re-run")), ("most time (ops, ms)", _recompute_col("kinds")),
                ("GiB restored by recomputation", _recompute_col("restored")),
                ("longest chain", _recompute_col("chain")),
                ("GiB swapped out", _recompute_col("swapped")),
                ("LP: recompute, GiB recomputed / swapped", _recompute_col("lp"))]}


EXPERIMENTS["auto-search-models"] = auto_search(
    [{"cmd": "train", "name": m["model"], "budget": b, "gpu": g,
      "args": ["--batch", str(m["batch"]), *(["--seq", str(m["seq"])] if "seq" in m else [])]}
     for g in ("p100-16g", "h100-80g") for m in PAPER_MODELS for b in ("50%", "25%")], "the paper models")
EXPERIMENTS["auto-search-logs"] = auto_search(
    [{"cmd": "replay", "name": l, "budget": b, "gpu": g, "args": []}
     for g in ("p100-16g", "h100-80g") for l in DTR_LOGS for b in ["50%", "25%"] + (["4GB"] if l == "transformer" else [])],
    "the DTR logs")


# auto's run-to-run spread on the wall clock (--auto-clock wall): each row's auto command run again
# and again, one after another. Where the search stops at the planning limit, what it rehearsed
# depends on the machine's speed and load, so the plan (and the verdict against the target or the
# best other policy) can move. The default clock (rehearsals) has no spread by construction.
def _repeat_ms(rep):
    """The iteration time as the sweeps report it: the mean after the measured one."""
    its = rep["iterations"][1:] or rep["iterations"]
    return sum(i["time_ms"] for i in its) / len(its)


def _repeat_col(kind, repeats):
    def cell(c):
        reps = [c.rep.get(f"auto{k}") for k in range(repeats)]
        if not c.rep.get("budgets") or any(r is None for r in reps):
            return "OOM" if kind == "runs" else ""
        unmanaged = float(c.rep["budgets"][0]["unmanaged_ms"])
        over = [_repeat_ms(r) / unmanaged for r in reps]
        target = 1.05 if c.row["budget"] == "50%" else 1.15
        if kind == "runs":
            return " / ".join(f"{x:.4f}×" for x in over)
        if kind == "range":
            return f"{min(over):.4f}–{max(over):.4f}× ({(max(over) / min(over) - 1) * 100:.1f}%)"
        if kind == "met":
            return f"{sum(x <= target for x in over)} of {len(over)} ({target:.2f}×)"
        plans = [r["policy_report"]["planning_ms"] / 1e3 for r in reps]
        return f"{min(plans):.2f}–{max(plans):.2f}"
    return cell


def _repeat_run(k):
    """The k-th run of the row's auto command (a repeat: the memo runs it again)."""
    def run(row, got):
        args = _auto_run(row, got, "--auto-clock", "wall", iters=4)
        return {"args": args, "repeat": k} if args else None
    return run


def auto_repeat(rows, what, repeats):
    train = rows[0]["cmd"] == "train"
    return {
        "kind": "runs", "serial": True,  # the spread is the planning limit's, so nothing runs beside a run
        "about": f"auto's run-to-run spread on {what}: per row `vtensor {rows[0]['cmd']} ...{' --backend sim' if train else ''} --gpu G --policy auto "
                 f"--budget B --iters 4{' [--densities bench/densities/M.json]' if train else ''} --auto-clock wall --report R` on sim, "
                 f"{repeats} times in a row (B from a sweep of none); each run's mean iteration after the measured one "
                 "(as the sweeps report it) over none's; the runs in order, their range (max / min - 1), "
                 + ("how many meet the target, " if train else "") + "and the planning time's range (s)",
        "rows": rows,
        "runs": [("budgets", _none_sweep), *[(f"auto{k}", _repeat_run(k)) for k in range(repeats)]],
        "columns": [("model" if train else "log", lambda c: c.row["name"]), ("GPU", lambda c: c.row["gpu"]),
                    ("budget", lambda c: c.row["budget"]), ("auto's overhead, run by run", _repeat_col("runs", repeats)),
                    ("range (spread)", _repeat_col("range", repeats)),
                    *([("runs that meet the target", _repeat_col("met", repeats))] if train else []),
                    ("planning (s)", _repeat_col("planning", repeats))]}


EXPERIMENTS["auto-recompute"]["rows"] = EXPERIMENTS["auto-search-models"]["rows"]
EXPERIMENTS["auto-repeat"] = auto_repeat(EXPERIMENTS["auto-search-models"]["rows"], "the paper rows", 5)
EXPERIMENTS["auto-repeat-logs"] = auto_repeat(EXPERIMENTS["auto-search-logs"]["rows"], "the DTR logs", 3)


# auto's default planning clock against this machine: per row, what the rehearsals counted on the
# clock (their ops, and what they recomputed, compacted and evicted: AutoPolicy's kClockNs*) and
# how long they took. bench/fit_clock.py fits the clock's rates to these rows.
def _clock(c):
    rep = c.rep.get("auto")
    if not rep:
        return None
    r = rep["policy_report"]
    k = r["planning_clock"]
    ch = k["charged"]
    return {"iterations": f"{k['rehearsed_iterations']}",
            "graph": f"{ch['graph_ops']} / {ch['graph_tensors']}",
            "charged": f"{ch['recomputed_ops']} / {ch['compactions']} / {ch['evictions']}",
            "clock": f"{k['clock_ms'] / 1e3:.3f} = {(k['clock_ms'] - k['charged_ms']) / 1e3:.3f} + {k['charged_ms'] / 1e3:.3f}",
            "wall": f"{k['rehearsals_wall_ms'] / k['workers'] / 1e3:.3f}",
            "ratio": f"{k['rehearsals_wall_ms'] / k['workers'] / max(k['clock_ms'], 1e-9):.2f}",
            "planning": f"{r['planning_ms'] / 1e3:.2f}"}


def _clock_col(key):
    return lambda c: (_clock(c) or {}).get(key, "OOM")


EXPERIMENTS["planning-clock"] = {
    "kind": "runs", "serial": True,  # its figures are timings
    "about": "auto's planning clock (the default, --auto-clock rehearsals) against this machine: per row "
             "`vtensor train|replay ... --policy auto --budget B --iters 2 --report R` on sim (B from a sweep of none), "
             "and from the report's planning_clock: the iterations rehearsed, the graph's ops / tensors, what the "
             "finished rehearsals recomputed (ops) / compacted / evicted (each x its iterations), the clock it "
             "counted (ops + charged, over the 2 workers), the rehearsals' own wall time over the 2 workers, their "
             "ratio, and the whole planning time. bench/fit_clock.py bench-out/planning-clock.json fits the clock's "
             "rates to these rows",
    "rows": [r for r in EXPERIMENTS["auto-search-models"]["rows"] if r["name"] != "vgg16" or r["budget"] == "50%"] +
            [{"cmd": "replay", "name": l, "budget": "25%", "gpu": "p100-16g", "args": []}
             for l in ("densenet121", "inceptionv4", "lstm", "unet")],
    "runs": [("budgets", _none_sweep), ("auto", _auto_run)],
    "columns": [("row", lambda c: c.row["name"]), ("GPU", lambda c: c.row["gpu"]), ("budget", lambda c: c.row["budget"]),
                ("rehearsed iterations", _clock_col("iterations")), ("graph ops / tensors", _clock_col("graph")),
                ("recomputed ops / compactions / evictions", _clock_col("charged")),
                ("clock (s): ops + charged", _clock_col("clock")), ("rehearsals' wall (s)", _clock_col("wall")),
                ("wall / clock", _clock_col("ratio")), ("planning (s)", _clock_col("planning"))]}


# auto's wall cap (--auto-wall-cap; bench/run.py turns it off elsewhere): the rows with the largest
# graphs, each planned with the default cap (the limits + 0.2 s) and without one: the planning time,
# whether the cap cut it, and what that cost the plan (the iteration time against the unmanaged one).
def _wall_cap(c, key):
    rep = c.rep.get(key)
    if not rep or not c.rep.get("budgets"):
        return None
    r = rep["policy_report"]
    unmanaged = float(c.rep["budgets"][0]["unmanaged_ms"])
    return {"planning": f"{r['planning_ms'] / 1e3:.2f}", "capped": "yes" if r["planning_clock"].get("wall_capped") else "no",
            "overhead": f"{_repeat_ms(rep) / unmanaged:.4f}×"}


def _wall_cap_col(key, field):
    return lambda c: (_wall_cap(c, key) or {}).get(field, "OOM")


EXPERIMENTS["auto-wall-cap"] = {
    "kind": "runs", "serial": True,  # its figures are timings
    "about": "auto's wall cap on the rows with the largest graphs: per row `vtensor replay --trace dtr:LOG --gpu G "
             "--policy auto --budget B --iters 2 --auto-wall-cap S` on sim (B from a sweep of none), S the default "
             "(9.5 s: the limits + 0.2 s) and 0 (none): the planning time, whether the cap cut the planning, and "
             "the overhead (mean iteration after the measured one over the unmanaged time). The capped plan depends "
             "on this machine's speed and load; rerun, it may differ",
    "rows": [{"cmd": "replay", "name": l, "budget": b, "gpu": g, "args": []}
             for g in ("p100-16g", "h100-80g") for l, b in (("densenet121", "25%"), ("inceptionv4", "50%"),
                                                            ("inceptionv4", "25%"), ("treelstm", "25%"),
                                                            ("unroll_gan", "25%"))],
    "runs": [("budgets", _none_sweep), ("capped", lambda row, got: _auto_run(row, got, "--auto-wall-cap", "9.5")),
             ("uncapped", lambda row, got: _auto_run(row, got, "--auto-wall-cap", "0"))],
    "columns": [("row", lambda c: c.row["name"]), ("GPU", lambda c: c.row["gpu"]), ("budget", lambda c: c.row["budget"]),
                ("planning (s), cap 9.5 s", _wall_cap_col("capped", "planning")),
                ("cut by the cap", _wall_cap_col("capped", "capped")),
                ("planning (s), no cap", _wall_cap_col("uncapped", "planning")),
                ("overhead, cap 9.5 s", _wall_cap_col("capped", "overhead")),
                ("overhead, no cap", _wall_cap_col("uncapped", "overhead"))]}


# auto's codec rate on the cpu backend (--auto-codec-rate): a compressing plan (only the compression
# candidates) planned with the codec timed on the backend, and with the model (the modelled GPU's
# bandwidth in the rehearsals): its prediction against its run, and where the run's extra time went.

def _codec_run(row, got, rate):
    return train(row, "--policy", "auto", "--budget", fraction_of_peak(got["none"], row["fraction"], 512),
                 "--auto-candidates", "compress+capuchin,compress+capuchin@0.94,compress+swap",
                 "--auto-codec-rate", rate, "--auto-replay-guard", "off")


def _codec_col(fn):
    def col(c):
        rep = c.rep["run"]
        if rep is None:
            return "OOM"
        return fn(rep["policy_report"], rep["iterations"][2:])
    return col


EXPERIMENTS["auto-codec-cpu"] = {
    "kind": "runs", "serial": True,  # its figures are timings
    "about": "`vtensor train --model M --backend cpu --policy auto --budget B --iters 8 --auto-candidates "
             "compress+capuchin,compress+capuchin@0.94,compress+swap --auto-codec-rate R --auto-replay-guard off`, "
             "B the fraction of none's peak (rounded down to 512 B): the chosen plan's prediction and the median of "
             "iterations 2-7; the codecs' time per iteration (the run's compress_ms + decompress_ms) and its stall "
             "beside the prediction's. Timings on this 2-core machine; rerun, they move",
    "defaults": {"backend": "cpu", "iters": 8},
    "rows": [{"model": m, "fraction": f, "rate": r} for m in ("resnet-tiny",) for f in (0.5, 0.25)
             for r in ("measured", "modelled")],
    "runs": [("none", lambda r, got: train({**r, "iters": 2})),
             ("run", lambda r, got: _codec_run(r, got, r["rate"]))],
    "columns": [("model", lambda c: c.row["model"]), ("budget", lambda c: f"{c.row['fraction']} x peak"),
                ("codec rate", lambda c: c.row["rate"]),
                ("plan", _codec_col(lambda p, it: p["chosen"])),
                ("codec ns/B", _codec_col(lambda p, it: "%.3f" % p["codec_rate"]["ns_per_byte"]
                                          if p["codec_rate"]["ns_per_byte"] is not None else "(model)")),
                ("predicted ms", _codec_col(lambda p, it: "%.2f" % p["predicted_time_ms"])),
                ("ran ms", _codec_col(lambda p, it: "%.2f" % median(i["time_ms"] for i in it))),
                ("ran / predicted", _codec_col(lambda p, it: "%.2f" % (median(i["time_ms"] for i in it) / p["predicted_time_ms"]))),
                ("codec ms / iteration", _codec_col(lambda p, it: "%.2f" % median(i["compress_ms"] + i["decompress_ms"] for i in it))),
                ("stall ms, ran / predicted", _codec_col(lambda p, it: "%.2f / %.2f" % (
                    median(i["stall_ms"] for i in it), p["predicted_stall_ms"])))]}


# Which LP auto's starts are rounded from (--auto-lp-model): the bound's and the one that also
# compresses (compress, the default), the bound's alone, the one that holds a copy's bytes on the
# device while in flight, or both of those. The logs have no densities: compress is bound there.
LP_MODELS = ["compress", "bound", "in-flight", "both"]


def _lp_models(train):
    return LP_MODELS if train else LP_MODELS[1:]


def _lp_model_run(model):
    def run(row, got):
        return _auto_run(row, got, "--auto-lp-model", model, iters=4)
    return run


def _lp_model_col(model, base):
    def cell(c):
        r, sw = c.rep.get(model), c.rep.get("budgets")
        if not r or not sw:
            return "OOM"
        over = _repeat_ms(r) / float(sw[0]["unmanaged_ms"])
        b = c.rep.get(base)
        if model == base or not b:
            return f"{over:.4f}×"
        return f"{over:.4f}× ({(_repeat_ms(r) / _repeat_ms(b) - 1) * 100:+.1f}%)"
    return cell


def _lp_flight_status(c):
    r = c.rep.get("in-flight")
    return r["policy_report"]["lp"].get("in_flight", {}).get("status", "-") if r else "-"


def _lp_compress_cell(c):
    """The bound LP's optimum and the compressing LP's, over the measured kernels, and the GiB the
    latter keeps compressed."""
    r = c.rep.get("compress")
    if not r:
        return "-"
    lp = r["policy_report"].get("lp", {})
    cl = lp.get("compress", {})
    if lp.get("status") != "optimal" or cl.get("status") != "optimal":
        return cl.get("status", "-")
    k = lp["compute_ms"]
    return f"{(k + lp['overhead_ms']) / k:.3f}× → {(k + cl['overhead_ms']) / k:.3f}× ({cl['compressed_bytes'] / 2**30:.2f} GiB)"


def auto_lp_model(rows, what):
    train = rows[0]["cmd"] == "train"
    models = _lp_models(train)
    base = models[0]
    return {
        "kind": "runs", "serial": True,  # auto's planning limit: nothing runs beside a run
        "about": f"the LP auto's starts are rounded from, on {what}: per row `vtensor {rows[0]['cmd']} ...{' --backend sim' if train else ''} "
                 f"--gpu G --policy auto --budget B --iters 4{' [--densities bench/densities/M.json]' if train else ''} "
                 f"--auto-lp-model M --report R` on sim for M in {', '.join(models)} (B from a sweep of none; "
                 + ("compress is the default" if train else "the default, compress, is bound where there are no densities") +
                 f"); each run's mean iteration after the measured one over none's, and against {base}'s; the in-flight LP's status"
                 + ("; the bound LP's optimum → the compressing LP's, over the measured kernels (GiB it keeps compressed)" if train else ""),
        "rows": rows,
        "runs": [("budgets", _none_sweep), *[(m, _lp_model_run(m)) for m in models]],
        "columns": [("model" if train else "log", lambda c: c.row["name"]), ("GPU", lambda c: c.row["gpu"]),
                    ("budget", lambda c: c.row["budget"]), *[(m, _lp_model_col(m, base)) for m in models],
                    ("in-flight LP", _lp_flight_status), *([("LP optimum → with compression", _lp_compress_cell)] if train else [])]}


EXPERIMENTS["auto-lp-model"] = auto_lp_model(EXPERIMENTS["auto-search-models"]["rows"], "the paper rows")
EXPERIMENTS["auto-lp-model-logs"] = auto_lp_model(EXPERIMENTS["auto-search-logs"]["rows"], "the DTR logs")


# What the LP's starts buy: auto with them (default) and without (--auto-lp 0), the same sweep
# otherwise (as headline-*: reference batch, 4 iterations, densities where the model has them).
def _paper_sweep(row, policies, budgets):
    """`vtensor sweep` of a paper model's row at its reference batch on sim, as headline-*."""
    return ["sweep", "--model", row["model"], "--batch", str(row["batch"]), *(["--seq", str(row["seq"])] if "seq" in row else []),
            "--backend", "sim", "--gpu", row["gpu"], "--iters", "4", "--policies", policies, "--budgets", budgets,
            *densities_args({"model": row["model"]})]


def _lp_sweep(row, off):
    return _paper_sweep(row, "none,auto", "50%,25%") + (["--auto-lp", "0"] if off else [])


def _lp_cell(c, run, budget):
    hit = [r for r in (c.rep.get(run) or []) if r["policy"] == "auto" and r["budget"] == budget]
    return f"{float(hit[0]['overhead']):.3f}×" if hit and hit[0]["status"] == "ok" else "OOM"


# The optimizer step inside the backward (--step-in-backward): each policy against none at the
# same budgets in bytes (50% / 25% of the reference run's unmanaged peak), with the step after the
# backward (the reference) and inside it.
SIB_POLICIES = ["capuchin", "dtr", "auto"]


def _sib_sweep(row, got, inside):
    policies = ",".join(["none", *SIB_POLICIES])
    if not inside:
        return _paper_sweep(row, policies, "50%,25%")
    ref = {r["budget"]: r["budget_bytes"] for r in (got.get("after") or []) if r["policy"] == "none"}
    if "50%" not in ref or "25%" not in ref:
        return None
    return _paper_sweep(row, policies, f"{int(ref['50%'])}B,{int(ref['25%'])}B") + ["--step-in-backward"]


def _sib_cell(c, policy, k):
    def one(run):
        rows = [r for r in (c.rep.get(run) or []) if r["policy"] == policy]
        if len(rows) <= k:
            return "-"
        return f"{float(rows[k]['overhead']):.3f}×" if rows[k]["status"] == "ok" else "OOM"
    return f"{one('after')} → {one('inside')}"


def _sib_peak(c):
    def peak(run):
        rows = c.rep.get(run) or []
        return float(rows[0]["unmanaged_peak_bytes"]) / 2**20 if rows else None
    a, b = peak("after"), peak("inside")
    return f"{a:.0f} → {b:.0f}" if a is not None and b is not None else "-"


EXPERIMENTS["step-in-backward"] = {
    "kind": "runs", "serial": True,  # auto's planning limit makes its choice depend on the machine's speed
    "about": "each policy against none with the optimizer step after the backward (the reference) → inside it: "
             "`vtensor sweep --model M --batch B [--seq S] --backend sim --gpu G --iters 4 --policies "
             "none,capuchin,dtr,auto --budgets 50%,25% [--densities bench/densities/M.json]`, then the same with "
             "`--budgets X,Y --step-in-backward` where X and Y are the first sweep's budgets in bytes; none's maximum "
             "batch at the GPU's memory: `vtensor maxbatch --model M [--seq S] --gpu G --policy none [--step-in-backward]`",
    "rows": [{**m, "gpu": g} for g in ("p100-16g", "h100-80g") for m in PAPER_MODELS],
    "runs": [("after", lambda r, got: _sib_sweep(r, got, False)), ("inside", lambda r, got: _sib_sweep(r, got, True)),
             ("mb after", lambda r, got: maxbatch(r, "--policy", "none")),
             ("mb inside", lambda r, got: maxbatch(r, "--policy", "none", "--step-in-backward"))],
    "columns": [("model", lambda c: c.row["model"]), ("GPU", lambda c: c.row["gpu"]),
                ("none's peak MiB", _sib_peak),
                ("none's max batch", lambda c: f"{c.rep['mb after']['max_batch']} → {c.rep['mb inside']['max_batch']}"),
                *[(f"{p} {b}", (lambda p, k: lambda c: _sib_cell(c, p, k))(p, k))
                  for p in SIB_POLICIES for k, b in enumerate(("50%", "25%"))]]}


EXPERIMENTS["auto-lp"] = {
    "kind": "runs", "serial": True,  # auto's planning limit makes its choice depend on the machine's speed
    "about": "auto against none with its LP starts (default) and without them (`--auto-lp 0`): `vtensor sweep --model M "
             "--batch B [--seq S] --backend sim --gpu G --iters 4 --policies none,auto --budgets 50%,25% "
             "[--densities bench/densities/M.json] [--auto-lp 0]`",
    "rows": [{**m, "gpu": g} for g in ("p100-16g", "h100-80g") for m in PAPER_MODELS],
    "runs": [("lp", lambda r, got: _lp_sweep(r, False)), ("off", lambda r, got: _lp_sweep(r, True))],
    "columns": [("model", lambda c: c.row["model"]), ("GPU", lambda c: c.row["gpu"]),
                ("50%: without → with the LP starts", lambda c: f"{_lp_cell(c, 'off', '50%')} → {_lp_cell(c, 'lp', '50%')}"),
                ("25%: without → with the LP starts", lambda c: f"{_lp_cell(c, 'off', '25%')} → {_lp_cell(c, 'lp', '25%')}")]}



# What the integer program buys (lp.h, Cbc over the LP's fractional gaps): auto without it
# (default) and with --auto-ilp 2, the same rows and reports as auto-search-models.
def _ilp_cell(c):
    lp = (c.rep.get("ilp") or {}).get("policy_report", {}).get("lp") or {}
    ip = lp.get("integer")
    if not ip or c.rep.get("budgets") is None:
        return {}
    unmanaged = float(c.rep["budgets"][0]["unmanaged_ms"])
    compute = lp["compute_ms"]
    out = {"lp": _lp(lp, unmanaged), "gaps": f"{ip['integer_columns'] // 2} / {ip['integer_columns'] // 2 + ip['fixed_gaps']}",
           "ilp": f"{(compute + ip['overhead_ms']) / unmanaged:.3f}× ({ip['status']}, {ip['wall_ms'] / 1e3:.1f} s; "
                  f"bound {(compute + ip['bound_ms']) / unmanaged:.3f}×)" if ip["overhead_ms"] is not None
                  else f"{ip['status']} ({ip['wall_ms'] / 1e3:.1f} s)"}
    times = []
    for run in ("lp", "ilp"):
        r = (c.rep.get(run) or {}).get("policy_report", {})
        times.append(f"{r['predicted_time_ms'] / unmanaged:.3f}×" if "predicted_time_ms" in r else "OOM")
    out["auto"] = " → ".join(times)
    srch = (c.rep.get("ilp") or {}).get("policy_report", {}).get("search", {})
    out["start"] = f"{srch.get('start', '')} on {srch.get('start_policy', '')}" if srch.get("start_policy") else ""
    return out


def auto_ilp(search):
    rows = EXPERIMENTS[search]["rows"]
    return {
        "kind": "runs", "serial": True,  # auto's planning limit makes its choice depend on the machine's speed
        "about": "the integer program over the LP's fractional gaps (lp.h; COIN-OR Cbc, 2 s limit, the LP's rounding up as "
                 "its first solution; the gaps the LP moves whole or not at all stay so): per row `vtensor "
                 f"{rows[0]['cmd']} ... --policy auto --budget B --iters 2 --report R` on sim without and with "
                 "`--auto-ilp 2` (B from a sweep of none); the LP's optimum, the gaps the integer program decides / all "
                 "gaps, its best plan and Cbc's bound over them (× unmanaged), auto's time without → with it "
                 "(× unmanaged), and the start its kept climb came from with it",
        "rows": rows,
        "runs": [("budgets", EXPERIMENTS[search]["runs"][0][1]),
                 ("lp", _auto_run), ("ilp", lambda r, got: _auto_run(r, got, "--auto-ilp", "2"))],
        "columns": [("row", lambda c: c.row["name"]), ("GPU", lambda c: c.row["gpu"]), ("budget", lambda c: c.row["budget"]),
                    ("LP bound (× unmanaged; solve)", lambda c: _ilp_cell(c).get("lp", "")),
                    ("gaps decided / all", lambda c: _ilp_cell(c).get("gaps", "")),
                    ("integer program (status, wall; Cbc's bound)", lambda c: _ilp_cell(c).get("ilp", "")),
                    ("auto without → with it", lambda c: _ilp_cell(c).get("auto", "")),
                    ("start of the kept climb, with it", lambda c: _ilp_cell(c).get("start", ""))]}


EXPERIMENTS["auto-ilp"] = auto_ilp("auto-search-models")
EXPERIMENTS["auto-ilp-logs"] = auto_ilp("auto-search-logs")


def _allocator_sweep(row, allocator):
    return _lp_sweep(row, False) + ["--allocator", allocator]


def _planned_cell(c, budget):
    return f"{_lp_cell(c, 'caching', budget)} → {_lp_cell(c, 'planned', budget)}"


EXPERIMENTS["auto-planned"] = {
    "kind": "runs", "serial": True,  # auto's planning limit makes its choice depend on the machine's speed
    "about": "auto against none on the caching allocator (default) and on the planned pool: `vtensor sweep --model M "
             "--batch B [--seq S] --backend sim --gpu G --iters 4 --policies none,auto --budgets 50%,25% "
             "[--densities bench/densities/M.json] --allocator caching|planned`",
    "rows": [{**m, "gpu": g} for g in ("p100-16g", "h100-80g") for m in PAPER_MODELS],
    "runs": [("caching", lambda r, got: _allocator_sweep(r, "caching")),
             ("planned", lambda r, got: _allocator_sweep(r, "planned"))],
    "columns": [("model", lambda c: c.row["model"]), ("GPU", lambda c: c.row["gpu"]),
                ("50%: caching → planned", lambda c: _planned_cell(c, "50%")),
                ("25%: caching → planned", lambda c: _planned_cell(c, "25%"))]}


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


# auto over a longer run. The tables above time guided iterations 1-3 (`sweep --iters 4`); a user
# trains for thousands. The same rows for 10 iterations: 1-3 against 4-9, and the slowest of them.
def _steady_cell(c, what):
    rep = c.rep.get("auto")
    if not rep:
        return "OOM"
    u = float(c.rep["budgets"][0]["unmanaged_ms"])
    t = [i["time_ms"] for i in rep["iterations"][1:]]
    ev = [i["evictions"] for i in rep["iterations"][1:]]
    if what == "first":
        return f"{sum(t[:3]) / 3 / u:.3f}×"
    if what == "later":
        return f"{sum(t[3:]) / len(t[3:]) / u:.3f}×"
    if what == "slowest":
        return f"{max(t) / u:.3f}× (iteration {t.index(max(t)) + 1})"
    if what == "start":  # auto's start state, and the chosen plan's rehearsals of each over 10 iterations
        ss = (rep.get("policy_report") or {}).get("start_state")
        if not ss:
            return ""
        runs = " / ".join("OOM" if ss[f"{k}_ms"] is None else f"{ss[f'{k}_ms'] / u:.3f}×" for k in ("packed", "reordered", "restored"))
        return f"{ss['state']} ({runs})"
    if what == "measured":  # the measured iteration (the warm start's moves at its end included)
        return f"{rep['iterations'][0]['time_ms'] / u:.3f}×"
    if what == "warm":  # the warm start that ran, and what the cold start's rehearsal said
        w = (rep.get("policy_report") or {}).get("warm_start")
        if not w:
            return ""
        cold = f"{w['cold_ms'] / u:.3f}× / {w['cold_measured_ms'] / u:.3f}×"
        return f"{w['variant']} (cold: {cold})" if w["variant"] else f"cold ({cold})"
    return f"{sum(ev[:3]) / 3:.0f} / {sum(ev[3:]) / len(ev[3:]):.0f}"


EXPERIMENTS["auto-steady"] = {
    "kind": "runs", "serial": True,  # auto's planning limit makes its choice depend on the machine's speed
    "about": "auto over 10 iterations: per row `vtensor train --model M --batch B [--seq S] --backend sim --gpu G "
             "--policy auto --budget B --iters 10 [--densities D]`, or `vtensor replay --trace dtr:LOG --gpu G --policy "
             "auto --budget B --iters 10` (B from a sweep of none); the mean time of guided "
             "iterations 1-3 (what the tables above time) and 4-9 against the unmanaged iteration, the slowest, "
             "the evictions per iteration, the start state auto ran (the chosen plan rehearsed over iterations 1-9 "
             "packed / reordered / restored, the report's start_state), the measured iteration 0, and the warm start "
             "that ran (the report's warm_start: the steady layout, the feedback's trigger moves, both, or cold; in "
             "brackets the cold start's rehearsal of iterations 1-3 / of the measured iteration)",
    "rows": EXPERIMENTS["auto-search-models"]["rows"] + EXPERIMENTS["auto-search-logs"]["rows"],
    "runs": [("budgets", _none_sweep), ("auto", lambda r, got: _auto_run(r, got, "--quiet", iters=10))],
    "columns": [("row", lambda c: c.row["name"]), ("GPU", lambda c: c.row["gpu"]), ("budget", lambda c: c.row["budget"]),
                ("iterations 1-3", lambda c: _steady_cell(c, "first")),
                ("iterations 4-9", lambda c: _steady_cell(c, "later")),
                ("slowest", lambda c: _steady_cell(c, "slowest")),
                ("evictions per iteration: 1-3 / 4-9", lambda c: _steady_cell(c, "ev")),
                ("start state (1-9: packed / reordered / restored)", lambda c: _steady_cell(c, "start")),
                ("measured iteration", lambda c: _steady_cell(c, "measured")),
                ("warm start (cold: 1-3 / measured)", lambda c: _steady_cell(c, "warm"))]}


def render(name, exp, rows):
    table = RENDER[exp["kind"]](name, exp, rows)
    return f"Generated by `bench/run.py {name}` ({exp['about']}).\n\n{table}\n"


def update_docs(name, text, docs):
    begin = f"<!-- generated: bench/run.py {name} -->"
    end = f"<!-- end generated: {name} -->"
    hits = 0
    paths = sorted(glob.glob(os.path.join(docs, "**", "*.md"), recursive=True))  # docs/experiments/*.md too
    for path in paths:
        with open(path) as f:
            doc = f.read()
        pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        if not pat.search(doc):
            continue
        doc = pat.sub(lambda _: f"{begin}\n{text}{end}", doc)
        with open(path + ".tmp", "w") as f:
            f.write(doc)
        os.replace(path + ".tmp", path)
        hits += 1
        print(f"[{name}] updated {path}")
    if not hits:
        sys.exit(f"[{name}] no {docs}/**/*.md holds the markers {begin} ... {end}")


def write_outputs(name, exp, rows, out):
    os.makedirs(out, exist_ok=True)
    fields = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    for ext, write in ((".csv", lambda f: (lambda w: (w.writeheader(), w.writerows(rows)))(csv.DictWriter(f, fieldnames=fields))),
                       (".json", lambda f: json.dump({"experiment": name, "spec": exp, "rows": rows}, f, indent=1,
                                                 default=lambda o: getattr(o, "__name__", str(o))))):
        path = os.path.join(out, name + ext)
        with open(path + ".tmp", "w", newline="") as f:
            write(f)
        os.replace(path + ".tmp", path)
    text = render(name, exp, rows)
    with open(os.path.join(out, name + ".md"), "w") as f:
        f.write(text)
    return text


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
