"""The tables of docs/results.md that set every policy side by side: the headline grids (every
policy x the paper models x 50% / 25% of the unmanaged peak, p100-16g and h100-80g; also shown in
docs/experiments/capuchin.md and compress.md), the DTR operator logs replayed under the planning
policies, and the tiny presets trained for real on the cpu backend."""
from ..helpers import DTR_LOGS, PAPER_MODELS, TINY_MODELS


EXPERIMENTS = {
    "headline-p100": {"kind": "grid", "backend": "sim", "gpu": "p100-16g", "models": PAPER_MODELS,
                      "policies": "all", "budgets": ["50%", "25%"], "iters": 4, "maxbatch": True,
                      "about": "every policy x 4 paper models x {50%, 25%} of the unmanaged peak, p100-16g: "
                               "overhead against none at the reference batch / maximum batch in the budget"},
    "headline-h100": {"kind": "grid", "backend": "sim", "gpu": "h100-80g", "models": PAPER_MODELS,
                      "policies": "all", "budgets": ["50%", "25%"], "iters": 4, "maxbatch": True,
                      "about": "the same on h100-80g"},
    "dtr-logs": {"kind": "logs", "gpus": ["p100-16g", "h100-80g"], "logs": DTR_LOGS,
                 "policies": ["capuchin-swap", "capuchin-recompute", "capuchin", "dtr", "checkpoint", "auto"],
                 "budgets": ["50%", "25%"], "extra_budgets": {"transformer": ["4GB"]}, "iters": 4,
                 "about": "the DTR artifact's operator logs replayed at 50% / 25% of each log's unmanaged peak"},
    "tiny-cpu": {"kind": "grid", "backend": "cpu", "models": TINY_MODELS, "policies": "all",
                 "budgets": ["50%", "25%"], "iters": 20, "maxbatch": False,
                 "sweep_args": ["--um-page-size", "16KiB"],  # the default 2 MiB page is larger than these models
                 "about": "the tiny presets trained for real on the cpu backend: every policy at 50% / 25%, "
                          "bit-identity to none checked per row; um pages of 16 KiB"},
}
