#!/usr/bin/env python3
"""What auto's search buys and what its planning costs, per row of the headline and DTR-log tables.

For each paper model (reference batch) and DTR log at 50% / 25% of its unmanaged peak (and the
Transformer log at 4 GB), on each GPU: one `vtensor train` / `vtensor replay --policy auto`
with a report; from the report, the best of the planners as they are (capuchin, capuchin-recompute,
capuchin-swap, checkpoint, dtr, lru-recompute) against the candidate auto chose (on sim a rehearsal is the run, so
these are the times the run measures), and the planning time (rehearsals, on this machine).

  bench/auto_search.py [--gpus p100-16g,h100-80g] [--what models,logs] > auto_search.md

  bench/auto_search.py --summary bench-out   # after bench/run.py headline-p100 headline-h100 dtr-logs:
                                             # auto beside the best other policy per row, and its
                                             # extra time beside dtr's and capuchin's on the logs
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(ROOT, "build", "vtensor")
PLAIN = ["capuchin", "capuchin-recompute", "capuchin-swap", "checkpoint", "dtr", "lru-recompute"]
MODELS = [("resnet50", ["--batch", "32"]), ("vgg16", ["--batch", "64"]),
          ("gpt2-small", ["--batch", "8", "--seq", "1024"]), ("bert-base", ["--batch", "32", "--seq", "128"])]
LOGS = ["densenet121", "inceptionv4", "lstm", "resnet32", "transformer", "treelstm", "unet", "unroll_gan"]


def vt(args):
    p = subprocess.run([BIN, *args], capture_output=True, text=True)
    return p


def budgets(src, gpu, tmp):
    """budget label -> bytes, from a sweep of policy none (it reports the budgets even on OOM)."""
    path = os.path.join(tmp, "b.csv")
    extra = ["50%", "25%"]
    p = vt(["sweep", *src, "--gpu", gpu, "--policies", "none", "--budgets", ",".join(extra), "--iters", "1", "--out", path])
    if p.returncode != 0:
        sys.exit(f"sweep failed: {p.stderr.strip()[-400:]}")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {r["budget"]: int(r["budget_bytes"]) for r in rows}, float(rows[0]["unmanaged_ms"])


def row(cmd, src, gpu, budget, tmp):
    rep = os.path.join(tmp, "r.json")
    p = vt([cmd, *src, *(["--backend", "sim"] if cmd == "train" else []), "--gpu", gpu, "--policy", "auto", "--budget", f"{budget}B", "--iters", "2", "--report", rep])
    if p.returncode != 0:
        return None
    with open(rep) as f:
        r = json.load(f)["policy_report"]
    trained = {c["policy"]: c["predicted_time_ms"] for c in r["candidates"] if c.get("trained")}
    plain = {k: v for k, v in trained.items() if k in PLAIN}
    best_plain = min(plain, key=plain.get) if plain else None
    skipped = sum(1 for c in r["candidates"] if "time limit" in c.get("error", ""))
    ch = next((c for c in r["candidates"] if c["policy"] == r["chosen"]), {})
    return {"chosen": r["chosen"], "auto_ms": trained.get(r["chosen"]), "best_plain": best_plain,
            "stall_ms": ch.get("predicted_stall_ms", 0), "recompute_ms": ch.get("predicted_recompute_ms", 0),
            "compactions": ch.get("predicted_compactions", 0), "swapped": ch.get("predicted_swapped_out_bytes", 0),
            "plain_ms": plain.get(best_plain), "planning_s": r["planning_ms"] / 1e3,
            "rehearsed": len(r["candidates"]) - skipped, "skipped": skipped}


def summary(out):
    def load(name):
        path = os.path.join(out, name + ".csv")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return list(csv.DictReader(f))

    def fmt(x):
        return f"{x:.2f}×" if x is not None else "OOM"

    print("Paper models (reference batch; target: 1.05× at 50%, 1.15× at 25%; max batch in the same budget):\n")
    print("| model | GPU | budget | auto | best other policy | target | auto's max batch | best other's max batch |")
    print("|---|---|---|---|---|---|---|---|")
    for name in ("headline-p100", "headline-h100"):
        rows = load(name)
        keys = []
        for r in rows:
            if (r["model"], r["budget"]) not in keys:
                keys.append((r["model"], r["budget"]))
        for m, b in keys:
            sel = {r["policy"]: r for r in rows if r["model"] == m and r["budget"] == b}
            if "auto" not in sel:
                continue
            ok = {p: float(r["overhead"]) for p, r in sel.items() if r["status"] == "ok" and p not in ("auto", "none")}
            best = min(ok, key=ok.get) if ok else None
            a = sel["auto"]
            av = float(a["overhead"]) if a["status"] == "ok" else None
            target = 1.05 if b == "50%" else 1.15
            met = "" if av is None else ("met" if av <= target else "missed")
            mb = max((int(r["max_batch"] or 0) for p, r in sel.items() if p not in ("auto", "none")), default=0)
            print(f"| {m} | {a['gpu']} | {b} | {fmt(av)} | {best + ' ' + fmt(ok[best]) if best else 'none trains'} | "
                  f"{met} | {a['max_batch']} | {mb} |")
    logs = load("dtr-logs")
    if not logs:
        return
    print("\nDTR logs (time against the log's unmanaged replay; extra time = overhead - 1):\n")
    print("| log | GPU | budget | auto | best other policy | auto's extra | dtr's extra | capuchin's extra |")
    print("|---|---|---|---|---|---|---|---|")
    keys = []
    for r in logs:
        if (r["model"], r["gpu"], r["budget"]) not in keys:
            keys.append((r["model"], r["gpu"], r["budget"]))
    for m, g, b in keys:
        sel = {r["policy"]: r for r in logs if r["model"] == m and r["gpu"] == g and r["budget"] == b}
        if "auto" not in sel:
            continue
        ov = {p: float(r["overhead"]) for p, r in sel.items() if r["status"] == "ok" and p != "none"}
        others = {p: v for p, v in ov.items() if p != "auto"}
        best = min(others, key=others.get) if others else None

        def extra(p):
            return f"{(ov[p] - 1) * 100:.0f}%" if p in ov else "OOM"
        print(f"| {m} | {g} | {b} | {fmt(ov.get('auto'))} | {best + ' ' + fmt(others[best]) if best else 'none trains'} | "
              f"{extra('auto')} | {extra('dtr')} | {extra('capuchin')} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--summary", metavar="DIR", help="summarise bench/run.py's CSVs in DIR instead of running")
    ap.add_argument("--gpus", default="p100-16g,h100-80g")
    ap.add_argument("--what", default="models,logs")
    a = ap.parse_args()
    if a.summary:
        summary(a.summary)
        return
    work = []
    if "models" in a.what:
        work += [("train", m, ["--model", m, *args], ["50%", "25%"]) for m, args in MODELS]
    if "logs" in a.what:
        work += [("replay", l, ["--trace", f"dtr:{l}"], ["50%", "25%"] + (["4GB"] if l == "transformer" else []))
                 for l in LOGS]
    print("| row | GPU | budget | best planner as it is | auto's choice | search gain | auto's time: unmanaged + stall + recompute + rest (ms) | GiB swapped out | planning (s) | rehearsed / skipped |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for gpu in a.gpus.split(","):
            for cmd, name, src, bl in work:
                sweep_src = src if cmd == "train" else ["--trace", src[1]]
                bb, unmanaged = budgets(sweep_src, gpu, tmp)
                for b in bl:
                    nbytes = bb.get(b, 4_000_000_000 if b == "4GB" else None)
                    r = row(cmd, src, gpu, nbytes, tmp)
                    if not r or r["auto_ms"] is None:
                        print(f"| {name} | {gpu} | {b} | OOM | OOM | | | | | |", flush=True)
                        continue
                    plain = f"{r['best_plain']} {r['plain_ms']:.1f} ms" if r["best_plain"] else "none trains"
                    gain = f"{(1 - r['auto_ms'] / r['plain_ms']) * 100:.1f}%" if r["plain_ms"] else ""
                    rest = r["auto_ms"] - unmanaged - r["stall_ms"] - r["recompute_ms"]
                    parts = f"{unmanaged:.1f} + {r['stall_ms']:.1f} + {r['recompute_ms']:.1f} + {rest:.1f}"
                    print(f"| {name} | {gpu} | {b} | {plain} | {r['chosen']} {r['auto_ms']:.1f} ms | {gain} | {parts} | "
                          f"{r['swapped'] / 2**30:.2f} | {r['planning_s']:.2f} | {r['rehearsed']} / {r['skipped']} |", flush=True)


if __name__ == "__main__":
    main()
