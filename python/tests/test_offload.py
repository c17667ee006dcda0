"""offload(): bit-identical losses and gradients with and without the hooks, the plan learned on the
measured step used by the next ones, and the bytes saved activations hold on the device, measured.
On CPU torch (device="cpu": on a GPU machine too, where the default is "cuda"; test_cuda.py has
the CUDA path)."""
import pytest
import torch

import vtensor.torch as vt
from models import assert_identical, cnn_batch, gpt_batch, loss_of, small_cnn, small_gpt, train_step

MODELS = {"cnn": (small_cnn, cnn_batch), "gpt": (small_gpt, gpt_batch)}


def unmanaged_saved_peak(model, x, y):
    """Peak of live saved-activation bytes of a step without offload (a large budget: nothing moves)."""
    off = vt.offload(policy="swap", budget="1GiB", device="cpu")
    with off:
        train_step(model, x, y)
    s = off.stats()
    assert s["swapped_out_bytes"] == 0 and s["peak_device_bytes"] >= s["peak_saved_bytes"]
    return s["peak_saved_bytes"]


@pytest.mark.parametrize("policy", ["capuchin", "swap"])
@pytest.mark.parametrize("name", ["cnn", "gpt"])
def test_identical_math_plan_used_and_memory_lowered(name, policy):
    make, batch = MODELS[name]
    model = make()
    x, y = batch()
    ref = train_step(model, x, y)
    peak = unmanaged_saved_peak(model, x, y)
    budget = peak // 2
    off = vt.offload(policy=policy, budget=budget, device="cpu")
    for step in range(3):
        with off:
            got = train_step(model, x, y)
        assert_identical(ref, got)  # every step, measured and guided
        s = off.stats()
        assert s["peak_saved_bytes"] == peak  # the same tensors were saved...
        assert s["peak_device_bytes"] <= budget < peak  # ...but the device held at most the budget
        assert s["swapped_out_bytes"] > 0 and s["swapped_in_bytes"] == s["swapped_out_bytes"]
        if step == 0:
            assert s["mode"] == "measured" and s["planned_swap_outs"] == 0 and s["passive_evictions"] > 0
            assert s["plan"]["actions"] > 0
        else:
            # The plan from step 1 drives the step: its swap-outs and prefetches, no passive eviction.
            assert s["mode"] == "guided" and not s["sequence_changed"]
            assert s["planned_swap_outs"] > 0 and s["prefetches"] > 0 and s["passive_evictions"] == 0
            assert s["late"] < off.history[0]["late"]
    assert len(off.history) == 3


def test_capuchin_swaps_only_what_the_plan_chose():
    model = small_cnn()
    x, y = cnn_batch()
    peak = unmanaged_saved_peak(model, x, y)
    # A budget just under the peak: Capuchin moves a few tensors, vDNN's swap moves every one.
    moved = {}
    for policy in ("capuchin", "swap"):
        off = vt.offload(policy=policy, budget=int(peak * 0.9), device="cpu")
        for _ in range(2):
            with off:
                train_step(model, x, y)
        moved[policy] = off.stats()["swapped_out_bytes"]
        assert off.stats()["peak_device_bytes"] <= int(peak * 0.9)
    assert 0 < moved["capuchin"] < moved["swap"] == off.stats()["saved_bytes"]


def test_changed_step_measures_again():
    model = small_cnn()
    x, y = cnn_batch()
    off = vt.offload(policy="capuchin", budget="256KiB", device="cpu")
    with off:
        train_step(model, x, y)
    ref = train_step(model, x[:4], y[:4])
    with off:
        got = train_step(model, x[:4], y[:4])  # other shapes: the plan does not apply
    assert_identical(ref, got)
    s = off.stats()
    assert s["sequence_changed"] and s["mode"] == "passive" and "plan" in s and s["planned_from"] == 1
    assert "differs from the measured step" in s["reason"] and "planned again" in s["reason"]
    with off:
        got = train_step(model, x[:4], y[:4])
    assert_identical(ref, got)
    s = off.stats()
    assert s["mode"] == "guided" and not s["sequence_changed"] and s["planned_from"] == 2 and s["reason"] is None


def test_a_batch_sliced_from_a_preloaded_dataset_counts_its_slice():
    model = small_cnn()
    x, y = cnn_batch()
    data = torch.cat([x] * 16)  # a preloaded dataset: the batch is a view into it
    off = vt.offload(policy="swap", budget="1GiB", device="cpu")
    with off:
        train_step(model, data[8:16], y)
    sliced = off.stats()["saved_bytes"]
    with off:
        train_step(model, x.clone(), y)
    assert sliced == off.stats()["saved_bytes"]  # the slice's bytes, not the dataset's 16x


def test_backward_after_the_step_warns_and_restores_every_tensor():
    model = small_cnn()
    x, y = cnn_batch()
    ref = train_step(model, x, y)
    off = vt.offload(policy="swap", budget=256 << 10, device="cpu")
    torch.manual_seed(123)
    model.zero_grad(set_to_none=True)
    with off:
        loss = loss_of(model, x, y)
    with pytest.warns(UserWarning, match="backward ran outside `with off:`"):
        loss.backward()
    assert off.stats()["unpacks_after_step"] > 0
    assert_identical(ref, (loss.detach(), [p.grad for p in model.parameters()]))


def test_an_exception_inside_a_step_leaves_nothing_hooked_and_the_next_step_works():
    model = small_cnn()
    x, y = cnn_batch()
    ref = train_step(model, x, y)
    off = vt.offload(policy="capuchin", budget="256KiB", device="cpu")
    with pytest.raises(ZeroDivisionError):
        with off:
            loss_of(model, x, y)
            1 / 0
    assert off.stats()["failed"] and off.plan is None
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None  # no hooks left installed
    assert_identical(ref, train_step(model, x, y))
    with off:
        assert_identical(ref, train_step(model, x, y))
    assert off.stats()["mode"] == "measured" and not off.stats()["failed"]


def test_budget_too_small_is_an_oom_with_the_arena_figures():
    model = small_cnn()
    x, y = cnn_batch()
    off = vt.offload(policy="capuchin", budget="64KiB", device="cpu")  # one saved feature map is 128 KiB
    with pytest.raises(vt.OutOfMemoryError, match=r"requested 128.00 KiB .* of a 64.00 KiB budget .*largest free block") as e:
        with off:
            train_step(model, x, y)
    assert isinstance(e.value, torch.OutOfMemoryError) and isinstance(e.value, MemoryError)


def test_bad_arguments_name_what_is_accepted():
    with pytest.raises(ValueError, match="accepted: 'capuchin', 'swap', 'compress'"):
        vt.offload(policy="lru", budget="1GiB")
    with pytest.raises(ValueError, match="budget is required"):
        vt.offload(policy="swap")
    with pytest.raises(ValueError, match="accepted: a number"):
        vt.offload(policy="swap", budget="12 parsecs")
    with pytest.raises(ValueError, match="min_bytes"):
        vt.offload(policy="swap", budget="1GiB", min_bytes=-1)
    with pytest.raises(ValueError, match="device"):
        vt.offload(policy="swap", budget="1GiB", device="tpu")
