"""The package as a user meets it: the import, budgets parsed as the CLI parses them, the
OutOfMemoryError class, and the installed extension (no PYTHONPATH)."""
import math
import subprocess
import sys

import pytest
import torch

import vtensor
import vtensor.torch as vt


def test_budgets_parse_as_the_cli_parses_them():
    MiB = 1 << 20
    assert vt.parse_budget("64 MiB") == 64 * MiB == vt.parse_budget("64MiB") == vt.parse_budget(64 * MiB)
    assert vt.parse_budget("64MB") == 64_000_000  # MB is 10^6, MiB 2^20, as in the CLI
    assert vt.parse_budget(1e8) == vt.parse_budget("1e8") == 100_000_000
    assert vt.parse_budget("1.5GiB") == 3 << 29
    for bad in (0, -5, 10 ** 30, "abc", "0", float("nan"), math.inf, "1e400", [1], True):
        with pytest.raises(ValueError, match="budget"):
            vt.parse_budget(bad)


def test_out_of_memory_is_torchs_and_vtensors():
    assert issubclass(vt.OutOfMemoryError, torch.OutOfMemoryError)
    assert issubclass(vt.OutOfMemoryError, MemoryError)
    assert vt.OutOfMemoryError is vtensor.OutOfMemoryError


def test_the_package_is_installed_not_on_a_path():
    assert "site-packages" in vtensor.__file__, vtensor.__file__
    r = subprocess.run([sys.executable, "-c", "import vtensor.torch, sys; print(vtensor.torch.__file__)"],
                       capture_output=True, text=True, cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and "site-packages" in r.stdout, r.stderr


def test_an_old_torch_is_refused_naming_the_version_needed():
    code = ("import sys, types, torch; torch.__version__ = '2.3.1'; "
            "sys.modules.pop('vtensor', None)\n"
            "try:\n import vtensor\nexcept ImportError as e:\n print(e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "vtensor needs torch >= 2.4" in r.stdout and "this is torch 2.3.1" in r.stdout, r.stdout + r.stderr
