#!/usr/bin/env python3
"""Markdown tables from bench/vdnn.py's CSVs (the ones docs/experiments.md quotes).

  bench/vdnn_tables.py runs OUT/sim.csv            one row per model, batch and vDNN policy
  bench/vdnn_tables.py layers OUT/layers.csv M B P the per-layer report of one run
"""
import csv
import sys

GIB = 1 << 30


def gib(b):
    return f"{int(b) / GIB:.2f}" if b not in ("", None) else ""


def runs(path):
    rows = list(csv.DictReader(open(path)))
    print("| model | batch | policy | trains in budget | peak GiB | peak vs none | mean vs none | mean (no persistent) vs none "
          "| offloaded GiB / iter | prefetch stall ms / iter | all copy stalls ms / iter | time vs oracle |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in dict.fromkeys((r["model"], r["batch"]) for r in rows):
        group = [r for r in rows if (r["model"], r["batch"]) == key]
        oracle = group[0]  # none at the oracle budget
        none_fits = next((r["status"] for r in group[1:] if r["policy"] == "none"), "ok") == "ok"
        print(f"| {key[0]} | {key[1]} | none (oracle) | {'yes' if none_fits else 'no'} | {gib(oracle['peak_allocated_bytes'])} "
              f"| 1.000 | 1.000 | 1.000 | 0 | 0 | 0 | 1.000 |")
        for policy in ("vdnn-all", "vdnn-conv", "vdnn-dyn"):
            mine = [r for r in group if r["policy"] == policy]
            fits = mine[0]["status"] == "ok"
            r = mine[0] if fits else (mine[1] if len(mine) > 1 else None)
            trains = "yes" if fits else f"no ({mine[0]['chosen']})"
            if policy == "vdnn-dyn" and fits:
                trains += f": {mine[0]['chosen'].replace(' + ', ', ')}"
            if r is None:
                print(f"| {key[0]} | {key[1]} | {policy} | {trains} | | | | | | | | |")
                continue
            print(f"| {key[0]} | {key[1]} | {policy} | {trains} | {gib(r['peak_allocated_bytes'])} | {r['peak_vs_none']} "
                  f"| {r['mean_vs_none']} | {r['mean_activations_vs_none']} | {gib(r['offloaded_bytes_per_iter'])} "
                  f"| {float(r['prefetch_stall_ms_per_iter']):.1f} | {float(r['stall_ms_per_iter']):.1f} | {r['time_vs_none']} |")


def layers(path, model, batch, policy):
    print("| layer | kind | offloaded | offloaded MiB | prefetch after op | prefetch stall ms / iter |")
    print("|---|---|---|---|---|---|")
    for r in csv.DictReader(open(path)):
        if (r["model"], r["batch"], r["policy"]) == (model, batch, policy):
            print(f"| {r['layer']} | {r['kind']} | {'yes' if r['offloaded'] == 'True' else 'no'} "
                  f"| {int(r['offloaded_bytes']) / (1 << 20):.0f} | {r['prefetch_after_op']} | {r['prefetch_stall_ms_per_iter']} |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "runs":
        runs(sys.argv[2])
    elif len(sys.argv) == 6 and sys.argv[1] == "layers":
        layers(*sys.argv[2:])
    else:
        sys.exit(__doc__)
