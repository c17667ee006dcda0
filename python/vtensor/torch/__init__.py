"""vtensor for PyTorch users.

    vtensor.torch.use_allocator(budget="10GiB", allocator="caching")   # before any CUDA tensor
    off = vtensor.torch.offload(policy="capuchin", budget="2GiB")      # saved-tensor hooks
    with off: loss = model(x).sum(); loss.backward()                    # step 1 measures, then guided
    model, report = vtensor.torch.auto_checkpoint(model, example, budget="1GiB")

Each module opens with what it does and where it follows or deviates from PyTorch and the papers.
"""
from vtensor._vtensor import OutOfMemoryError  # noqa: F401
from vtensor.torch.allocator import (  # noqa: F401
    ALLOCATORS, HostDevice, last_oom, max_memory_allocated, memory_allocated, reset_peak_memory_stats,
    stats, step, use_allocator)
from vtensor.torch.checkpoint import auto_checkpoint, measure_modules  # noqa: F401
from vtensor.torch.offload import POLICIES, Offload, offload  # noqa: F401
from vtensor.torch._util import parse_budget  # noqa: F401

__all__ = ["ALLOCATORS", "HostDevice", "OutOfMemoryError", "Offload", "POLICIES", "auto_checkpoint", "last_oom",
           "max_memory_allocated", "measure_modules", "memory_allocated", "offload", "parse_budget",
           "reset_peak_memory_stats", "stats", "step", "use_allocator"]
