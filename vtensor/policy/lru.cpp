#include "vtensor/policy/lru.h"

#include <algorithm>

namespace vtensor {

std::vector<TensorId> least_recently_used(const MemoryView& view, size_t bytes, bool recomputable_only,
                                          size_t host_room) {
  std::vector<TensorView> cands;
  for (const TensorView& v : view.evictable_views()) {
    if (recomputable_only && !view.can_recompute(v.id)) continue;
    cands.push_back(v);
  }
  // Logical access clock, ties by id: deterministic on every backend.
  std::sort(cands.begin(), cands.end(), [](const TensorView& a, const TensorView& b) {
    return a.last_access != b.last_access ? a.last_access < b.last_access : a.id < b.id;
  });
  std::vector<TensorId> out;
  size_t freed = 0;
  for (const auto& c : cands) {
    if (freed >= bytes) break;
    if (c.bytes > host_room) continue;  // does not fit on the host: try the next one
    host_room -= c.bytes;
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
  return lru_swap_victims(view, bytes);
}

std::vector<Victim> lru_swap_victims(const MemoryView& view, size_t bytes) {
  std::vector<TensorId> ids = least_recently_used(view, bytes, false, view.host_room());
  if (ids.empty()) ids = least_recently_used(view, bytes, false);
  std::vector<Victim> out;
  for (TensorId id : ids) out.push_back({id, EvictAction::kSwap});
  return out;
}

}  // namespace vtensor
