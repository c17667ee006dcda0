"""vtensor for Python: the C++ runtime's memory manager pieces, reachable from PyTorch.

`vtensor.torch` holds what PyTorch users call: use_allocator / stats (a budgeted allocator),
offload (saved-tensor hooks planned from a measured step), auto_checkpoint. The extension
`vtensor._vtensor` is built by the repository's CMake next to this file (see the README).
"""
from vtensor._vtensor import OutOfMemoryError, format_bytes, parse_bytes  # noqa: F401

__all__ = ["OutOfMemoryError", "format_bytes", "parse_bytes"]
