"""vtensor.torch.auto beside PyTorch's own ways to cut a step's peak, at equal measured peak, on CPU
torch, for bench/run.py's torch-auto experiment.

For each model (the tests' CNN and tiny GPT, Hugging Face GPT-2, Llama and BERT from small configs,
torchvision's resnet18; batches where activations outweigh the weights) --steps AdamW steps (seeded)
under: plain PyTorch; selective activation checkpointing per block with a hand-written policy (save
matmul and convolution outputs, recompute the rest); torch.utils.checkpoint per block;
torch.compile with `activation_memory_budget` 0.5 (backend aot_eager_decomp_partition: the
min-cut partitioner the budget steers, without a C++ compiler); torch.autograd.graph.save_on_cpu.
Then vtensor.torch.auto with each one's measured peak as its budget, and at 50% of plain's peak.
Per row: time (median of the steps after the first, which a planning policy measures and compile
compiles) against plain's, the step's real peak (vt.StepPeak: parameters, gradients, optimizer
state and malloc's bytes at op boundaries), MiB moved to host, ops recomputed (auto's count; for
PyTorch's, the aten ops dispatched beyond plain's), and whether losses, gradients and weights are
bit-identical to plain's. On CPU the "host" is the same memory: save_on_cpu frees nothing, and
auto's offload goes to an anonymous mapping outside malloc's heap. torchtune's OffloadActivations
is not run here: it offloads a CUDA device's activations to CPU (on a CPU device there is nothing to
move), and its package brings torchao and a dataset stack into the environment; it belongs to the
GPU rows.
    .venv/bin/python bench/torch_auto.py --json OUT.json [--steps 4] [--models a,b]
"""
import argparse
import contextlib
import functools
import os
import statistics
import sys
import threading
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts  # noqa: E402

import vtensor  # noqa: E402
import vtensor.torch as vt  # noqa: E402
from vtensor.torch.memory import malloc_in_use  # noqa: E402
import models as own  # noqa: E402
import subjects  # noqa: E402
from script_io import write_rows  # noqa: E402
from torch_policies import blocks  # noqa: E402

MODELS = ("cnn", "tiny-gpt", "gpt2", "llama", "bert", "resnet18")
BATCH = {"cnn": 64, "tiny-gpt": 64, "gpt2": 48, "llama": 48, "bert": 48, "resnet18": 96}
SAVE = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.convolution.default",
        "aten._scaled_dot_product_flash_attention_for_cpu.default", "aten._scaled_dot_product_efficient_attention.default"}


def subject(name):
    """(make model, data(step) -> (inputs, loss_fn))."""
    if name in ("cnn", "tiny-gpt"):
        make = own.small_cnn if name == "cnn" else own.small_gpt

        def data(k):
            g = torch.Generator().manual_seed(k)
            if name == "cnn":
                x, y = torch.randn(64, 3, 16, 16, generator=g), torch.randint(0, 10, (64,), generator=g)
            else:
                idx = torch.randint(0, 64, (64, 17), generator=g)
                x, y = idx[:, :-1], idx[:, 1:]
            return (x,), lambda out: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        return make, data
    return subjects.MODELS[name], lambda k: subjects.batch(name, k, BATCH[name], 64)


def _sac_policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if str(op) in SAVE else CheckpointPolicy.PREFER_RECOMPUTE


def wrap_blocks(name, model, selective):
    """Each block's forward under torch.utils.checkpoint (non-reentrant), with the hand-written
    selective policy where asked."""
    for b in blocks(name, model):
        fwd = b.forward
        kw = {"context_fn": functools.partial(create_selective_checkpoint_contexts, _sac_policy)} if selective else {}

        def run(*a, _fwd=fwd, _kw=kw, **k):
            return checkpoint(_fwd, *a, use_reentrant=False, **_kw, **k)
        b.forward = run
    return model


class SampledPeak:
    """The step's peak as vt.StepPeak counts it (the step's start tensors plus malloc's bytes above
    its start), but read by a thread in a loop instead of at op boundaries: torch.compile runs its
    graph as plain code only where no TorchDispatchMode is active, so op boundaries cannot be
    hooked there. It also sees what an op holds inside itself; each read is a lower bound."""

    def __init__(self, model, opt):
        from vtensor.torch._step_record import _start_tensors
        self.start = sum(t.untyped_storage().nbytes() for t in _start_tensors(model, opt, "cpu"))
        self.peak_bytes = 0

    def _loop(self):
        while not self._stop.is_set():
            self._max = max(self._max, malloc_in_use())

    def __enter__(self):
        self._malloc0 = self._max = malloc_in_use()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self._max = max(self._max, malloc_in_use())
        self.peak_bytes = self.start + self._max - self._malloc0
        return False


class OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def train(name, steps, prepare=None, context=None, count_ops=False, hooked=True):
    """`steps` AdamW steps; prepare(model) -> model (wrapping, compile); context(model, opt) -> the
    per-step context (vt.auto), else each step under vt.StepPeak (hooked) or SampledPeak. Returns
    losses, last grads, final params, per-step times and peaks (op boundaries; sampled), the
    context, the aten ops dispatched in the last step."""
    make, data = subject(name)
    model = make()
    model.train()
    if prepare is not None:
        model = prepare(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ctx = context(model, opt) if context is not None else None
    losses, grads, times, peaks, sampled, ops = [], [], [], [], [], 0
    for k in range(steps):
        inputs, loss_fn = data(k)
        torch.manual_seed(1000 + k)  # dropout masks
        meter = ctx if ctx is not None else vt.StepPeak(model, opt) if hooked else contextlib.nullcontext()
        counter = OpCount() if count_ops and k == steps - 1 else contextlib.nullcontext()
        thread = SampledPeak(model, opt)
        t = time.perf_counter()
        with thread, meter:
            with counter:
                loss = loss_fn(model(*inputs))
                loss.backward()
        times.append(time.perf_counter() - t)
        sampled.append(thread.peak_bytes)
        peaks.append(ctx.stats()["peak_bytes"] if ctx is not None else meter.peak_bytes if hooked else 0)
        if count_ops and k == steps - 1:
            ops = counter.ops
        losses.append(loss.detach().clone())
        grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
        opt.step()
        opt.zero_grad(set_to_none=True)
    params = [p.detach().clone() for p in model.parameters()]
    return dict(losses=losses, grads=grads, params=params, times=times, peaks=peaks, sampled=sampled, ctx=ctx, ops=ops)


def identical(a, b):
    pairs = list(zip(a["losses"], b["losses"])) + list(zip(a["grads"], b["grads"])) + list(zip(a["params"], b["params"]))
    same = len(a["grads"]) == len(b["grads"]) and all(torch.equal(x, y) for x, y in pairs)
    return "yes" if same else "no"


def compiled(model):
    torch._dynamo.reset()
    torch._functorch.config.activation_memory_budget = 0.5
    return torch.compile(model, backend="aot_eager_decomp_partition")


COMPILE = "torch.compile, activation_memory_budget 0.5"


def _row(name, method, got=None, plain_t=None, ref=None, **kw):
    r = dict(model=name, method=method, peak="", sampled="", ratio="", moved="", recomputed="", identical="", vs="",
             note="")
    if got is not None:
        mib = 2 ** -20
        r.update(peak=max(got["peaks"][1:]) * mib if max(got["peaks"][1:]) else "",
                 sampled=max(got["sampled"][1:]) * mib, ratio=statistics.median(got["times"][1:]) / plain_t,
                 identical=identical(ref, got) if ref is not got else "-")
    r.update(kw)
    return r


def rows_of(name, steps):
    ref = train(name, steps, count_ops=True)
    plain_t, plain_peak = statistics.median(ref["times"][1:]), max(ref["peaks"][1:])
    rows = [_row(name, "plain", ref, plain_t, ref, note=f"{ref['ops']} aten ops a step")]
    alts = [("selective checkpoint (save matmuls) per block", dict(prepare=lambda m: wrap_blocks(name, m, True))),
            ("torch.utils.checkpoint per block", dict(prepare=lambda m: wrap_blocks(name, m, False))),
            (COMPILE, dict(prepare=compiled, hooked=False)),
            ("save_on_cpu", dict(context=_save_on_cpu))]
    targets = [("50% of plain's peak", int(plain_peak * 0.5), None)]
    for label, kw in alts:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = train(name, steps, count_ops="prepare" in kw and label != COMPILE, **kw)
        except Exception as e:  # compile on a model it cannot trace
            rows.append(_row(name, label, note=f"did not run: {type(e).__name__}: {str(e).splitlines()[0][:120]}"))
            continue
        rows.append(_row(name, label, got, plain_t, ref, recomputed=max(got["ops"] - ref["ops"], 0) if got["ops"] else ""))
        peak = max(got["peaks"][1:]) or max(got["sampled"][1:])
        targets.append((f"{label}'s peak", int(peak), statistics.median(got["times"][1:])))
    for label, budget, their_t in targets:
        rows.append(_auto_row(name, steps, label, budget, their_t, ref, plain_t))
    return rows


def _save_on_cpu(model, opt):
    """torch.autograd.graph.save_on_cpu around each step, measured as vt.StepPeak measures."""
    class Step:
        def __enter__(self):
            self.m = vt.StepPeak(model, opt).__enter__()
            self.c = torch.autograd.graph.save_on_cpu(pin_memory=False)
            self.c.__enter__()
            return self

        def __exit__(self, *exc):
            self.c.__exit__(*exc)
            self.m.__exit__(*exc)
            return False

        def stats(self):
            return {"peak_bytes": self.m.peak_bytes}
    return Step()


def _auto_row(name, steps, label, budget, their_t, ref, plain_t):
    mib = 2 ** -20
    made = []

    def context(model, opt):
        made.append(vt.auto(model, budget=budget, optimizer=opt))
        return made[0]
    what = f"vt.auto at {label}"
    try:
        got = train(name, steps, context=context)
    except vtensor.OutOfMemoryError as e:
        return _row(name, what, note=f"no plan holds {budget * mib:.2f} MiB: lowest about {e.lowest_budget * mib:.2f} MiB")
    except ValueError as e:
        return _row(name, what, note=f"refused: {str(e)[:120]}")
    h = made[0].history
    guided = [s for s in h if s["mode"] == "guided"]
    last = guided[-1] if guided else h[-1]
    t = statistics.median(got["times"][1:])
    within = "within" if max(got["peaks"][1:]) <= budget else "over"
    return _row(name, what, got, plain_t, ref, moved=last["swapped_out_bytes"] * mib, recomputed=last["recomputed_ops"],
                vs=f"{t / their_t:.2f}x" if their_t else "",
                note=f"budget {budget * mib:.2f} MiB, {within}; {len(guided)} of {len(h)} steps guided")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="where the rows go (a JSON list)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    models = a.models.split(",")
    bad = [m for m in models if m not in MODELS]
    if bad or a.steps < 3:
        sys.exit(f"torch_auto: unknown model {bad} or --steps < 3; accepted models: {', '.join(MODELS)}")
    torch.set_num_threads(1)
    rows = []
    for m in models:
        print(f"torch_auto: {m}", flush=True)
        rows += rows_of(m, a.steps)
    write_rows(a.json, rows)


if __name__ == "__main__":
    main()
