"""Capuchin's tables (docs/experiments/capuchin.md): the maximum batch at the whole GPU's memory
(Capuchin's 7x setting), the DTR logs under the Capuchin modes and dtr per GPU with the planner's own
prediction, and Capuchin, DTR and the passive baselines on the cpu backend."""
from ..helpers import (DTR_LOGS, PAPER_MODELS, fastest, fraction_of_peak, median, mib, steady, sweep_cell, sweep_row,
                       train)


EXPERIMENTS = {
    "maxbatch-gpu": {"kind": "maxbatch", "gpus": ["p100-16g", "h100-80g"],
                     "models": [{"model": m["model"], **({"seq": m["seq"]} if "seq" in m else {})} for m in PAPER_MODELS],
                     "policies": ["none", "capuchin-swap", "capuchin-recompute", "capuchin", "dtr", "vdnn-conv",
                                  "lru-recompute", "auto"],
                     "ratios": [["capuchin", "none"], ["auto", "none"]],
                     "about": "maximum batch at the whole GPU's memory, SGD with momentum (Capuchin's 7x setting)"},
}


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
