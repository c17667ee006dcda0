// Zero-overhead swap (Zhang et al., arXiv 1903.06631, section 3.2): swap only what the copies
// can hide. Iteration 1 runs passive (LRU swap on OOM, like `lru`) and its access trace is the
// measured iteration; at its end the policy plans the swaps every later iteration repeats.
//   Candidates: for each non-persistent tensor, each absence interval between two consecutive
//     accesses. The swap-out is issued right after the first access (op s) and names its release
//     op r: the first op whose predicted end is at or after the copy's predicted end (the memory
//     manager frees the block at the end of op r, a point fixed by the op sequence), so a long
//     copy may span as many ops as it needs; the prefetch is issued after the latest op p whose
//     end leaves a swap-in time before the next access. The block is absent during ops r+1..p.
//   Scores (each ranked, ranks summed, smallest first): absence time, absence x size, and the
//     load above the limit (bytes above it summed over the ops of the absence).
//   Selection: while the predicted peak (persistent + live tensors + workspace per op) is above
//     the target, take the best-ranked candidate whose absence covers the peak op and whose copies,
//     queued with those already chosen on one copy stream per direction (issue order), still
//     leave every hidden copy on time: hiding each copy alone is not enough once they queue. A
//     queued swap-out ends later than alone, and its release op is taken from its queued end; a
//     prefetch that would delay a chosen one is issued earlier while the absence still covers the peak.
//   Two passes, kept the better (lower predicted peak; stick-to-limit: fits the target with fewer
//     stalling copies): release ops anywhere, and at most two ops after the issue. The greedy is
//     myopic: a long copy ranked first (VGG-16's first conv output) brings a large block back into
//     a later window that becomes the new peak, where only short copies would have done better.
//   no-overhead (`zero-overhead-swap`): only hidden copies; the target is 0, so it takes blocks
//     while any covers the peak: the smallest budget it reaches is the peak it achieves.
//   stick-to-limit (`zero-overhead-swap-limit`): the target is 95% of the budget; when hidden copies
//     are not enough, copies that cannot be hidden are taken too (they stall; released where the
//     copy would end alone, else two ops on), and anything still above the budget is evicted
//     passively (LRU swap), as in iteration 1. A guided iteration that
//     still evicts (the allocator fragmented beyond the headroom) makes it plan again from the
//     measured iteration for a lower target, at most kZeroOverheadReplans times.
// Op times: the kernels' own times from the trace, back to back, so that the stalls of a passive
// measured iteration do not widen the windows.
// The plan depends on measured times: on the cpu backend which blocks hide can change from run
// to run (memory figures of one run are still exact); on the sim backend's virtual clock it is
// deterministic.
// Bandwidth: calibration copies by the memory manager (a fixed latency plus time per byte on the
// backend's clock), the same both ways. Deviations: the paper swaps at the granularity of its memory pool's blocks
// and assumes known bandwidth; we plan per tensor, measure op times from the trace, and keep a
// passive fallback so a wrong estimate can never fail a run. The paper frees a block when its
// copy is done; we free it at the end of the predicted op (deterministic memory figures).
// Host budget (not in the paper): the plan ignores it; a planned swap-out the host cannot take
// is skipped by the memory manager, and the passive fallback swaps victims that fit on host.
#pragma once
#include <map>

#include "vtensor/policy/policy.h"

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
  nlohmann::json report() const override;
  std::string summary() const override;

 private:
  bool stick_to_limit_;
  const MemoryView* view_ = nullptr;
  int iteration_ = 0;
  bool planned_ = false;
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
