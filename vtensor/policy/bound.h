// A lower bound on what any swap / recompute plan adds to an iteration (ours; policy auto reports
// it beside its plan, so a miss can be read against what no plan of its kind could avoid).
//   At each op over the budget, the bytes over it must be off the device: swapped (out after the
//   tensor's last use before the op, back before its next, on a link of the measured speed, one
//   copy per direction at a time) or dropped and recomputed (at least its producer's kernel time,
//   shared among the producer's outputs by bytes). A plan that adds O ms can only have moved what
//   the link carries in those windows stretched by O, and recomputes at least the cheapest bytes
//   the link leaves; the least O that covers the bytes over the budget is that op's bound, and the
//   largest over the ops is the iteration's. A relaxation: copies, chains, fragmentation, the
//   order of the queues and which tensor goes where are left out, so no plan beats it, and the
//   planners may sit well above it.
//   Compression and a smaller conv workspace are not modelled: the bound holds for plans that keep,
//   swap or recompute (the conv workspaces are left out of the bytes over the budget). Both
//   directions are taken at the measured link speed (swap_ns_per_byte; 0: an infinitely fast link).
#pragma once
#include <cstddef>
#include <string>

#include "vtensor/policy/capuchin.h"

namespace vtensor {

struct OverheadBound {
  bool feasible = true;         // false: some op needs more than the budget (what it uses there)
  double compute_ms = 0;        // the measured kernels end to end
  double overhead_ms = 0;       // no swap / recompute plan runs faster than compute_ms + this
  int op = -1;                  // the op that binds (-1: nothing over the budget)
  size_t over_bytes = 0;        // bytes over the budget at that op
  size_t swap_bytes = 0;        // the relaxation's split there: swapped,
  size_t recompute_bytes = 0;   // recomputed,
  size_t free_bytes = 0;        // and alive but never used again (dropped at no cost)
  int ops_evaluated = 0;
  std::string binds;            // "nothing", "link", "recompute", "link and recompute", "working set"
};

// From the planner's input (the measured iteration: accesses, kernel times, link, budget).
OverheadBound overhead_bound(const PlannerInput& in);

}  // namespace vtensor
