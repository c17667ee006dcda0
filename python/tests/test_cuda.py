"""The CUDA paths, on a GPU with torch >= 2.0 (skipped elsewhere, with the reason): the pluggable
allocator (one arena, a cudaMalloc of the budget) and offload's CUDA store (pinned host copies on
a side stream). Each allocator test runs in a process of its own: torch takes a pluggable
allocator only before its first CUDA allocation. Runs without pytest too (the GPU image may lack
it): `PYTHONPATH=python python3 python/tests/test_cuda.py`, exit 1 on a failure."""
import json
import os
import subprocess
import sys

import torch

try:
    import pytest
except ImportError:  # the script runner below
    pytest = None

HERE = os.path.dirname(os.path.abspath(__file__))
HAVE_CUDA = torch.cuda.is_available() and hasattr(getattr(torch.cuda, "memory", None), "CUDAPluggableAllocator")
WHY = (f"needs a GPU and torch >= 2.0 (CUDAPluggableAllocator); this is torch {torch.__version__}"
       + ("" if torch.cuda.is_available() else " without a GPU"))
MiB = 1 << 20

# Deterministic kernels, so that two runs can be compared bit for bit.
PRELUDE = f"""
import json, os, sys
sys.path.insert(0, {HERE!r})
import torch
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.use_deterministic_algorithms(True, warn_only=True)
import vtensor.torch as vt
from models import cnn_batch, small_cnn, train_step
"""

TRAIN = PRELUDE + """
if {budget!r}:
    vt.use_allocator(budget={budget!r}, allocator={allocator!r})
model = small_cnn().cuda()
x, y = (t.cuda() for t in cnn_batch())
losses = []
for _ in range(3):
    loss, grads = train_step(model, x, y)
    with torch.no_grad():
        for p, g in zip(model.parameters(), grads):
            p -= 0.01 * g
    losses.append(loss.item())
out = {{"losses": [repr(v) for v in losses],
        "params": [repr(p.double().sum().item()) for p in model.parameters()]}}
if {budget!r}:
    s = vt.stats()
    out.update(peak=s["peak_allocated_bytes"], capacity=s["capacity_bytes"], ooms=s["num_ooms"])
print(json.dumps(out))
"""

OOM = PRELUDE + """
vt.use_allocator(budget="64MiB")
a = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")  # fits
try:
    b = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # fits the budget, not beside a
    print(json.dumps({"raised": None}))
except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
    print(json.dumps({"raised": type(e).__name__, "message": str(e), "last_oom": vt.last_oom(),
                      "ooms": vt.stats()["num_ooms"]}))
"""


def _run(code):
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.join(HERE, "..", ".."), os.path.join(HERE, ".."),
                                                       env.get("PYTHONPATH", "")] if p)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def _skip_unless_cuda(f):
    return pytest.mark.skipif(not HAVE_CUDA, reason=WHY)(f) if pytest else f


@_skip_unless_cuda
def test_pluggable_allocator_trains_bit_identically_within_its_budget():
    ref = _run(TRAIN.format(budget=None, allocator="caching"))
    for allocator in ("caching", "planned"):
        got = _run(TRAIN.format(budget="256MiB", allocator=allocator))
        assert got["losses"] == ref["losses"], f"{allocator}: losses {got['losses']} against {ref['losses']}"
        assert got["params"] == ref["params"], f"{allocator}: parameters differ after three steps"
        assert 0 < got["peak"] <= got["capacity"] == 256 * MiB and got["ooms"] == 0, got


@_skip_unless_cuda
def test_pluggable_allocator_out_of_memory_names_request_use_and_budget():
    got = _run(OOM)
    assert got["raised"], "a 64 MiB request beside 32 MiB in use fit a 64 MiB arena"
    assert got["ooms"] >= 1, got
    msg = got["last_oom"]
    assert "requested 64.00 MiB" in msg and " in use" in msg and "64.00 MiB budget" in msg, msg


@_skip_unless_cuda
def test_offload_on_cuda_is_bit_identical_and_holds_the_budget():
    import vtensor.torch as vt
    from models import cnn_batch, small_cnn, train_step, assert_identical
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    model = small_cnn().cuda()
    x, y = (t.cuda() for t in cnn_batch())
    ref = train_step(model, x, y)
    off = vt.offload(policy="swap", budget="1GiB", device="cuda")
    with off:
        assert_identical(ref, train_step(model, x, y))
    peak = off.stats()["peak_saved_bytes"]
    assert peak > 0 and off.stats()["swapped_out_bytes"] == 0
    for policy in ("capuchin", "swap"):
        off = vt.offload(policy=policy, budget=peak // 2, device="cuda")
        for step in range(3):
            with off:
                got = train_step(model, x, y)
            assert_identical(ref, got)
            s = off.stats()
            assert s["peak_device_bytes"] <= peak // 2 < s["peak_saved_bytes"], (policy, step, s)
            assert s["swapped_out_bytes"] > 0 and s["swapped_in_bytes"] == s["swapped_out_bytes"], (policy, step, s)
        assert off.stats()["mode"] == "guided", (policy, off.stats())


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    if not HAVE_CUDA:
        print(f"test_cuda: skipped: {WHY}")
        sys.exit(0)
    failed = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"PASS {name}")
            except Exception as e:  # noqa: BLE001 - report every failure, then exit non-zero
                failed += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}")
    sys.exit(1 if failed else 0)
