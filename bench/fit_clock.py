#!/usr/bin/env python3
"""Fits auto's planning-clock rates (kClockNsPerOp, kClockNsPerRecompute,
kClockNsPerCompaction, kClockNsPerEvictionTensor in vtensor/policy/auto/tuning.h) to this machine.

Reads the rows of `bench/run.py planning-clock` (bench-out/planning-clock.json): per row, the
rehearsals' counts (iterations x ops, recomputed ops, compactions, evictions x tensors) and their
wall time. Finds non-negative rates under which each row's counts cost its wall time, in the
least-squares sense over the rows' relative errors (each row weighs the same, however long it
planned), then the factor that scales them so the slowest row for its counts rehearses within
--within of the clock (0.9: the rest of planning, the LP solves, needs the remainder). Prints
both and each row's ratio; --out writes them as JSON.

  python3 bench/fit_clock.py bench-out/planning-clock.json [--within 0.9] [--out F]
"""
import argparse
import itertools
import json
import sys

FEATURES = ["op", "recomputed op", "compaction", "eviction x tensor"]


def solve(a, b):
    """Least squares a x = b by the normal equations (a few columns); None when singular."""
    n = len(a[0])
    m = [[sum(r[i] * r[j] for r in a) for j in range(n)] + [sum(r[i] * y for r, y in zip(a, b))] for i in range(n)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def nnls(a, b):
    """Non-negative least squares over every subset of the columns (four of them: 15 subsets)."""
    best = None
    n = len(a[0])
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            x = solve([[r[i] for i in cols] for r in a], b)
            if x is None or min(x) < 0:
                continue
            full = [0.0] * n
            for i, v in zip(cols, x):
                full[i] = v
            err = sum((sum(r[i] * full[i] for i in range(n)) - y) ** 2 for r, y in zip(a, b))
            if best is None or err < best[0]:
                best = (err, full)
    return best[1] if best else None


def rows_of(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"fit_clock: cannot read {path}: {e} (run `bench/run.py planning-clock` first)")
    if data.get("experiment") != "planning-clock":
        sys.exit(f"fit_clock: {path} is not bench/run.py planning-clock's output (experiment: {data.get('experiment')!r})")
    out = []
    for r in data["rows"]:
        if r.get("rehearsed iterations", "OOM") == "OOM":
            continue
        ops, tensors = (int(x) for x in r["graph ops / tensors"].split(" / "))
        rc, cp, ev = (int(x) for x in r["recomputed ops / compactions / evictions"].split(" / "))
        wall_ms = float(r["rehearsals' wall (s)"]) * 1e3 * 2  # summed over the 2 workers
        feats = [int(r["rehearsed iterations"]) * ops, rc, cp, ev * tensors]
        out.append((f"{r['row']} {r['GPU']} {r['budget']}", feats, wall_ms))
    if len(out) < len(FEATURES):
        sys.exit(f"fit_clock: {len(out)} rows in {path} planned; at least {len(FEATURES)} are needed")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="bench-out/planning-clock.json")
    ap.add_argument("--within", type=float, default=0.9,
                    help="the rehearsals' wall / clock the slowest row may reach (default 0.9)")
    ap.add_argument("--out", help="write the fit as JSON")
    args = ap.parse_args()
    if not 0 < args.within <= 1:
        sys.exit(f"fit_clock: --within must be in (0, 1], got {args.within}")
    rows = rows_of(args.json)
    a = [[f / w for f in feats] for _, feats, w in rows]  # each row's counts per ms of its wall
    rates = nnls(a, [1.0] * len(rows))  # ms per unit
    if rates is None:
        sys.exit("fit_clock: no non-negative fit")
    ratio = {name: w / sum(f * r for f, r in zip(feats, rates)) for name, feats, w in rows}
    scale = max(ratio.values()) / args.within
    fit = {"rates_ns": dict(zip(FEATURES, (r * 1e6 for r in rates))), "scale": scale,
           "scaled_rates_ns": dict(zip(FEATURES, (r * 1e6 * scale for r in rates))),
           "wall_over_fitted_clock": ratio}
    print("fitted rates (ns): " + ", ".join(f"{k} {v:.1f}" for k, v in fit["rates_ns"].items()))
    print(f"scaled {scale:.2f}x so the slowest row rehearses in {args.within:g} of the clock: " +
          ", ".join(f"{k} {v:.1f}" for k, v in fit["scaled_rates_ns"].items()))
    for name, r in ratio.items():
        print(f"  {name:34s} wall / fitted clock {r:.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(fit, f, indent=1)


if __name__ == "__main__":
    main()
