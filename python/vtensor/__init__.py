"""vtensor for PyTorch 2: the C++ runtime's memory manager pieces, reachable from a training step.

`vtensor.torch` holds what PyTorch users call: use_allocator / stats (a budgeted allocator), offload
(saved-tensor hooks: Capuchin's or vDNN's swap plan from a measured step, or lossless compression),
auto_checkpoint (recomputation per region and per op through selective activation checkpointing).
The extension `vtensor._vtensor` is built by `pip install ./python` (python/pyproject.toml).
"""
import re

import torch

MIN_TORCH = (2, 4)  # selective activation checkpointing (create_selective_checkpoint_contexts)


def _torch_version(text):
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


if _torch_version(torch.__version__) < MIN_TORCH:
    raise ImportError(f"vtensor needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]} (selective activation checkpointing, "
                      f"torch.OutOfMemoryError); this is torch {torch.__version__}: pip install 'torch>=2.4'")

from vtensor._vtensor import OutOfMemoryError, format_bytes, parse_bytes  # noqa: E402

__all__ = ["MIN_TORCH", "OutOfMemoryError", "format_bytes", "parse_bytes"]
