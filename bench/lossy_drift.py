#!/usr/bin/env python3
"""Loss drift of the opt-in lossy codecs against `none` on the cpu backend (real data).

Usage: bench/lossy_drift.py [--models resnet-tiny:0.35,vgg-tiny:0.62] [--iters 20]
For each model: `none` unbounded, then `compress` at the budget fraction of its peak without
--lossy and with each lossy mode; per run the largest |loss - none's loss| over the
iterations, the final loss, compressed MiB and ratio of the last iteration, and which codecs
the run used. Needs build/vtensor.
"""
import argparse, json, os, subprocess, tempfile

BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "vtensor")


def train(model, extra, tmp):
    rep = os.path.join(tmp, "r.json")
    subprocess.run([BIN, "train", "--model", model, "--quiet", "--report", rep] + extra, check=True,
                   stdout=subprocess.DEVNULL)
    with open(rep) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet-tiny:0.35,vgg-tiny:0.62")
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    print("| model | budget | lossy | max abs loss drift | final loss (none) | final loss | compressed MiB | ratio | codecs |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in a.models.split(","):
            model, frac = spec.split(":")
            base = train(model, ["--iters", str(a.iters)], tmp)
            budget = int(base["summary"]["peak_allocated_bytes"] * float(frac)) // 512 * 512
            for mode in ["", "--no-persistent-buffers", "bf16", "fp16", "int8"]:
                extra = ["--policy", "compress", "--budget", str(budget), "--iters", str(a.iters)]
                if mode.startswith("--"):
                    extra.append(mode)
                elif mode:
                    extra += ["--lossy", mode, "--no-persistent-buffers"]
                r = train(model, extra, tmp)
                drift = max(abs(x["loss"] - y["loss"]) for x, y in zip(base["iterations"], r["iterations"]))
                last = r["iterations"][-1]
                codecs = sorted({t["codec"] for t in r.get("compression", [])})
                ratio = f"{last['compression_ratio']:.3f}" if last["compression_ratio"] else "-"
                label = mode or "(lossless)"
                print(f"| {model} | {frac} | {label} | {drift:.2e} | {base['summary']['final_loss']:.5f} | "
                      f"{r['summary']['final_loss']:.5f} | {last['compressed_bytes'] / 2**20:.2f} | {ratio} | {', '.join(codecs)} |")


if __name__ == "__main__":
    main()
