"""Models no one here wrote (Hugging Face GPT-2, a Llama, BERT from small configs; torchvision's
resnet18), trained with AdamW and gradient accumulation, in fp32 and under bf16 autocast: under every
lossless policy the losses, gradients and parameters are bit-identical to plain PyTorch's, and the
budget is held."""
import copy
import warnings

import pytest

import vtensor.torch as vt
from subjects import MODELS, assert_identical, batch, train

pytest.importorskip("transformers")
pytest.importorskip("torchvision")

POLICIES = ["capuchin@50%", "swap@25%", "compress", "auto_checkpoint@50%", "auto_checkpoint@25%"]
_refs = {}


def reference(name, autocast):
    if (name, autocast) not in _refs:
        _refs[(name, autocast)] = train(name, autocast=autocast)
    return _refs[(name, autocast)]


def saved_peak(name, autocast):
    """Plain PyTorch's peak of live saved bytes (an offload context with room for all: nothing moves)."""
    off = vt.offload(policy="swap", budget="1GiB", device="cpu")
    train(name, context=lambda k: off, steps=1, accum=1, autocast=autocast)
    assert off.stats()["swapped_out_bytes"] == 0
    return off.history[0]["peak_saved_bytes"]


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", list(MODELS))
def test_bit_identical_to_plain_pytorch_within_the_budget(name, policy, autocast):
    ref = reference(name, autocast)
    kind, _, frac = policy.partition("@")
    frac = int(frac.rstrip("%")) / 100 if frac else None
    if kind in ("capuchin", "swap"):
        budget = int(saved_peak(name, autocast) * frac)
        off = vt.offload(policy=kind, budget=budget, device="cpu")
        got = train(name, context=lambda k: off, autocast=autocast)
        assert_identical(ref, got, policy)
        for s in off.history:
            assert s["peak_device_bytes"] <= budget < s["peak_saved_bytes"], s
            assert s["swapped_out_bytes"] > 0
        assert off.history[-1]["mode"] == "guided"
    elif kind == "compress":
        comp = vt.offload(policy="compress")
        got = train(name, context=lambda k: comp, autocast=autocast)
        assert_identical(ref, got, policy)
        s = comp.stats()
        assert s["held_bytes"] == 0 and s["saved_bytes"] > 0, s
        if name == "resnet18" and not autocast:  # ReLU outputs; bf16 tensors are kept (the codec packs 32-bit words)
            assert s["compressed_entries"] > 0 and s["peak_held_bytes"] < s["saved_bytes"], s
    else:
        model = MODELS[name]()
        inputs, loss_fn = batch(name, 0)
        plain = vt.measure_peak(copy.deepcopy(model), inputs, loss_fn)
        rep = {}

        def prepare(m):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                rep.update(vt.auto_checkpoint(m, inputs, int(plain * frac), loss_fn=loss_fn))
            rep["warned"] = any("no choice fits" in str(x.message) for x in w)

        got = train(name, model=model, prepare=prepare, autocast=autocast)
        assert_identical(ref, got, policy)
        assert rep["fits"] or rep["warned"], rep  # held, or the user was told by how much it misses
        assert rep["measured_peak_after"] <= rep["measured_peak_before"], rep
