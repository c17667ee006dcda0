// Capuchin (Peng et al., ASPLOS'20), the policy: tensor-level swap and recomputation planned from
// the access pattern measured at runtime.
//   Measured iteration: passive (LRU swap on OOM, swap in on access) while every access is timed.
//   Plan: plan_capuchin (capuchin_planner.h, device-free) from its trace.
//   Guided iterations run the plan; a late prefetch moves its trigger earlier next time; a
//   changed access sequence goes back to measuring (the cycle: MeasuredCycle, measured.h).
// Deviations: the passive fallback stays on; for policy auto only, the feedback stops after the
// guided iterations auto rehearsed (set_feedback_iterations), where the plan does not fit its
// fallback may compact and evict only the shortfall (set_compact_unfit), and the planner's
// extensions are set here (set_pins, set_wrap_persistent, set_min_wrap_bytes,
// set_deadline_swap_outs, set_need_ordered_prefetches, set_fifo_prefetches, set_swap_cost_weight).
// Full notes: docs/design.md.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "vtensor/memory/policy.h"
#include "vtensor/policy/capuchin_planner.h"
#include "vtensor/policy/measured.h"

namespace vtensor {

// A prefetch trigger moved earlier by Capuchin's feedback (`ops` times, one op each): replayed
// when the plan is made (CapuchinPolicy::set_trigger_moves), as if those iterations had run.
struct TriggerMove {
  TensorId id = kNoTensor;
  int back_op = -1;
  int ops = 0;
  bool operator==(const TriggerMove&) const = default;
};

// What the guided fallback evicts for a request of `bytes`: nothing (nullopt) where the request is
// within the budget and the plan fits or compact_unfit is on (the memory manager compacts); with
// compact_unfit over the budget, the shortfall only; otherwise the whole request. Capuchin's own
// fallback and policy auto's ",dtr" one (AutoPolicy::choose_victims) both follow it.
std::optional<size_t> guided_fallback_bytes(size_t bytes, size_t allocated, size_t budget, bool fits, bool compact_unfit);

class CapuchinPolicy final : public Policy {
 public:
  explicit CapuchinPolicy(CapuchinMode mode) : mode_(mode) {}
  std::string name() const override;
  void attach(const MemoryView& view) override { view_ = &view; }
  void begin_iteration(int iteration) override;
  std::vector<Action> after_op(int op_index) override;
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) override;
  void end_iteration(const AccessTrace& trace) override;
  void on_restore(TensorId id, int op_index, Residency from, double waited_ms) override;
  void on_swap_out_wait(TensorId id, double waited_ms) override;
  std::vector<TensorId> on_host_at_start() const override;
  bool iteration_repeats() const override { return cycle_.repeats(); }
  bool measuring() const override { return !cycle_.guided(); }
  nlohmann::json report() const override;
  std::string summary() const override;

  // Plan for this fraction of the budget (policy auto's search: headroom for fragmentation and
  // recomputations' working sets); 1 by default. The passive fallback still uses the whole budget.
  void set_plan_fraction(double f) { plan_fraction_ = f; }
  void set_swap_cost_weight(double w) { swap_cost_weight_ = w; }
  void set_pins(std::vector<PlanPin> pins) { pins_ = std::move(pins); }
  // The feedback's moves a longer run of this plan made, applied when it plans (policy auto's
  // warm start): each moves as the feedback would, where the budget lets it.
  void set_trigger_moves(std::vector<TriggerMove> m) { trigger_moves_in_ = std::move(m); }
  // Also swap persistent tensors across the iteration boundary (PlannerInput::wrap_persistent).
  void set_wrap_persistent(bool on) { wrap_persistent_ = on; }
  // The smallest persistent tensor the greedy swaps over the iteration's end (PlannerInput::min_wrap_bytes).
  void set_min_wrap_bytes(size_t b) { min_wrap_bytes_ = b; }
  // Order the D2H queue by deadline (PlannerInput::deadline_swap_outs).
  void set_deadline_swap_outs(bool on) { deadline_swap_outs_ = on; }
  // Issue one op's prefetches in need order (PlannerInput::need_ordered_prefetches).
  void set_need_ordered_prefetches(bool on) { need_ordered_prefetches_ = on; }
  // Plan the H2D queue in issue order (PlannerInput::fifo_prefetches).
  void set_fifo_prefetches(bool on) { fifo_prefetches_ = on; }
  // Move late prefetches' triggers only after the first n guided iterations (-1: after every one,
  // Capuchin's own). Policy auto: those its rehearsal timed, so later iterations run that plan.
  void set_feedback_iterations(int n) { feedback_iterations_ = n; }
  // Per plan candidate, what its gap cost the last guided iteration (stall on its swap-in or on
  // its swap-out, its recomputation), as on_restore / on_swap_out_wait measured it.
  const std::vector<double>& measured_cost_ms() const { return cost_ms_; }
  // Likewise per tensor, its gap over the iteration's end (persistent tensors): a wrap swap's late
  // prefetch at its first use and the waits for its swap-out, or those of the passive fallback's
  // eviction of a tensor the plan kept. The gap: from last_use(id) to first_use(id) (-1: unused).
  const std::vector<double>& measured_wrap_cost_ms() const { return wrap_cost_ms_; }
  int first_use(TensorId id) const { return static_cast<size_t>(id) < first_use_.size() ? first_use_[static_cast<size_t>(id)] : -1; }
  int last_use(TensorId id) const { return static_cast<size_t>(id) < last_use_.size() ? last_use_[static_cast<size_t>(id)] : -1; }
  bool guided() const { return cycle_.guided(); }
  // Where the plan does not fit, the guided fallback as where it does: no victims for a request
  // within the budget (the memory manager compacts), and over it victims for the shortfall only,
  // not the whole request. Off: the whole request, LRU (the passive fallback). Policy auto
  // chooses it per row (AutoPolicy::set_compact_unfit).
  void set_compact_unfit(bool on) { compact_unfit_ = on; }
  bool compact_unfit() const { return compact_unfit_; }
  const CapuchinPlan& plan() const { return plan_; }
  int measurements() const { return cycle_.measurements(); }
  int trigger_moves() const { return trigger_moves_; }
  // Per plan candidate, the ops its trigger moved earlier by the feedback so far.
  const std::vector<int>& fed_back() const { return fed_back_; }

 private:
  void index_plan();
  bool wrap_gap(TensorId id, int op_index) const;

  CapuchinMode mode_;
  const MemoryView* view_ = nullptr;
  bool compact_unfit_ = false;
  MeasuredCycle cycle_;
  CapuchinPlan plan_;
  std::vector<char> late_;                                   // per candidate, this iteration
  std::vector<int> fed_back_;                                // per candidate, its feedback moves
  std::vector<double> cost_ms_;                              // per candidate, last guided iteration
  std::vector<std::vector<int>> candidates_of_;              // tensor -> its candidates (one per gap)
  std::vector<double> wrap_cost_ms_;                         // per tensor, its gap over the iteration's end
  std::vector<int> first_use_, last_use_;                    // per tensor, in the measured iteration
  int trigger_moves_ = 0;
  int current_op_ = -1;
  double swap_ns_per_byte_ = 0;
  double plan_fraction_ = 1.0;
  double swap_cost_weight_ = 1.0;
  std::vector<PlanPin> pins_;
  std::vector<TriggerMove> trigger_moves_in_;
  bool feed_back(size_t k);  // candidate k's prefetch one op earlier, where the budget lets it
  bool wrap_persistent_ = false;
  size_t min_wrap_bytes_ = 0;
  bool deadline_swap_outs_ = false;
  bool need_ordered_prefetches_ = false;
  bool fifo_prefetches_ = false;
  int feedback_iterations_ = -1;
};

}  // namespace vtensor
