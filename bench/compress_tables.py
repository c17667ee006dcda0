#!/usr/bin/env python3
"""Markdown tables for docs/experiments.md from bench/compress_compare.sh's CSVs.

Usage: bench/compress_tables.py OUTDIR/p100-16g.csv OUTDIR/h100-80g.csv
Per GPU: the comparison (time vs `none` at the reference batch / maximum batch under the
budget, the Capuchin section's form) and the ablation (compress with each switch off).
"""
import csv, sys

MAIN = ["compress", "compress+swap", "capuchin", "dtr", "vdnn-conv"]
ABL = ["compress", "compress@no-sliding-workspace", "compress@no-persistent-buffers", "compress@compress-on-compute-stream"]
GIB = 1024 ** 3


def cell(r):
    t = "OOM" if r["overhead_vs_none"] == "oom" else f"{float(r['overhead_vs_none']):.2f}×"
    return f"{t} / {r['max_batch']}"


def main():
    for path in sys.argv[1:]:
        rows = list(csv.DictReader(open(path)))
        gpu = rows[0]["gpu"]
        by = {}
        for r in rows:
            by.setdefault((r["model"], r["fraction"]), {})[r["policy"]] = r
        print(f"#### {gpu}: time vs `none` at the reference batch / maximum batch under the budget\n")
        print("| model (reference batch, none's time) | budget | none: max batch | " + " | ".join(MAIN) + " |")
        print("|---|---|---|" + "---|" * len(MAIN))
        for (m, f), ps in by.items():
            n = ps["none"]
            b = int(n["budget_bytes"]) / GIB
            print(f"| {m} ({n['batch']}, {float(n['none_best_iteration_ms']):.0f} ms) | {float(f):.2f} = {b:.2f} GiB | "
                  f"{n['max_batch']} | " + " | ".join(cell(ps[p]) if p in ps else "n/a" for p in MAIN) + " |")
        print(f"\n#### {gpu}: ablation (compress, reference batch): time vs `none`, max batch, swapped and compressed GiB per iteration (ratio)\n")
        print("| model | budget | " + " | ".join(ABL) + " |")
        print("|---|---|" + "---|" * len(ABL))
        for (m, f), ps in by.items():
            if m not in ("resnet50", "vgg16"):
                continue
            cells = []
            for p in ABL:
                r = ps.get(p)
                if r is None or r["overhead_vs_none"] == "oom":
                    cells.append(f"OOM / {r['max_batch'] if r else '?'}")
                    continue
                sw = float(r["swapped_out_bytes_per_iter"] or 0) / GIB
                cb = float(r["compressed_bytes_per_iter"] or 0) / GIB
                ratio = r["compression_ratio"] or "-"
                cells.append(f"{float(r['overhead_vs_none']):.2f}× / {r['max_batch']}; swap {sw:.2f}, compr. {cb:.2f} ({ratio})")
            print(f"| {m} | {float(f):.2f} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
