"""Weights that `vtensor train --save` writes load with the safetensors package into the plain PyTorch
module a user would write for the preset (mlp-tiny, resnet-tiny), and that module's loss on
vtensor's own synthetic batch (reimplemented here bit for bit, dropout mask included) matches the
loss vtensor reports for those weights within fp32 rounding."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "vtensor")
# |torch - vtensor| / |vtensor| measured 0 to 1.6e-7 (1-2 float32 ulps; both presets, data seeds 1, 2, 7,
# 1 to 6 training iterations): the bound is about 6x that.
REL_BOUND = 1e-6
DATA_SEED = 1  # ModelConfig::seed, the --data-seed default (data and dropout)


# ---- vtensor's RNG (vtensor/backend/cpu/kernels.cpp): splitmix64 and uniform01, on uint64 arrays.
def mix64(x):
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):  # uint64 products wrap, as in C++
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniform01(seed, i):  # float(mix64(seed ^ mix64(i)) >> 40) * 2^-24, exact in float32
    r = mix64(np.uint64(seed) ^ mix64(i)) >> np.uint64(40)
    return r.astype(np.float32) * np.float32(2.0**-24)


def mix_int(x):  # mix64 of a Python int, as a Python int
    return int(mix64(x & (2**64 - 1)))


def synthetic_batch(shape, num_classes, iteration, data_seed=DATA_SEED):
    """cpu_backend.cpp synthetic_batch for the data op GraphBuilder::data makes (seed mix64(seed ^ 0xda7a))."""
    seed = mix_int(data_seed ^ 0xDA7A)
    batch_seed = mix_int(seed + iteration % 8)
    n, per = shape[0], int(np.prod(shape[1:]))
    idx = np.arange(n, dtype=np.uint64)
    labels = (uniform01(batch_seed, idx) * np.float32(num_classes)).astype(np.int64)  # float32 product, truncated
    j = np.arange(per, dtype=np.uint64)
    x = np.empty((n, per), dtype=np.float32)
    for i in range(n):
        pattern = uniform01(mix_int(seed ^ (0xC1A55 + int(labels[i]))), j)
        noise = uniform01(mix_int(batch_seed + 1 + i), j)
        x[i] = (np.float32(2) * pattern - np.float32(1)) + np.float32(0.5) * (noise - np.float32(0.5))
    return torch.from_numpy(x.reshape(shape)), torch.from_numpy(labels)


def dropout_mask(k, shape, p, iteration, data_seed=DATA_SEED):
    """kDropout on the cpu backend: the k-th dropout op GraphBuilder made has attrs.seed
    mix64(seed + 0x5eed * k); the kernel keeps element i (row-major) when
    uniform01(mix64(attrs.seed + iteration), i) >= p and scales kept ones by 1 / (1 - p) (float32)."""
    op_seed = mix_int(data_seed + 0x5EED * k)
    keep = uniform01(mix_int(op_seed + iteration), np.arange(int(np.prod(shape)), dtype=np.uint64)) >= np.float32(p)
    return torch.from_numpy(keep.reshape(shape)), torch.tensor(np.float32(1) - np.float32(p))


# ---- The PyTorch modules.
class MlpTiny(nn.Module):
    """vtensor preset mlp-tiny (zoo.cpp build_mlp): 64 features, 2 x (linear 64, relu, dropout 0.1), linear 10."""

    def __init__(self, features=64, width=64, classes=10, p=0.1):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(features, width), nn.Linear(width, width)
        self.classifier = nn.Linear(width, classes)
        self.p = p

    def forward(self, x, masks=None):
        # masks: vtensor's exact dropout masks [(keep, 1 - p)] per layer; None = F.dropout's own.
        for i, fc in enumerate((self.fc1, self.fc2)):
            x = F.relu(fc(x))
            if masks is None:
                x = F.dropout(x, self.p, self.training)
            else:
                keep, keep_div = masks[i]
                x = torch.where(keep, x / keep_div, torch.zeros_like(x))
        return self.classifier(x)


def conv_bn(cin, cout, k, stride):  # zoo.cpp conv_bn: conv (no bias, pad k/2) + batch norm (eps 1e-5)
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout, eps=1e-5))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.shortcut = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()
        self.conv1, self.conv2 = conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, 1)

    def forward(self, x):
        return F.relu(self.conv2(F.relu(self.conv1(x))) + self.shortcut(x))


class ResNetTiny(nn.Module):
    """vtensor preset resnet-tiny (zoo.cpp build_resnet, depths {1,1,1,1}, basic blocks, width 8, 16x16
    input): CIFAR stem (3x3 conv_bn, relu, no pool), 4 stages, global average pool, linear 10."""

    def __init__(self, width=8, classes=10):
        super().__init__()
        self.stem = conv_bn(3, width, 3, 1)
        chans = [width << s for s in range(4)]
        self.layers = nn.Sequential(*[BasicBlock(chans[max(s - 1, 0)], c, 1 if s == 0 else 2) for s, c in enumerate(chans)])
        self.classifier = nn.Linear(chans[-1], classes)

    def forward(self, x):
        x = self.layers(F.relu(self.stem(x)))
        return self.classifier(x.mean(dim=(2, 3)))


def resnet_names(model):
    """vtensor's tensor name -> this module's state_dict key. GraphBuilder names a layer's k-th tensor of a
    kind 'layer.what_k' (the first unnumbered); a block makes its shortcut conv_bn first, then conv1, conv2."""
    out = {}

    def add(layer, k, key):
        s = "" if k == 1 else f"_{k}"
        for vt, pt in (("weight", "0.weight"), ("bn_weight", "1.weight"), ("bn_bias", "1.bias"),
                       ("running_mean", "1.running_mean"), ("running_var", "1.running_var")):
            out[f"{layer}.{vt}{s}"] = f"{key}.{pt}"

    add("stem", 1, "stem")
    for s, blk in enumerate(model.layers):
        parts = (["shortcut"] if isinstance(blk.shortcut, nn.Sequential) else []) + ["conv1", "conv2"]
        for k, part in enumerate(parts, 1):
            add(f"layer{s + 1}.0", k, f"layers.{s}.{part}")
    out.update({"classifier.weight": "classifier.weight", "classifier.bias": "classifier.bias"})
    return out


# ---- vtensor's side.
def vtensor(*args):
    r = subprocess.run([BIN, "train", *args, "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + r.stdout


def saved_weights_and_loss(tmp_path, model):
    """Trains 3 iterations and saves; then the loss vtensor reports for those weights: a fresh --init run
    starts at iteration 0 (trainer.cpp), so its iterations[0].loss is the forward loss on batch 0
    (dropout masks of iteration 0) before any update."""
    w, rep = tmp_path / "w.safetensors", tmp_path / "r.json"
    vtensor("--model", model, "--iters", "3", "--save", str(w))
    vtensor("--model", model, "--init", str(w), "--iters", "1", "--report", str(rep))
    return w, json.load(open(rep))["iterations"][0]["loss"]


def load_exactly(module, tensors, names):
    """Loads `tensors` (vtensor names) via `names` (vtensor -> state_dict key): every tensor in the file used,
    every parameter and buffer of the module from the file (num_batches_tracked, unused in train mode, aside)."""
    assert set(names) == set(tensors), sorted(set(names) ^ set(tensors))
    want = {k for k in module.state_dict() if not k.endswith("num_batches_tracked")}
    assert set(names.values()) == want, sorted(set(names.values()) ^ want)
    missing, unexpected = module.load_state_dict({names[k]: v for k, v in tensors.items()}, strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing)


def rel(a, b):
    return abs(a - b) / abs(b)


@pytest.mark.skipif(not os.access(BIN, os.X_OK), reason=f"the vtensor command is not built ({BIN})")
def test_mlp_tiny_weights_give_vtensors_loss_in_pytorch(tmp_path, record_property):
    st = pytest.importorskip("safetensors.torch")
    w, vt_loss = saved_weights_and_loss(tmp_path, "mlp-tiny")
    tensors = st.load_file(str(w))
    model = MlpTiny()
    load_exactly(model, tensors, {k: k for k in model.state_dict()})  # the same names: fc1.weight [out, in], ...
    x, y = synthetic_batch((16, 64), 10, iteration=0)
    # vtensor's dropout masks reproduced (not disabled): dropout ops 1 and 2, iteration 0.
    masks = [dropout_mask(k, (16, 64), 0.1, iteration=0) for k in (1, 2)]
    assert all(0 < (~m).sum() < m.numel() for m, _ in masks)
    with torch.no_grad():
        loss = F.cross_entropy(model(x, masks), y).item()  # mean over the batch, as softmax_ce_forward
        no_dropout = F.cross_entropy(model(x, [(torch.ones(16, 64, dtype=torch.bool), 1.0)] * 2), y).item()
    d = rel(loss, vt_loss)
    record_property("relative_difference", d)
    assert d <= REL_BOUND, f"mlp-tiny: torch {loss!r} vs vtensor {vt_loss!r}, relative difference {d:.3g}"
    assert rel(no_dropout, vt_loss) > 100 * REL_BOUND  # the masks matter: without them it differs
    print(f"mlp-tiny: torch {loss!r} vtensor {vt_loss!r} relative difference {d:.3g}")


@pytest.mark.skipif(not os.access(BIN, os.X_OK), reason=f"the vtensor command is not built ({BIN})")
def test_resnet_tiny_weights_give_vtensors_loss_in_pytorch(tmp_path, record_property):
    st = pytest.importorskip("safetensors.torch")
    w, vt_loss = saved_weights_and_loss(tmp_path, "resnet-tiny")
    tensors = st.load_file(str(w))
    model = ResNetTiny()
    load_exactly(model, tensors, resnet_names(model))
    model.train()  # batch norm on batch statistics (biased variance), as vtensor's kBatchNorm
    x, y = synthetic_batch((32, 3, 16, 16), 10, iteration=0)
    with torch.no_grad():
        loss = F.cross_entropy(model(x), y).item()
    d = rel(loss, vt_loss)
    record_property("relative_difference", d)
    assert d <= REL_BOUND, f"resnet-tiny: torch {loss!r} vs vtensor {vt_loss!r}, relative difference {d:.3g}"
    print(f"resnet-tiny: torch {loss!r} vtensor {vt_loss!r} relative difference {d:.3g}")
