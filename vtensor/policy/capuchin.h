// Capuchin (Peng et al., ASPLOS'20): tensor-level swap and recomputation planned from the
// access pattern measured at runtime.
//   Measured iteration: passive (LRU swap on OOM, swap in on access) while every access is timed.
//   Plan (plan_capuchin, device-free): candidates are the access gaps that span ops over the
//   budget. Swaps ranked by free time FT, each with an in-trigger walked back from the
//   back-access until the copy hides and a release op where its queued copy is predicted to end
//   (Action::free_after); recomputations ranked by memory saved per second of their chain
//   (MSPS), re-ranked after each choice; the hybrid takes hidden swaps first, then per tensor the
//   cheaper of swap stall and recompute. It stops once the predicted peak (tensors + workspaces) fits.
//   Guided iterations run the plan; a late prefetch moves its trigger earlier next time; a
//   changed access sequence goes back to measuring.
// Deviations: release at a predicted op, not on copy completion (deterministic memory figures);
// op times laid end to end from the measured kernel times; each access gap is a candidate,
// parameters included; lazy re-ranking; recompute on access (ahead of it only when pinned: PlanPin); a
// swap whose tensor a chosen recomputation reads is prefetched for that recomputation, and a chain
// pays for a source still on the host or still copying back (the paper leaves this open); the passive
// fallback stays on; the plan ignores the host budget; for policy auto only, persistent tensors
// may also be swapped across the iteration boundary (wrap_persistent, or a pin) and the feedback stops
// after the guided iterations auto rehearsed (set_feedback_iterations) and its D2H queue may be
// in deadline order (deadline_swap_outs), and where the plan does not fit its fallback may compact
// and evict only the shortfall (set_compact_unfit), and its greedy may leave persistent tensors under
// a floor on the device (set_min_wrap_bytes), and its H2D queue may be planned in issue order
// with each swap charged the stall it adds to those queued after it (fifo_prefetches).
// Full notes: docs/design.md.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "vtensor/memory/policy.h"

namespace vtensor {

enum class CapuchinMode { kSwap, kRecompute, kHybrid };
// kCompress: only as a PlanPin (policy auto's search); Capuchin's own planner never compresses.
enum class CapuchinDecision { kKeep, kSwap, kRecompute, kCompress };
const char* to_string(CapuchinDecision d);

// A decision fixed for one access gap before the greedy runs (policy auto's per-gap search): the
// gap of `id` that ends at `back_op` is kept, swapped (its prefetch `trigger_shift` ops earlier
// than the planner's in-trigger), recomputed (`ahead_op` >= 0: recomputed after that op, ahead
// of its access, where the compute stream would otherwise wait on a copy) or compressed on the
// device with `codec` into a persistent buffer of `capacity` bytes (each codec pass `codec_ns`,
// on the compression stream; compress.h's gap_codec). The greedy plans the rest around it; a pin
// that does not lower the bytes over the budget is not taken.
struct PlanPin {
  TensorId id = kNoTensor;
  int back_op = -1;
  CapuchinDecision decision = CapuchinDecision::kKeep;
  int trigger_shift = 0;
  int ahead_op = -1;
  int trigger_op = -1;  // kSwap: the latest op its prefetch is issued after (-1: the planner's); trigger_shift counts from the earlier of the two
  Codec codec = Codec::kNone;  // kCompress
  size_t capacity = 0;
  double codec_ns = 0;
  bool operator==(const PlanPin&) const = default;
};
std::string to_string(const PlanPin& p);

// A prefetch trigger moved earlier by Capuchin's feedback (`ops` times, one op each): replayed
// when the plan is made (CapuchinPolicy::set_trigger_moves), as if those iterations had run.
struct TriggerMove {
  TensorId id = kNoTensor;
  int back_op = -1;
  int ops = 0;
  bool operator==(const TriggerMove&) const = default;
};

// What the planner needs per tensor (from the graph).
struct PlannerTensor {
  size_t bytes = 0;
  int producer = -1;               // op index
  std::vector<TensorId> inputs;    // the producer's inputs: the lineage
  bool persistent = false;
  bool recomputable = false;       // the producer may be re-run
  int release_after = -1;          // freed after this op when later than its last access (replayed logs)
  bool excluded = false;           // not a candidate (another mechanism handles it: compress+swap)
};

struct PlannerInput {
  std::vector<PlannerTensor> tensors;  // indexed by TensorId
  std::vector<TensorAccess> accesses;  // recompute accesses are ignored
  int num_ops = 0;
  // Per op, its measured kernel time. When given (num_ops entries), ops are laid end to end by
  // it, so the stalls and passive swaps of the measured iteration do not count as free time;
  // otherwise op start times are the first access times.
  std::vector<double> op_ns;
  double swap_ns_per_byte = 0;
  size_t budget = 0;
  // Per op, the scratch its kernel was given, as allocated (aligned). Empty: no workspaces.
  std::vector<size_t> workspace_bytes;
  // Per op, bytes another mechanism adds to (> 0) or takes from (< 0) the curve (compress+swap:
  // what the compression plan saves and its buffers cost). Empty: none.
  std::vector<long long> memory_delta;
  // The hybrid's exchange rate between a swap's predicted stall and a recomputation's time when
  // it ranks the two (> 1: recompute sooner). 1: Capuchin's own; policy auto searches over it.
  double swap_cost_weight = 1.0;
  std::vector<PlanPin> pins;  // decided before the greedy (policy auto's search)
  // Persistent tensors may also be swapped across the iteration boundary (policy auto's plans;
  // Capuchin plans within one iteration): see CapuchinPlan::wrap_swaps.
  bool wrap_persistent = false;
  // With wrap_persistent, the greedy leaves a persistent tensor of fewer bytes than this on the
  // device (a pin may still swap it): it frees next to nothing, and its copies queue behind the
  // large ones on both lanes. 0: every size (policy auto searches over it).
  size_t min_wrap_bytes = 0;
  // The D2H queue in deadline order (policy auto's plans; Capuchin issues each swap-out at its
  // eviction): a swap-out may go ahead of queued ones that have not started by its eviction and
  // whose prefetches come after its back-access; those are issued after it
  // (CapuchinCandidate::swap_out_op).
  bool deadline_swap_outs = false;
  // The prefetches issued after one op in the order their tensors are needed, not in the order the
  // greedy chose them. The stream copies in issue order, while the lane model (CopyLane) put each
  // in the first gap that fits it; policy auto rehearses the searched plan both ways (",need").
  bool need_ordered_prefetches = false;
  // The H2D queue planned as the stream runs it (FifoLane: a prefetch issued before queued ones
  // delays them, and a swap is charged that delay) instead of CopyLane's gaps; policy auto's ",fifo".
  bool fifo_prefetches = false;
};

// A persistent tensor swapped across the iteration boundary: out after its last use, its block
// freed after `release_op` (>= num_ops: that op of the next iteration less num_ops), back by a
// prefetch after `trigger_op`, before its first use. Its gap, for a PlanPin, is (id, back_op):
// no gap within the iteration ends at a tensor's first use.
struct WrapSwap {
  TensorId id = kNoTensor;
  size_t bytes = 0;
  int evict_op = -1, release_op = -1, trigger_op = -1, back_op = -1;
};

struct CapuchinCandidate {
  TensorId id = kNoTensor;
  size_t bytes = 0;
  int evict_op = -1, back_op = -1;  // the gap: evicted after evict_op, needed again at back_op
  double swap_ns = 0;               // one copy, one direction
  double free_time_ns = 0;          // FT
  int trigger_op = -1;              // prefetch after this op (swap)
  int release_op = -1;              // swap: its block is freed after this op (the one its queued copy ends in)
  int swap_out_op = -1;             // swap: its swap-out is issued after this op (evict_op, or later: deadline_swap_outs)
  double swap_stall_ns = 0;         // predicted wait at the back-access (swap)
  double prefetch_start_ns = 0;     // predicted start of the swap-in copy
  double recompute_ns = 0;          // predicted recompute time of the chain (< 0: not recomputable)
  double msps = 0;                  // bytes per second of recompute at the time it was ranked
  CapuchinDecision decision = CapuchinDecision::kKeep;
  int order = -1;                   // when it was chosen
  bool pinned = false;              // its decision came from a PlanPin
  int ahead_op = -1;                // recompute: recomputed after this op, ahead of the access
};

struct CapuchinPlan {
  Plan plan;
  std::vector<CapuchinCandidate> candidates;
  std::vector<double> op_start_ns;
  std::vector<size_t> memory_before, memory_after;  // predicted bytes per op
  size_t peak_before = 0, peak_after = 0;
  int peak_window_first = -1, peak_window_last = -1;  // ops over the budget before planning
  bool fits = false;
  std::vector<WrapSwap> wrap_swaps;  // PlannerInput::wrap_persistent
};

// What the guided fallback evicts for a request of `bytes`: nothing (nullopt) where the request is
// within the budget and the plan fits or compact_unfit is on (the memory manager compacts); with
// compact_unfit over the budget, the shortfall only; otherwise the whole request. Capuchin's own
// fallback and policy auto's ",dtr" one (AutoPolicy::choose_victims) both follow it.
std::optional<size_t> guided_fallback_bytes(size_t bytes, size_t allocated, size_t budget, bool fits, bool compact_unfit);

// The op a swap-out issued after evict_op and ending at copy_end_ns ends in: the first later op
// that ends at or after it (-1: none). Its block is freed after that op.
int capuchin_release_op(const std::vector<double>& op_start_ns, int evict_op, double copy_end_ns);
// Free time of a swap of `swap_ns` out after evict_op, back before back_op: from the end of its
// release op (the copy alone on its lane) to the start of the swap-in.
double capuchin_free_time(const std::vector<double>& op_start_ns, int evict_op, int back_op, double swap_ns);
CapuchinPlan plan_capuchin(const PlannerInput& in, CapuchinMode mode);

// What the planner measures from its input before it plans: op start times (num_ops + 1, the
// last the iteration's end), each tensor's first / last use and the ops that use it, and the
// unmanaged memory curve (persistent tensors, live intervals, workspaces, memory_delta).
struct PlannerTimeline {
  std::vector<double> start;
  std::vector<int> first, last;
  std::vector<std::vector<int>> ops_of;
  std::vector<size_t> mem;
};
PlannerTimeline planner_timeline(const PlannerInput& in);
PlannerInput planner_input(const Graph& g, const AccessTrace& trace, size_t budget);

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
  bool iteration_repeats() const override { return repeats_; }
  bool measuring() const override { return !guided_; }
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
  bool guided() const { return guided_; }
  // Where the plan does not fit, the guided fallback as where it does: no victims for a request
  // within the budget (the memory manager compacts), and over it victims for the shortfall only,
  // not the whole request. Off: the whole request, LRU (the passive fallback). Policy auto
  // chooses it per row (AutoPolicy::set_compact_unfit).
  void set_compact_unfit(bool on) { compact_unfit_ = on; }
  bool compact_unfit() const { return compact_unfit_; }
  const CapuchinPlan& plan() const { return plan_; }
  int measurements() const { return measurements_; }
  int trigger_moves() const { return trigger_moves_; }
  // Per plan candidate, the ops its trigger moved earlier by the feedback so far.
  const std::vector<int>& fed_back() const { return fed_back_; }

 private:
  void index_plan();
  bool wrap_gap(TensorId id, int op_index) const;

  CapuchinMode mode_;
  const MemoryView* view_ = nullptr;
  bool guided_ = false;
  bool compact_unfit_ = false;
  bool repeats_ = false;  // the last iteration was guided by the plan the next one runs
  CapuchinPlan plan_;
  std::vector<std::vector<Action>> at_op_;
  std::vector<std::pair<TensorId, int>> measured_sequence_;  // (tensor, op) of every access
  std::vector<char> late_;                                   // per candidate, this iteration
  std::vector<int> fed_back_;                                // per candidate, its feedback moves
  std::vector<double> cost_ms_;                              // per candidate, last guided iteration
  std::vector<std::vector<int>> candidates_of_;              // tensor -> its candidates (one per gap)
  std::vector<double> wrap_cost_ms_;                         // per tensor, its gap over the iteration's end
  std::vector<int> first_use_, last_use_;                    // per tensor, in the measured iteration
  int measurements_ = 0, trigger_moves_ = 0, guided_iterations_ = 0;
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
