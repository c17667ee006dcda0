"""The planned pool's and zero-overhead swap's tables (docs/experiments/planned-pool.md): arena
over lower bound per allocator and planner on sim and cpu, and the zero-overhead-swap policies
against none and lru across budgets, GPUs and allocators."""
from ..helpers import UNLIMITED, fraction_of_peak, loss_equals_none, median, mib, steady, steady_mean, train


EXPERIMENTS = {}


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
