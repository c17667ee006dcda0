"""vtensor.torch's policies side by side on CPU torch, for bench/run.py's torch-policies experiment.

For each model (the tests' CNN and tiny GPT, torchvision's resnet18, Hugging Face GPT-2, Llama and
BERT from small configs) one training step (AdamW, seeded) under: plain PyTorch; offload
(capuchin, swap) with a device budget of 50% / 25% of plain's peak of saved bytes; compress;
auto_checkpoint with the step's real activation peak budgeted so that its saved part is 50% / 25%
of plain's; torch.utils.checkpoint's non-reentrant checkpoint on every block. Per row: the step's
median time over --steps steps against plain's, the step's real peak (vtensor.torch.peak_memory:
malloc's bytes in use at op boundaries, above the step's start), the policy's own figure of saved
bytes held (offload: its device arena's peak; compress: compressed and kept bytes), and whether
losses and gradients are bit-identical to plain's. On CPU offload's "device" is an arena in the
same memory as its "host", so its real peak does not fall: the table shows it as it is.
    .venv/bin/python bench/torch_policies.py --json OUT.json [--steps 5] [--models a,b]
"""
import argparse
import copy
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import vtensor.torch as vt  # noqa: E402
import models as own  # noqa: E402
import subjects  # noqa: E402
from script_io import write_rows  # noqa: E402


def own_subject(name):
    make, data = (own.small_cnn, own.cnn_batch) if name == "cnn" else (own.small_gpt, own.gpt_batch)
    x, y = data()

    def loss_fn(out):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return make, (x,), loss_fn


def subject(name):
    if name in ("cnn", "tiny-gpt"):
        return own_subject("cnn" if name == "cnn" else "gpt")
    inputs, loss_fn = subjects.batch(name, 0)
    return subjects.MODELS[name], inputs, loss_fn


def blocks(name, model):
    """The model's blocks, for torch.utils.checkpoint per block."""
    if name == "cnn":
        return [m for m in model if isinstance(m, torch.nn.Sequential)]
    if name == "tiny-gpt":
        return list(model.blocks)
    if name == "resnet18":
        return [b for layer in (model.layer1, model.layer2, model.layer3, model.layer4) for b in layer]
    if name == "gpt2":
        return list(model.transformer.h)
    if name == "llama":
        return list(model.model.layers)
    return list(model.bert.encoder.layer)


def step(model, inputs, loss_fn, ctx):
    torch.manual_seed(7)
    with ctx:
        loss = loss_fn(model(*inputs))
        loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


class Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def measure(model, inputs, loss_fn, ctx, steps):
    step(model, inputs, loss_fn, ctx)  # measured step of a planning policy, warm-up of the rest
    model.zero_grad(set_to_none=True)
    with vt.peak_memory("cpu"):
        step(model, inputs, loss_fn, ctx)  # the meter's own first use
    model.zero_grad(set_to_none=True)
    with vt.peak_memory("cpu") as m:
        got = step(model, inputs, loss_fn, ctx)
    times = []
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        t = time.perf_counter()
        step(model, inputs, loss_fn, ctx)
        times.append(time.perf_counter() - t)
    return got, m.peak_bytes, statistics.median(times)


def identical(a, b):
    return torch.equal(a[0], b[0]) and len(a[1]) == len(b[1]) and all(torch.equal(x, y) for x, y in zip(a[1], b[1]))


def rows_of(name, steps):
    make, inputs, loss_fn = subject(name)
    base = make()
    ref, plain_peak, plain_t = measure(copy.deepcopy(base), inputs, loss_fn, Null(), steps)
    probe = vt.offload(policy="swap", budget="1GiB", device="cpu")
    step(copy.deepcopy(base), inputs, loss_fn, probe)
    saved = probe.stats()["peak_saved_bytes"]
    out = [dict(model=name, policy="plain", budget="-", ratio=1.0, peak=plain_peak, held=saved, identical="-",
                note=f"{saved / 2**20:.2f} MiB saved for backward at the peak")]
    for frac in (0.5, 0.25):
        for policy in ("capuchin", "swap"):
            off = vt.offload(policy=policy, budget=int(saved * frac), device="cpu")
            got, peak, t = measure(copy.deepcopy(base), inputs, loss_fn, off, steps)
            s = off.stats()
            out.append(dict(model=name, policy=f"offload {policy}", budget=f"{frac:.0%}", ratio=t / plain_t, peak=peak,
                            held=s["peak_device_bytes"], identical="yes" if identical(ref, got) else "NO",
                            note=f"{s['mode']}; {s['swapped_out_bytes'] / 2**20:.2f} MiB to host (the same memory on CPU)"))
        model = copy.deepcopy(base)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = vt.auto_checkpoint(model, inputs, int(plain_peak - (1 - frac) * saved), loss_fn=loss_fn)
        got, peak, t = measure(model, inputs, loss_fn, Null(), steps)
        out.append(dict(model=name, policy="auto_checkpoint", budget=f"{frac:.0%}", ratio=t / plain_t, peak=peak,
                        held="", identical="yes" if identical(ref, got) else "NO",
                        note=f"{len(rep['chosen'])} of {len(rep['candidates'])} regions, "
                             f"{sum(len(v) for v in rep['saved_ops'].values())} ops saved; "
                             + ("fits" if rep["fits"] else f"misses by {(rep['measured_peak_after'] - rep['budget']) / 2**20:.2f} MiB")))
    comp = vt.offload(policy="compress")
    got, peak, t = measure(copy.deepcopy(base), inputs, loss_fn, comp, steps)
    s = comp.stats()
    out.append(dict(model=name, policy="compress", budget="-", ratio=t / plain_t, peak=peak, held=s["peak_held_bytes"],
                    identical="yes" if identical(ref, got) else "NO",
                    note=f"{s['compressed_entries']} of {s['entries']} tensors compressed, ratio {s['ratio']:.2f}"))
    model = copy.deepcopy(base)
    for b in blocks(name, model):
        vt.checkpoint_module(b)
    got, peak, t = measure(model, inputs, loss_fn, Null(), steps)
    out.append(dict(model=name, policy="torch checkpoint per block", budget="-", ratio=t / plain_t, peak=peak,
                    held="", identical="yes" if identical(ref, got) else "NO", note=f"{len(blocks(name, model))} blocks"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="where the rows go (a JSON list)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--models", default="cnn,tiny-gpt,resnet18,gpt2,llama,bert")
    a = ap.parse_args()
    models = a.models.split(",")
    known = ("cnn", "tiny-gpt", "resnet18", "gpt2", "llama", "bert")
    bad = [m for m in models if m not in known]
    if bad or a.steps < 1:
        sys.exit(f"torch_policies: unknown model {bad} or --steps < 1; accepted models: {', '.join(known)}")
    torch.set_num_threads(1)
    rows = []
    for m in models:
        print(f"torch_policies: {m}", flush=True)
        rows += rows_of(m, a.steps)
    for r in rows:  # bytes as MiB
        for k in ("peak", "held"):
            if isinstance(r[k], int):
                r[k] = r[k] / 2**20
    write_rows(a.json, rows)


if __name__ == "__main__":
    main()
