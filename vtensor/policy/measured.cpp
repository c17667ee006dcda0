// The measured -> guided cycle (measured.h).
#include "vtensor/policy/measured.h"

#include "vtensor/memory/allocator.h"

namespace vtensor {

MeasuredCycle::End MeasuredCycle::end_iteration(const AccessTrace& trace) {
  auto seq = use_sequence(trace);
  repeats_ = false;
  if (!guided_) {
    seen_ = std::move(seq);
    return End::kMeasured;
  }
  if (seq != sequence_) {  // new shapes or a new graph: measure again
    guided_ = false;
    return End::kChanged;
  }
  repeats_ = true;
  ++guided_iterations_;
  return End::kGuided;
}

void MeasuredCycle::planned() {
  sequence_ = std::move(seen_);
  seen_.clear();
  guided_ = true;
  ++measurements_;
}

std::vector<Action> MeasuredCycle::actions_after(int op_index) const {
  if (!guided_ || op_index < 0 || static_cast<size_t>(op_index) >= at_op_.size()) return {};
  return at_op_[static_cast<size_t>(op_index)];
}

size_t planned_budget(const MemoryView& view, double fraction) {
  return static_cast<size_t>(static_cast<double>(view.budget()) * fraction);
}

std::vector<size_t> allocated_workspaces(const MemoryView& view) {
  std::vector<size_t> ws;
  for (const Op& op : view.graph().ops()) {
    const size_t b = view.workspace_bytes(op);
    ws.push_back(b ? align_up(b) : 0);
  }
  return ws;
}

}  // namespace vtensor
