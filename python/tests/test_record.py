"""record_step(): a PyTorch step as an operator log that `vtensor replay` replays under the C++
policies, on the sim backend."""
import json
import os
import subprocess

import pytest
import torch
import torch.nn.functional as F

import vtensor.torch as vt
from models import cnn_batch, gpt_batch, small_cnn, small_gpt

BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "vtensor")


def record(tmp_path, name):
    make, data = (small_cnn, cnn_batch) if name == "cnn" else (small_gpt, gpt_batch)
    x, y = data()
    path = str(tmp_path / f"{name}.log")
    ops = vt.record_step(make(), (x,), path, loss_fn=lambda out: F.cross_entropy(out.reshape(-1, out.shape[-1]),
                                                                               y.reshape(-1)))
    return path, ops


@pytest.mark.parametrize("name", ["cnn", "gpt"])
def test_the_log_names_every_op_and_tensor(tmp_path, name):
    path, ops = record(tmp_path, name)
    lines = [json.loads(line) for line in open(path)]
    kinds = [r["INSTRUCTION"] for r in lines]
    assert kinds[0] == "ANNOTATE" and lines[0]["ANNOTATION"] == "START"
    assert sum(k in ("CALL", "MUTATE") for k in kinds) == ops > 20
    assert [r.get("ANNOTATION") for r in lines if r["INSTRUCTION"] == "ANNOTATE"] == ["START", "BACKWARD"]
    made = {n for r in lines if r["INSTRUCTION"] == "CALL" for n in r["RESULT"]}
    consts = {r["NAME"] for r in lines if r["INSTRUCTION"] == "CONSTANT"}
    for r in lines:
        if r["INSTRUCTION"] in ("CALL", "MUTATE"):
            assert set(r["ARGS"]) <= made | consts, r  # every argument was made or given before
            assert int(r["TIME"]) > 0
    assert len(consts) >= sum(1 for _ in (small_cnn() if name == "cnn" else small_gpt()).parameters())
    assert any(r["INSTRUCTION"] == "RELEASE" for r in lines)


@pytest.mark.skipif(not os.access(BIN, os.X_OK), reason=f"the vtensor command is not built ({BIN})")
@pytest.mark.parametrize("name", ["cnn", "gpt"])
def test_vtensor_replays_the_step_under_its_policies(tmp_path, name):
    path, _ = record(tmp_path, name)
    none = subprocess.run([BIN, "replay", "--trace", path, "--gpu", "h100-80g", "--policy", "none", "--quiet",
                           "--report", str(tmp_path / "none.json")], capture_output=True, text=True)
    assert none.returncode == 0, none.stderr
    peak = json.load(open(tmp_path / "none.json"))["iterations"][-1]["peak_allocated_bytes"]
    for policy in ("dtr", "capuchin", "checkpoint", "lru"):
        r = subprocess.run([BIN, "replay", "--trace", path, "--gpu", "h100-80g", "--policy", policy, "--budget",
                            f"{int(peak * 0.75)}B", "--quiet", "--report", str(tmp_path / f"{policy}.json")],
                           capture_output=True, text=True)
        if r.returncode == 3:  # the policy cannot fit this budget: an OOM it names
            assert "out of device memory" in r.stderr + r.stdout
            continue
        assert r.returncode == 0, (policy, r.stderr)
        rep = json.load(open(tmp_path / f"{policy}.json"))
        assert rep["iterations"][-1]["peak_allocated_bytes"] <= int(peak * 0.75), policy


def test_bad_arguments(tmp_path):
    x, _ = gpt_batch()
    with pytest.raises(ValueError, match="torch.nn.Module"):
        vt.record_step(lambda t: t, (x,), str(tmp_path / "a.log"))
    with pytest.raises(ValueError, match="tuple"):
        vt.record_step(small_gpt(), x, str(tmp_path / "a.log"))
    with pytest.raises(ValueError, match="existing folder"):
        vt.record_step(small_gpt(), (x,), str(tmp_path / "nope" / "a.log"))
    assert not os.listdir(tmp_path)


@pytest.mark.skipif(not os.access(BIN, os.X_OK), reason=f"the vtensor command is not built ({BIN})")
def test_weights_saved_by_vtensor_load_in_pytorch_and_back(tmp_path):
    """train --save writes safetensors the safetensors package reads; a file PyTorch saves loads with --init."""
    st = pytest.importorskip("safetensors.torch")
    saved = tmp_path / "w.safetensors"

    def train(*args, iters="2"):
        r = subprocess.run([BIN, "train", "--model", "resnet-tiny", "--iters", iters, *args], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return next(line for line in r.stdout.splitlines() if line.startswith("done:")).split(", peak")[0]  # the losses
    train("--save", str(saved), iters="3")
    tensors = st.load_file(str(saved))
    assert tensors and all(t.dtype == torch.float32 for t in tensors.values())
    assert "classifier.weight" in tensors
    again = tmp_path / "from_torch.safetensors"
    st.save_file({k: v.clone() for k, v in tensors.items()}, str(again))  # written by PyTorch's side
    assert train("--init", str(saved)) == train("--init", str(again))  # the same weights, the same run
    st.save_file({k: v * 0.5 for k, v in tensors.items()}, str(again))
    assert train("--init", str(saved)) != train("--init", str(again))  # and they are used
