// CachingAllocator: best-fit with split and coalesce over one fixed arena of `capacity` bytes, in the
// spirit of TensorFlow's BFC and PyTorch's CUDACachingAllocator but with a single segment: the arena
// is the budget, so there is nothing to cudaMalloc, cache or release.
// Best fit picks the smallest free block that fits; ties go to the lowest offset so memory packs low.
// A block is split when the remainder is at least one alignment unit; a freed block merges with both
// free neighbours at once, so no two free blocks are ever adjacent.
// `reserved` is the end offset of the highest live block (capacity minus the trailing free block):
// the address space in use, the analogue of PyTorch's reserved-but-never-returned segments.
// Deviations from PyTorch: no small/large pools, no size-class rounding beyond 256 bytes, no
// oversize-block split limit, no streams/events, and no cache flush-and-retry on OOM (there is
// nothing to flush: eviction is the MemoryManager's job). All operations are O(log n) in blocks.
// High placement (ours, off by default; policy auto turns it on where its rehearsal runs faster):
// a request of at least set_high_placement's size takes the top end of the last best-fit block,
// so large blocks gather high and the small ones' holes stay low, out of their way, in the spirit
// of PyTorch's separate small and large pools; `reserved` then reaches the arena's top.
// Compaction (ours; PyTorch and BFC never move blocks): a full one slides every movable block down;
// one for a request moves the fewest live bytes that make its block, into holes elsewhere where
// they fit (best fit, largest first), else sliding one window; O(n log n) in blocks.
#pragma once
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "vtensor/memory/allocator.h"

namespace vtensor {

class CachingAllocator final : public DeviceAllocator {
 public:
  // Throws std::invalid_argument when capacity is 0 or not a multiple of kAllocAlignment.
  explicit CachingAllocator(size_t capacity);

  std::string name() const override { return "caching"; }
  std::optional<size_t> allocate(size_t bytes, int64_t tag = -1) override;
  void free(size_t offset) override;
  size_t block_size(size_t offset) const override;
  const AllocatorStats& stats() const override { return stats_; }
  void reset_peak() override;
  std::vector<std::pair<size_t, size_t>> compact(const std::function<bool(size_t)>& movable, size_t need = 0) override;
  void set_high_placement(size_t min_bytes) override { high_placement_ = min_bytes == 0 ? 0 : align_up(min_bytes); }
  // Takes the exact range [offset, offset + bytes) as one live block when it lies inside one free
  // block (the planned pool reserves its region this way). False, and nothing changes, otherwise.
  bool reserve(size_t offset, size_t bytes, int64_t tag = -1);
  // (offset, size) of every live block, ascending.
  std::vector<std::pair<size_t, size_t>> live_blocks() const;
  // Per iteration: arena (peak reserved) against the lower bound (peak live bytes).
  void end_iteration(bool repeats) override;
  nlohmann::json report() const override;

  // Throws std::logic_error describing the first violated structural or statistical invariant.
  void check_invariants() const;

  size_t num_blocks() const { return blocks_.size(); }
  size_t num_free_blocks() const { return free_set_.size(); }

 private:
  struct Block {
    size_t size;
    bool free;
    int64_t tag;
  };
  using BlockMap = std::map<size_t, Block>;  // offset -> block; tiles [0, capacity)
  using FreeKey = std::pair<size_t, size_t>;  // (size, offset): begin() of lower_bound is the best fit

  void update_derived_stats();
  std::vector<BlockMap::iterator> ordered_blocks();
  struct SlideWindow {
    bool found = false;
    size_t live = 0, start = 0, end = 0;  // the live bytes that slide; the window's address range
  };
  std::vector<std::pair<size_t, size_t>> relocate_window(const std::function<bool(size_t)>& movable, size_t need,
                                                         size_t below);
  SlideWindow plan_slide(const std::function<bool(size_t)>& movable, size_t need);
  std::vector<std::pair<size_t, size_t>> apply_slide(const SlideWindow& w);
  void carve(size_t offset, size_t bytes, int64_t tag);
  size_t taken(BlockMap::iterator it);  // the stats and trace of a new live block; its offset
  void release(size_t offset, size_t bytes);

  size_t capacity_;
  size_t high_placement_ = 0;  // requests of at least this size are placed high (0: none)
  BlockMap blocks_;
  std::set<FreeKey> free_set_;
  AllocatorStats stats_;
  size_t last_arena_ = 0, last_lower_bound_ = 0, max_arena_ = 0;
  double last_fragmentation_ = 0;
  int iterations_ = 0;
};

}  // namespace vtensor
