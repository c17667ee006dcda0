// auto (ours): one policy that chooses, per run, among keep / swap / recompute plans by their
// effect on the whole iteration rather than by an isolated per-tensor figure.
//   Measured iteration: passive (DTR's eviction on OOM), every access and kernel timed.
//   Plan: each candidate planner (Capuchin hybrid / swap / recompute, Chen's checkpointing, DTR,
//   passive recomputation) is rehearsed on the sim backend's model of the measured iteration:
//   the same graph, memory manager, allocator (arena, fragmentation, compaction), copy queues
//   and compute stream, with the measured kernel times and link bandwidth (on sim, the run's own
//   GPU model, so the rehearsal is the run). A candidate that runs out of memory is discarded;
//   the fastest rehearsed iteration wins. Guided iterations are run by that planner's policy,
//   fed the measured trace (its own measured iteration is the one just run).
// Deviations from the design (docs/design.md, "auto"): the choice is per run among whole
// plans, not per tensor and access gap in one search; no compression candidate (it needs
// densities on sim); no exact (ILP/DP) search; no pre-triggered recomputation. The rehearsal
// needs a Rehearser (vtensor/train/rehearsal.h, set by the Trainer); without one, auto runs
// Capuchin's hybrid.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vtensor/memory/policy.h"

namespace vtensor {

// What a rehearsal of one candidate needs from the run.
struct RehearsalSetup {
  const Graph* graph = nullptr;
  size_t budget = 0;
  std::string gpu;                 // the GPU the sim models (the run's own on sim)
  std::vector<double> op_ms;       // per op, the measured kernel time (empty: the cost model's)
  double link_ms_per_byte = 0;     // measured host link (0: the GPU's)
  int iterations = 4;              // the measured one and guided ones (as the benchmarks run)
};

struct RehearsalResult {
  std::string policy;
  bool trained = false;
  std::string error;               // why not (out of memory, ...)
  double time_ms = 0;              // mean over the guided iterations
  size_t peak_allocated = 0;       // over the guided iterations
  double stall_ms = 0, recompute_ms = 0;  // means over the guided iterations
  uint64_t compactions = 0, evictions = 0, swapped_out_bytes = 0, recomputed_ops = 0;  // per guided iteration (mean)
  double wall_ms = 0;              // how long the rehearsal took
};

using Rehearser = std::function<RehearsalResult(const std::string& policy, const RehearsalSetup& setup)>;

// The candidates auto rehearses, in order of preference on a tie: the planners as they are, then
// the search's variants (NAME@F: planned for F of the budget; capuchin@F,wW: swap stall weighed W).
const std::vector<std::string>& auto_candidates();

class AutoPolicy final : public Policy {
 public:
  // forced: run that candidate after the measured iteration without rehearsing (what a
  // rehearsal itself runs); empty: choose by rehearsal.
  explicit AutoPolicy(std::string forced = {});
  ~AutoPolicy() override;
  std::string name() const override { return "auto"; }
  void attach(const MemoryView& view) override;
  void begin_iteration(int iteration) override;
  std::vector<ConvAlgo> conv_algorithms() const override;
  std::vector<Action> after_op(int op_index) override;
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) override;
  void end_iteration(const AccessTrace& trace) override;
  void on_restore(TensorId id, int op_index, Residency from, double waited_ms) override;
  std::optional<size_t> smallest_working_budget() const override;
  nlohmann::json report() const override;
  std::string summary() const override;

  void set_rehearser(Rehearser r) { rehearser_ = std::move(r); }
  void set_candidates(std::vector<std::string> c) { candidates_ = std::move(c); }
  // Once planning has taken this long, the remaining candidates are not rehearsed.
  void set_time_limit_ms(double ms) { time_limit_ms_ = ms; }
  const std::string& chosen() const { return chosen_; }
  const std::vector<RehearsalResult>& rehearsals() const { return rehearsals_; }
  double planning_ms() const { return planning_ms_; }

 private:
  Policy& current() { return active_ ? *active_ : *measuring_; }
  const Policy& current() const { return active_ ? *active_ : *measuring_; }
  void choose(const AccessTrace& trace);

  std::string forced_;
  std::vector<std::string> candidates_;
  Rehearser rehearser_;
  const MemoryView* view_ = nullptr;
  std::unique_ptr<Policy> measuring_;  // Capuchin's hybrid, passive until it plans
  std::unique_ptr<Policy> active_;     // the chosen planner's policy, once chosen
  std::unique_ptr<Policy> dtr_;       // evicts while measuring (passive)
  std::string chosen_;
  std::vector<RehearsalResult> rehearsals_;
  double planning_ms_ = 0;
  double time_limit_ms_ = kDefaultTimeLimitMs;

 public:
  static constexpr double kDefaultTimeLimitMs = 8000;
};

}  // namespace vtensor
