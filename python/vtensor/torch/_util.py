"""Argument checks shared by vtensor.torch: every bad argument is a ValueError naming what is accepted."""
from vtensor import _vtensor


def parse_budget(budget, what="budget", required=True):
    """Bytes from an int or a string such as "10GiB", "512MiB", "1.5G"."""
    if budget is None:
        if required:
            raise ValueError(f"{what} is required: bytes as an int, or a string such as '512MiB' or '10GiB'")
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, str)):
        raise ValueError(f"{what} must be bytes as an int or a string such as '512MiB' or '10GiB', "
                         f"not {type(budget).__name__}")
    if isinstance(budget, int):
        if budget <= 0:
            raise ValueError(f"{what} must be positive bytes, got {budget}")
        return budget
    return _vtensor.parse_bytes(budget, what)  # raises ValueError naming the accepted units


def check_choice(value, accepted, what):
    if value not in accepted:
        raise ValueError(f"unknown {what} {value!r}; accepted: " + ", ".join(repr(a) for a in accepted))
    return value
