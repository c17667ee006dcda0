"""The transformers' tables (docs/experiments/transformers.md, and docs/results.md's cpu peaks):
GPT-2 small and BERT-base with Adam, unmanaged peaks beside an analytic accounting, maximum batches,
the cost model's time per op kind, and the peaks measured on the cpu backend."""
from ..helpers import UNLIMITED, gib, maxbatch, model_args, train


EXPERIMENTS = {}


# Transformers (GPT-2 small, BERT-base) with Adam on the sim backend: unmanaged peaks beside an
# analytic accounting, maximum batches, and the cost model's time per op kind. Analytic figures
# (s sequence, b batch, h hidden, a heads, L layers, V vocabulary, P parameters):
#   states 16 P (fp32 weights, gradients, Adam m and v); layers L (64 sbh + 4 a s^2 b)
#   (Korthikanti et al. 2022, fp32, no dropout); head 8 sbV (the logits and their gradient).
# Our graph's saved activations, exactly: L (64 sbh + 4 a s^2 b + 16 sb) plus
#   4 (2 sbh + 4 sb + sbV) for gpt, 4 (5 sbh + 6 sb + sbV) for bert;
# the column "formula = measured" compares them with the allocation after the last forward op.

TRANSFORMER_SHAPES = {"gpt2-small": (12, 12, 768, 50257), "bert-base": (12, 12, 768, 30522)}  # L, a, h, V


def transformer_analytic(row, params):
    L, a, h, vocab = TRANSFORMER_SHAPES[row["model"]]
    s, b = row["seq"], row["batch"]
    layers = L * (64 * s * b * h + 4 * a * s * s * b)
    head = 8 * s * b * vocab
    extra = 4 * (2 * s * b * h + 4 * s * b + s * b * vocab) if row["model"].startswith("gpt") else \
        4 * (5 * s * b * h + 6 * s * b + s * b * vocab)
    ours = L * (64 * s * b * h + 4 * a * s * s * b + 16 * s * b) + extra
    return {"states": 16 * params, "layers": layers, "head": head, "ours": ours, "total": 16 * params + layers + head}


def transformer_peak(c):
    """What the peaks table reads from a row's report and costs: saved activations, the peak."""
    j = c.rep["train"]
    s, b = c.row["seq"], c.row["batch"]
    points = j["memory_timeline"]["points"]  # allocated after each op of the last iteration
    last_fwd = next(i for i, o in enumerate(c.rep["costs"]) if ".bwd" in o["name"]) - 1
    # After op 0 (the data): the persistent tensors as allocated and the token ids and targets (8 sb).
    saved = points[last_fwd][1] - (points[0][1] - 8 * s * b)
    params = j["graph"]["param_bytes"] // 4
    return {"saved": saved, "after_forward": points[last_fwd][1], "params": params,
            "peak": j["summary"]["peak_allocated_bytes"], "reserved": j["summary"]["peak_reserved_bytes"],
            "persistent": j["graph"]["persistent_bytes"], **transformer_analytic(c.row, params)}


def tp(key, scale=2**30):
    return lambda c: transformer_peak(c)[key] / scale


EXPERIMENTS["transformer-peaks"] = {
    "kind": "runs",
    "about": "policy none, Adam, sim a100-80g, unlimited budget, 2 iterations with the timeline; all in GiB; "
             "`vtensor costs` of the same shape finds the last forward op",
    "defaults": {"backend": "sim", "gpu": "a100-80g", "iters": 2, "optimizer": "adam"},
    "rows": [{"model": "gpt2-small", "seq": 1024, "batch": b} for b in (1, 2, 4, 8)] +
            [{"model": "gpt2-small", "seq": 512, "batch": 8}] +
            [{"model": "bert-base", "seq": 128, "batch": b} for b in (8, 16, 32, 64)] +
            [{"model": "bert-base", "seq": 512, "batch": 8}],
    "runs": [("train", lambda r, got: train(r, *UNLIMITED, "--timeline")),
             ("costs", lambda r, got: ["costs", *model_args(r), "--gpu", r["gpu"]])],
    "columns": [("model", lambda c: c.row["model"]), ("seq", lambda c: c.row["seq"]), ("batch", lambda c: c.row["batch"]),
                ("persistent (12P)", tp("persistent"), "{:.2f}"), ("saved activations", tp("saved"), "{:.2f}"),
                ("backward adds", lambda c: (transformer_peak(c)["peak"] - transformer_peak(c)["after_forward"]) / 2**30, "{:.2f}"),
                ("peak allocated", tp("peak"), "{:.2f}"), ("peak reserved", tp("reserved"), "{:.2f}"),
                ("16P", tp("states"), "{:.2f}"), ("L x (64sbh + 4as^2b)", tp("layers"), "{:.2f}"), ("8sbV", tp("head"), "{:.2f}"),
                ("analytic", tp("total"), "{:.2f}"), ("peak / analytic", lambda c: transformer_peak(c)["peak"] / transformer_peak(c)["total"], "{:.3f}"),
                ("formula = measured", lambda c: "yes" if transformer_peak(c)["saved"] == transformer_peak(c)["ours"] else
                 f"no ({transformer_peak(c)['ours']} formula)")]}

EXPERIMENTS["transformer-maxbatch"] = {
    "kind": "runs", "about": "`vtensor maxbatch --model M --seq S --optimizer adam --gpu G --policy P` (3 iterations per "
                             "probe; predicted time: mean of iterations 2 and 3)",
    "rows": [{"model": m, "seq": s, "optimizer": "adam", "gpu": g, "policy": p}
             for m, s in (("gpt2-small", 1024), ("bert-base", 128)) for g in ("p100-16g", "v100-32g", "a100-80g")
             for p in ("none", "lru", "lru-recompute")],
    "runs": [("mb", lambda r, got: maxbatch(r, "--policy", r["policy"]))],
    "columns": [("model", lambda c: f"{c.row['model']}, seq {c.row['seq']}"), ("GPU", lambda c: c.row["gpu"]),
                ("policy", lambda c: c.row["policy"]), ("max batch", lambda c: c.rep["mb"]["max_batch"]),
                ("peak allocated", lambda c: gib(c.rep["mb"]["peak_allocated_bytes"])),
                ("predicted iteration", lambda c: c.rep["mb"]["iteration_ms"], "{:.1f} ms"),
                ("samples/s", lambda c: 1e3 * c.rep["mb"]["max_batch"] / c.rep["mb"]["iteration_ms"], "{:.1f}")]}


def kind_costs(rows):
    """Per op kind: ops, predicted ms, bounds; and the total."""
    kinds = {}
    for o in rows:
        k = kinds.setdefault(o["kind"], {"ops": 0, "ms": 0.0})
        k["ops"] += 1
        k["ms"] += float(o["total_ms"])
    return kinds


def costs_items(c):
    g, b = kind_costs(c.rep["gpt"]), kind_costs(c.rep["bert"])
    order = sorted(set(g) | set(b), key=lambda k: -(g.get(k, {}).get("ms", 0) + b.get(k, {}).get("ms", 0)))
    total = lambda d: {"ops": sum(x["ops"] for x in d.values()), "ms": sum(x["ms"] for x in d.values())}
    return [{"kind": k, "gpt": g.get(k), "bert": b.get(k), "gpt_total": total(g)["ms"], "bert_total": total(b)["ms"]}
            for k in order] + [{"kind": "total", "gpt": total(g), "bert": total(b), "gpt_total": 0, "bert_total": 0}]


def costs_col(model, what):
    def f(c):
        x = c.item[model]
        if x is None:
            return ""
        if what == "share":
            return f"{x['ms'] / c.item[model + '_total']:.1%}" if c.item[model + "_total"] else ""
        return x["ops"] if what == "ops" else f"{x['ms']:.2f}"
    return f


EXPERIMENTS["transformer-costs"] = {
    "kind": "runs", "about": "`vtensor costs --model M --seq S --batch B --optimizer adam --gpu v100-32g`: the predicted "
                             "time of one training iteration per op kind, FP32",
    "rows": [{"gpu": "v100-32g"}],
    "runs": [("gpt", lambda r, got: ["costs", *model_args({"model": "gpt2-small", "seq": 1024, "batch": 8, "optimizer": "adam"}),
                                     "--gpu", r["gpu"]]),
             ("bert", lambda r, got: ["costs", *model_args({"model": "bert-base", "seq": 128, "batch": 32, "optimizer": "adam"}),
                                      "--gpu", r["gpu"]])],
    "each": costs_items,
    "columns": [("op kind", lambda c: c.item["kind"]),
                ("GPT-2 small, seq 1024, batch 8: ops", costs_col("gpt", "ops")), ("ms", costs_col("gpt", "ms")),
                ("share", costs_col("gpt", "share")),
                ("BERT-base, seq 128, batch 32: ops", costs_col("bert", "ops")), ("ms ", costs_col("bert", "ms")),
                ("share ", costs_col("bert", "share"))]}

EXPERIMENTS["transformer-peaks-cpu"] = {
    "kind": "runs", "serial": True,
    "about": "policy none, cpu backend (real kernels), caching allocator, one iteration; 1 GB = 10^9 bytes",
    "defaults": {"backend": "cpu", "iters": 1},
    "rows": [{"model": m, "batch": 8, "seq": 32, "optimizer": o} for m in ("gpt-tiny", "bert-tiny") for o in ("sgd", "adam")] +
            [{"model": "gpt2-small", "batch": b, "seq": 128, "optimizer": "adam"} for b in (1, 4, 8)] +
            [{"model": "gpt2-small", "batch": 8, "seq": 128, "optimizer": "sgd"},
             {"model": "gpt2-small", "batch": 1, "seq": 1024, "optimizer": "adam"}] +
            [{"model": "bert-base", "batch": b, "seq": 128, "optimizer": "adam"} for b in (1, 8, 16)] +
            [{"model": "bert-base", "batch": 16, "seq": 128, "optimizer": "sgd"},
             {"model": "bert-base", "batch": 32, "seq": 128, "optimizer": "adam"}],
    "runs": [("train", lambda r, got: train(r, "--budget", "64GiB"))],
    "columns": [("model", lambda c: c.row["model"]), ("batch", lambda c: c.row["batch"]), ("seq", lambda c: c.row["seq"]),
                ("optimizer", lambda c: c.row["optimizer"]),
                ("params", lambda c: (lambda n: f"{n:,}" if n < 10**6 else f"{n / 1e6:.2f}M")(c.rep["train"]["graph"]["param_bytes"] // 4)),
                ("persistent", lambda c: (lambda n: f"{n / 1e6:.2f} MB" if n < 10**8 else f"{n / 1e9:.3f} GB")(c.rep["train"]["graph"]["persistent_bytes"])),
                ("peak allocated", lambda c: (lambda n: f"{n / 1e6:.2f} MB" if n < 10**8 else f"{n / 1e9:.3f} GB")(c.rep["train"]["summary"]["peak_allocated_bytes"])),
                ("16 B/param (fp32 Adam model states)", lambda c: "" if c.row["optimizer"] != "adam" else
                 (lambda n: f"{n / 1e6:.2f} MB" if n < 10**8 else f"{n / 1e9:.3f} GB")(16 * (c.rep["train"]["graph"]["param_bytes"] // 4)))]}
