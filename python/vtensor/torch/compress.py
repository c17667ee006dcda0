"""Lossless compression of saved activations for PyTorch (FreeLunch, Patel et al., MCHPC'21).

    comp = vtensor.torch.offload(policy="compress")
    with comp:
        loss_fn(model(x), y).backward()

Every float32 tensor autograd saves for backward goes through saved-tensor hooks to vtensor's
bitmask codec (vtensor/backend/codec.h): one bit per element saying whether its bit pattern is
non-zero, then the non-zero elements. ReLU outputs and what is saved after them are mostly zeros,
so they shrink to about density + 1/32 of their bytes; the original is let go, so the resident
bytes of the step really fall (on CPU too). Unpacking decompresses into a fresh tensor, bit for bit,
so losses and gradients are identical to a step without the hooks. A tensor the codec would not
shrink below `max_ratio` of its bytes, a tensor of another dtype (bf16 under autocast: the codec
packs 32-bit words), parameters and tensors under `min_bytes` are kept as they are.
  CPU: the C++ codec of the cpu backend (vtensor._vtensor.codec_*), GIL released.
  CUDA: the same format built from torch ops on the device (a deviation: the cuda backend's
    kernels live in the C++ runtime's CUDA library, which this package does not link); the tests
    check on CPU that both give the same bytes.
Deviations from FreeLunch: no side stream or sliding workspace on CUDA (torch's allocator serves
the buffers), the sign codec is not used (a hook sees the tensor, not whether every reader needs
only its sign), and no hybrid with swapping: `budget`, where given, is checked and reported
(stats()["fits"]), not enforced.
"""
import time
import weakref

import torch

from vtensor import _vtensor
from vtensor.torch import _saved
from vtensor.torch._util import check_nonnegative_int, parse_budget

CODECS = ("bitmask",)
_WORD = 32


def compressed_size(x):
    """Bytes the bitmask codec writes for the float32 tensor x (any device)."""
    n = x.numel()
    nnz = int((x.reshape(-1).view(torch.int32) != 0).sum()) if x.device.type != "cpu" else \
        _vtensor.codec_count_nonzero(x.data_ptr(), n)
    return _vtensor.codec_bytes("bitmask", n, nnz)


def compress(x):
    """x (1-D, contiguous float32) as its bitmask encoding, a uint8 tensor on x's device."""
    n = x.numel()
    if x.device.type == "cpu":
        nnz = _vtensor.codec_count_nonzero(x.data_ptr(), n)
        size = _vtensor.codec_bytes("bitmask", n, nnz)
        out = torch.empty(size, dtype=torch.uint8)
        written = _vtensor.codec_compress("bitmask", x.data_ptr(), n, out.data_ptr(), size)
        assert written == size, (written, size)
        return out
    return _compress_torch(x)


def decompress(data, n, device):
    """The n float32 that compress() encoded in data."""
    if device.type == "cpu":
        out = torch.empty(n, dtype=torch.float32)
        _vtensor.codec_decompress("bitmask", data.data_ptr(), n, out.data_ptr())
        return out
    return _decompress_torch(data, n)


def _compress_torch(x):
    """The codec's format from torch ops: mask words (bit i of word w: element 32w+i non-zero), values."""
    n = x.numel()
    bits = x.view(torch.int32) != 0
    words = -(-n // _WORD)
    padded = torch.zeros(words * _WORD, dtype=torch.int32, device=x.device)
    padded[:n] = bits.to(torch.int32)
    shifts = torch.arange(_WORD, dtype=torch.int32, device=x.device)
    mask = (padded.view(words, _WORD) << shifts).sum(1, dtype=torch.int32)  # disjoint bits: the sum is the OR
    values = x[bits]
    return torch.cat([mask.view(torch.uint8), values.view(torch.uint8)])


def _decompress_torch(data, n):
    words = -(-n // _WORD)
    mask = data[:4 * words].view(torch.int32)
    shifts = torch.arange(_WORD, dtype=torch.int32, device=data.device)
    bits = ((mask.view(words, 1) >> shifts) & 1).view(-1)[:n].bool()
    out = torch.zeros(n, dtype=torch.int32, device=data.device)
    out[bits] = data[4 * words:].view(torch.int32)
    return out.view(torch.float32)


class _Entry:
    __slots__ = ("data", "raw", "n", "nbytes", "held", "refs", "alive")

    def __init__(self, nbytes):
        self.data = self.raw = None
        self.n, self.nbytes, self.held, self.refs, self.alive = 0, nbytes, 0, 0, True


class Compress:
    """Saved-tensor hooks that compress what they can (see the module's note); one step per `with`."""

    def __init__(self, budget=None, min_bytes=0, device=None, max_ratio=0.9):
        self.budget = parse_budget(budget, required=False)
        self.min_bytes = check_nonnegative_int(min_bytes, "min_bytes")
        if isinstance(max_ratio, bool) or not isinstance(max_ratio, (int, float)) or not 0 < max_ratio <= 1:
            raise ValueError(f"max_ratio must be a number in (0, 1], got {max_ratio!r}")
        self.max_ratio = float(max_ratio)
        self.device = device
        self.policy = "compress"
        self.history = []
        self._hooks = None
        self._step = None

    def __enter__(self):
        if self._hooks is not None:
            raise RuntimeError("this compress context is already active (one step at a time)")
        self._step = {"step": len(self.history) + 1, "mode": "compress", "policy": "compress", "budget": self.budget,
                      "entries": 0, "saved_bytes": 0, "compressed_entries": 0, "compressed_from_bytes": 0,
                      "compressed_bytes": 0, "kept_bytes": 0, "held_bytes": 0, "peak_held_bytes": 0,
                      "skipped_tensors": 0, "compress_ms": 0.0, "decompress_ms": 0.0, "decompressions": 0}
        self._by_key = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        self._hooks = None
        s = self._step
        s["ratio"] = s["compressed_bytes"] / s["compressed_from_bytes"] if s["compressed_from_bytes"] else 1.0
        s["fits"] = None if self.budget is None else s["peak_held_bytes"] <= self.budget
        s["failed"] = exc[0] is not None
        self.history.append(s)
        self._by_key = {}
        return False

    def stats(self):
        """The last step's figures: bytes saved, compressed (from, to, ratio), kept, the peak held."""
        return dict(self.history[-1]) if self.history else {}

    def _hold(self, n):
        s = self._step
        if s is None:
            return
        s["held_bytes"] += n
        s["peak_held_bytes"] = max(s["peak_held_bytes"], s["held_bytes"])

    def _pack(self, t):
        s = self._step
        if (not isinstance(t, torch.Tensor) or t.layout != torch.strided or _saved.is_parameter(t)
                or (self.device is not None and t.device.type != self.device)):
            s["skipped_tensors"] += 1
            return ("raw", t)
        r, start = _saved.region(t)
        nbytes = r.numel() * r.element_size()
        k = _saved.key(t, start, r.numel())
        hit = self._by_key.get(k)
        # The same bytes only while the tensor first saved lives: once it is gone, its storage (let
        # go of for the compressed copy) may hold another tensor at the same address.
        e = hit[1] if hit is not None and hit[0]() is not None and hit[1].alive else None
        if e is None:
            e = _Entry(nbytes)
            self._by_key[k] = (weakref.ref(t), e)
            s["entries"] += 1
            s["saved_bytes"] += nbytes
            t0 = time.perf_counter_ns()
            if t.dtype == torch.float32 and nbytes >= max(self.min_bytes, 1) and \
                    compressed_size(r) <= self.max_ratio * nbytes:
                e.data, e.n = compress(r.detach()), r.numel()
                e.held = e.data.numel()
                s["compressed_entries"] += 1
                s["compressed_from_bytes"] += nbytes
                s["compressed_bytes"] += e.held
            else:
                e.raw = r.detach()
                e.held = nbytes
                s["kept_bytes"] += nbytes
            s["compress_ms"] += (time.perf_counter_ns() - t0) / 1e6
            self._hold(e.held)
        return ("v", _saved.Handle(self, e, _saved.View(t, start)))

    def _unpack(self, packed):
        kind, obj = packed
        if kind == "raw":
            return obj
        e = obj.entry
        if e.raw is not None:
            return obj.view.of(e.raw)
        t0 = time.perf_counter_ns()
        r = decompress(e.data, e.n, e.data.device)
        if self._step is not None:
            self._step["decompress_ms"] += (time.perf_counter_ns() - t0) / 1e6
            self._step["decompressions"] += 1
        return obj.view.of(r)

    def _release(self, e):
        if e.alive:
            e.alive = False
            self._hold(-e.held)
            e.data = e.raw = None
