#include "vtensor/policy/lru.h"

#include <algorithm>

namespace vtensor {

std::vector<TensorId> least_recently_used(const MemoryView& view, size_t bytes, bool recomputable_only) {
  std::vector<TensorView> cands;
  for (TensorId id : view.evictable()) {
    if (recomputable_only && !view.can_recompute(id)) continue;
    cands.push_back(view.view(id));
  }
  // Logical access clock, ties by id: deterministic on every backend.
  std::sort(cands.begin(), cands.end(), [](const TensorView& a, const TensorView& b) {
    return a.last_access != b.last_access ? a.last_access < b.last_access : a.id < b.id;
  });
  std::vector<TensorId> out;
  size_t freed = 0;
  for (const auto& c : cands) {
    if (freed >= bytes) break;
    out.push_back(c.id);
    freed += c.bytes;
  }
  return out;
}

std::vector<Victim> LruPolicy::choose_victims(size_t bytes, const MemoryView& view) {
  std::vector<Victim> out;
  if (action_ == EvictAction::kDrop) {
    for (TensorId id : least_recently_used(view, bytes, true)) out.push_back({id, EvictAction::kDrop});
    if (!out.empty()) return out;
    // Nothing left that can be recomputed (parameters, gradients): those are swapped.
  }
  for (TensorId id : least_recently_used(view, bytes, false)) out.push_back({id, EvictAction::kSwap});
  return out;
}

}  // namespace vtensor
