#!/usr/bin/env python3
"""Planned pool and zero-overhead swap at paper scale on the sim backend (called by
`bench/planned.sh paper OUTDIR`). Memory figures are exact (the same code as the cpu backend);
times come from the sim's virtual clock, a roofline cost model not validated on hardware.

pool.csv: per model and batch, the lower bound (largest sum of live bytes), the caching
allocator's arena, ratio and fragmentation at its peak, and the planned pool's ratio with the
default planner (greedy-size) and with `--planner best`.
zos.csv: per model and batch, `none` (unlimited budget), `zero-overhead-swap` (no budget: the
peak it reaches is the smallest budget it needs), and at FRACTIONS of none's peak
`zero-overhead-swap-limit` beside `lru`. Per-iteration figures are the last iteration's (the
first one is the measured, passive one)."""
import csv, json, os, subprocess, sys

binary, out = sys.argv[1], sys.argv[2]
gpu = os.environ.get("GPU", "p100-16g")
iters = int(os.environ.get("ITERS", "5"))
pool_spec = os.environ.get("POOL", "mlp-tiny:16,64 vgg-tiny:32,64 resnet-tiny:32,64 gpt-tiny:8,32 bert-tiny:8,32 "
                           "mlp:128,512 vgg11:32,64 vgg16:32,64 resnet18:64,128 resnet34:64,128 resnet50:32,64,128 "
                           "gpt2-small:4,8 gpt2-medium:2,4 gpt2-large:1,2 bert-base:16,32 bert-large:8,16")
zos_spec = os.environ.get("ZOS", "resnet50:32,64,128 vgg16:32,64 gpt2-small:4,8")
fractions = [float(f) for f in os.environ.get("FRACTIONS", "0.9 0.8 0.7").split()]
os.makedirs(f"{out}/json", exist_ok=True)
MiB = 2**20


def spec(s):
    for item in s.split():
        m, bs = item.split(":")
        for b in bs.split(","):
            yield m, int(b)


def train(name, model, batch, *extra, on=None):
    path = f"{out}/json/{name}.json"
    cmd = [binary, "train", "--model", model, "--batch", str(batch), "--backend", "sim", "--gpu", on or gpu,
           "--iters", str(iters), "--quiet", "--report", path, *extra]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        if "out of memory" in r.stderr.lower():
            return None
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return json.load(open(path))


unlimited = ["--budget", "1024GiB"]
pool_rows = []
for m, b in spec(pool_spec):
    c = train(f"{m}-{b}-caching", m, b, *unlimited)
    p = train(f"{m}-{b}-planned", m, b, *unlimited, "--allocator", "planned")
    bst = train(f"{m}-{b}-planned-best", m, b, *unlimited, "--allocator", "planned", "--planner", "best")
    ca, pa, ba = c["allocator_report"], p["allocator_report"], bst["allocator_report"]
    assert ca["lower_bound_bytes"] == pa["lower_bound_bytes"] == ba["lower_bound_bytes"]
    pool_rows.append({
        "model": m, "batch": b, "lower_bound_mib": ca["lower_bound_bytes"] / MiB,
        "caching_arena_mib": ca["arena_bytes"] / MiB, "caching_over_lb": ca["arena_over_lower_bound"],
        "caching_fragmentation_at_peak": ca["fragmentation_at_peak"],
        "planned_arena_mib": pa["arena_bytes"] / MiB, "planned_over_lb": pa["arena_over_lower_bound"],
        "best_over_lb": ba["arena_over_lower_bound"], "best_planner": ba["plan"]["made_by"],
        "fallbacks": pa["fallback_requests"] + ba["fallback_requests"]})

zos_rows = []
for m, b in spec(zos_spec):
    none = train(f"{m}-{b}-none", m, b, *unlimited)
    none_last = none["iterations"][-1]
    none_peak = max(i["peak_allocated_bytes"] for i in none["iterations"])
    runs = [("zero-overhead-swap", None), ("zero-overhead-swap+planned", None)]
    for f in fractions:
        budget = int(none_peak * f) // 256 * 256
        runs += [("zero-overhead-swap-limit", (f, budget)), ("lru", (f, budget))]
    for policy, fb in runs:
        budget_args = unlimited if fb is None else ["--budget", str(fb[1])]
        pol = policy.split("+")
        alloc = ["--allocator", "planned"] if pol[1:] == ["planned"] else []
        j = train(f"{m}-{b}-{policy}-{fb[0] if fb else 'none'}", m, b, *budget_args, "--policy", pol[0], *alloc)
        row = {"model": m, "batch": b, "policy": policy, "budget": "unlimited" if fb is None else f"{fb[0]:.0%}",
               "budget_mib": "" if fb is None else fb[1] / MiB, "none_peak_mib": none_peak / MiB,
               "none_ms": none_last["time_ms"], "none_arena_mib": none["allocator_report"]["arena_bytes"] / MiB}
        if j is None:
            row.update({"peak_mib": "oom"})
        else:
            last = j["iterations"][-1]
            pr = j.get("policy_report") or {}
            row.update({"peak_mib": last["peak_allocated_bytes"] / MiB, "arena_mib": j["allocator_report"]["arena_bytes"] / MiB,
                        "arena_over_lb": j["allocator_report"]["arena_over_lower_bound"],
                        "saved": 1 - last["peak_allocated_bytes"] / none_peak,
                        "time_ms": last["time_ms"], "time_vs_none": last["time_ms"] / none_last["time_ms"],
                        "stall_ms": last["stall_ms"], "swapped_out_mib": last["swapped_out_bytes"] / MiB,
                        "evictions": last["evictions"], "planned_swaps": len(pr.get("chosen", [])),
                        "stalling_swaps": sum(not c["hidden"] for c in pr.get("chosen", []))})
        zos_rows.append(row)


# The no-overhead mode on other GPUs: what hides depends on compute speed against the host link.
gpus = os.environ.get("GPUS", "titan-x-12g p100-16g v100-16g a100-40g h100-80g").split()
gpu_rows = []
for m, b in spec(zos_spec):
    for g in gpus:
        n = train(f"{m}-{b}-none-{g}", m, b, *unlimited, on=g)
        z = train(f"{m}-{b}-zero-overhead-swap-{g}", m, b, *unlimited, "--policy", "zero-overhead-swap", on=g)
        n_peak = max(i["peak_allocated_bytes"] for i in n["iterations"])
        z_last, n_last = z["iterations"][-1], n["iterations"][-1]
        gpu_rows.append({"model": m, "batch": b, "gpu": g, "none_ms": n_last["time_ms"],
                         "saved": 1 - z_last["peak_allocated_bytes"] / n_peak,
                         "time_vs_none": z_last["time_ms"] / n_last["time_ms"], "stall_ms": z_last["stall_ms"],
                         "swapped_out_mib": z_last["swapped_out_bytes"] / MiB})


def write_csv(name, rows):
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(f"{out}/{name}", "w", newline="") as fh:
        w = csv.DictWriter(fh, keys)
        w.writeheader()
        w.writerows(rows)


write_csv("pool.csv", pool_rows)
write_csv("zos.csv", zos_rows)
write_csv("zos_gpus.csv", gpu_rows)

print(f"Arena / lower bound, sim backend ({gpu}, unlimited budget, policy none, last of {iters} iterations)\n")
print("| model | batch | lower bound | caching arena | caching / LB | caching frag. at peak | planned / LB (greedy-size) | planned / LB (best) | best planner | fallbacks |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in pool_rows:
    print(f'| {r["model"]} | {r["batch"]} | {r["lower_bound_mib"]:.2f} MiB | {r["caching_arena_mib"]:.2f} MiB | {r["caching_over_lb"]:.4f} '
          f'| {r["caching_fragmentation_at_peak"]:.2%} | {r["planned_over_lb"]:.4f} | {r["best_over_lb"]:.4f} | {r["best_planner"]} | {r["fallbacks"]} |')
print(f"\nZero-overhead swap on the sim backend ({gpu}); none: unlimited budget; last of {iters} iterations\n")
print("| model | batch | policy | budget | peak allocated | saved vs none | arena (saved vs none) | time vs none | stall / iter | swapped out / iter | planned swaps (stalling) | passive evictions / iter |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in zos_rows:
    budget = r["budget"] if r["budget_mib"] == "" else f'{r["budget"]} ({r["budget_mib"]:.0f} MiB)'
    if r["peak_mib"] == "oom":
        print(f'| {r["model"]} | {r["batch"]} | {r["policy"]} | {budget} | oom | | | | | | | |')
        continue
    swaps = f'{r["planned_swaps"]} ({r["stalling_swaps"]})' if r["policy"] != "lru" else "-"
    arena = f'{r["arena_mib"]:.0f} MiB ({1 - r["arena_mib"] / r["none_arena_mib"]:.1%})'
    print(f'| {r["model"]} | {r["batch"]} | {r["policy"]} | {budget} | {r["peak_mib"]:.0f} MiB | {r["saved"]:.1%} | {arena} | {r["time_vs_none"]:.3f} '
          f'| {r["stall_ms"]:.2f} ms | {r["swapped_out_mib"]:.0f} MiB | {swaps} | {r["evictions"]} |')
print(f"\nzero-overhead-swap (no budget) across GPUs; last of {iters} iterations\n")
print("| model | batch | GPU | none iteration | saved vs none | time vs none | stall / iter | swapped out / iter |")
print("|---|---|---|---|---|---|---|---|")
for r in gpu_rows:
    print(f'| {r["model"]} | {r["batch"]} | {r["gpu"]} | {r["none_ms"]:.1f} ms | {r["saved"]:.1%} | {r["time_vs_none"]:.3f} | {r["stall_ms"]:.2f} ms | {r["swapped_out_mib"]:.0f} MiB |')
