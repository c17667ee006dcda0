// Capuchin's planner (Peng et al., ASPLOS'20), device-free: from one measured iteration's trace,
// which access gaps to swap or recompute. CapuchinPolicy (capuchin.h) measures and runs the plan.
//   Candidates are the access gaps that span ops over the budget. Swaps ranked by free time FT,
//   each with an in-trigger walked back from the back-access until the copy hides and a release
//   op where its queued copy is predicted to end (Action::free_after); recomputations ranked by
//   memory saved per second of their chain (MSPS), re-ranked after each choice; the hybrid takes
//   hidden swaps first, then per tensor the cheaper of swap stall and recompute. It stops once the
//   predicted peak (tensors + workspaces) fits. The greedy: capuchin_planner.cpp.
// Deviations: release at a predicted op, not on copy completion (deterministic memory figures);
// op times laid end to end from the measured kernel times; each access gap is a candidate,
// parameters included; lazy re-ranking; recompute on access (ahead of it only when pinned); a swap
// whose tensor a chosen recomputation reads is prefetched for it, and a chain pays for a source
// still on the host or still copying back (the paper leaves this open); the host budget is ignored.
// Policy auto's extensions (PlannerInput's last block; capuchin_planner_auto.cpp): pins, wrap swaps,
// D2H in deadline order, H2D in issue order. Full notes: docs/design.md.
#pragma once
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

// What the planner needs per tensor (from the graph).
struct PlannerTensor {
  size_t bytes = 0;
  int producer = -1;               // op index
  std::vector<TensorId> inputs;    // the producer's inputs: the lineage
  bool persistent = false;
  bool recomputable = false;       // the producer may be re-run
  int release_after = -1;          // freed after this op when later than its last access (replayed logs)
  bool excluded = false;           // not a candidate (another mechanism handles it: compress+swap)
  bool pinned = false;             // never moved (TensorInfo::pinned): on the device whenever it is alive
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

  // ---- Policy auto's extensions: only policy auto (its search and rehearsals) sets these, through
  // CapuchinPolicy's setters; at their defaults the planner is Capuchin's own.
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

}  // namespace vtensor
