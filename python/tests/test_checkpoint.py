"""auto_checkpoint(): regions and ops chosen so the step's real activation peak fits the budget,
gradients unchanged, applied with hooks that survive torch.save / deepcopy / state_dict, and
measuring steps that leave the model as they found it."""
import copy
import io
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import vtensor.torch as vt
from models import assert_identical, cnn_batch, gpt_batch, small_cnn, small_gpt, train_step

MODELS = {"cnn": (small_cnn, cnn_batch), "gpt": (small_gpt, gpt_batch)}


def loss_of_out(out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def plain_peak(model, x, y):
    return vt.measure_peak(model, (x,), lambda out: loss_of_out(out, y))


@pytest.mark.parametrize("name", ["cnn", "gpt"])
def test_fits_the_budget_with_identical_gradients(name):
    make, batch = MODELS[name]
    model = make()
    x, y = batch()
    ref = train_step(copy.deepcopy(model), x, y)
    peak = plain_peak(model, x, y)
    budget = int(peak * 0.8)
    rep = vt.auto_checkpoint(model, (x,), budget, loss_fn=lambda out: loss_of_out(out, y))
    assert rep["chosen"] and set(rep["chosen"]) <= set(rep["candidates"])
    assert rep["fits"] and rep["measured_peak_after"] <= budget < rep["measured_peak_before"]
    assert set(vt.checkpointed_modules(model)) == set(rep["chosen"])
    assert_identical(ref, train_step(model, x, y))


class Encoder(nn.Module):  # blocks as attributes: no nn.Sequential, no nn.ModuleList
    def __init__(self):
        super().__init__()
        self.first, self.second, self.third = (nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
                                               for _ in range(3))

    def forward(self, x):
        return self.third(self.second(self.first(x)).relu()).relu()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encoder, self.head = Encoder(), nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.encoder(x))


def test_regions_are_any_module_not_only_sequential_children():
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    model = Net()
    ref = train_step(copy.deepcopy(model), x, y)
    peak = plain_peak(model, x, y)
    rep = vt.auto_checkpoint(model, (x,), int(peak * 0.8), loss_fn=lambda out: loss_of_out(out, y))
    # The encoder holds most of the saved bytes: the regions are inside it.
    assert {"encoder.first", "encoder.second", "encoder.third"} <= set(rep["candidates"]), rep["candidates"]
    assert rep["fits"] and set(rep["chosen"]) <= {"encoder.first", "encoder.second", "encoder.third", "head"}, rep
    assert_identical(ref, train_step(model, x, y))


def test_a_larger_budget_recomputes_less():
    x, y = gpt_batch()
    peak = plain_peak(small_gpt(), x, y)
    ms = []
    for frac in (0.7, 0.9, 1.5):
        rep = vt.auto_checkpoint(small_gpt(), (x,), int(peak * frac), loss_fn=lambda out: loss_of_out(out, y))
        assert rep["fits"], rep
        ms.append(rep["recompute_ms"])
    assert ms[0] >= ms[1] >= ms[2] == 0


def test_per_op_saves_keep_the_math():
    x, y = gpt_batch()
    model = small_gpt()
    ref = train_step(copy.deepcopy(model), x, y)
    peak = plain_peak(model, x, y)
    rep = vt.auto_checkpoint(model, (x,), int(peak * 0.8), loss_fn=lambda out: loss_of_out(out, y))
    assert rep["fits"]
    saved = [op for ops in vt.checkpointed_modules(model).values() for op in ops]
    assert sorted(saved) == sorted(op for ops in rep["saved_ops"].values() for op in ops)
    assert_identical(ref, train_step(model, x, y))


def test_the_model_survives_save_deepcopy_and_state_dict():
    x, y = cnn_batch()
    model = small_cnn()
    ref = train_step(copy.deepcopy(model), x, y)
    vt.auto_checkpoint(model, (x,), int(plain_peak(model, x, y) * 0.75), loss_fn=lambda out: loss_of_out(out, y))
    chosen = vt.checkpointed_modules(model)
    assert chosen
    twin = copy.deepcopy(model)
    assert vt.checkpointed_modules(twin) == chosen
    assert_identical(ref, train_step(twin, x, y))
    assert all(p.grad is None for p in model.parameters())  # the copy's gradients stay on the copy
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert vt.checkpointed_modules(loaded) == chosen
    assert_identical(ref, train_step(loaded, x, y))
    plain = small_cnn(seed=5)
    plain.load_state_dict(model.state_dict())
    assert set(plain.state_dict()) == set(model.state_dict())
    assert_identical(ref, train_step(plain, x, y))
    vt.remove_checkpoints(model)
    assert not vt.checkpointed_modules(model)


def test_measuring_leaves_buffers_rng_and_grads_as_they_were():
    x, y = cnn_batch()
    model = small_cnn()
    model(x).sum().backward()  # a gradient the user already has
    grads = [p.grad.clone() for p in model.parameters()]
    stats = {k: v.clone() for k, v in model.state_dict().items() if "running" in k or "num_batches" in k}
    torch.manual_seed(7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vt.auto_checkpoint(model, (x,), int(plain_peak(model, x, y) * 0.7), loss_fn=lambda out: loss_of_out(out, y))
    after_rng = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(after_rng, torch.rand(3))
    for k, v in stats.items():
        assert torch.equal(model.state_dict()[k], v), k
    for g, p in zip(grads, model.parameters()):
        assert torch.equal(g, p.grad)


def test_no_choice_fits_warns_by_how_much():
    x, y = gpt_batch()
    with pytest.warns(UserWarning, match=r"no choice fits the budget of 1.00 KiB: .* over"):
        rep = vt.auto_checkpoint(small_gpt(), (x,), "1KiB", loss_fn=lambda out: loss_of_out(out, y))
    assert not rep["fits"]


def test_bad_arguments_name_what_is_accepted():
    x, y = gpt_batch()
    with pytest.raises(ValueError, match="unknown module 'blocks.9'; accepted"):
        vt.auto_checkpoint(small_gpt(), (x,), "1MiB", modules=["blocks.9"])
    with pytest.raises(ValueError, match="tuple"):
        vt.auto_checkpoint(small_gpt(), x, "1MiB")
    with pytest.raises(ValueError, match="budget"):
        vt.auto_checkpoint(small_gpt(), (x,), None)
    with pytest.raises(ValueError, match="torch.nn.Module.*a function"):
        vt.auto_checkpoint(lambda t: t, (x,), "1MiB")
    with pytest.raises(ValueError, match="list of module names"):
        vt.auto_checkpoint(small_gpt(), (x,), "1MiB", modules="blocks.0")


def test_a_loss_that_raises_leaves_the_model_unhooked():
    x, y = gpt_batch()
    model = small_gpt()
    ref = train_step(copy.deepcopy(model), x, y)

    def bad_loss(out):
        raise ZeroDivisionError("in the user's loss")
    with pytest.raises(ZeroDivisionError):
        vt.auto_checkpoint(model, (x,), "1MiB", loss_fn=bad_loss)
    assert not vt.checkpointed_modules(model)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert_identical(ref, train_step(model, x, y))
