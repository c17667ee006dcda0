"""Gradient checkpointing's tables (docs/experiments/checkpoint.md): the maximum batch with Adam
against Capuchin and the others, and checkpointing's plan at its maximum batch."""
from ..helpers import PAPER_MODELS_ADAM, gib, maxbatch, train


EXPERIMENTS = {
    "maxbatch-adam": {"kind": "maxbatch", "gpus": ["p100-16g", "h100-80g"], "models": PAPER_MODELS_ADAM,
                      "policies": ["none", "checkpoint", "capuchin", "capuchin-recompute", "dtr", "lru-recompute"],
                      "ratios": [["capuchin", "checkpoint"], ["capuchin", "none"]],
                      "about": "maximum batch at the whole GPU's memory, transformers with Adam "
                               "(Capuchin's anchor against gradient checkpointing)"},
}


# Gradient checkpointing's plan at its maximum batch (p100-16g; Adam for the transformers):
# `vtensor maxbatch --policy checkpoint`, then one training run at that batch and its
# policy_report.

def ckpt(c, key):
    return c.rep["run"]["policy_report"][key]


EXPERIMENTS["checkpoint-plan"] = {
    "kind": "runs",
    "about": "`vtensor maxbatch --model M --gpu p100-16g --policy checkpoint`, then `vtensor train --model M --batch "
             "MAX --backend sim --gpu p100-16g --policy checkpoint --iters 2`: its policy_report and last iteration",
    "defaults": {"backend": "sim", "gpu": "p100-16g", "iters": 2},
    "rows": PAPER_MODELS_ADAM,
    "runs": [("mb", lambda r, got: maxbatch(r, "--policy", "checkpoint")),
             ("run", lambda r, got: train({**r, "batch": got["mb"]["max_batch"]}, "--policy", "checkpoint"))],
    "columns": [
        ("model, batch", lambda c: f"{c.row['model']}, {c.rep['mb']['max_batch']}"),
        ("segments / layers (plan kept)", lambda c: f"{ckpt(c, 'segments')} / {ckpt(c, 'layers')} ({ckpt(c, 'rule')})"),
        ("checkpoints", lambda c: f"{ckpt(c, 'checkpoints')}, {gib(ckpt(c, 'checkpoint_bytes'))}"),
        ("dropped per iteration", lambda c: gib(ckpt(c, "dropped_bytes_per_iteration"))),
        ("recomputed ops (plan / measured)", lambda c: "{} / {}".format(
            ckpt(c, "expected_recomputed_ops_per_iteration"), c.rep["run"]["iterations"][-1]["recomputed_ops"])),
        ("Chen's re-run of the segments", lambda c: ckpt(c, "segment_recompute_ops_per_iteration")),
        ("forward ops", lambda c: ckpt(c, "forward_ops")),
        ("recompute / iteration", lambda c: "{:.0f} / {:.0f} ms".format(c.rep["run"]["iterations"][-1]["recompute_ms"],
                                                                         c.rep["run"]["iterations"][-1]["time_ms"])),
        ("planned peak (measured)", lambda c: "{} ({})".format(gib(ckpt(c, "planned_peak_bytes")),
                                                               gib(c.rep["run"]["summary"]["peak_allocated_bytes"]))),
        ("sqrt(L) plan's peak", lambda c: gib(ckpt(c, "sqrt_plan_peak_bytes")))]}
