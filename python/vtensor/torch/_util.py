"""Argument checks shared by vtensor.torch: every bad argument is a ValueError naming what is accepted."""
import math

import torch.nn as nn

from vtensor import _vtensor

_MAX_BYTES = 10 ** 15  # parse_bytes' range: 1 B to 1 PB
_BUDGET_FORMS = "bytes as an int or float (e.g. 1e8), or a string such as '512MiB', '64 MiB' or '10GiB'"


def parse_budget(budget, what="budget", required=True):
    """Bytes from an int, a float or a string: the CLI's syntax (vtensor::parse_bytes): "10GiB", "64 MiB",
    "1.5G", "1e8"; KiB / MiB / GiB and K / M / G are powers of 1024, KB / MB / GB powers of 1000."""
    if budget is None:
        if required:
            raise ValueError(f"{what} is required: {_BUDGET_FORMS}")
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, float, str)):
        raise ValueError(f"{what} must be {_BUDGET_FORMS}, not {type(budget).__name__}")
    if isinstance(budget, str):
        return _vtensor.parse_bytes(budget, what)  # raises ValueError naming the accepted forms
    if isinstance(budget, float) and not math.isfinite(budget):
        raise ValueError(f"{what} must be a finite number of bytes, got {budget!r}")
    if not 1 <= budget <= _MAX_BYTES:
        raise ValueError(f"{what} {budget!r} is out of range (1 B to 1 PB); accepted: {_BUDGET_FORMS}")
    return int(round(budget))


def check_choice(value, accepted, what):
    if not isinstance(value, str) or value not in accepted:
        raise ValueError(f"unknown {what} {value!r}; accepted: " + ", ".join(repr(a) for a in accepted))
    return value


def check_module(model, what="model"):
    if not isinstance(model, nn.Module):
        raise ValueError(f"{what} must be a torch.nn.Module, not {type(model).__name__}"
                         + (" (a function: wrap it in an nn.Module)" if callable(model) else ""))
    return model


def check_nonnegative_int(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be an int >= 0, got {value!r}")
    return value

