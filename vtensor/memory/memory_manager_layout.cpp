// MemoryManager: the device arena's layout: compaction, and the start state of an iteration
// (packed, reordered, or restored through move_to_layout).

#include "vtensor/memory/memory_manager.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "vtensor/memory/caching_allocator.h"
#include "vtensor/memory/planning_hooks.h"

namespace vtensor {

bool MemoryManager::compact(size_t need) {
  // No copy or codec may touch a device block while it moves.
  while (finish_oldest_swap_out()) {
  }
  while (finish_oldest_compress()) {
  }
  // What owns each movable block: a tensor's own block, a tensor's compressed buffer, or the
  // sliding workspace (kNoTensor).
  struct Owner {
    size_t offset;
    TensorId id;
    bool buffer;
  };
  std::vector<Owner> owner;  // by offset; at a shared offset, the first listed
  for (size_t i = 0; i < states_.size(); ++i) {
    State& s = states_[i];
    if (s.residency == Residency::kSwappingIn || s.residency == Residency::kDecompressing) wait_copy(s);
    if (s.residency == Residency::kResident || s.residency == Residency::kSwappingIn || s.residency == Residency::kDecompressing)
      owner.push_back({s.offset, static_cast<TensorId>(i), false});
    if (s.has_buffer) owner.push_back({s.comp_offset, static_cast<TensorId>(i), true});
  }
  if (has_sliding_) owner.push_back({sliding_offset_, kNoTensor, true});
  const auto by_offset = [](const Owner& a, const Owner& b) { return a.offset < b.offset; };
  std::stable_sort(owner.begin(), owner.end(), by_offset);
  owner.erase(std::unique(owner.begin(), owner.end(), [](const Owner& a, const Owner& b) { return a.offset == b.offset; }),
              owner.end());
  const auto find = [&](size_t off) {
    const auto it = std::lower_bound(owner.begin(), owner.end(), Owner{off, kNoTensor, false}, by_offset);
    return it != owner.end() && it->offset == off ? &*it : nullptr;
  };
  // The allocator asks block by block in address order (a pass per step of its search), so the
  // answer walks on from the last one; a lower address starts a binary search again.
  size_t at = 0;
  const auto movable = [&](size_t off) {
    if (at >= owner.size() || (at > 0 && owner[at - 1].offset >= off))
      at = static_cast<size_t>(std::lower_bound(owner.begin(), owner.end(), Owner{off, kNoTensor, false}, by_offset) - owner.begin());
    while (at < owner.size() && owner[at].offset < off) ++at;
    return at < owner.size() && owner[at].offset == off;
  };
  auto moves = allocator_->compact(movable, need);
  char* base = static_cast<char*>(backend_.arena_base());
  const double t0 = backend_.now_ms();
  // In the allocator's order: a slide's moves ascend, each down into space already vacated; a
  // relocation's go into holes outside the window they leave, so no move overwrites a later one's
  // source, and the backend may group them (Backend::move_device_batch).
  std::vector<Backend::DeviceMove> batch;
  batch.reserve(moves.size());
  for (const auto& [from, to] : moves) {
    const Owner* found = find(from);
    if (!found) throw std::logic_error("compact: the allocator moved a block nothing owns");
    const Owner o = *found;
    if (o.id == kNoTensor) {  // the sliding workspace holds nothing between compressions
      sliding_offset_ = to;
      continue;
    }
    State& s = st(o.id);
    const size_t bytes = o.buffer ? s.comp_capacity : s.bytes;
    batch.push_back({base + to, base + from, bytes});
    (o.buffer ? s.comp_offset : s.offset) = to;
    counters_.compacted_bytes += bytes;
    ++counters_.compacted_blocks;
  }
  backend_.move_device_batch(batch);
  counters_.compact_ms += backend_.now_ms() - t0;
  ++counters_.compactions;
  return !moves.empty();
}

// The start state of the next iteration, for a policy that asks for it: packed, and where it
// asks (StartState::kReordered), with the persistent tensors that got a new block this
// iteration (swapped in, decompressed) above the others, in the order they got it (the
// schedule's, so the same every iteration). Packing alone keeps the blocks' relative order, so a
// tensor brought back into another hole each iteration changes the order, and the layout can
// drift from one iteration to the next (the Transformer log at 25% on h100-80g: no eviction in
// iterations 1-4, 92 per iteration later). Where the free space cannot take them, the packed
// order stays; so it does after a measuring iteration, and on the planned pool, which keeps its
// own placement (its footprint holds the space this would move through).
bool MemoryManager::pack_start_state() {
  bool moved_any = compact();
  const PlanningHooks* plan = policy_->planning();
  if (!plan || plan->start_state() != StartState::kReordered || allocator_->name() != "caching" || !policy_->iteration_repeats())
    return moved_any;
  std::vector<TensorId> placed;
  size_t bytes = 0;
  std::vector<std::pair<size_t, TensorId>> by_offset;
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    if (s.residency != Residency::kResident) continue;
    by_offset.emplace_back(s.offset, static_cast<TensorId>(i));
    if (s.placed_seq > 0 && s.locks == 0) {
      placed.push_back(static_cast<TensorId>(i));
      bytes += align_up(s.bytes);
    }
  }
  if (placed.empty() || allocator_->stats().largest_free_block < bytes) return moved_any;
  std::sort(placed.begin(), placed.end(), [&](TensorId a, TensorId b) { return st(a).placed_seq < st(b).placed_seq; });
  std::sort(by_offset.begin(), by_offset.end());
  const size_t n = placed.size();
  bool in_place = by_offset.size() >= n;
  for (size_t k = 0; in_place && k < n; ++k) in_place = by_offset[by_offset.size() - n + k].second == placed[k];
  if (in_place) return moved_any;
  // The free space is one block above the packed ones: the new blocks follow each other there
  // in order, as long as no old block is freed before the last is placed.
  char* base = static_cast<char*>(backend_.arena_base());
  std::vector<size_t> old;
  std::vector<Backend::DeviceMove> batch;  // each into the free space above, none onto a source
  const double t0 = backend_.now_ms();
  for (TensorId id : placed) {
    State& s = st(id);
    const auto to = allocator_->allocate(s.bytes, id);
    if (!to) throw std::logic_error("pack_start_state: no room for " + graph_.tensor(id).name);
    batch.push_back({base + *to, base + s.offset, s.bytes});
    old.push_back(s.offset);
    s.offset = *to;
    counters_.compacted_bytes += s.bytes;
    ++counters_.compacted_blocks;
    counters_.reordered_bytes += s.bytes;
  }
  backend_.move_device_batch(batch);
  counters_.compact_ms += backend_.now_ms() - t0;
  for (size_t off : old) allocator_->free(off);
  compact();
  return true;
}

std::vector<LayoutBlock> MemoryManager::live_device_blocks() const {
  std::vector<LayoutBlock> out;
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    const auto id = static_cast<TensorId>(i);
    if (s.residency == Residency::kResident || s.residency == Residency::kSwappingIn ||
        s.residency == Residency::kDecompressing)
      out.push_back({id, false, s.offset, allocator_->block_size(s.offset)});
    if (s.has_buffer) out.push_back({id, true, s.comp_offset, allocator_->block_size(s.comp_offset)});
  }
  if (has_sliding_) out.push_back({kNoTensor, true, sliding_offset_, allocator_->block_size(sliding_offset_)});
  return out;
}

// Packing keeps the blocks' order, so where a persistent tensor left its block during the
// iteration (swapped out, back elsewhere) everything above its old block slides down, every
// iteration: GPT-2 small at 50% on h100-80g moved 391 blocks (841 MB) per iteration that way.
// Where the iteration ends with the blocks it started with, each displaced one goes back instead
// (move_to_layout), unless the moves form a cycle: then the packing runs. Breaking the cycle through
// a gap instead, ResNet-50 at 25% on p100-16g ran 1.438x against 1.365x (the restored starts'
// climbs end elsewhere). Only after an iteration that ran the schedule the next one runs.
std::optional<bool> MemoryManager::restore_start_state() {
  if (start_layout_.empty() || !policy_->iteration_repeats()) return std::nullopt;
  const uint64_t before = counters_.compacted_bytes;
  const std::optional<bool> moved = move_to_layout(start_layout_, false);
  counters_.restored_bytes += counters_.compacted_bytes - before;
  return moved;
}

namespace {

struct LayoutMove {
  size_t from, to, size, k;  // k: the block's index in the live blocks
  bool cut = false;          // moved out of a cycle into a gap
};

// The moves of `left` that can run now, in an order where none lands on a block still to move:
// move j before move i where j's block lies where i goes (Kahn's order; the layout's blocks do
// not overlap, and the blocks that stay are where it has them). Shorter than left on a cycle.
std::vector<size_t> move_order(const std::vector<LayoutMove>& moves, const std::vector<size_t>& left) {
  std::vector<size_t> by_from = left;
  std::sort(by_from.begin(), by_from.end(), [&](size_t a, size_t b) { return moves[a].from < moves[b].from; });
  std::map<size_t, std::vector<size_t>> after;
  std::map<size_t, size_t> waits;
  for (size_t i : left) {
    const LayoutMove& m = moves[i];
    waits[i];
    auto it = std::lower_bound(by_from.begin(), by_from.end(), m.to,
                               [&](size_t j, size_t off) { return moves[j].from + moves[j].size <= off; });
    for (; it != by_from.end() && moves[*it].from < m.to + m.size; ++it)
      if (*it != i) after[*it].push_back(i), ++waits[i];
  }
  std::vector<size_t> order;
  for (size_t i : left)
    if (waits[i] == 0) order.push_back(i);
  for (size_t q = 0; q < order.size(); ++q)
    for (size_t i : after[order[q]])
      if (--waits[i] == 0) order.push_back(i);
  return order;
}

// The lowest gap of `size` bytes below capacity that is free now (the blocks `now`) and in the
// layout (every move's source and target).
std::optional<size_t> free_gap(const std::vector<LayoutBlock>& now, const std::vector<LayoutMove>& moves, size_t size,
                               size_t capacity) {
  std::vector<std::pair<size_t, size_t>> taken;  // [begin, end) now or in the layout
  for (const LayoutBlock& b : now) taken.emplace_back(b.offset, b.offset + b.size);
  for (const LayoutMove& m : moves) taken.emplace_back(m.from, m.from + m.size), taken.emplace_back(m.to, m.to + m.size);
  std::sort(taken.begin(), taken.end());
  std::optional<size_t> gap;
  for (size_t end = 0, k = 0; k <= taken.size() && !gap; ++k) {
    const size_t next = k < taken.size() ? taken[k].first : capacity;
    if (next >= end + size) gap = end;
    if (k < taken.size()) end = std::max(end, taken[k].second);
  }
  return gap;
}

}  // namespace

std::optional<bool> MemoryManager::move_to_layout(const std::vector<LayoutBlock>& layout, bool through_gaps) {
  auto* caching = dynamic_cast<CachingAllocator*>(allocator_.get());
  if (!caching || layout.empty()) return std::nullopt;
  for (auto& s : states_)  // no copy may touch a block while it moves
    if (s.residency == Residency::kSwappingIn || s.residency == Residency::kDecompressing) wait_copy(s);
  const std::vector<LayoutBlock> now = live_device_blocks();
  if (now.size() != layout.size()) return std::nullopt;
  std::vector<LayoutMove> moves;
  for (size_t k = 0; k < now.size(); ++k) {
    const LayoutBlock &a = now[k], &b = layout[k];
    if (a.id != b.id || a.buffer != b.buffer || a.size != b.size) return std::nullopt;
    if (a.offset != b.offset) moves.push_back({a.offset, b.offset, a.size, k});
  }
  if (moves.empty()) return false;
  char* base = static_cast<char*>(backend_.arena_base());
  std::vector<Backend::DeviceMove> batch;  // no move goes onto a later one's block
  const double t0 = backend_.now_ms();
  auto flush = [&] {
    backend_.move_device_batch(batch);
    batch.clear();
  };
  auto move = [&](LayoutMove& m, size_t to) {
    const LayoutBlock& b = now[m.k];
    caching->free(m.from);
    if (!caching->reserve(to, m.size, b.id))
      throw std::logic_error("move_to_layout: the block at " + std::to_string(to) + " is not free");
    if (b.id == kNoTensor) {  // the sliding workspace holds nothing between compressions
      sliding_offset_ = to;
    } else {
      State& s = st(b.id);
      const size_t bytes = b.buffer ? s.comp_capacity : s.bytes;
      batch.push_back({base + to, base + m.from, bytes});
      (b.buffer ? s.comp_offset : s.offset) = to;
      counters_.compacted_bytes += bytes;
      ++counters_.compacted_blocks;
    }
    m.from = to;
  };
  std::vector<size_t> left(moves.size());
  for (size_t i = 0; i < moves.size(); ++i) left[i] = i;
  while (!left.empty()) {
    const std::vector<size_t> order = move_order(moves, left);
    if (!through_gaps && order.size() != left.size()) {  // nothing has moved yet
      counters_.compact_ms += backend_.now_ms() - t0;
      return std::nullopt;
    }
    for (size_t i : order) move(moves[i], moves[i].to);
    if (order.size() == left.size()) break;
    std::vector<char> done(moves.size(), 0);
    for (size_t i : order) done[i] = 1;
    std::erase_if(left, [&](size_t i) { return done[i] != 0; });
    // A cycle: the smallest of its blocks goes to a gap that is free now and in the layout, and
    // on from there once the others have moved (a batch of its own: the batch may read every
    // source before it writes).
    std::optional<size_t> gap, cut;  // each block at most once: then every cycle is broken
    for (size_t i : left)
      if (!moves[i].cut && (!cut || moves[i].size < moves[*cut].size)) cut = i;
    if (cut) gap = free_gap(now, moves, moves[*cut].size, caching->stats().capacity);
    if (!gap) {  // no room to break it: the caller packs
      flush();
      counters_.compact_ms += backend_.now_ms() - t0;
      return std::nullopt;
    }
    move(moves[*cut], *gap);
    moves[*cut].cut = true;
    flush();
  }
  flush();
  counters_.compact_ms += backend_.now_ms() - t0;
  return true;
}

}  // namespace vtensor
