"""auto_checkpoint(): the measured peak of saved bytes fits the budget, least recompute first,
gradients unchanged; what it chose is reported."""
import copy

import pytest

import vtensor.torch as vt
from models import assert_identical, cnn_batch, gpt_batch, small_cnn, small_gpt, train_step

MODELS = {"cnn": (small_cnn, cnn_batch), "gpt": (small_gpt, gpt_batch)}


@pytest.mark.parametrize("name", ["cnn", "gpt"])
def test_fits_the_budget_with_identical_gradients(name):
    make, batch = MODELS[name]
    model = make()
    x, y = batch()
    ref = train_step(copy.deepcopy(model), x, y)
    _, _, peak, _ = vt.measure_modules(model, (x,), lambda out: loss_of_out(out, y))
    budget = int(peak * 0.75)
    rep = vt.auto_checkpoint(model, (x,), budget, loss_fn=lambda out: loss_of_out(out, y))
    assert rep["measured_peak_before"] == peak
    assert rep["chosen"] and set(rep["chosen"]) <= set(rep["candidates"])
    assert rep["fits"] and rep["measured_peak_after"] <= budget < peak  # measured again, after
    assert rep["rule"] == "least recompute within the budget"
    # The C++ replay's prediction is within 10% of what was measured after.
    assert abs(rep["predicted_peak"] - rep["measured_peak_after"]) <= 0.1 * rep["measured_peak_after"]
    assert_identical(ref, train_step(model, x, y))


def test_a_larger_budget_checkpoints_less():
    x, y = gpt_batch()
    _, _, peak, _ = vt.measure_modules(small_gpt(), (x,), lambda out: loss_of_out(out, y))
    chosen = []
    for frac in (0.6, 0.9, 1.5):
        rep = vt.auto_checkpoint(small_gpt(), (x,), int(peak * frac), loss_fn=lambda out: loss_of_out(out, y))
        assert rep["fits"]
        chosen.append(len(rep["chosen"]))
    assert chosen[0] > chosen[1] >= chosen[2] == 0


def test_bad_arguments_name_what_is_accepted():
    x, y = gpt_batch()
    with pytest.raises(ValueError, match="unknown module 'blocks.9'; accepted"):
        vt.auto_checkpoint(small_gpt(), (x,), "1MiB", modules=["blocks.9"])
    with pytest.raises(ValueError, match="tuple"):
        vt.auto_checkpoint(small_gpt(), x, "1MiB")
    with pytest.raises(ValueError, match="budget"):
        vt.auto_checkpoint(small_gpt(), (x,), None)


def loss_of_out(out, y):
    import torch.nn.functional as F
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
