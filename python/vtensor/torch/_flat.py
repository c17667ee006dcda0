"""An op's arguments and results flattened to their tensors and rebuilt: what torch's pytree does
for the structures aten ops take (tensors in tuples, lists, dicts), at a fraction of its cost; it
runs on every op a recorder or a guided auto step sees."""
import torch


class _Slot:
    """Where a tensor was in an op's arguments (strip / fill)."""
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


def strip(x, out):
    """x (an op's arguments or results: tensors in tuples, lists, dicts) with each tensor appended
    to `out` and replaced by its _Slot; in torch's pytree order, at a fraction of its cost (this
    runs on every op a recorder or a guided step sees)."""
    if isinstance(x, torch.Tensor):
        out.append(x)
        return _Slot(len(out) - 1)
    if isinstance(x, list):
        return [strip(y, out) for y in x]
    if isinstance(x, tuple):
        ys = [strip(y, out) for y in x]
        return tuple(ys) if type(x) is tuple else type(x)(*ys)
    if isinstance(x, dict):
        return {k: strip(v, out) for k, v in x.items()}
    return x


def fill(x, values):
    """strip's inverse: each _Slot replaced by values[its index]."""
    if isinstance(x, _Slot):
        return values[x.i]
    if isinstance(x, list):
        return [fill(y, values) for y in x]
    if isinstance(x, tuple):
        ys = [fill(y, values) for y in x]
        return tuple(ys) if type(x) is tuple else type(x)(*ys)
    if isinstance(x, dict):
        return {k: fill(v, values) for k, v in x.items()}
    return x


def _collect(x, out):
    for y in x:
        if isinstance(y, torch.Tensor):
            out.append(y)
        elif isinstance(y, (list, tuple)):
            _collect(y, out)
        elif isinstance(y, dict):
            _collect(y.values(), out)


def tensors_in(x):
    """The tensors of x, in torch's pytree order."""
    if isinstance(x, torch.Tensor):
        return [x]
    out = []
    _collect(x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else (), out)
    return out
