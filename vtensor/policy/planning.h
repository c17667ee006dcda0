// The hooks of a policy that plans by rehearsing candidates on the sim model of a measured
// iteration (auto), behind their own interface so that Policy keeps the hooks every policy has.
// The trainer reaches them through Policy::rehearsing(): it hands the policy its rehearser, and
// once the graph and the budget are known it prepares the policy (a saved plan given as an
// option is then checked against them and loaded).
#pragma once
#include <cstddef>
#include <functional>

namespace vtensor {

class Graph;
struct RehearsalSetup;
struct RehearsalResult;
struct Candidate;  // vtensor/policy/auto/candidates.h
using Rehearser = std::function<RehearsalResult(const Candidate& candidate, const RehearsalSetup& setup)>;

class RehearsingPolicy {
 public:
  virtual ~RehearsingPolicy() = default;
  virtual void set_rehearser(Rehearser r) = 0;
  // Throws std::invalid_argument naming what does not fit. sim_without_densities: the run is on
  // sim without --densities, where a plan that compresses cannot size what it compresses.
  virtual void prepare(const Graph& graph, size_t budget, bool sim_without_densities) = 0;
};

}  // namespace vtensor
