"""A budgeted allocator for PyTorch: vtensor's caching or planned allocator over one arena.

use_allocator(budget, allocator) makes every CUDA allocation of the process come from one arena of
`budget` bytes, sub-allocated by vtensor's C++ allocators (caching: best fit with split and
coalesce; planned: Zhang et al.'s lifetime-aware pool, planned from the first step bracketed by
`with vtensor.torch.step():`). stats() speaks PyTorch's vocabulary (allocated_bytes, reserved_bytes,
their peaks, num_ooms) plus the fragmentation and the largest free block, and works where
torch.cuda.max_memory_allocated does not with a custom allocator (pytorch#133281). An allocation
that does not fit is an OOM whose message says what was requested, what is in use, the largest
free block and the fragmentation (pytorch#29554); last_oom() returns it.

On CUDA the arena is plugged in with torch.cuda.memory.CUDAPluggableAllocator, whose C entry
points are vtensor_torch_malloc / vtensor_torch_free in the extension; the arena is one cudaMalloc
of the budget. Either for the whole process (torch.cuda.memory.change_current_allocator, before the
first CUDA allocation), or, with pool=True, as a torch.cuda.MemPool that serves only what is
allocated inside `with torch.cuda.use_mem_pool(pool):` (torch's allocator serves the rest). A
request that does not fit raises (torch does not check for a null pointer). That path is tested by
python/tests/test_cuda.py where there is a GPU (bench/cuda_bench.sh's python-cuda step). Without CUDA the same arena is driven over host memory by HostDevice through
vtensor_torch_try_malloc (null on failure: ctypes passes no exception) and vtensor_torch_free.
Deviations from PyTorch's CUDACachingAllocator: one fixed arena, nothing returned to the driver,
no per-stream pools (torch's stream argument is ignored: one stream's order is assumed, as with
cudaMalloc), and an OOM does not free cached blocks and retry (nothing is cached outside the arena).
"""
import contextlib
import ctypes

import torch

from vtensor import _vtensor
from vtensor.torch._util import check_choice, parse_budget

ALLOCATORS = ("caching", "planned")
_state = {"device": None, "step": 0}


def use_allocator(budget="10GiB", allocator="caching", device=None, pool=False):
    """Serve allocations from one arena of `budget` bytes with vtensor's `allocator`.

    device: None for CUDA (a GPU), or a HostDevice (CPU torch: the same entry points over host
    memory). pool (CUDA): False plugs the arena in for the whole process (before its first CUDA
    allocation) and returns "cuda"; True returns a torch.cuda.MemPool over it, used inside
    `with torch.cuda.use_mem_pool(pool):`. On CPU returns the HostDevice.
    """
    nbytes = parse_budget(budget)
    check_choice(allocator, ALLOCATORS, "allocator")
    if not isinstance(pool, bool):
        raise ValueError(f"pool must be True or False, got {pool!r}")
    if device is None:
        if not torch.cuda.is_available():
            raise RuntimeError("use_allocator on CUDA needs a GPU; pass device=vtensor.torch.HostDevice() on CPU")
        plug = torch.cuda.memory.CUDAPluggableAllocator(_vtensor.__file__, _vtensor.malloc_symbol,
                                                        _vtensor.free_symbol)
        _vtensor.pluggable_configure(nbytes, allocator, 0)  # the arena: cudaMalloc of the budget on first use
        if pool:
            device = torch.cuda.MemPool(plug.allocator())
        else:
            torch.cuda.memory.change_current_allocator(plug)
            device = "cuda"
    else:
        if not isinstance(device, HostDevice):
            raise ValueError("device must be None (CUDA) or a vtensor.torch.HostDevice")
        device._bind(nbytes, allocator)
    _state["device"] = device
    _state["step"] = 0
    return device


def _require():
    if _state["device"] is None:
        raise RuntimeError("vtensor.torch.use_allocator(...) has not been called")


def stats():
    """PyTorch-named figures of the arena: allocated_bytes, reserved_bytes, peak_allocated_bytes,
    peak_reserved_bytes, num_ooms, fragmentation (1 - largest free block / free bytes),
    largest_free_block_bytes, capacity_bytes, num_allocs, num_frees, allocator, `plan` (the
    allocator's report: for `planned`, planned and fallback requests), and torch.cuda.memory_stats()'s
    "allocated_bytes.all.current" / ".all.peak" (and reserved_bytes') for the same figures."""
    _require()
    s = _vtensor.pluggable_stats()
    s["allocator"] = _vtensor.pluggable_name()
    # torch.cuda.memory_stats()'s keys for the same figures (one pool: "all").
    for k in ("allocated_bytes", "reserved_bytes"):
        s[f"{k}.all.current"], s[f"{k}.all.peak"] = s[k], s[f"peak_{k}"]
    import json
    s["plan"] = json.loads(_vtensor.pluggable_report())
    return s


def memory_allocated():
    return stats()["allocated_bytes"]


def max_memory_allocated():
    return stats()["peak_allocated_bytes"]


def reset_peak_memory_stats():
    _require()
    _vtensor.pluggable_reset_peak()


def last_oom():
    """The message of the last allocation that did not fit ('' when none)."""
    return _vtensor.pluggable_last_oom()


@contextlib.contextmanager
def step():
    """Brackets one training step: the planned allocator records the first and serves the next ones from its plan."""
    _require()
    _vtensor.pluggable_begin_iteration(_state["step"])
    try:
        yield
    finally:
        _vtensor.pluggable_end_iteration()
        _state["step"] += 1


class HostDevice:
    """The fake device hook for CPU torch: an arena in host memory, allocated through the very C
    entry points CUDAPluggableAllocator calls (vtensor_torch_try_malloc, the non-throwing form of
    vtensor_torch_malloc, and vtensor_torch_free, via ctypes).
    empty(shape, dtype) returns a torch tensor whose bytes live in the arena; its block is freed when
    the tensor's storage dies."""

    def __init__(self):
        self._lib = ctypes.CDLL(_vtensor.__file__)
        self._lib.vtensor_torch_try_malloc.restype = ctypes.c_void_p
        self._lib.vtensor_torch_try_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        self._lib.vtensor_torch_free.restype = None
        self._lib.vtensor_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        self._arena = None

    def _bind(self, nbytes, allocator):
        self._arena = torch.empty(nbytes + 256, dtype=torch.uint8)  # host memory standing in for the device
        base = (self._arena.data_ptr() + 255) // 256 * 256
        _vtensor.pluggable_configure(nbytes, allocator, base)

    def malloc(self, size):
        p = self._lib.vtensor_torch_try_malloc(size, 0, None)
        if not p:
            raise _vtensor.OutOfMemoryError(_vtensor.pluggable_last_oom())
        return p

    def free(self, ptr, size=0):
        self._lib.vtensor_torch_free(ptr, size, 0, None)

    def empty(self, shape, dtype=torch.float32):
        shape = tuple(shape)
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * torch.empty(0, dtype=dtype).element_size()
        p = self.malloc(nbytes)
        buf = (ctypes.c_uint8 * max(nbytes, 1)).from_address(p)
        t = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes).view(dtype).view(shape) if nbytes else \
            torch.empty(shape, dtype=dtype)
        # The block goes back when the storage's last user is gone: a finalizer on the ctypes buffer,
        # which the storage keeps alive.
        import weakref
        weakref.finalize(buf, self.free, p, nbytes)
        return t
