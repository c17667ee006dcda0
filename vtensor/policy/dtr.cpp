#include "vtensor/policy/dtr.h"

#include <algorithm>
#include <limits>

#include "vtensor/policy/lru.h"

namespace vtensor {

double dtr_op_cost(const Graph& g, const Op& op) {
  if (op.kind == OpKind::kReplay) return op.recorded_ms * 1e6 + 1.0;  // a log's measured time, in ns
  double elems = 0;
  for (TensorId t : op.inputs) elems += static_cast<double>(g.tensor(t).shape.numel());
  for (TensorId t : op.outputs) elems += static_cast<double>(g.tensor(t).shape.numel());
  return std::max(op.flops, elems) + 1.0;
}

void DtrPolicy::build(const Graph& g) {
  if (graph_ == &g) return;
  graph_ = &g;
  consumers_.assign(g.num_tensors(), {});
  cost_.assign(g.num_ops(), 0);
  for (const Op& op : g.ops()) {
    cost_[static_cast<size_t>(op.index)] = dtr_op_cost(g, op);
    for (TensorId in : op.inputs) consumers_[static_cast<size_t>(in)].push_back(op.index);
  }
}

// Not on the device and would have to be recomputed: dropped, released earlier this iteration
// (it comes back as dropped when needed), or chosen in this round.
bool DtrPolicy::gone(TensorId id, const MemoryView& view, const std::vector<char>& chosen) const {
  if (chosen[static_cast<size_t>(id)]) return true;
  const TensorView v = view.view(id);
  return !v.persistent && (v.residency == Residency::kDropped || v.residency == Residency::kUnallocated);
}

double DtrPolicy::heuristic(TensorId id, const MemoryView& view, uint64_t now, const std::vector<char>& chosen) {
  const Graph& g = view.graph();
  build(g);
  std::vector<char> seen(g.num_tensors(), 0);
  double cost = cost_[static_cast<size_t>(g.tensor(id).producer)];
  seen[static_cast<size_t>(id)] = 1;
  // Dropped ancestors: re-run when t is recomputed.
  std::vector<TensorId> stack(g.op(g.tensor(id).producer).inputs);
  while (!stack.empty()) {
    const TensorId a = stack.back();
    stack.pop_back();
    if (seen[static_cast<size_t>(a)] || !gone(a, view, chosen) || g.tensor(a).producer < 0) continue;
    seen[static_cast<size_t>(a)] = 1;
    const Op& p = g.op(g.tensor(a).producer);
    cost += cost_[static_cast<size_t>(p.index)];
    stack.insert(stack.end(), p.inputs.begin(), p.inputs.end());
  }
  // Dropped descendants: their recomputation would need t again.
  stack = {id};
  while (!stack.empty()) {
    const TensorId a = stack.back();
    stack.pop_back();
    for (int oi : consumers_[static_cast<size_t>(a)]) {
      const Op& op = g.op(oi);
      if (op.backward || op.optimizer) continue;
      for (TensorId out : op.outputs) {
        if (seen[static_cast<size_t>(out)] || view.view(out).residency != Residency::kDropped) continue;
        seen[static_cast<size_t>(out)] = 1;
        cost += cost_[static_cast<size_t>(oi)];
        stack.push_back(out);
      }
    }
  }
  const TensorView v = view.view(id);
  const double staleness = static_cast<double>(now - std::min(now, v.last_access)) + 1.0;
  return cost / (static_cast<double>(v.bytes) * staleness);
}

std::vector<Victim> DtrPolicy::choose_victims(size_t bytes, const MemoryView& view) {
  build(view.graph());
  ++rounds_;
  std::vector<TensorId> cands;
  uint64_t now = 0;
  for (TensorId id : view.evictable()) {
    now = std::max(now, view.view(id).last_access);
    if (view.can_recompute(id)) cands.push_back(id);
  }
  ++now;
  std::vector<Victim> out;
  std::vector<char> chosen(view.graph().num_tensors(), 0);
  size_t freed = 0;
  while (freed < bytes && !cands.empty()) {
    size_t best = 0;
    double best_h = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < cands.size(); ++k) {
      const double h = heuristic(cands[k], view, now, chosen);
      if (h < best_h) best_h = h, best = k;  // ties: the lower id (evictable() is in id order)
    }
    const TensorId id = cands[best];
    cands.erase(cands.begin() + static_cast<long>(best));
    chosen[static_cast<size_t>(id)] = 1;
    out.push_back({id, EvictAction::kDrop});
    freed += view.view(id).bytes;
    ++drops_;
  }
  if (!out.empty()) return out;
  // Nothing left that can be recomputed (parameters, gradients, optimizer state): swap those.
  out = lru_swap_victims(view, bytes);  // among those that fit on the host
  swaps_ += out.size();
  return out;
}

nlohmann::json DtrPolicy::report() const {
  return {{"eviction_rounds", rounds_}, {"drops_chosen", drops_}, {"swaps_chosen", swaps_},
          {"cost_model", "max(FLOPs, elements read and written) per op"},
          {"neighbourhood", "exact sum over dropped ancestors and dropped descendants"}};
}

}  // namespace vtensor
