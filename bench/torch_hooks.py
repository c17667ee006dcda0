"""Figures of vtensor.torch on CPU torch: offload (capuchin, swap) and auto_checkpoint at a fraction of
each test model's unmanaged peak of saved bytes; step time against the same step without hooks.
    PYTHONPATH=python /usr/bin/python3 bench/torch_hooks.py [--frac 0.5] [--steps 5]
CPU only: the "device" is a host arena, so times say what the hooks cost here, not a GPU's."""
import argparse
import copy
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "tests"))
import torch  # noqa: E402

import vtensor.torch as vt  # noqa: E402
from models import cnn_batch, gpt_batch, small_cnn, small_gpt, train_step  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--frac", type=float, default=0.5)
ap.add_argument("--steps", type=int, default=5)
args = ap.parse_args()
torch.set_num_threads(1)


def timed(fn, steps):
    fn()
    t = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t) / steps * 1e3


print("model policy         budget_KiB  saved_peak_KiB  device_peak_KiB  swapped_out_KiB  ms/step  vs_plain")
for name, make, batch in (("cnn", small_cnn, cnn_batch), ("gpt", small_gpt, gpt_batch)):
    model = make()
    x, y = batch()
    plain = timed(lambda: train_step(model, x, y), args.steps)
    probe = vt.offload(policy="swap", budget="1GiB")
    with probe:
        train_step(model, x, y)
    peak = probe.stats()["peak_saved_bytes"]
    budget = int(peak * args.frac)
    print(f"{name:5} {'none':14} {'-':>10}  {peak / 1024:14.0f}  {peak / 1024:15.0f}  {0:15.0f}  {plain:7.2f}  1.00")
    for policy in ("capuchin", "swap"):
        off = vt.offload(policy=policy, budget=budget)

        def step():
            with off:
                train_step(model, x, y)

        ms = timed(step, args.steps)
        s = off.stats()
        print(f"{name:5} {'offload-' + policy:14} {budget / 1024:10.0f}  {s['peak_saved_bytes'] / 1024:14.0f}  "
              f"{s['peak_device_bytes'] / 1024:15.0f}  {s['swapped_out_bytes'] / 1024:15.0f}  {ms:7.2f}  {ms / plain:.2f}")
    m = copy.deepcopy(model)
    rep = vt.auto_checkpoint(m, (x,), budget, loss_fn=lambda out: torch.nn.functional.cross_entropy(
        out.reshape(-1, out.shape[-1]), y.reshape(-1)))
    ms = timed(lambda: train_step(m, x, y), args.steps)
    print(f"{name:5} {'auto_checkpoint':14} {budget / 1024:10.0f}  {rep['measured_peak_after'] / 1024:14.0f}  "
          f"{rep['measured_peak_after'] / 1024:15.0f}  {0:15.0f}  {ms:7.2f}  {ms / plain:.2f}  "
          f"chose {','.join(rep['chosen'])} ({rep['rule']})")
