"""The runner's own tests (tests/e2e/test_runner.py; test_only, so `all` skips them): smoke, of
kind grid, and smoke-runs, of kind runs, on mlp-tiny on sim."""
from ..helpers import fraction_of_peak, steady_mean, train


EXPERIMENTS = {
    "smoke": {"kind": "grid", "backend": "sim", "gpu": "p100-16g", "models": [{"model": "mlp-tiny", "batch": 16}],
              "policies": ["lru", "capuchin"], "budgets": ["50%"], "iters": 3, "maxbatch": True,
              "about": "the runner's own test: mlp-tiny on sim, two policies, one budget", "test_only": True},
}


EXPERIMENTS["smoke-runs"] = {
    "kind": "runs", "test_only": True,
    "about": "the runner's own test of kind runs: mlp-tiny on sim, none unbounded, then two policies at half its peak "
             "and the largest batch each trains there",
    "defaults": {"model": "mlp-tiny", "batch": 16, "backend": "sim", "gpu": "p100-16g", "iters": 3},
    "rows": [{"policy": "lru"}, {"policy": "capuchin"}],
    "runs": [("none", lambda r, got: train(r)),
             ("run", lambda r, got: train(r, "--policy", r["policy"], "--budget", fraction_of_peak(got["none"], 0.5))),
             ("max batch", lambda r, got: {"start": r["batch"], "limit": 256, "search": lambda b, r=r, B=fraction_of_peak(
                 got["none"], 0.5): train({**r, "batch": b}, "--policy", r["policy"], "--budget", B)})],
    "columns": [("policy", lambda c: c.row["policy"]),
                ("budget bytes", lambda c: fraction_of_peak(c.rep["none"], 0.5)),
                ("none peak bytes", lambda c: c.rep["none"]["summary"]["peak_allocated_bytes"]),
                ("peak bytes", lambda c: c.rep["run"]["summary"]["peak_allocated_bytes"]),
                ("time vs none", lambda c: steady_mean(c.rep["run"], "time_ms") / steady_mean(c.rep["none"], "time_ms"), "{:.2f}×"),
                ("max batch", lambda c: c.rep["max batch"]["max_batch"])]}
