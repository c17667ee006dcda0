"""vDNN's tables (docs/experiments/vdnn.md): the maximum batch in a Titan X's 12 GiB, the vDNN
policies on the cpu and sim backends against none at the oracle budget, the per-layer reports, and
the planned memory per rung from the C++ benchmark vtensor_vdnn_plan."""
import re

from ..helpers import fraction_of_peak, loss_equals_none, mib, steady_mean, train


EXPERIMENTS = {
    "maxbatch-vdnn": {"kind": "maxbatch", "gpus": ["titan-x-12g"],
                      "models": [{"model": "vgg16"}, {"model": "vgg16", "flags": ["--inplace-relu-grad"]},
                                 {"model": "resnet50"}, {"model": "resnet50", "flags": ["--inplace-relu-grad"]}],
                      "policies": ["none", "vdnn-conv", "vdnn-all", "vdnn-dyn"], "ratios": [],
                      "about": "maximum batch in a Titan X's 12 GiB under vDNN, with and without the in-place ReLU backward"},
}


# vDNN (docs/experiments/vdnn.md): none at the oracle budget, then none and each vDNN
# policy at the budget under study; vdnn-all / vdnn-conv, whose plans do not depend on the
# budget, measured again at the oracle budget where they do not fit (status over_budget).

VDNN = ["vdnn-all", "vdnn-conv", "vdnn-dyn"]


def mean_allocated(rep):
    points = (rep.get("memory_timeline") or {}).get("points") or []
    return sum(p[1] for p in points) / len(points) if points else 0


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


# vDNN's planned memory per rung: the C++ benchmark vtensor_vdnn_plan (built with
# -DVTENSOR_BUILD_BENCH=ON), which the CLI cannot give.
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
