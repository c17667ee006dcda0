"""auto's tables of its search (docs/experiments/auto.md): auto beside the best other policy
(derived from headline-* and dtr-logs), what its search did per row (candidates, climb, window,
recomputations, the LP and bound), its run-to-run spread on the wall clock, its planning clock and
wall cap against this machine, and its iterations over a longer run."""
from ..helpers import DTR_LOGS, PAPER_MODELS, densities


EXPERIMENTS = {}


# auto (docs/experiments/auto.md). auto-vs-best and auto-vs-best-logs are derived from
# the rows of headline-p100 / headline-h100 and dtr-logs (run them first, into the same --out);
# auto-search runs `auto` once per row with a report and reads, from its rehearsals, the best of
# the planners as they are against the candidate auto chose, the breakdown of its time and the
# planning time (on this machine: that column is a timing, the others are the sim's).
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
