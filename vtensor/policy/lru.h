// Passive eviction by recency, the baseline every planned policy should beat.
//   lru:           on OOM, swap out the least-recently-used resident tensors until the
//                  request's size has been freed; a swapped tensor comes back when accessed.
//   lru-recompute: the same order, but drop tensors that can be recomputed instead of copying
//                  them. Parameters, optimizer state and gradients cannot be recomputed: when
//                  nothing droppable is left they are swapped, so the policy reaches the same
//                  budgets as `lru` while recomputing every activation it evicts.
// No planning and no prefetch: every swap-in is a stall, every drop a recomputation. This is
// the passive mode Capuchin's measured iteration runs in (Peng et al., ASPLOS'20, section 4).
// Host budget: swap victims are taken in the same order among those that still fit on the host
// (MemoryView::host_room); lru never drops instead, so it runs out of host memory where
// lru-recompute, which drops what can be recomputed, still trains.
#pragma once
#include "vtensor/memory/policy.h"

namespace vtensor {

class LruPolicy final : public Policy {
 public:
  explicit LruPolicy(EvictAction action) : action_(action) {}
  std::string name() const override { return action_ == EvictAction::kSwap ? "lru" : "lru-recompute"; }
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) override;

 private:
  EvictAction action_;
};

// The least-recently-used evictable tensors (optionally only recomputable ones) whose bytes
// add up to at least `bytes`. Shared by passive policies.
// `host_room`: skip candidates that would take the sum of those chosen past it (swap victims).
std::vector<TensorId> least_recently_used(const MemoryView& view, size_t bytes, bool recomputable_only,
                                          size_t host_room = std::numeric_limits<size_t>::max());
// Swap victims by recency among those that fit on the host. When none fits, the plain LRU
// choice: the memory manager refuses it and reports the host as what ran out.
std::vector<Victim> lru_swap_victims(const MemoryView& view, size_t bytes);

}  // namespace vtensor
