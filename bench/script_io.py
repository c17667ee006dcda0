"""What the bench scripts that bench/run.py's kind torch runs share: the rows written whole or not at
all, and the policies the vtensor command lists."""
import json
import os
import subprocess


def write_rows(path, rows):
    """rows (a JSON list) to path, whole or not at all."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=1)
    os.replace(tmp, path)


def policies(binary):
    """Every policy `vtensor policies` lists, in its order."""
    out = subprocess.run([binary, "policies"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]
