// DTR, Dynamic Tensor Rematerialization (Kirisame et al., ICLR'21): greedy eviction at runtime,
// no planning pass. On OOM, drop the resident tensor with the smallest
//   h(t) = cost(t) / (bytes(t) * staleness(t)),
// where cost is the compute of t's producer plus that of its evicted neighbourhood: the
// dropped ancestors that recomputing t would re-run and the dropped descendants whose
// recomputation would now need t again (the exact sum over those, not the equivalence-class
// approximation). Dropped tensors are recomputed when accessed.
// Deviations: op cost comes from a static cost model (FLOPs, or elements touched for
// memory-bound ops) instead of measured kernel times, so that choices, and with them memory
// figures, are identical on every backend (a replayed op's cost is its recorded time, which is
// as fixed and is what DTR measures); staleness uses the logical access clock.
// Parameters, gradients and optimizer state cannot be recomputed: when nothing droppable is
// left they are swapped to host, least recently used first among those that fit in the host
// budget (as lru-recompute does).
#pragma once
#include <vector>

#include "vtensor/memory/policy.h"

namespace vtensor {

// The cost model DTR ranks by: FLOPs, or the elements an op reads and writes when larger; a
// replayed op's recorded time (ns).
double dtr_op_cost(const Graph& g, const Op& op);

class DtrPolicy final : public Policy {
 public:
  std::string name() const override { return "dtr"; }
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) override;
  nlohmann::json report() const override;

  // h of one resident tensor given the tensors already chosen this round (for tests).
  double heuristic(TensorId id, const MemoryView& view, uint64_t now, const std::vector<char>& chosen);

 private:
  void build(const Graph& g);
  bool gone(TensorId id, const MemoryView& view, const std::vector<char>& chosen) const;

  const Graph* graph_ = nullptr;
  std::vector<std::vector<int>> consumers_;  // tensor -> ops that read it
  std::vector<double> cost_;                 // per op
  uint64_t drops_ = 0, swaps_ = 0, rounds_ = 0;
};

}  // namespace vtensor
