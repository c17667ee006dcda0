"""The README's PyTorch example, run as written (with the installed package, no PYTHONPATH)."""
import os
import re
import subprocess
import sys

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_the_readmes_example_runs_as_written():
    with open(README) as f:
        text = f.read()
    m = re.search(r"\n((?:    .*\n)*?    import torch, torch\.nn as nn, vtensor\.torch as vt\n(?:    .*\n)+)", text)
    assert m, "the README has no PyTorch example"
    code = "\n".join(line[4:] for line in m.group(1).splitlines()) + "\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["measured", "guided", "guided"], r.stdout
    assert all(" on the device" in line for line in lines[:3]) and " -> " in lines[3], r.stdout
