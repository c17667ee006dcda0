// The hooks of a policy that shapes the arena and its plan between iterations (auto), behind
// their own interface so that Policy keeps the hooks every policy has. The memory manager and
// the executor reach them through Policy::planning(); a policy without them (null) compacts
// nothing at an iteration's end, places every block low, and is not told its iterations' times.
#pragma once
#include <cstddef>
#include <vector>

#include "vtensor/memory/policy.h"

namespace vtensor {

class PlanningHooks {
 public:
  virtual ~PlanningHooks() = default;
  // Compact the arena when an iteration ends (after the copies of on_host_at_start): each
  // iteration then starts with the persistent tensors packed and the free space in one block, so
  // the layout does not drift from iteration to iteration and the first iterations time what the
  // later ones run.
  virtual bool compact_at_iteration_end() const { return false; }
  // What that compaction leaves (StartState).
  virtual StartState start_state() const { return StartState::kPacked; }
  // The size from which the device allocator places a request high (DeviceAllocator::
  // set_high_placement; 0: none), read at each iteration's start.
  virtual size_t high_placement_bytes() const { return 0; }
  // A layout that compaction puts the arena in instead, once (asked after end_iteration; empty:
  // none): auto's warm start, the steady layout its long rehearsal of the plan ended in, taken
  // at the switch from the measured iteration. Where the live blocks are not the layout's, the
  // start state applies.
  virtual std::vector<LayoutBlock> take_start_layout() { return {}; }
  // Whether the memory manager should time the backend's codec before the first iteration
  // (MemoryView::codec_rate): a planner that may compress and plans from a measurement (auto).
  virtual bool wants_codec_rate() const { return false; }
  // The iteration that just ended took `time_ms` on the backend's clock, its copies and codecs
  // waited for (told after end_iteration and the device's synchronize): what a plan's
  // prediction can be checked against as it runs (auto's replay guard).
  virtual void on_iteration_time(int iteration, double time_ms) {}
  // Asked after begin_iteration: true where the coming iteration runs another plan than the last
  // (auto's replay guard), so the compression buffers the last one kept and holds nothing in now
  // are freed instead of holding the new plan's room.
  virtual bool take_plan_change() { return false; }
};

}  // namespace vtensor
