"""offload(policy="compress"): vtensor's lossless bitmask codec on saved tensors: identical math,
fewer real bytes held, and the torch-op form of the codec (CUDA) writes the C++ codec's bytes."""
import pytest
import torch

import vtensor.torch as vt
from vtensor.torch import compress as codec
from models import assert_identical, cnn_batch, gpt_batch, small_cnn, small_gpt, train_step


@pytest.mark.parametrize("make,batch", [(small_cnn, cnn_batch), (small_gpt, gpt_batch)])
def test_identical_math(make, batch):
    model = make()
    x, y = batch()
    ref = train_step(model, x, y)
    comp = vt.offload(policy="compress")
    for _ in range(2):
        with comp:
            assert_identical(ref, train_step(model, x, y))
    s = comp.stats()
    assert s["decompressions"] >= s["compressed_entries"]
    assert s["held_bytes"] == 0  # every entry let go after backward


def test_relu_outputs_shrink_and_the_held_bytes_fall():
    model = small_cnn()
    x, y = cnn_batch()
    comp = vt.offload(policy="compress")
    with comp:
        train_step(model, x, y)
    s = comp.stats()
    assert s["compressed_entries"] > 0 and s["ratio"] < 0.7, s
    assert s["peak_held_bytes"] < 0.8 * s["saved_bytes"], s


def test_the_real_peak_falls():
    model = small_cnn()
    x, y = torch.randn(64, 3, 16, 16), torch.randint(0, 10, (64,))
    train_step(model, x, y)
    with vt.peak_memory("cpu") as plain:
        train_step(model, x, y)
    comp = vt.offload(policy="compress")
    with vt.peak_memory("cpu") as m, comp:
        train_step(model, x, y)
    assert m.peak_bytes < plain.peak_bytes, (m.peak_bytes, plain.peak_bytes)


@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_torch_form_writes_the_cpp_codecs_bytes(density):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1000, generator=g)
    x[torch.rand(1000, generator=g) >= density] = 0
    x[5] = -0.0  # a bit pattern, not a value: kept
    cpp = codec.compress(x)
    assert torch.equal(cpp, codec._compress_torch(x))
    assert cpp.numel() == codec.compressed_size(x)
    back = codec._decompress_torch(cpp, x.numel())
    assert torch.equal(back.view(torch.int32), x.view(torch.int32))
    assert torch.equal(codec.decompress(cpp, x.numel(), x.device).view(torch.int32), x.view(torch.int32))


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_ratio"):
        vt.Compress(max_ratio=0)
    with pytest.raises(ValueError, match="min_bytes"):
        vt.offload(policy="compress", min_bytes=-3)
    with pytest.raises(ValueError, match="device"):
        vt.offload(policy="compress", device="tpu")


def test_an_exception_inside_a_step_leaves_nothing_hooked():
    model = small_cnn()
    x, y = cnn_batch()
    ref = train_step(model, x, y)
    comp = vt.offload(policy="compress")
    with pytest.raises(ZeroDivisionError):
        with comp:
            model(x)
            1 / 0
    assert comp.stats()["failed"]
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    with comp:
        assert_identical(ref, train_step(model, x, y))
    assert not comp.stats()["failed"]
