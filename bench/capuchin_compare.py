#!/usr/bin/env python3
"""Capuchin / DTR / vDNN comparison: for each model and each budget (a fraction of the
unmanaged peak at the reference batch: the model's preset batch, or MODEL:BATCH), every
policy's overhead against `none` at that batch and its maximum batch under that budget
(doubling or halving from the reference batch, then bisection to within --precision of it).

Usage: bench/capuchin_compare.py [--models resnet-tiny,vgg-tiny|resnet50:32,...] [--fractions 0.5,0.25]
           [--backend cpu] [--gpu NAME] [--iters 6] [--policies ...] [--max-batch-limit 4096]
           [--precision 0] [--timeout 300] > out.csv
Paper scale (sim): bench/capuchin_compare.py --models resnet50,vgg16,gpt2-small --backend sim --gpu p100-16g --iters 4 --precision 0.02
Compression (FreeLunch): --densities DIR passes DIR/MODEL.json (written by a cpu run with
--densities-out, bench/compress_compare.sh) to the compress policies on sim; a policy written
POLICY@FLAG[@FLAG] runs with --FLAG (the ablation: compress@no-sliding-workspace,
compress@no-persistent-buffers, compress@compress-on-compute-stream).
Needs build/vtensor. Policies the binary does not list (e.g. vdnn-conv before its branch is
merged) are skipped with a note on stderr. The first iteration is left out of the timings: it
is Capuchin's measured (passive) iteration and warms caches for everyone else. Times are the
fastest of the remaining iterations, other figures their medians.
"""
import argparse, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "vtensor")


def run(args, model, policy, batch, budget, iters, tmp):
    report = os.path.join(tmp, "r.json")
    if os.path.exists(report):
        os.remove(report)
    policy, *flags = policy.split("@")
    cmd = [BIN, "train", "--model", model, "--policy", policy, "--iters", str(iters), "--quiet",
           "--backend", args.backend, "--report", report] + ["--" + f for f in flags]
    dens = os.path.join(args.densities, model + ".json") if args.densities else ""
    if policy.startswith("compress") and dens and os.path.exists(dens) and args.backend == "sim":
        cmd += ["--densities", dens]  # none for a model without ReLU (gpt, bert): nothing to size
    if args.gpu:
        cmd += ["--gpu", args.gpu]
    if batch:
        cmd += ["--batch", str(batch)]
    if budget:
        cmd += ["--budget", str(budget)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"timeout: {' '.join(cmd)}", file=sys.stderr)
        return None
    if p.returncode != 0:
        if "out of device memory" not in (p.stderr + p.stdout).lower():
            print(f"failed (rc {p.returncode}): {' '.join(cmd)}\n{p.stderr[-400:]}", file=sys.stderr)
        return None
    with open(report) as f:
        return json.load(f)


def steady(rep, key):
    # Over the iterations after the first: the fastest for time (a loaded machine only adds to
    # it), the median for the rest.
    its = sorted(i[key] for i in (rep["iterations"][1:] or rep["iterations"]))
    if key == "time_ms":
        return its[0]
    n = len(its)
    return its[n // 2] if n % 2 else (its[n // 2 - 1] + its[n // 2]) / 2


def max_batch(args, model, policy, budget, start, tmp):
    # From the reference batch: double while it trains, or halve until it does; then bisect until
    # hi - lo <= max(1, precision * lo). Iterations per probe: enough for Capuchin's guided one.
    fits = lambda b: run(args, model, policy, b, budget, min(args.iters, 3), tmp) is not None
    start = max(1, start)
    if fits(start):
        lo, hi = start, start * 2
        while hi <= args.max_batch_limit and fits(hi):
            lo, hi = hi, hi * 2
        if hi > args.max_batch_limit:
            return lo
    else:
        hi, lo = start, start // 2
        while lo >= 1 and not fits(lo):
            hi, lo = lo, lo // 2
        if lo < 1:
            return 0
    while hi - lo > max(1, int(args.precision * lo)):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet-tiny,vgg-tiny")
    ap.add_argument("--fractions", default="0.5,0.25")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--gpu", default="")
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--policies", default="none,capuchin-swap,capuchin-recompute,capuchin,dtr,vdnn-conv,lru,lru-recompute,checkpoint")
    ap.add_argument("--max-batch-limit", type=int, default=4096)
    ap.add_argument("--precision", type=float, default=0.0, help="relative precision of the maximum batch (0: exact)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run; a run past it counts as failed")
    ap.add_argument("--densities", default="", help="directory of MODEL.json densities for the compress policies on sim")
    args = ap.parse_args()
    listed = subprocess.run([BIN, "policies"], capture_output=True, text=True).stdout
    policies = []
    for p in args.policies.split(","):
        if any(line.split()[:1] == [p.split("@")[0]] for line in listed.splitlines()):
            policies.append(p)
        else:
            print(f"skipping policy {p}: not in this build", file=sys.stderr)
    print("model,backend,gpu,fraction,budget_bytes,policy,batch,peak_allocated_bytes,best_iteration_ms,none_best_iteration_ms,"
          "overhead_vs_none,swapped_out_bytes_per_iter,recomputed_ops_per_iter,stall_ms_per_iter,max_batch,max_batch_vs_none,"
          "compressed_bytes_per_iter,compression_ratio")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.models.split(","):
            model, _, ref_batch = spec.partition(":")
            base = run(args, model, "none", int(ref_batch or 0), 1 << 40 if args.backend == "sim" else 0, args.iters, tmp)
            if base is None:
                print(f"skipping {model}: none fails unbounded", file=sys.stderr)
                continue
            batch = base["config"]["batch"]
            peak = base["summary"]["peak_allocated_bytes"]
            none_ms = steady(base, "time_ms")
            for frac in [float(x) for x in args.fractions.split(",")]:
                budget = int(peak * frac) // 256 * 256
                none_max = max_batch(args, model, "none", budget, batch, tmp)
                for p in policies:
                    rep = run(args, model, p, batch, budget, args.iters, tmp)
                    mb = none_max if p == "none" else max_batch(args, model, p, budget, batch, tmp)
                    if rep is None:
                        row = [model, args.backend, args.gpu, frac, budget, p, batch, "", "", f"{none_ms:.3f}", "oom", "", "", ""]
                        comp = ["", ""]
                    else:
                        ms = steady(rep, "time_ms")
                        row = [model, args.backend, args.gpu, frac, budget, p, batch, rep["summary"]["peak_allocated_bytes"],
                               f"{ms:.3f}", f"{none_ms:.3f}", f"{ms / none_ms:.3f}", f"{steady(rep, 'swapped_out_bytes'):.0f}",
                               f"{steady(rep, 'recomputed_ops'):.1f}", f"{steady(rep, 'stall_ms'):.3f}"]
                        cb = steady(rep, "compressed_bytes") if "compressed_bytes" in rep["iterations"][0] else 0
                        ca = steady(rep, "compressed_to_bytes") if cb else 0
                        comp = [f"{cb:.0f}", f"{ca / cb:.3f}" if cb else ""]
                    row += [mb, f"{mb / none_max:.2f}" if none_max else "inf"] + comp
                    print(",".join(str(x) for x in row), flush=True)


if __name__ == "__main__":
    main()
