"""FreeLunch's compression tables (docs/experiments/compress.md): the ablation of compress's
switches on sim with the maximum batch searched by the runner, compress on the cpu backend with its
real codecs, and the opt-in lossy codecs' loss drift."""
from ..helpers import (UNLIMITED, densities_args, fastest, fraction_of_peak, gib, loss_equals_none, median, steady,
                       train)


EXPERIMENTS = {}


# FreeLunch's ablation: compress with each switch off, at the reference batch and 50% / 25% of
# none's peak; each cell the time against none's (fastest iteration after the first), the
# maximum batch in that budget (searched by the runner with train runs, to within 2%: `vtensor
# maxbatch` does not take the ablation switches), and the GiB swapped and compressed per
# iteration (medians after the first) with the compression ratio.

ABLATION = [("compress", []), ("compress@no-sliding-workspace", ["--no-sliding-workspace"]),
            ("compress@no-persistent-buffers", ["--no-persistent-buffers"]),
            ("compress@compress-on-compute-stream", ["--compress-on-compute-stream"])]


def ablation_cell(c, name):
    r, mb = c.rep[name], c.rep[name + " max batch"]["max_batch"]
    if r is None:
        return f"OOM / {mb}"
    cb = median(i.get("compressed_bytes", 0) for i in steady(r))
    ca = median(i.get("compressed_to_bytes", 0) for i in steady(r))
    return "{:.2f}× / {}; swap {:.2f}, compr. {:.2f} ({})".format(
        fastest(r) / fastest(c.rep["none"]), mb, median(i["swapped_out_bytes"] for i in steady(r)) / 2**30, cb / 2**30,
        f"{ca / cb:.3f}" if cb else "-")


def compress_ablation(gpu):
    def budget(r, got):
        return fraction_of_peak(got["none"], r["fraction"])
    runs = [("none", lambda r, got: train(r, *UNLIMITED))]
    for name, flags in ABLATION:
        runs.append((name, lambda r, got, f=flags: train(r, "--policy", "compress", "--budget", budget(r, got), *f,
                                                        *densities_args(r))))
        runs.append((name + " max batch", lambda r, got, f=flags: {
            "start": r["batch"], "precision": 0.02,
            "search": lambda b, r=r, B=budget(r, got): train({**r, "batch": b, "iters": 3}, "--policy", "compress",
                                                             "--budget", B, *f, *densities_args(r))}))
    return {
        "kind": "runs",
        "about": f"compress with each ablation switch, sim {gpu}, reference batch, 4 iterations (3 per max-batch probe), "
                 "densities from bench/densities/; each cell: time vs none / max batch in the budget (to within 2%); "
                 "GiB swapped and compressed per iteration (ratio)",
        "defaults": {"backend": "sim", "gpu": gpu, "iters": 4},
        "rows": [{"model": m, "batch": b, "fraction": f} for m, b in (("resnet50", 32), ("vgg16", 64)) for f in (0.5, 0.25)],
        "runs": runs,
        "columns": [("model", lambda c: c.row["model"]), ("budget", lambda c: f"{c.row['fraction']:.2f} = {gib(fraction_of_peak(c.rep['none'], c.row['fraction']))}")] +
                   [(name, lambda c, n=name: ablation_cell(c, n)) for name, _ in ABLATION]}


EXPERIMENTS["compress-ablation-p100"] = compress_ablation("p100-16g")
EXPERIMENTS["compress-ablation-h100"] = compress_ablation("h100-80g")


# FreeLunch on the cpu backend (real codecs): the last of 5 iterations.

def last_it(c, key):
    return c.rep["run"]["iterations"][-1][key]


EXPERIMENTS["compress-cpu"] = {
    "kind": "runs", "serial": True,
    "about": "`vtensor train --model M --policy P --budget B --iters 5` on the cpu backend, the last iteration",
    "defaults": {"backend": "cpu", "iters": 5},
    "rows": [{"model": m, "budget": b, "policy": p, "flags_": fl} for m, bs in (("resnet-tiny", ("1280KiB", "2560KiB")),
                                                                             ("vgg-tiny", ("830KiB",)))
             for b in bs for p, fl in (("lru", []), ("compress", []), ("compress+swap", []),
                                       ("compress", ["--no-persistent-buffers"]))],
    "runs": [("none", lambda r, got: train(r)),
             ("run", lambda r, got: train(r, "--policy", r["policy"], "--budget", r["budget"], *r["flags_"]))],
    "columns": [("model", lambda c: c.row["model"]), ("budget", lambda c: c.row["budget"]),
                ("policy", lambda c: " ".join([c.row["policy"], *c.row["flags_"]])),
                ("final loss", lambda c: c.rep["run"]["summary"]["final_loss"], "{:.4f}"),
                ("losses = none", lambda c: loss_equals_none(c.rep["run"], c.rep["none"])),
                ("peak MiB", lambda c: last_it(c, "peak_allocated_bytes") / 2**20, "{:.2f}"),
                ("swapped out MiB", lambda c: last_it(c, "swapped_out_bytes") / 2**20, "{:.2f}"),
                ("compressed MiB", lambda c: last_it(c, "compressed_bytes") / 2**20, "{:.2f}"),
                ("ratio", lambda c: f"{last_it(c, 'compression_ratio'):.3f}" if last_it(c, "compression_ratio") else "-")]}


# The opt-in lossy codecs: loss drift against none (cpu, real data), compress at a fraction of
# none's peak without --lossy and with each lossy mode.

LOSSY_MODES = [("(lossless)", []), ("--no-persistent-buffers", ["--no-persistent-buffers"]),
               ("bf16", ["--lossy", "bf16", "--no-persistent-buffers"]), ("fp16", ["--lossy", "fp16", "--no-persistent-buffers"]),
               ("int8", ["--lossy", "int8", "--no-persistent-buffers"])]

EXPERIMENTS["lossy-drift"] = {
    "kind": "runs", "serial": True,
    "about": "cpu backend, 20 iterations: none, then compress at the fraction of its peak (rounded down to 512 bytes) "
             "without --lossy and with each lossy mode; the largest |loss - none's loss| over the iterations, the last "
             "iteration's compressed MiB and ratio, the codecs the run used",
    "defaults": {"backend": "cpu", "iters": 20},
    "rows": [{"model": m, "fraction": f, "mode": label, "mode_args": a}
             for m, f in (("resnet-tiny", 0.35), ("vgg-tiny", 0.62)) for label, a in LOSSY_MODES],
    "runs": [("none", lambda r, got: train(r)),
             ("run", lambda r, got: train(r, "--policy", "compress", "--budget",
                                          fraction_of_peak(got["none"], r["fraction"], 512), *r["mode_args"]))],
    "columns": [("model", lambda c: c.row["model"]), ("budget", lambda c: c.row["fraction"]), ("lossy", lambda c: c.row["mode"]),
                ("max abs loss drift", lambda c: max(abs(x["loss"] - y["loss"]) for x, y in
                                                     zip(c.rep["none"]["iterations"], c.rep["run"]["iterations"])), "{:.2e}"),
                ("final loss (none)", lambda c: c.rep["none"]["summary"]["final_loss"], "{:.5f}"),
                ("final loss", lambda c: c.rep["run"]["summary"]["final_loss"], "{:.5f}"),
                ("compressed MiB", lambda c: last_it(c, "compressed_bytes") / 2**20, "{:.2f}"),
                ("ratio", lambda c: f"{last_it(c, 'compression_ratio'):.3f}" if last_it(c, "compression_ratio") else "-"),
                ("codecs", lambda c: ", ".join(sorted({t["codec"] for t in c.rep["run"].get("compression", [])})))]}
