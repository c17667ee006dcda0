"""A PyTorch step replayed under every C++ policy, for bench/run.py's torch-replay experiment: the
step vtensor.torch.auto measures (Hugging Face GPT-2, Llama and BERT from small configs at batch
48, and the tests' tiny GPT at 64; AdamW; CPU torch, one thread) kept with `log=`, then
`vtensor sweep --trace LOG --gpu h100-80g --policies P,... --budgets 50%,25%` (every policy
`vtensor policies` lists; unified memory in 64 KiB pages: these steps are a few MiB): each policy on the
sim model of that step (its measured op times, the saved storages movable, the rest pinned). Per
model and policy: the predicted step against the unmanaged replay at 50% and 25% of its peak, or
why it did not run.
    .venv/bin/python bench/torch_replay.py --json OUT.json [--models gpt2,llama,bert,tiny-gpt]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
import torch  # noqa: E402

import vtensor.torch as vt  # noqa: E402
import torch_auto  # noqa: E402
from script_io import policies, write_rows  # noqa: E402

BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(HERE, "..", "build", "vtensor")
MODELS = ("gpt2", "llama", "bert", "tiny-gpt")


def record(name, path):
    """The measured step of vt.auto (budget: the whole machine, so the step runs plain) kept at path."""
    make, data = torch_auto.subject(name)
    model = make()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = vt.auto(model, budget="16GiB", optimizer=opt, log=path)
    inputs, loss_fn = data(0)
    with step:
        loss_fn(model(*inputs)).backward()


def cell(r):
    if r["status"] == "ok":
        return f"{r['overhead']:.3f}x"
    return "oom" if r["status"] == "oom" else r["status"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="where the rows go (a JSON list)")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    models = a.models.split(",")
    bad = [m for m in models if m not in MODELS]
    if bad:
        sys.exit(f"torch_replay: unknown model {bad}; accepted: {', '.join(MODELS)}")
    if not os.access(BIN, os.X_OK):
        sys.exit(f"torch_replay: {BIN} not found: build the project first (scripts/install.sh)")
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            print(f"torch_replay: {m}", flush=True)
            log, out = os.path.join(tmp, f"{m}.log"), os.path.join(tmp, f"{m}.json")
            record(m, log)
            p = subprocess.run([BIN, "sweep", "--trace", log, "--gpu", "h100-80g", "--policies", ",".join(policies(BIN)),
                                "--budgets", "50%,25%", "--um-page-size", "64KiB", "--out", out], capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"torch_replay: the sweep of {m} failed: {(p.stderr or p.stdout).strip()[-300:]}")
            with open(out) as f:
                got = json.load(f)
            ops = sum(1 for line in open(log) if '"CALL"' in line or '"MUTATE"' in line)
            for policy in dict.fromkeys(r["policy"] for r in got):
                by = {r["budget"]: r for r in got if r["policy"] == policy}
                rows.append(dict(model=m, ops=ops, policy=policy, half=cell(by["50%"]) if "50%" in by else "",
                                 quarter=cell(by["25%"]) if "25%" in by else "",
                                 moved=by["50%"].get("swapped_out_bytes", 0) / 2**20 if "50%" in by and
                                 by["50%"]["status"] == "ok" else "",
                                 recomputed=by["50%"].get("recomputed_ops", "") if "50%" in by else ""))
    write_rows(a.json, rows)


if __name__ == "__main__":
    main()
