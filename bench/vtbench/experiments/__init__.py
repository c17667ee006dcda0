"""The experiments, one module per system: NAME.py declares the tables of
docs/experiments/NAME.md (planned_pool.py for planned-pool.md, auto.py and auto_options.py for
auto.md), results.py the cross-policy tables of docs/results.md, allocator.py the allocators' C++
benchmarks, python.py the Python package's table and smoke.py the runner's own tests. Each module
fills its own EXPERIMENTS; here they are joined into one table in ORDER, the order `bench/run.py
list` prints and `all` runs (a derived table after its sources). A new experiment goes into its
system's module and its name into ORDER; importing this package fails on a name declared twice or
missing from either side."""
from . import (allocator, auto, auto_options, capuchin, checkpoint, compress, planned_pool, python, results, sim, smoke,
               transformers, um, vdnn)

MODULES = [results, capuchin, checkpoint, vdnn, sim, planned_pool, transformers, um, compress, allocator, smoke, python,
           auto, auto_options]

ORDER = [
    "headline-p100", "headline-h100", "dtr-logs", "maxbatch-gpu", "maxbatch-adam", "maxbatch-vdnn", "smoke",
    "tiny-cpu", "sim-peaks", "sim-maxbatch", "dtr-transformer-sweep", "vdnn-cpu", "vdnn-sim",
    "vdnn-sim-inplace", "vdnn-layers-vgg16", "vdnn-layers-resnet50", "pool-sim", "pool-tiny-cpu",
    "pool-zoo-cpu", "zos-sim", "zos-limit-sim", "zos-gpus", "zos-limit-cpu", "zos-planned-pool",
    "transformer-peaks", "transformer-maxbatch", "transformer-costs", "transformer-peaks-cpu", "um-sim-p100",
    "um-sim-h100", "um-maxbatch-p100", "um-maxbatch-h100", "compress-ablation-p100", "compress-ablation-h100",
    "dtr-logs-p100", "dtr-logs-h100", "capuchin-cpu-resnet-tiny", "capuchin-cpu-vgg-tiny", "um-cpu",
    "compress-cpu", "lossy-drift", "allocator-bench", "planner-bench", "vdnn-plan", "smoke-runs",
    "um-lookahead", "host-budget", "checkpoint-plan", "torch-policies", "torch-auto", "torch-auto-planning", "torch-replay", "host-cost", "host-model", "host-plans", "host-next", "auto-vs-best", "auto-vs-best-logs",
    "auto-recompute", "auto-search-models", "auto-search-logs", "auto-repeat", "auto-repeat-logs",
    "planning-clock", "auto-wall-cap", "auto-codec-cpu", "auto-lp-model", "auto-lp-model-logs",
    "step-in-backward", "auto-lp", "auto-ilp", "auto-ilp-logs", "auto-planned", "sim-calibrated",
    "auto-steady"
]


def _join():
    """EXPERIMENTS (name -> spec, in ORDER) and MODULE (name -> the module declaring it)."""
    declared = {}
    for m in MODULES:
        for name in m.EXPERIMENTS:
            if name in declared:
                raise ImportError(f"experiment {name} is declared in both {declared[name].__name__} and {m.__name__}")
            declared[name] = m
    twice = sorted({n for n in ORDER if ORDER.count(n) > 1})
    unordered = [n for n in declared if n not in ORDER]
    undeclared = [n for n in ORDER if n not in declared]
    if twice or unordered or undeclared:
        raise ImportError(f"bench/vtbench/experiments: ORDER names twice: {', '.join(twice) or 'none'}; lacks: "
                          f"{', '.join(unordered) or 'none'}; names undeclared: {', '.join(undeclared) or 'none'}")
    return {n: declared[n].EXPERIMENTS[n] for n in ORDER}, {n: declared[n].__name__ for n in ORDER}


EXPERIMENTS, MODULE = _join()
