"""vtensor.torch.auto beside torch.distributed: each rank plans its own step. Two processes on the
gloo backend (CPU), Hugging Face GPT-2 (small config) under DistributedDataParallel and under
FSDP2's fully_shard; each rank's losses, gradients and weights bit-identical to the same
distributed run without vtensor, at half the plain step's peak."""
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import vtensor.torch as vt
import subjects

WORLD, BATCH, STEPS = 2, 48, 5


def _wrap(kind, model):
    if kind == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    from torch.distributed.fsdp import fully_shard
    for block in model.transformer.h:
        fully_shard(block)
    return fully_shard(model)


def _grads(model):
    out = []
    for p in model.parameters():
        g = p.grad
        if g is not None:
            out.append((g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone())
    return out


def _params(model):
    return [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone() for p in model.parameters()]


def _train(kind, rank, context=None):
    """STEPS optimizer steps of this rank's batches; context(model, opt) gives each step's context
    (None: plain PyTorch). Returns (losses, last gradients, final parameters, the contexts)."""
    model = _wrap(kind, subjects.gpt2())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ctx = context(model, opt) if context is not None else None
    losses, grads, used = [], [], []
    for step in range(STEPS):
        inputs, loss_fn = subjects.batch("gpt2", step * WORLD + rank, BATCH)
        torch.manual_seed(1000 + step)  # dropout masks
        c = ctx() if ctx is not None else None
        if c is not None:
            used.append(c)
            with c:
                loss = loss_fn(model(*inputs))
                loss.backward()
        else:
            loss = loss_fn(model(*inputs))
            loss.backward()
        losses.append(loss.detach().clone())
        grads = _grads(model)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses, grads, _params(model), used


def _rank(rank, kind, store, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        ref = _train(kind, rank)
        meters = []

        def peak(model, opt):
            return lambda: meters.append(vt.StepPeak(model, opt)) or meters[-1]
        _train(kind, rank, peak)
        budget = int(max(m.peak_bytes for m in meters) * 0.5)
        steps = []

        def auto(model, opt):
            steps.append(vt.auto(model, budget=budget, optimizer=opt))
            return lambda: steps[0]
        got = _train(kind, rank, auto)
        subjects.assert_identical(ref[:3], got[:3], f"{kind} rank {rank} at 50%")
        h = steps[0].history
        assert h[0]["mode"] == "measured", h[0]
        guided = [s for s in h if s["mode"] == "guided"]
        assert guided, [s["mode"] for s in h]
        assert all(s["swapped_out_bytes"] + s["recomputed_ops"] > 0 for s in guided), guided
        assert guided[-1]["peak_bytes"] <= budget, (guided[-1], budget)
        torch.save({"modes": [s["mode"] for s in h], "peaks": [s["peak_bytes"] for s in h], "budget": budget},
                   os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("kind", ["ddp", "fsdp2"])
def test_each_rank_plans_its_own_step_bit_identical(kind, tmp_path):
    mp.spawn(_rank, args=(kind, str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    for r in range(WORLD):
        got = torch.load(tmp_path / f"rank{r}.pt")
        assert got["peaks"][-1] <= got["budget"], got
