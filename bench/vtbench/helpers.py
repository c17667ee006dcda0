"""What the experiments' declarations share: the repository's root, the model sets (the paper's
reference batches, the tiny presets, the DTR logs), a model's vtensor arguments and label, its
densities file, the argument lists of a row's `vtensor train / replay / maxbatch` run, and the
small readers of reports the columns use (fraction_of_peak(), steady(), median(), gib(), ...)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# The reference batches of docs/experiments/capuchin.md, "Method" (FP32, SGD with momentum; CNNs at 224x224).
PAPER_MODELS = [
    {"model": "resnet50", "batch": 32},
    {"model": "vgg16", "batch": 64},
    {"model": "gpt2-small", "batch": 8, "seq": 1024},
    {"model": "bert-base", "batch": 32, "seq": 128},
]
TINY_MODELS = [{"model": m} for m in ("resnet-tiny", "vgg-tiny", "gpt-tiny", "bert-tiny")]
PAPER_MODELS_ADAM = [  # docs/experiments/checkpoint.md's setting: transformers with Adam (m and v counted)
    {"model": "bert-base", "seq": 128, "optimizer": "adam"},
    {"model": "gpt2-small", "seq": 1024, "optimizer": "adam"},
    {"model": "resnet50"},
    {"model": "vgg16"},
]
DTR_LOGS = ["densenet121", "inceptionv4", "lstm", "resnet32", "transformer", "treelstm", "unet", "unroll_gan"]


def model_args(m):
    a = ["--model", m["model"]]
    if "batch" in m:
        a += ["--batch", str(m["batch"])]
    if "seq" in m:
        a += ["--seq", str(m["seq"])]
    if "optimizer" in m:
        a += ["--optimizer", m["optimizer"]]
    return a + m.get("flags", [])


def model_label(m):
    extra = [f"seq {m['seq']}"] if "seq" in m else []
    extra += [m["optimizer"]] if "optimizer" in m else []
    extra += [f.lstrip("-") for f in m.get("flags", [])]
    return m["model"] + (f" ({', '.join(extra)})" if extra else "")


def densities(m):
    """The non-zero counts a cpu run measured for this model (bench/densities/MODEL.json): what
    sizes the compress policies' tensors on sim. None for a model without ReLU / max-pool."""
    path = os.path.join(ROOT, "bench", "densities", m["model"] + ".json")
    return path if os.path.exists(path) else None


def takes_densities(policy):
    """The policies that read --densities: the compress ones, and auto (its compression candidates)."""
    return policy.startswith("compress") or policy == "auto"


def densities_args(row):
    d = densities(row)
    return ["--densities", d] if d else []


UNLIMITED = ["--budget", "1024GiB"]
# The experiments compare policies at fractions of a peak and measure unlimited runs, budgets the
# simulated GPU need not hold.
ABOVE_GPU = ["--budget-above-gpu"]


# Helpers for the runs' arguments and the columns.

def train(row, *extra, cmd="train"):
    """`vtensor train` (or replay) of a row: its model, backend, GPU and iterations, and extra."""
    if cmd == "replay":
        a = ["replay", "--trace", row["trace"], "--gpu", row["gpu"], *ABOVE_GPU]
    else:
        a = ["train", *model_args(row), "--backend", row.get("backend", "cpu")]
        if row.get("backend") == "sim":
            a += ["--gpu", row["gpu"], *ABOVE_GPU]
    return [*a, "--iters", row.get("iters", 3), "--quiet", *row.get("train_args", []), *extra]


def maxbatch(row, *extra):
    """`vtensor maxbatch` of a row's model (the search chooses the batch) on its GPU."""
    return ["maxbatch", *model_args({k: v for k, v in row.items() if k != "batch"}), "--gpu", row["gpu"], *ABOVE_GPU,
            *extra]


def fraction_of_peak(rep, f, align=256):
    """A budget: the fraction f of a report's peak allocated bytes, rounded down to align."""
    return int(rep["summary"]["peak_allocated_bytes"] * f) // align * align


def steady(rep):
    """The iterations after the first (the measured one for the planning policies)."""
    return rep["iterations"][1:] or rep["iterations"]


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def gib(b):
    return f"{b / 2**30:.2f} GiB"


def mib(b):
    return f"{b / 2**20:.2f} MiB"


def steady_mean(rep, key):
    it = steady(rep)
    return sum(x[key] for x in it) / len(it)


def fastest(rep):
    return min(i["time_ms"] for i in steady(rep))


def loss_equals_none(rep, none):
    return "yes" if all(a["loss"] == b["loss"] for a, b in zip(rep["iterations"], none["iterations"])) else "no"


def sweep_row(c, policy):
    """The row of a sweep's CSV (run "sweep") at the row's budget under policy."""
    return next(x for x in c.rep["sweep"] if (x["budget"], x["policy"]) == (c.row["budget"], policy))


def sweep_cell(c, policy, fn):
    x = sweep_row(c, policy)
    return fn(x) if x["status"] == "ok" else "oom"
