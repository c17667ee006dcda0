// The measured -> guided cycle of a policy that plans from one measured iteration (capuchin's
// three, compress and its two hybrids). The first iteration runs passive and is measured; at its
// end the policy plans, and the iterations after it are guided: they run the plan's actions
// after their ops, each checked at its end against the measured access sequence. A changed
// sequence (new shapes, a new graph) drops the plan and the next iteration is measured again.
// MeasuredCycle keeps that state, the measured sequence and the plan's actions by op; the policy
// keeps what it plans, how it feeds a guided iteration back into its plan, and its fallback.
// zero-overhead-swap plans once and replans for less on fragmentation, never measuring again, and
// auto's measured iteration feeds its search: neither runs this cycle.
#pragma once
#include <utility>
#include <vector>

#include "vtensor/memory/policy.h"

namespace vtensor {

class MeasuredCycle {
 public:
  enum class End {
    kMeasured,  // a measured iteration ended: plan from its trace, then planned()
    kGuided,    // a guided iteration ran the plan on the measured sequence: feed it back
    kChanged,   // a guided iteration saw another sequence: the next one is measured
  };
  End end_iteration(const AccessTrace& trace);
  // The plan is made from the iteration end_iteration just called kMeasured: guided from the next one.
  void planned();
  // The plan's actions by op (again after feedback moved some).
  void index(const Plan& plan, size_t num_ops) { at_op_ = actions_by_op(plan, num_ops); }
  // Guided: the plan's actions after op `op_index`; measured: none.
  std::vector<Action> actions_after(int op_index) const;

  bool guided() const { return guided_; }
  bool repeats() const { return repeats_; }  // the last iteration was guided by the plan the next one runs
  int measurements() const { return measurements_; }
  int guided_iterations() const { return guided_iterations_; }  // kGuided ends so far
  // (tensor, op) of every use of the measured iteration the plan was made from.
  const std::vector<std::pair<TensorId, int>>& sequence() const { return sequence_; }

 private:
  bool guided_ = false;
  bool repeats_ = false;
  int measurements_ = 0, guided_iterations_ = 0;
  std::vector<std::pair<TensorId, int>> sequence_, seen_;  // the plan's; the last measured iteration's
  std::vector<std::vector<Action>> at_op_;
};

// The budget a plan is made for: `fraction` of the view's (the policies' set_plan_fraction).
size_t planned_budget(const MemoryView& view, double fraction);
// Per op, the workspace the memory manager allocated for it, aligned (PlannerInput::workspace_bytes).
std::vector<size_t> allocated_workspaces(const MemoryView& view);

}  // namespace vtensor
