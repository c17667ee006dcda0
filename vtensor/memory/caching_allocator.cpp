#include "vtensor/memory/caching_allocator.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>

namespace vtensor {

CachingAllocator::CachingAllocator(size_t capacity) : capacity_(capacity) {
  if (capacity == 0 || capacity % kAllocAlignment != 0) {
    throw std::invalid_argument("caching allocator capacity " + std::to_string(capacity) +
                                " must be a positive multiple of " + std::to_string(kAllocAlignment));
  }
  blocks_.emplace(0, Block{capacity, true, -1});
  free_set_.emplace(capacity, 0);
  stats_.capacity = capacity;
  update_derived_stats();
}

// free_bytes, largest_free_block, reserved and the peaks, all O(1) from the structures.
void CachingAllocator::update_derived_stats() {
  stats_.free_bytes = capacity_ - stats_.allocated;
  stats_.largest_free_block = free_set_.empty() ? 0 : free_set_.rbegin()->first;
  // The last block is live (reserved = capacity) or free; a trailing free block's offset is the
  // end of the highest live block because free blocks never touch.
  const auto& [last_offset, last] = *blocks_.rbegin();
  stats_.reserved = last.free ? last_offset : capacity_;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
}

std::optional<size_t> CachingAllocator::allocate(size_t bytes, int64_t tag) {
  // Checked before rounding so huge requests cannot overflow align_up.
  auto fit = free_set_.end();
  size_t size = 0;
  if (bytes <= capacity_) {
    size = bytes == 0 ? kAllocAlignment : align_up(bytes);
    fit = free_set_.lower_bound({size, 0});
  }
  if (fit == free_set_.end()) {
    ++stats_.num_ooms;
    record(AllocEvent::Kind::kOom, 0, bytes, tag);
    return std::nullopt;
  }
  if (high_placement_ > 0 && size >= high_placement_) {
    // The last free block of the best-fit size, its top end: the large blocks gather high, the
    // small ones low (ties otherwise go to the lowest offset).
    fit = std::prev(free_set_.upper_bound({fit->first, std::numeric_limits<size_t>::max()}));
    const auto [hole_size, hole] = *fit;
    const size_t rest = hole_size - size;
    if (rest >= kAllocAlignment) {
      auto below = blocks_.find(hole);
      auto node = free_set_.extract(fit);
      node.value() = {rest, hole};
      free_set_.insert(std::move(node));
      below->second.size = rest;
      auto it = blocks_.emplace_hint(std::next(below), hole + rest, Block{size, false, tag});
      return taken(it);
    }
  }
  const auto [hole_size, offset] = *fit;
  auto it = blocks_.find(offset);
  const size_t rest = hole_size - size;
  if (rest >= kAllocAlignment) {
    // The only allocation happens first so a bad_alloc leaves the allocator untouched;
    // the free-set node is re-keyed in place instead of erase + insert.
    blocks_.emplace_hint(std::next(it), offset + size, Block{rest, true, -1});
    it->second.size = size;
    auto node = free_set_.extract(fit);
    node.value() = {rest, offset + size};
    free_set_.insert(std::move(node));
  } else {
    free_set_.erase(fit);  // rest is 0: sizes are multiples of the alignment
  }
  it->second.free = false;
  it->second.tag = tag;
  return taken(it);
}

size_t CachingAllocator::taken(BlockMap::iterator it) {
  stats_.allocated += it->second.size;
  ++stats_.num_allocs;
  update_derived_stats();
  record(AllocEvent::Kind::kAlloc, it->first, it->second.size, it->second.tag);
  return it->first;
}

void CachingAllocator::free(size_t offset) {
  auto it = blocks_.find(offset);
  if (it == blocks_.end()) {
    throw std::logic_error("caching allocator: free of unknown offset " + std::to_string(offset));
  }
  if (it->second.free) {
    throw std::logic_error("caching allocator: free of already-free offset " + std::to_string(offset));
  }
  const size_t size = it->second.size;
  const int64_t tag = it->second.tag;
  auto prev = it == blocks_.begin() ? blocks_.end() : std::prev(it);
  auto next = std::next(it);
  const bool merge_prev = prev != blocks_.end() && prev->second.free;
  const bool merge_next = next != blocks_.end() && next->second.free;

  // Reuse a neighbour's free-set node for the merged block; allocate only when there is none,
  // before anything is modified, so a bad_alloc leaves the allocator untouched.
  std::set<FreeKey>::node_type node;
  if (merge_prev) node = free_set_.extract({prev->second.size, prev->first});
  if (merge_next) {
    auto next_node = free_set_.extract({next->second.size, next->first});
    if (node.empty()) node = std::move(next_node);
  }
  const size_t start = merge_prev ? prev->first : offset;
  const size_t merged = size + (merge_prev ? prev->second.size : 0) + (merge_next ? next->second.size : 0);
  if (node.empty()) {
    free_set_.emplace(merged, start);
  } else {
    node.value() = {merged, start};
    free_set_.insert(std::move(node));
  }
  if (merge_next) blocks_.erase(next);
  if (merge_prev) {
    blocks_.erase(it);
    it = prev;
  }
  it->second = Block{merged, true, -1};
  stats_.allocated -= size;
  ++stats_.num_frees;
  update_derived_stats();
  record(AllocEvent::Kind::kFree, offset, size, tag);
}

std::vector<std::pair<size_t, size_t>> CachingAllocator::compact(const std::function<bool(size_t)>& movable, size_t need) {
  std::vector<std::pair<size_t, size_t>> moves;
  if (need > 0) {
    if (need > capacity_ || stats_.largest_free_block >= align_up(need)) return moves;
    // Sliding bounds what a relocation may move: fewer bytes than the slide, or the slide.
    const SlideWindow slide = plan_slide(movable, align_up(need));
    if (!slide.found) return moves;
    moves = relocate_window(movable, align_up(need), slide.live);
    return moves.empty() ? apply_slide(slide) : moves;
  }
  BlockMap packed;
  size_t cursor = 0;  // lowest address not yet taken; never above a live block's offset
  for (const auto& [off, b] : blocks_) {
    if (b.free) continue;
    const size_t dst = movable(off) ? cursor : off;
    if (dst > cursor) packed.emplace_hint(packed.end(), cursor, Block{dst - cursor, true, -1});
    packed.emplace_hint(packed.end(), dst, b);  // ascending: each goes at the end
    if (dst != off) moves.emplace_back(off, dst);
    cursor = dst + b.size;
  }
  if (cursor < capacity_) packed.emplace_hint(packed.end(), cursor, Block{capacity_ - cursor, true, -1});
  blocks_ = std::move(packed);
  free_set_.clear();
  for (const auto& [off, b] : blocks_)
    if (b.free) free_set_.emplace(b.size, off);
  update_derived_stats();
  return moves;
}

// The blocks in address order.
std::vector<CachingAllocator::BlockMap::iterator> CachingAllocator::ordered_blocks() {
  std::vector<BlockMap::iterator> blocks;
  blocks.reserve(blocks_.size());
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) blocks.push_back(it);
  return blocks;
}

// A free block of `need` bytes made by moving the live blocks of one window elsewhere: of the
// windows of whole blocks that span `need` bytes (no unmovable live block inside) with fewer than
// `below` live bytes, the ones with the fewest first (a tie: the lower), the first whose live
// blocks all fit in the free blocks outside it (largest first, each in the smallest that takes
// it, at its start). Those moves fill small holes instead of sliding what lies above them. No
// moves where none fits.
std::vector<std::pair<size_t, size_t>> CachingAllocator::relocate_window(const std::function<bool(size_t)>& movable,
                                                                           size_t need, size_t below) {
  constexpr size_t kTries = 8;
  const auto blocks = ordered_blocks();
  struct Window {
    size_t live, lo, hi;
  };
  std::vector<Window> windows;
  size_t lo = 0, span = 0, live = 0;
  for (size_t hi = 0; hi < blocks.size(); ++hi) {
    const auto& [off, b] = *blocks[hi];
    if (!b.free && !movable(off)) {  // a barrier
      lo = hi + 1, span = live = 0;
      continue;
    }
    span += b.size;
    if (!b.free) live += b.size;
    for (; lo < hi && span - blocks[lo]->second.size >= need; ++lo) {
      span -= blocks[lo]->second.size;
      if (!blocks[lo]->second.free) live -= blocks[lo]->second.size;
    }
    if (span >= need && live < below) windows.push_back({live, lo, hi});
  }
  std::sort(windows.begin(), windows.end(),
            [](const Window& a, const Window& b) { return a.live != b.live ? a.live < b.live : a.lo < b.lo; });
  std::vector<std::pair<size_t, size_t>> moves;
  for (size_t t = 0; t < std::min(kTries, windows.size()) && moves.empty(); ++t) {
    const Window& w = windows[t];
    std::set<FreeKey> holes = free_set_;
    std::vector<std::pair<size_t, size_t>> live_blocks;  // (size, offset)
    for (size_t k = w.lo; k <= w.hi; ++k) {
      const auto& [off, b] = *blocks[k];
      if (b.free) holes.erase({b.size, off});
      else live_blocks.emplace_back(b.size, off);
    }
    std::sort(live_blocks.begin(), live_blocks.end(),
              [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    for (const auto& [size, off] : live_blocks) {
      const auto fit = holes.lower_bound({size, 0});
      if (fit == holes.end()) {
        moves.clear();
        break;
      }
      const auto [hole_size, hole] = *fit;
      holes.erase(fit);
      if (hole_size > size) holes.emplace(hole_size - size, hole + size);
      moves.emplace_back(off, hole);
    }
    if (moves.empty()) continue;
    // Each block into its hole, then the window freed as one block (merged with free neighbours).
    for (const auto& [from, to] : moves) {
      const Block b = blocks_.at(from);
      carve(to, b.size, b.tag);
    }
    const size_t start = blocks[w.lo]->first, end = blocks[w.hi]->first + blocks[w.hi]->second.size;
    for (size_t k = w.lo; k <= w.hi; ++k)
      if (blocks[k]->second.free) free_set_.erase({blocks[k]->second.size, blocks[k]->first});
    blocks_.erase(blocks[w.lo], std::next(blocks[w.hi]));
    release(start, end - start);
    std::sort(moves.begin(), moves.end());
  }
  update_derived_stats();
  return moves;
}

// Sliding (where no window's blocks fit elsewhere for less): the window that holds `need` free
// bytes with the fewest live bytes between its first and last free block (those slide down to its
// start, its free bytes one block on top); a tie goes to the lower. A full compaction slides the
// window from the first hole to the top, so this never moves more.
CachingAllocator::SlideWindow CachingAllocator::plan_slide(const std::function<bool(size_t)>& movable, size_t need) {
  SlideWindow best;
  const auto blocks = ordered_blocks();
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  size_t lo = kNone, free_sum = 0, live_sum = 0;  // the window [lo, hi]; lo is a free block
  for (size_t hi = 0; hi < blocks.size(); ++hi) {
    const auto& [off, b] = *blocks[hi];
    if (!b.free) {
      if (!movable(off)) lo = kNone, free_sum = live_sum = 0;  // a barrier
      else if (lo != kNone) live_sum += b.size;
      continue;
    }
    if (lo == kNone) lo = hi, free_sum = live_sum = 0;
    free_sum += b.size;
    while (lo < hi) {  // the start moves up while what is left holds `need`: fewer live bytes
      size_t next = lo + 1, live_gap = 0;
      for (; !blocks[next]->second.free; ++next) live_gap += blocks[next]->second.size;
      if (free_sum - blocks[lo]->second.size < need) break;
      free_sum -= blocks[lo]->second.size, live_sum -= live_gap, lo = next;
    }
    if (free_sum >= need && (!best.found || live_sum < best.live))
      best = {true, live_sum, blocks[lo]->first, blocks[hi]->first + blocks[hi]->second.size};
  }
  return best;
}

std::vector<std::pair<size_t, size_t>> CachingAllocator::apply_slide(const SlideWindow& w) {
  std::vector<std::pair<size_t, size_t>> moves;
  std::vector<std::pair<size_t, Block>> packed;
  size_t cursor = w.start;
  const auto first = blocks_.find(w.start), last = blocks_.lower_bound(w.end);
  for (auto it = first; it != last; ++it) {
    const auto& [off, b] = *it;
    if (b.free) {
      free_set_.erase({b.size, off});
      continue;
    }
    packed.emplace_back(cursor, b);
    if (cursor != off) moves.emplace_back(off, cursor);
    cursor += b.size;
  }
  blocks_.erase(first, last);
  for (const auto& [off, b] : packed) blocks_.emplace(off, b);
  blocks_.emplace(cursor, Block{w.end - cursor, true, -1});
  free_set_.emplace(w.end - cursor, cursor);
  update_derived_stats();
  return moves;
}

// [offset, offset + bytes) inside one free block becomes a live block; no statistics change.
void CachingAllocator::carve(size_t offset, size_t bytes, int64_t tag) {
  auto it = std::prev(blocks_.upper_bound(offset));
  const size_t hole = it->first, hole_size = it->second.size;
  if (!it->second.free || offset + bytes > hole + hole_size) throw std::logic_error("caching allocator: carve outside a free block");
  free_set_.erase({hole_size, hole});
  if (offset > hole) {
    it->second.size = offset - hole;
    free_set_.emplace(offset - hole, hole);
    it = blocks_.emplace_hint(std::next(it), offset, Block{bytes, false, tag});
  } else {
    it->second = Block{bytes, false, tag};
  }
  const size_t after = hole + hole_size - (offset + bytes);
  if (after > 0) {
    blocks_.emplace_hint(std::next(it), offset + bytes, Block{after, true, -1});
    free_set_.emplace(after, offset + bytes);
  }
}

// [offset, offset + bytes), in no block now, becomes a free block merged with free neighbours.
void CachingAllocator::release(size_t offset, size_t bytes) {
  size_t start = offset, size = bytes;
  auto next = blocks_.lower_bound(offset);
  if (next != blocks_.begin()) {
    auto prev = std::prev(next);
    if (prev->second.free) {
      free_set_.erase({prev->second.size, prev->first});
      start = prev->first, size += prev->second.size;
      blocks_.erase(prev);
    }
  }
  if (next != blocks_.end() && next->second.free) {
    free_set_.erase({next->second.size, next->first});
    size += next->second.size;
    blocks_.erase(next);
  }
  blocks_.emplace(start, Block{size, true, -1});
  free_set_.emplace(size, start);
}

bool CachingAllocator::reserve(size_t offset, size_t bytes, int64_t tag) {
  if (bytes == 0 || offset % kAllocAlignment != 0 || bytes % kAllocAlignment != 0 || offset > capacity_ ||
      bytes > capacity_ - offset)
    return false;
  auto it = blocks_.upper_bound(offset);
  if (it == blocks_.begin()) return false;
  --it;
  if (!it->second.free || offset + bytes > it->first + it->second.size) return false;
  carve(offset, bytes, tag);
  stats_.allocated += bytes;
  ++stats_.num_allocs;
  update_derived_stats();
  record(AllocEvent::Kind::kAlloc, offset, bytes, tag);
  return true;
}

std::vector<std::pair<size_t, size_t>> CachingAllocator::live_blocks() const {
  std::vector<std::pair<size_t, size_t>> out;
  for (const auto& [off, b] : blocks_)
    if (!b.free) out.emplace_back(off, b.size);
  return out;
}

void CachingAllocator::end_iteration(bool) {
  last_arena_ = stats_.peak_reserved;
  last_lower_bound_ = stats_.peak_allocated;
  last_fragmentation_ = stats_.fragmentation();
  max_arena_ = std::max(max_arena_, last_arena_);
  ++iterations_;
}

nlohmann::json CachingAllocator::report() const {
  if (iterations_ == 0) return nullptr;
  // The lower bound is the largest sum of live bytes at one instant, which is the peak of
  // allocated bytes; the arena is the highest address in use at any instant (peak reserved).
  return {{"allocator", "caching"},
          {"arena_bytes", last_arena_},
          {"lower_bound_bytes", last_lower_bound_},
          {"arena_over_lower_bound",
           last_lower_bound_ ? static_cast<double>(last_arena_) / static_cast<double>(last_lower_bound_) : 0.0},
          {"fragmentation_at_peak",
           last_arena_ ? 1.0 - static_cast<double>(last_lower_bound_) / static_cast<double>(last_arena_) : 0.0},
          {"external_fragmentation_at_end", last_fragmentation_},
          {"peak_reserved_bytes_all_iterations", max_arena_}};
}

size_t CachingAllocator::block_size(size_t offset) const {
  auto it = blocks_.find(offset);
  if (it == blocks_.end() || it->second.free) {
    throw std::logic_error("caching allocator: no live block at offset " + std::to_string(offset));
  }
  return it->second.size;
}

void CachingAllocator::reset_peak() {
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void CachingAllocator::check_invariants() const {
  auto fail = [](const std::string& what) { throw std::logic_error("caching allocator invariant: " + what); };
  auto at = [](size_t offset) { return " (block at " + std::to_string(offset) + ")"; };
  if (blocks_.empty()) fail("no blocks");
  size_t expect = 0, allocated = 0, reserved = 0, largest_free = 0, free_count = 0, live_count = 0;
  bool prev_free = false;
  for (const auto& [offset, b] : blocks_) {
    if (offset != expect) {
      fail((offset > expect ? "gap before " : "overlap at ") + std::to_string(offset) + ", expected " +
           std::to_string(expect));
    }
    if (offset % kAllocAlignment != 0) fail("misaligned offset" + at(offset));
    if (b.size == 0 || b.size % kAllocAlignment != 0) fail("bad size " + std::to_string(b.size) + at(offset));
    if (b.size > capacity_ - offset) fail("block runs past capacity" + at(offset));
    if (b.free) {
      if (prev_free) fail("adjacent free blocks" + at(offset));
      if (!free_set_.count({b.size, offset})) fail("free block missing from free set" + at(offset));
      largest_free = std::max(largest_free, b.size);
      ++free_count;
    } else {
      allocated += b.size;
      reserved = offset + b.size;
      ++live_count;
    }
    prev_free = b.free;
    expect = offset + b.size;
  }
  if (expect != capacity_) {
    fail("blocks end at " + std::to_string(expect) + ", capacity " + std::to_string(capacity_));
  }
  if (free_set_.size() != free_count) {
    fail("free set has " + std::to_string(free_set_.size()) + " entries for " + std::to_string(free_count) +
         " free blocks");
  }
  auto check = [&](const char* name, size_t got, size_t want) {
    if (got != want) {
      fail(std::string("stats.") + name + " = " + std::to_string(got) + ", recount " + std::to_string(want));
    }
  };
  check("capacity", stats_.capacity, capacity_);
  check("allocated", stats_.allocated, allocated);
  check("reserved", stats_.reserved, reserved);
  check("free_bytes", stats_.free_bytes, capacity_ - allocated);
  check("largest_free_block", stats_.largest_free_block, largest_free);
  check("live blocks (num_allocs - num_frees)", stats_.num_allocs - stats_.num_frees, live_count);
  if (stats_.peak_allocated < stats_.allocated) fail("peak_allocated below allocated");
  if (stats_.peak_reserved < stats_.reserved) fail("peak_reserved below reserved");
}

}  // namespace vtensor
