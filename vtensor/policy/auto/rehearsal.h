// What a rehearsal of one candidate plan takes and gives back: the setup auto hands the
// Rehearser (vtensor/train/rehearsal.h runs it on the sim backend's model of the measured
// iteration), the result with each swapped or recomputed gap's cost (the search's input), and
// the timeout a rehearsal's own policy throws past its time limit.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "vtensor/memory/policy.h"
#include "vtensor/policy/auto/candidates.h"
#include "vtensor/policy/auto/tuning.h"
#include "vtensor/policy/capuchin.h"
#include "vtensor/policy/planning.h"

namespace vtensor {

// What a rehearsal of one candidate needs from the run.
struct RehearsalSetup {
  const Graph* graph = nullptr;
  size_t budget = 0;
  std::string gpu;                 // the GPU the sim models (the run's own on sim)
  std::vector<double> op_ms;       // per op, the measured kernel time (empty: the cost model's)
  double link_ms_per_byte = 0;     // measured host link (0: the GPU's)
  // measured codec calls (MemoryView::codec_rate; ms_per_byte 0: the GPU's memory bandwidth)
  double codec_latency_ms = 0, codec_ms_per_byte = 0;
  double copy_queued_ms = 0;       // what each copy adds queued (MemoryView::copy_queued_ms; 0: its bytes alone)
  // per op, the device's scratch with the fast / lean convolution algorithm (empty: the op's own)
  std::vector<size_t> workspace, workspace_lean;
  std::string allocator = "caching";  // the run's device allocator (its default planner)
  size_t host_budget = 0;          // the run's --host-budget (0: unlimited)
  int iterations = kRehearsedIterations;  // the measured one and the guided ones
  double time_limit_ms = 0;        // wall time the rehearsal may take (0: no limit)
  std::vector<PlanPin> pins;       // the search's fixed decisions (Capuchin-based candidates)
  StartState start_state = StartState::kPacked;  // what each iteration's end leaves (PlanningHooks::start_state)
  // The layout the measured iteration's end leaves instead of its start state (empty: none; the
  // warm start, PlanningHooks::take_start_layout).
  std::vector<LayoutBlock> start_layout;
  std::vector<TriggerMove> trigger_moves;  // replayed on the plan (CapuchinPolicy::set_trigger_moves)
  bool compact_unfit = false;      // the fallback where the plan does not fit (CapuchinPolicy::set_compact_unfit)
  size_t min_wrap_bytes = 0;       // the smallest unpinned wrap swap (CapuchinPolicy::set_min_wrap_bytes)
  size_t high_placement_bytes = 0;  // requests placed high from the first guided iteration (PlanningHooks::high_placement_bytes)
  // Non-zero counts of the compressible outputs (the run's --densities on sim, or those auto's
  // measured iteration counted): what sizes the compression candidates' tensors. Null: the
  // compression candidates are not rehearsed.
  std::shared_ptr<const DensityTable> densities;
  bool measured_only = false;      // run the measured iteration only; its trace comes back (measured_trace)
};

// One access gap of a rehearsed Capuchin-based plan: what the plan decided and what it cost in
// the last guided iteration (stall on its swap-in or swap-out, or its recomputation; a kept gap
// costs when the passive fallback evicted it). The search's input. A wrap swap's gap
// (CapuchinPlan::wrap_swaps) runs from evict_op over the iteration's end to back_op.
struct RehearsedGap {
  TensorId id = kNoTensor;
  int evict_op = -1, back_op = -1, trigger_op = -1;
  CapuchinDecision decision = CapuchinDecision::kKeep;
  size_t bytes = 0;
  double cost_ms = 0;
  bool wrap = false;
  int fed_back = 0;  // ops its trigger moved earlier by Capuchin's feedback (the one trigger_op has)
};

struct RehearsalResult {
  Candidate policy;
  bool trained = false;
  std::string error;               // why not (out of memory, ...)
  double time_ms = 0;              // mean over the guided iterations
  double measured_ms = 0;          // the measured iteration's time (its end's moves included)
  bool start_layout_applied = false;  // the measured iteration ended in setup.start_layout
  size_t peak_allocated = 0;       // over the guided iterations
  double stall_ms = 0, recompute_ms = 0;  // means over the guided iterations
  double compact_ms = 0;                  // the compaction moves' compute time (mean)
  uint64_t compactions = 0, evictions = 0, swapped_out_bytes = 0, recomputed_ops = 0;  // per guided iteration (mean)
  double wall_ms = 0;              // how long the rehearsal took
  std::vector<PlanPin> pins;       // as rehearsed
  StartState start_state = StartState::kPacked;  // as rehearsed
  bool compact_unfit = false;                    // as rehearsed (RehearsalSetup::compact_unfit)
  size_t min_wrap_bytes = 0;                     // as rehearsed (RehearsalSetup::min_wrap_bytes)
  size_t high_placement_bytes = 0;               // as rehearsed (RehearsalSetup::high_placement_bytes)
  std::vector<RehearsedGap> gaps;  // the gaps the plan swaps or recomputes (Capuchin-based candidates)
  std::vector<LayoutBlock> end_layout;  // the arena the last iteration's end left
  // The measured iteration's trace as the rehearsal recorded it (RehearsalSetup::measured_only):
  // what each rehearsed plan was made from.
  std::shared_ptr<const AccessTrace> measured_trace;
};

// A rehearsal ran past its time limit (thrown by the rehearsed policy, caught by the rehearsal).
struct RehearsalTimeout : std::runtime_error {
  RehearsalTimeout() : std::runtime_error("not rehearsed to the end: planning time limit") {}
};

// Rehearser: vtensor/policy/planning.h.

}  // namespace vtensor
