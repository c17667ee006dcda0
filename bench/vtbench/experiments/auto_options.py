"""auto's options, a table each (docs/experiments/auto.md): the codec rate on the cpu backend,
the LP its starts are rounded from, with and without the LP starts, the integer program, the planned
pool, and the optimizer step inside the backward; the rows of auto-search-* where they share them."""
from ..helpers import PAPER_MODELS, densities_args, fraction_of_peak, maxbatch, median, train
from .auto import EXPERIMENTS as AUTO
from .auto import _auto_run, _lp, _none_sweep, _repeat_ms


EXPERIMENTS = {}


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


EXPERIMENTS["auto-lp-model"] = auto_lp_model(AUTO["auto-search-models"]["rows"], "the paper rows")
EXPERIMENTS["auto-lp-model-logs"] = auto_lp_model(AUTO["auto-search-logs"]["rows"], "the DTR logs")


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
    rows = AUTO[search]["rows"]
    return {
        "kind": "runs", "serial": True,  # auto's planning limit makes its choice depend on the machine's speed
        "about": "the integer program over the LP's fractional gaps (lp.h; COIN-OR Cbc, 2 s limit, the LP's rounding up as "
                 "its first solution; the gaps the LP moves whole or not at all stay so): per row `vtensor "
                 f"{rows[0]['cmd']} ... --policy auto --budget B --iters 2 --report R` on sim without and with "
                 "`--auto-ilp 2` (B from a sweep of none); the LP's optimum, the gaps the integer program decides / all "
                 "gaps, its best plan and Cbc's bound over them (× unmanaged), auto's time without → with it "
                 "(× unmanaged), and the start its kept climb came from with it",
        "rows": rows,
        "runs": [("budgets", AUTO[search]["runs"][0][1]),
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
