"""The real peak of a training step's memory, on CPU as on CUDA.

    with vtensor.torch.peak_memory() as m:
        loss_fn(model(x), y).backward()
    m.peak_bytes      # the most the step held above what was allocated when it began

CUDA: torch's own allocator figures (torch.cuda.max_memory_allocated, reset at the start).
CPU: torch has no CPU allocator statistics, and its CPU allocator takes its memory from glibc's
malloc, so the meter reads glibc's count of bytes in use (mallinfo2: every arena and mmapped chunk)
after every op dispatched on this thread (a TorchDispatchMode) and at the end. A buffer made and
freed inside one op (a convolution's workspace) is not seen, and the count includes the few bytes
Python's own objects take meanwhile: it is the real bytes at op boundaries, not a model of them.
"""
import ctypes
import ctypes.util

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_mallinfo2 = getattr(_libc, "mallinfo2", None)
if _mallinfo2 is not None:
    _mallinfo2.restype = _Mallinfo2


def malloc_in_use():
    """Bytes glibc's malloc has handed out and not had back (mmapped chunks included)."""
    if _mallinfo2 is None:
        raise RuntimeError("peak_memory on CPU needs glibc >= 2.33 (mallinfo2)")
    m = _mallinfo2()
    return m.uordblks + m.hblkhd


class _Sampler(TorchDispatchMode):
    def __init__(self, meter):
        super().__init__()
        self.meter = meter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.meter._sample()
        return out


class PeakMeter:
    """A context measuring the peak of one step; see the module's note. device: 'cpu' or 'cuda'."""

    def __init__(self, device="cpu"):
        if device not in ("cpu", "cuda"):
            raise ValueError(f"unknown device {device!r}; accepted: 'cpu', 'cuda'")
        self.device = device
        self.start_bytes = self.peak_bytes = self.end_bytes = 0
        self._mode = None

    def _now(self):
        return torch.cuda.memory_allocated() if self.device == "cuda" else malloc_in_use()

    def _sample(self):
        self._max = max(self._max, self._now())

    def __enter__(self):
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self._start = self._max = self._now()
        if self.device == "cpu":
            self._mode = _Sampler(self)
            self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None
        if self.device == "cuda":
            torch.cuda.synchronize()
            self._max = torch.cuda.max_memory_allocated()
        else:
            self._sample()
        end = self._now()
        self.start_bytes, self.end_bytes = self._start, end
        self.peak_bytes = max(self._max - self._start, 0)
        return False


def peak_memory(device=None):
    """A PeakMeter for `device` (default: 'cuda' when a GPU is there, else 'cpu')."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return PeakMeter(device)
