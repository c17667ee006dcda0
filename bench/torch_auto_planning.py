"""How long vtensor.torch.auto plans a step, against the step's op count: Hugging Face GPT-2 at
GPT-2 small's width (768, 12 heads, vocabulary 50257) with 4 to 24 layers (12: GPT-2 small), batch
8 x 128 tokens, AdamW, on CPU torch with one thread, for bench/run.py's torch-auto-planning
experiment. Per row: the measured step's aten ops, planning seconds
(`_vtensor.plan_step` with policy auto on the sim, and the sim replay that scales the budget; the
budget is the floor of parameters, gradients and AdamW's moments, which at this batch are most of
the peak, plus 50% of the rest, or 75% or 90% where no plan holds that: the lm head's working set
needs most of it at few layers), the plan's moves and its predicted step time against the measured one.
    .venv/bin/python bench/torch_auto_planning.py --json OUT.json [--layers 4,8,12,24]
"""
import argparse
import sys
import time

import torch
import torch.nn.functional as F

import vtensor
import vtensor.torch as vt
from script_io import write_rows

VOCAB, SEQ, BATCH = 50257, 128, 8


def model_of(layers):
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=1024, n_embd=768, n_layer=layers, n_head=12,
                                  use_cache=False)
    return transformers.GPT2LMHeadModel(cfg)


def planned(model, opt, budget, loss_of):
    step = vt.auto(model, budget=budget, optimizer=opt)
    t = time.perf_counter()
    with step:
        loss_of(model).backward()
    wall = time.perf_counter() - t
    model.zero_grad(set_to_none=True)
    return step, wall


def row(layers):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)

    def loss_of(model):
        logits = model(ids).logits
        return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    model = model_of(layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_of(model).backward()  # a first step makes AdamW's moments, which the peak then holds
    opt.step()
    model.zero_grad(set_to_none=True)
    with vt.StepPeak(model, opt) as m:
        loss_of(model).backward()
    model.zero_grad(set_to_none=True)
    floor = vt.auto(model, budget=m.peak_bytes, optimizer=opt).floor  # parameters, gradients, AdamW's moments
    for frac in (0.5, 0.75, 0.9):  # of the activations; the lm head's working set needs most at few layers
        budget = int(floor + frac * (m.peak_bytes - floor))
        try:
            step, wall = planned(model, opt, budget, loss_of)
            break
        except vtensor.OutOfMemoryError:
            continue
    else:
        return dict(layers=layers, note="no plan at 90% of the activations")
    s = step.stats()
    p = s["plan"]
    return dict(layers=layers, ops=s["ops"], planning=p["planning_s"], moves=p["moves"], step=s["time_ms"] / 1e3,
                whole=wall, predicted_s=p["predicted_ms"] / 1e3, peak=m.peak_bytes / 2**20, budget=budget / 2**20, frac=frac,
                summary=p["summary"].split(",")[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="where the rows go (a JSON list)")
    ap.add_argument("--layers", default="4,8,12,24")
    a = ap.parse_args()
    try:
        layers = [int(x) for x in a.layers.split(",")]
    except ValueError:
        layers = []
    if not layers or any(n < 1 or n > 48 for n in layers):
        sys.exit(f"torch_auto_planning: --layers must be comma-separated counts in [1, 48], got {a.layers!r}")
    torch.set_num_threads(1)
    rows = []
    for n in layers:
        print(f"torch_auto_planning: {n} layers", flush=True)
        rows.append(row(n))
    write_rows(a.json, rows)


if __name__ == "__main__":
    main()
