"""vtensor for PyTorch 2 users.

    vtensor.torch.use_allocator(budget="10GiB", allocator="caching")   # before any CUDA tensor
    off = vtensor.torch.offload(policy="capuchin", budget="2GiB")      # saved-tensor hooks: swap to host
    with off: loss = model(x).sum(); loss.backward()                    # step 1 measures, then guided
    comp = vtensor.torch.offload(policy="compress")                     # lossless codecs on saved tensors
    report = vtensor.torch.auto_checkpoint(model, (x,), budget="1GiB")  # recompute per region and per op
    step = vtensor.torch.auto(model, budget="6GiB", optimizer=opt)      # the C++ planner: keep / offload / recompute
    with step: loss = model(x).sum(); loss.backward()                   # step 1 measures, then guided

Each module opens with what it does and where it follows or deviates from PyTorch and the papers.
"""
from vtensor._vtensor import OutOfMemoryError, format_bytes  # noqa: F401
from vtensor.torch._util import parse_budget  # noqa: F401
from vtensor.torch.auto_step import AutoStep, StepPeak, auto  # noqa: F401
from vtensor.torch.allocator import (  # noqa: F401
    ALLOCATORS, HostDevice, last_oom, max_memory_allocated, memory_allocated, reset_peak_memory_stats,
    stats, step, use_allocator)
from vtensor.torch.checkpoint import (  # noqa: F401
    CheckpointHooks, auto_checkpoint, checkpoint_module, checkpointed_modules, measure_modules, measure_peak,
    remove_checkpoints)
from vtensor.torch.compress import Compress  # noqa: F401
from vtensor.torch.memory import PeakMeter, peak_memory  # noqa: F401
from vtensor.torch.offload import POLICIES, Offload, offload  # noqa: F401
from vtensor.torch.record import record_step  # noqa: F401

__all__ = ["ALLOCATORS", "AutoStep", "CheckpointHooks", "Compress", "HostDevice", "OutOfMemoryError", "Offload", "POLICIES",
           "PeakMeter", "StepPeak", "auto", "auto_checkpoint", "checkpoint_module", "checkpointed_modules", "format_bytes", "last_oom",
           "max_memory_allocated", "measure_modules", "measure_peak", "memory_allocated", "offload", "parse_budget",
           "peak_memory", "record_step", "remove_checkpoints", "reset_peak_memory_stats", "stats", "step", "use_allocator"]
