"""The allocators' C++ benchmarks (docs/results.md; built with -DVTENSOR_BUILD_BENCH=ON): the
caching allocator's throughput and the planned pool's planner time, google benchmarks of
vtensor_bench_allocator, one row per benchmark argument."""


EXPERIMENTS = {}


# The C++ benchmarks that measure what the CLI cannot: google benchmarks of
# build/bench/vtensor_bench_allocator.
def gbench_experiment(filt, about, first, label, fmt):
    """A google benchmark of vtensor_bench_allocator (--benchmark_filter=filt): a row per benchmark argument."""
    return {
        "kind": "runs", "needs": ["vtensor_bench_allocator"],
        "about": f"build/bench/vtensor_bench_allocator --benchmark_filter={filt} --benchmark_format=csv: {about}",
        "rows": [{}],
        "runs": [("bench", lambda r, got: ["bench:vtensor_bench_allocator", f"--benchmark_filter={filt}",
                                           "--benchmark_format=csv"])],
        "each": lambda c: c.rep["bench"],
        "columns": [(first, lambda c: c.item["name"].rsplit("/", 1)[1]),
                    (f"{label}, wall", lambda c: float(c.item["real_time"]), fmt),
                    (f"{label}, cpu", lambda c: float(c.item["cpu_time"]), fmt)]}


EXPERIMENTS["allocator-bench"] = gbench_experiment(
    "BM_Caching", "the caching allocator under a training-like pattern of allocations and frees (random sizes, a fixed "
    "number of live blocks)", "live blocks", "alloc-or-free", "{:.0f} ns")
EXPERIMENTS["planner-bench"] = gbench_experiment(
    "BM_Plan", "greedy-size (the planned pool's default planner) on a training-like iteration of N blocks (a quarter "
    "persistent and fixed, half activations alive until their backward, a quarter temporaries)", "blocks", "plan",
    "{:.2f} ms")
