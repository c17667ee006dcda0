"""Unified memory's tables (docs/experiments/um.md): um and um-prefetch against capuchin and dtr on
sim, their maximum batches, their paging counters on the cpu backend, and um-prefetch's lookahead."""
from ..helpers import fastest, fraction_of_peak, gib, loss_equals_none, maxbatch, mib, train


EXPERIMENTS = {}


# Unified memory (um, um-prefetch) against capuchin and dtr on the sim backend: budgets at
# 1/1.5, 1/2, 1/3 and 1/4 of none's peak at the reference batch; time against none's (the
# fastest iteration after the first), um-prefetch's prefetch accuracy (last iteration).

UM_MODELS = [{"model": "resnet50", "batch": 32}, {"model": "vgg16", "batch": 64},
             {"model": "gpt2-small", "batch": 8, "optimizer": "adam"}, {"model": "bert-base", "batch": 32, "optimizer": "adam"}]
UM_FRACTIONS = [(1 / 1.5, "1/1.5"), (0.5, "1/2 = 50%"), (1 / 3, "1/3"), (0.25, "1/4 = 25%")]
UM_POLICIES = ["um", "um-prefetch", "capuchin", "dtr"]


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
