"""vtensor.torch.auto: the C++ planner on a recorded PyTorch step. Losses, gradients and weights
bit-identical to plain PyTorch at half the plain step's peak, each guided step's measured peak
within the budget, the plan made once per kind of step and followed; at a quarter of the peak,
which no plan through hooks holds on these models, the error names the lowest budget a plan held.
On CPU torch (test_cuda.py has the CUDA path)."""
import contextlib
import os
import subprocess

import pytest
import torch
import torch.nn.functional as F

import vtensor.torch as vt
import subjects
from models import TinyGPT, small_cnn
from subjects import MODELS, assert_identical, train

# Batches where activations outweigh the parameters, gradients and AdamW's moments.
BATCHES = {"gpt2": 48, "llama": 48, "bert": 48, "resnet18": 96}
IMAGE = 64  # resnet18's


def _plain_peak(name):
    """The plain step's peak as auto counts it (vt.StepPeak), the most over the micro-batches."""
    meters = []

    def contexts(model, opt):
        def ctx(k):
            meters.append(vt.StepPeak(model, opt))
            return meters[-1]
        return ctx
    train(name, model=MODELS[name](), contexts=contexts, batch_size=BATCHES[name], steps=2, image=IMAGE)
    return max(m.peak_bytes for m in meters)


def _run_auto(name, budget, **kw):
    steps = []

    def contexts(model, opt):
        steps.append(vt.auto(model, budget=budget, optimizer=opt, **kw))
        return lambda k: steps[0]
    got = train(name, model=MODELS[name](), contexts=contexts, batch_size=BATCHES[name], image=IMAGE)
    return got, steps[0]


def _check_guided(step, budget):
    modes = [s["mode"] for s in step.history]
    # A plan per kind of micro-batch (gradients absent, gradients there), then guided steps.
    assert modes[:2] == ["measured", "measured"] and all(m == "guided" for m in modes[2:]), modes
    for s in step.history[2:]:
        assert s["swapped_out_bytes"] + s["recomputed_ops"] > 0, s
        assert s["moves_made"] > 0, s
        # A step over the budget has its plan made again, lowered by the overshoot.
        assert s["peak_bytes"] <= budget or "replanned" in s, (s, budget)
    for s in step.history[-2:]:  # the last step of each kind holds the budget
        assert s["peak_bytes"] <= budget, (s, budget)


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_hugging_face_models_bit_identical_within_half_the_peak(name):
    ref = train(name, model=MODELS[name](), batch_size=BATCHES[name])
    budget = int(_plain_peak(name) * 0.5)
    got, step = _run_auto(name, budget)
    assert_identical(ref, got, f"{name} at 50%")
    _check_guided(step, budget)


# The lowest budget a plan holds, as a fraction of the plain peak, is below these (measured: gpt2
# 0.28 to 0.34, llama 0.31, bert 0.27; resnet18 0.72 at this batch and image size).
LOWEST = {"gpt2": 0.45, "llama": 0.45, "bert": 0.45, "resnet18": 0.9}


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_a_quarter_of_the_peak_is_more_than_hooks_can_free(name):
    """At 25% of the plain peak what the hooks cannot move (the tensors autograd does not save, an
    op's own working set) needs about as much: the measured step ends in an OutOfMemoryError naming
    the lowest budget a plan held in the sim, or (bert on some runs: malloc's count of the measured
    step varies) a plan is made, which holds or says by how much it passed the budget."""
    peak = _plain_peak(name)
    budget = int(peak * 0.25)
    try:
        got, step = _run_auto(name, budget)
    except vt.OutOfMemoryError as e:
        assert "no plan holds this step in a budget of" in str(e) and "the lowest budget a plan held" in str(e)
        assert peak * 0.25 < e.lowest_budget < peak * LOWEST[name]
        return
    # Where the sim's model of the step finds a plan, the values are bit for bit plain PyTorch's,
    # and the step holds the budget, or says by how much it passed it with no tighter plan to make.
    assert_identical(train(name, model=MODELS[name](), batch_size=BATCHES[name]), got, f"{name} at 25%")
    last = step.history[-1]
    assert last["peak_bytes"] <= budget or "passed the budget by" in (last["reason"] or ""), last


def test_resnet18_at_the_lowest_budget_a_plan_holds():
    """resnet18 at 64 x 64: its first convolutions' outputs, each one op's own working set, hold
    more than half the plain peak, and a quarter is below its parameters, gradients and moments."""
    name = "resnet18"
    ref = train(name, model=MODELS[name](), batch_size=BATCHES[name], image=IMAGE)
    peak = _plain_peak(name)
    model = MODELS[name]()
    with pytest.raises(ValueError, match="below what the step's parameters, gradients and optimizer state need"):
        vt.auto(model, budget=int(peak * 0.25), optimizer=torch.optim.AdamW(model.parameters()))
    with pytest.raises(vt.OutOfMemoryError, match="no plan holds this step") as e:
        _run_auto(name, int(peak * 0.5))
    assert peak * 0.5 < e.value.lowest_budget < peak * LOWEST[name]
    budget = int(e.value.lowest_budget * 1.1)
    got, step = _run_auto(name, budget)
    assert_identical(ref, got, "resnet18")
    _check_guided(step, budget)


def _own_train(make, data, contexts=None, steps=3):
    """The project's own models (python/tests/models.py): SGD with momentum, two micro-batches a step."""
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ctx = contexts(model, opt) if contexts else (lambda: contextlib.nullcontext())
    losses = []
    for k in range(2 * steps):
        x, y = data(k)
        torch.manual_seed(50 + k)
        with ctx():
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)) / 2
            loss.backward()
        losses.append(loss.detach().clone())
        if k % 2:
            grads = [p.grad.clone() for p in model.parameters()]
            opt.step()
            opt.zero_grad(set_to_none=True)
    return losses, grads, [p.detach().clone() for p in model.parameters()]


def _cnn_data(k):
    g = torch.Generator().manual_seed(k)
    return torch.randn(64, 3, 16, 16, generator=g), torch.randint(0, 10, (64,), generator=g)


def _gpt_data(k):
    g = torch.Generator().manual_seed(k)
    idx = torch.randint(0, 64, (64, 17), generator=g)
    return idx[:, :-1], idx[:, 1:]


def _tiny_gpt():
    torch.manual_seed(0)
    return TinyGPT()


@pytest.mark.parametrize("name", ["small-cnn", "tiny-gpt"])
def test_the_projects_own_models_at_half_the_peak(name):
    make, data = (small_cnn, _cnn_data) if name == "small-cnn" else (_tiny_gpt, _gpt_data)
    ref = _own_train(make, data)
    meters = []

    def meter(model, opt):
        def ctx():
            meters.append(vt.StepPeak(model, opt))
            return meters[-1]
        return ctx
    _own_train(make, data, meter, steps=1)
    budget = int(max(m.peak_bytes for m in meters) * 0.5)
    steps = []

    def auto(model, opt):
        steps.append(vt.auto(model, budget=budget, optimizer=opt))
        return lambda: steps[0]
    got = _own_train(make, data, auto)
    assert_identical(ref, got, name)
    _check_guided(steps[0], budget)


@pytest.mark.parametrize("policy", ["capuchin-recompute", "dtr", "lru-recompute"])
def test_recomputation_is_bit_identical(policy):
    """The planners that drop: each dropped storage is made again by its aten op, RNG state and all
    (GPT-2's dropout), bit for bit."""
    ref = train("gpt2", model=MODELS["gpt2"](), batch_size=48)
    budget = int(_plain_peak("gpt2") * 0.5)
    got, step = _run_auto("gpt2", budget, policy=policy)
    assert_identical(ref, got, policy)
    assert all(s["recomputed_ops"] > 0 for s in step.history[2:])
    _check_guided(step, budget)


def test_bf16_autocast():
    ref = train("llama", model=MODELS["llama"](), batch_size=48, autocast=True)
    budget = int(_plain_peak("llama") * 0.5)
    steps = []

    def contexts(model, opt):
        steps.append(vt.auto(model, budget=budget, optimizer=opt))
        return lambda k: steps[0]
    got = train("llama", model=MODELS["llama"](), contexts=contexts, batch_size=48, autocast=True)
    assert_identical(ref, got, "llama under bf16 autocast")
    assert [s["mode"] for s in steps[0].history][2:] == ["guided"] * 4


def test_the_plan_is_data():
    got, step = _run_auto("gpt2", int(_plain_peak("gpt2") * 0.5))
    text = step.plan_text()
    assert text.startswith("plan by auto from step 1:") and "before op" in text
    info = step.history[0]["plan"]
    assert info["predicted_ms"] > 0 and info["ops"] > 0 and info["moves"] > 0
    assert info["planning_s"] >= 0 and info["sim_budget_bytes"] <= step.budget


def test_a_budget_below_the_floor_is_refused():
    model = MODELS["gpt2"]()
    opt = torch.optim.AdamW(model.parameters())
    floor = vt.auto(model, budget="1GiB", optimizer=opt).floor
    params = sum(p.untyped_storage().nbytes() for p in model.parameters())
    assert floor >= 4 * params  # parameters, gradients and AdamW's two moments (and the buffers)
    with pytest.raises(ValueError, match=f"below what the step's parameters, gradients and optimizer state need: "
                                         f"{vt.format_bytes(floor)}"):
        vt.auto(model, budget=floor - 1, optimizer=opt)
    vt.auto(model, budget=floor, optimizer=opt)


@pytest.mark.parametrize("kw,match", [
    ({"policy": "bogus"}, "unknown policy 'bogus'; accepted: auto"),
    ({"policy": "compress"}, "unknown policy 'compress'"),
    ({"optimizer": object()}, "optimizer must be a torch.optim.Optimizer"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
    ({"options": ["auto-search"]}, "options must be a dict"),
])
def test_bad_input_is_a_value_error(kw, match):
    args = dict(budget="1GiB")
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        vt.auto(MODELS["gpt2"](), **args)


def test_new_shapes_are_measured_again():
    model = MODELS["gpt2"]()
    opt = torch.optim.AdamW(model.parameters())
    step = vt.auto(model, budget=int(_plain_peak("gpt2") * 0.5), optimizer=opt)
    for k, size in enumerate([48, 48, 32, 32]):
        inputs, loss_fn = subjects.batch("gpt2", k, size)
        with step:
            loss_fn(model(*inputs)).backward()
        opt.zero_grad(set_to_none=True)
    modes = [(s["mode"], s["reason"] is not None) for s in step.history]
    assert modes == [("measured", False), ("guided", False), ("guided", True), ("measured", False)]
    assert "op 0 is" in step.history[2]["reason"]


BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "vtensor")


@pytest.mark.skipif(not os.access(BIN, os.X_OK), reason=f"the vtensor command is not built ({BIN})")
def test_the_measured_step_replays_under_every_policy(tmp_path):
    """The log auto planned from, kept with log=, is the step `vtensor replay` replays: every C++
    policy trains it at the budget the plan had, or says it runs out of memory."""
    log = str(tmp_path / "gpt2.log")
    model = MODELS["gpt2"]()
    step = vt.auto(model, budget=int(_plain_peak("gpt2") * 0.5), log=log)
    inputs, loss_fn = subjects.batch("gpt2", 0, 48)
    with step:
        loss_fn(model(*inputs)).backward()
    budget = step.history[0]["plan"]["sim_budget_bytes"]
    policies = subprocess.run([BIN, "policies"], capture_output=True, text=True, check=True).stdout.split("\n")
    names = [line.split()[0] for line in policies if line.strip()]
    assert "auto" in names and len(names) > 10
    trained = 0
    for policy in names:
        r = subprocess.run([BIN, "replay", "--trace", log, "--gpu", "h100-80g", "--policy", policy, "--budget",
                            f"{budget}B", "--budget-above-gpu", "--quiet"], capture_output=True, text=True)
        assert r.returncode == 0 or "out of device memory" in r.stderr + r.stdout or "needs --densities" in r.stderr, (
            policy, r.stderr[-400:])
        trained += r.returncode == 0
    assert trained >= 5  # auto and the planners among them


def test_a_log_the_runtime_cannot_read_falls_back_to_passive_offload(monkeypatch):
    """Where the runtime cannot read the measured step's log (an op it does not know), no plan is
    made: the steps after it offload saved tensors passively, least recently used first, and say
    at which op the reader stopped; still bit-identical."""
    from vtensor import _vtensor
    real = _vtensor.plan_step

    def unreadable(log, *args):
        with open(log) as f:
            lines = f.readlines()
        line = next(i for i, l in enumerate(lines, 1) if '"CALL"' in l and '"mm"' in l)
        raise ValueError(f"trace '{log}' line {line}: an op this build does not know")
    monkeypatch.setattr(_vtensor, "plan_step", unreadable)
    ref = train("gpt2", model=MODELS["gpt2"](), batch_size=BATCHES["gpt2"])
    monkeypatch.setattr(_vtensor, "plan_step", real)
    budget = int(_plain_peak("gpt2") * 0.5)
    monkeypatch.setattr(_vtensor, "plan_step", unreadable)
    got, step = _run_auto("gpt2", budget)
    assert_identical(ref, got, "passive")
    modes = [s["mode"] for s in step.history]
    assert modes[:2] == ["measured", "measured"] and set(modes[2:]) == {"passive"}, modes
    assert "could not be planned at op 'mm'" in step.history[0]["reason"], step.history[0]["reason"]
    assert all(s["passive_evictions"] > 0 and s["moves_made"] == 0 for s in step.history[2:])
    assert all(s["peak_bytes"] <= budget for s in step.history[2:]), (step.history, budget)
