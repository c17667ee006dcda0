// Experiments on top of the Trainer, meant for the sim backend: replaying a recorded trace
// under a policy and budget, the largest batch that trains (doubling, then bisection), and a
// policy x budget (x batch) grid. OOM at a probe or a grid point is a result, not an error.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "vtensor/train/trainer.h"

namespace vtensor {

// ---- trace replay
struct ReplayConfig {
  std::string trace;  // a path (vtensor trace or DTR log) or dtr:NAME
  std::string policy = "none";
  std::string allocator = "caching";
  std::string gpu;
  size_t budget = 0;  // 0: the GPU's memory
  size_t host_budget = 0;  // 0: unlimited
  bool budget_above_gpu = false;  // TrainConfig::budget_above_gpu
  int iters = 3;
  bool timeline = false;  // the last iteration's per-op memory timeline
  PolicyOptions policy_options;  // TrainConfig::policy_options
};
TrainResult replay_trace(const ReplayConfig& c, const std::function<void(const IterationStats&)>& on_iteration = {});

// ---- one run summarised
struct RunSummary {
  bool ok = false;           // false: out of memory
  std::string error;         // the OutOfMemoryError's message
  size_t peak_allocated = 0, peak_reserved = 0;
  // Device bytes at the peak: peak_allocated, or under unified memory the device pages in use
  // (allocated then counts the managed range, which may exceed the budget).
  size_t peak_device = 0;
  size_t peak_host = 0;      // host pool bytes held, peak over the iterations
  double iteration_ms = 0;   // mean over the iterations after the first (the first when only one)
  // Per iteration, the last one; under unified memory page migrations count as swapped bytes.
  uint64_t swapped_out_bytes = 0, swapped_in_bytes = 0, recomputed_ops = 0;
  double stall_ms = 0, recompute_ms = 0;                                      // last iteration
  // Backends with data (cpu, cuda): every iteration's loss and a digest of the final weights,
  // so two runs can be compared bit for bit. Empty / 0 on sim.
  std::vector<float> losses;
  uint64_t weights_digest = 0;
};
RunSummary run_summary(const TrainConfig& cfg);
// Both runs hold values and their losses and final weights are equal bit for bit (-0.0 is not 0.0).
bool same_values(const RunSummary& a, const RunSummary& b);
RunSummary summarise(const TrainResult& r);

// ---- maximum batch
struct MaxBatchResult {
  int batch = 0;  // 0: not even batch 1 fits
  RunSummary at_batch;
  std::vector<std::pair<int, RunSummary>> probes;  // in order, the checks above `batch` last
  std::vector<int> checked_above;  // batches above `batch` probed after the search
  std::vector<int> non_monotonic;  // those of them that trained: the search's assumption failed
};
// Doubles the batch from 1 while it trains, then bisects between the last batch that trained
// and the first that did not. The search assumes that a batch that fails makes every larger one
// fail; a passive policy need not be monotone, so it then checks batch x1.25 and x1.5 (rounded
// up; not above max_limit, not probed already; batch + 1 always was) and lists those that train
// in non_monotonic, leaving `batch` as the search found it.
MaxBatchResult search_max_batch(int max_limit, const std::function<RunSummary(int)>& run,
                                const std::function<void(int, const RunSummary&)>& on_probe = {});
// search_max_batch over training runs of `base` at each batch.
MaxBatchResult max_batch(const TrainConfig& base, int max_limit = 1 << 20,
                         const std::function<void(int, const RunSummary&)>& on_probe = {});

// ---- sweep
struct SweepBudget {
  std::string label;     // as given: "50%" or "4GiB"
  double fraction = 0;   // of the unmanaged peak, when > 0
  size_t bytes = 0;      // otherwise
};
// "100%,50%,4GiB" -> budgets; throws std::invalid_argument naming `what`.
std::vector<SweepBudget> parse_budgets(const std::string& text, const std::string& what);
std::vector<int> parse_batches(const std::string& text, const std::string& what);
std::vector<std::string> split_list(const std::string& text);

struct SweepRow {
  std::string model, policy, budget_label;
  int batch = 0;
  size_t budget = 0, unmanaged_peak = 0;
  double unmanaged_ms = 0;  // the unmanaged run's iteration time (0 when it failed)
  RunSummary run;
  double overhead = 0;  // iteration time / the unmanaged run's (0 when unknown)
  // Losses and final weights equal to the unmanaged run's, bit for bit: "yes" / "no", or ""
  // where unknown (sim holds no values; a run out of memory).
  std::string identical;
};
std::vector<SweepRow> sweep(const TrainConfig& base, const std::vector<std::string>& policies,
                            const std::vector<SweepBudget>& budgets, const std::vector<int>& batches,
                            const std::function<void(const SweepRow&)>& on_row = {});
// CSV or JSON by the extension (.csv, .json), written atomically.
void write_sweep(const std::vector<SweepRow>& rows, const std::string& path);

}  // namespace vtensor
