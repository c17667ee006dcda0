// Zero-overhead swap (Zhang et al., arXiv 1903.06631, section 3.2): swap only what the copies
// can hide. Iteration 1 runs passive (LRU swap on OOM) and is the measured iteration.
//   Candidates: each absence interval between two consecutive accesses of a tensor; the
//   swap-out follows the first access and is released at the op its predicted copy ends in, the
//   prefetch is issued late enough to arrive before the next access.
//   Scores: absence time, absence x size, load above the limit; their ranks summed.
//   Selection: while the predicted peak exceeds the target, take the best candidate covering the
//   peak op whose copies, queued with those chosen (one stream per direction), still hide.
//   `zero-overhead-swap`: hidden copies only (target 0: the peak it reaches is its smallest budget).
//   `zero-overhead-swap-limit`: target 95% of the budget; copies that cannot hide are taken too,
//   the rest is evicted passively, and a guided iteration that still evicts plans again lower.
// Deviations: per tensor rather than per pool block; bandwidth and op times measured (kernel
// times back to back); release at a predicted op, not on copy completion; a passive fallback so
// a wrong estimate never fails a run; the plan ignores the host budget. Full notes: docs/design.md.
#pragma once
#include <map>

#include "vtensor/memory/policy.h"

namespace vtensor {

// stick-to-limit plans for this share of the budget: the rest absorbs the allocator's fragmentation.
constexpr double kZeroOverheadHeadroom = 0.95;
// stick-to-limit: when a guided iteration still evicts passively, plan again (from the measured
// iteration) for the budget less the space the allocator could not use, at most this often.
constexpr int kZeroOverheadReplans = 2;

struct ZeroOverheadSwapConfig {
  bool stick_to_limit = false;
  size_t budget = 0;           // stick-to-limit's target
  double ms_per_byte = 0;      // copy time per byte, each way
  double latency_ms = 0;       // fixed cost of one copy
};

struct SwapChoice {
  TensorId tensor;
  size_t bytes;
  int swap_out_after, release_after, prefetch_after, next_access;  // ops; absent during release_after+1..prefetch_after
  double absence_ms;
  bool hidden;  // both copies fit in the measured times
};

struct ZeroOverheadSwapPlan {
  std::vector<SwapChoice> chosen;
  Plan plan;
  size_t peak_before = 0, peak_after = 0;  // predicted from the trace
  size_t candidates = 0, hidden_candidates = 0;
  int max_hold = 0;  // the pass kept: 0 release points anywhere, 2 at most two ops after the issue
};

// The planning step, a pure function of the measured iteration (testable without a device).
ZeroOverheadSwapPlan plan_zero_overhead_swap(const Graph& g, const AccessTrace& trace, const ZeroOverheadSwapConfig& cfg);
// One greedy pass of it; max_hold > 0: every block is released at most max_hold ops after its swap-out.
ZeroOverheadSwapPlan plan_zero_overhead_swap_pass(const Graph& g, const AccessTrace& trace, const ZeroOverheadSwapConfig& cfg,
                                                  int max_hold);

class ZeroOverheadSwapPolicy final : public Policy {
 public:
  explicit ZeroOverheadSwapPolicy(bool stick_to_limit) : stick_to_limit_(stick_to_limit) {}
  std::string name() const override { return stick_to_limit_ ? "zero-overhead-swap-limit" : "zero-overhead-swap"; }
  void attach(const MemoryView& view) override { view_ = &view; }
  void begin_iteration(int iteration) override { iteration_ = iteration; }
  std::vector<Action> after_op(int op_index) override;
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) override;
  void end_iteration(const AccessTrace& trace) override;
  bool iteration_repeats() const override { return repeats_; }
  bool measuring() const override { return !planned_; }
  nlohmann::json report() const override;
  std::string summary() const override;

 private:
  bool stick_to_limit_;
  const MemoryView* view_ = nullptr;
  int iteration_ = 0;
  bool planned_ = false;
  bool repeats_ = false;  // the last iteration ran the plan the next one runs
  double ms_per_byte_ = 0, latency_ms_ = 0;
  ZeroOverheadSwapPlan plan_;
  void plan(size_t target_budget);

  std::map<int, std::vector<Action>> by_op_;
  AccessTrace measured_;
  size_t target_budget_ = 0;
  int replans_ = 0;
  uint64_t passive_evictions_ = 0;  // after planning: what the plan did not cover
  uint64_t iteration_evictions_ = 0;
  size_t unusable_ = 0;  // this iteration: the largest budget share the allocator failed to use
};

}  // namespace vtensor
