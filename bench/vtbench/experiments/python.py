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


EXPERIMENTS["torch-auto"] = {
    "kind": "torch",
    "about": "vtensor.torch.auto beside PyTorch's own ways to cut a step's peak, on CPU torch 2.11 with one thread, "
             "4 AdamW steps per row: selective activation checkpointing per block with a hand-written policy (save "
             "matmul and convolution outputs), torch.utils.checkpoint per block, torch.compile with "
             "activation_memory_budget 0.5 (backend aot_eager_decomp_partition), save_on_cpu; then vt.auto with each "
             "one's measured peak as its budget, and at 50% of plain's peak. Time is the median of steps 2-4 (step 1 "
             "is auto's measured step and compile's compile) against plain's; peak is vt.StepPeak's (parameters, "
             "gradients, optimizer state and malloc's bytes at op boundaries; compile runs no per-op hook, so its "
             "peak is the sampled one only); sampled is a thread reading malloc's count in a loop; MiB to host and "
             "ops recomputed per step (PyTorch's: aten ops dispatched beyond plain's); auto vs them is auto's time "
             "over theirs (below 1: auto faster). On CPU host and device are one memory: save_on_cpu frees nothing",
    "script": "bench/torch_auto.py",
    "args": ["--steps", "4"],
    "columns": [("model", "model"), ("method", "method"), ("time vs plain", "ratio", "{:.2f}x"),
                ("peak MiB", "peak", "{:.2f}"), ("sampled peak MiB", "sampled", "{:.2f}"),
                ("MiB to host", "moved", "{:.2f}"), ("ops recomputed", "recomputed"), ("auto vs them", "vs"),
                ("bit-identical", "identical"), ("note", "note")],
}


EXPERIMENTS["torch-auto-planning"] = {
    "kind": "torch",
    "about": "how long vt.auto plans a step against its op count: Hugging Face GPT-2 at GPT-2 small's width (768, 12 "
             "heads, vocabulary 50257) with 4 to 24 layers (12 is GPT-2 small), batch 8 x 128, AdamW, CPU torch 2.11 "
             "with one thread; the budget is parameters, gradients and AdamW's moments plus half the rest of the plain "
             "step's peak (75% or 90% where no plan holds half); planning is `_vtensor.plan_step` under policy auto "
             "on the sim with the replay that scales the budget (wall seconds on this machine)",
    "script": "bench/torch_auto_planning.py",
    "args": [],
    "columns": [("layers", "layers"), ("aten ops", "ops"), ("planning s", "planning", "{:.2f}"),
                ("moves", "moves"), ("budget MiB", "budget", "{:.0f}"), ("plain peak MiB", "peak", "{:.0f}"),
                ("measured step s", "step", "{:.1f}"), ("predicted step s", "predicted_s", "{:.1f}"),
                ("plan", "summary")],
}


EXPERIMENTS["torch-replay"] = {
    "kind": "torch",
    "about": "a PyTorch step replayed under every C++ policy: the step vt.auto measures (Hugging Face GPT-2, Llama "
             "and BERT from small configs at batch 48, the tests' tiny GPT at 64; AdamW; CPU torch 2.11) kept with "
             "`log=`, then `vtensor sweep --trace LOG --gpu h100-80g --policies P,... --budgets 50%,25%` (every "
             "policy `vtensor policies` lists): the sim model of that step with its measured op times (on CPU, so "
             "copies at h100-80g's link hide behind them), the storages autograd saves movable and the rest "
             "pinned; the predicted step against the unmanaged replay at 50% and 25% of the log's own peak, and MiB "
             "swapped out and ops recomputed at 50%",
    "script": "bench/torch_replay.py",
    "args": [],
    "columns": [("model", "model"), ("aten ops", "ops"), ("policy", "policy"), ("50%", "half"), ("25%", "quarter"),
                ("MiB out at 50%", "moved", "{:.2f}"), ("recomputed at 50%", "recomputed")],
}
