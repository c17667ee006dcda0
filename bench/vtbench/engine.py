"""The runner's engine: how each kind of experiment runs (grid, logs, maxbatch, runs, derived,
torch) through the vtensor command (VTENSOR_BINARY, default build/vtensor), the C++ benchmarks in
build/bench/ or the Python package's scripts, and returns its rows; RUNNERS maps a kind to its
function. Runs of kind runs are memoised per experiment (Memo), so rows share their baselines."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

from .helpers import ABOVE_GPU, ROOT, densities, model_args, model_label, takes_densities


BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(ROOT, "build", "vtensor")
# auto's wall cap off, so that every table reproduces from its command on any machine (the plan is
# then a function of the command alone); the cap's own effect is the auto-wall-cap experiment.
os.environ.setdefault("VTENSOR_AUTO_WALL_CAP", "0")


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


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


# kind grid: `vtensor sweep` per model over policies x budgets (overhead against none at the
# reference batch), then, with maxbatch, `vtensor maxbatch --budget` per budget and policy.
# kind logs: `vtensor sweep --trace dtr:LOG` per log and GPU.
# kind maxbatch: `vtensor maxbatch` at the whole GPU's memory per model, GPU and policy; each cell
# the batch and the predicted time per sample at it.
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


# kind derived: a table computed from the rows other experiments wrote to the same --out
# (exp["from"], OUT/NAME.json; run them first) by exp["derive"](rows by name).
def run_derived(name, exp, out, jobs):
    src = {}
    for n in exp["from"]:
        path = os.path.join(out, n + ".json")
        if not os.path.exists(path):
            sys.exit(f"[{name}] needs the rows of {n} in {out}: run `bench/run.py {n}` first (or `all`)")
        with open(path) as f:
            src[n] = json.load(f)["rows"]
    return exp["derive"](src)


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


RUNNERS = {"grid": run_grid, "logs": run_logs, "maxbatch": run_maxbatch, "runs": run_runs, "derived": run_derived,
           "torch": run_torch}
