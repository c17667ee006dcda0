"""The Python package's table (docs/python.md): vtensor.torch's policies on CPU torch, run by
bench/torch_policies.py in the project's environment (.venv; kind torch)."""


EXPERIMENTS = {}


EXPERIMENTS["torch-policies"] = {
    "kind": "torch",
    "about": "vtensor.torch's policies on CPU torch 2.11, one AdamW step: plain, offload (capuchin, swap) at 50% / 25% "
             "of plain's saved bytes on the device, compress, auto_checkpoint with the saved part of the real peak at "
             "50% / 25%, torch's checkpoint on every block; time is the median of 5 steps against plain's; peak is the "
             "step's real peak above its start (malloc's bytes at op boundaries); on CPU offload's device and host are "
             "one memory, so its real peak does not fall",
    "script": "bench/torch_policies.py",
    "args": ["--steps", "5"],
    "columns": [("model", "model"), ("policy", "policy"), ("budget", "budget"), ("time vs plain", "ratio", "{:.2f}x"),
                ("real peak MiB", "peak", "{:.2f}"), ("saved held MiB", "held", "{:.2f}"),
                ("bit-identical", "identical"), ("what it did", "note")],
}
