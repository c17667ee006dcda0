#include "vtensor/memory/planned_allocator.h"

#include <algorithm>
#include <stdexcept>

namespace vtensor {

PlannedAllocator::PlannedAllocator(size_t capacity, const std::string& planner)
    : capacity_(capacity), planner_name_(planner), planner_(find_planner(planner)), caching_(capacity) {
  stats_.capacity = capacity;
  update_stats();
}

void PlannedAllocator::update_stats() {
  const auto& c = caching_.stats();
  stats_.free_bytes = capacity_ - stats_.allocated;
  stats_.largest_free_block = c.largest_free_block;  // outside the region: what a fallback can get
  stats_.reserved = c.reserved;                      // the region counts as in use once reserved
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
}

void PlannedAllocator::reset_peak() {
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

bool PlannedAllocator::region_free(size_t offset, size_t size) const {
  auto it = region_live_.lower_bound(offset + size);  // first block starting at or after our end
  if (it == region_live_.begin()) return true;
  --it;  // the last block starting before our end: the only one that can overlap
  return it->first + it->second <= offset;
}

std::optional<size_t> PlannedAllocator::fit_in_region(size_t size) const {
  auto live = region_live_.begin();
  for (const auto& [start, len] : footprint_) {
    size_t cursor = start;
    const size_t end = start + len;
    for (; live != region_live_.end() && live->first < end; ++live) {
      if (live->first >= cursor + size) return cursor;
      cursor = std::max(cursor, live->first + live->second);
    }
    if (cursor + size <= end) return cursor;
  }
  return std::nullopt;
}

std::optional<size_t> PlannedAllocator::allocate(size_t bytes, int64_t tag) {
  if (bytes > capacity_) {
    ++stats_.num_ooms;
    record(AllocEvent::Kind::kOom, 0, bytes, tag);
    return std::nullopt;
  }
  const size_t size = bytes == 0 ? kAllocAlignment : align_up(bytes);
  // The request's place in the plan: the n-th request with this tag (tensor id; -1 for scratch)
  // this iteration, so that a request added or missing elsewhere does not shift the rest.
  size_t k = plan_.size();
  size_t* seen = nullptr;
  if (in_iteration_ && region_reserved_) {
    seen = &seen_[tag];
    if (auto it = by_tag_.find(tag); it != by_tag_.end() && *seen < it->second.size()) k = it->second[*seen];
  }
  std::optional<size_t> off;
  bool in_region = false;
  if (region_reserved_ && k < plan_.size() && plan_[k].kind == Slot::kPlanned && plan_[k].size == size &&
      region_free(plan_[k].offset, size)) {
    off = plan_[k].offset;
    in_region = true;
    ++planned_requests_;
  } else {
    off = caching_.allocate(size, tag);
    if (!off && region_reserved_) {
      off = fit_in_region(size);
      in_region = off.has_value();
    }
  }
  if (!off) {
    ++stats_.num_ooms;
    record(AllocEvent::Kind::kOom, 0, bytes, tag);
    return std::nullopt;
  }
  // Served off the plan. A request that failed here, waited in the OOM ladder for a swap-out to
  // end, and then got its planned place is not a fallback: the recorded iteration waited too.
  if (!in_region && region_reserved_ && in_iteration_ && (k >= plan_.size() || plan_[k].kind != Slot::kCrossing)) {
    ++fallback_requests_;
    ++iteration_fallbacks_;
  }
  if (in_region) region_live_.emplace(*off, size);
  if (in_iteration_) {
    if (seen) ++*seen;
    live_records_[*off] = records_.size();
    records_.push_back({size, clock_++, -1, tag});
  }
  stats_.allocated += size;
  ++stats_.num_allocs;
  update_stats();
  record(AllocEvent::Kind::kAlloc, *off, size, tag);
  return off;
}

void PlannedAllocator::free(size_t offset) {
  size_t size;
  if (auto it = region_live_.find(offset); it != region_live_.end()) {
    size = it->second;
    region_live_.erase(it);
  } else {
    size = caching_.block_size(offset);  // throws for an unknown offset
    caching_.free(offset);
  }
  if (in_iteration_) {
    if (auto it = live_records_.find(offset); it != live_records_.end()) {
      records_[it->second].end = clock_++;
      live_records_.erase(it);
    } else {
      outside_.push_back({size, -1, clock_++});  // alive when the iteration began
    }
  }
  stats_.allocated -= size;
  ++stats_.num_frees;
  update_stats();
  record(AllocEvent::Kind::kFree, offset, size, -1);
}

size_t PlannedAllocator::block_size(size_t offset) const {
  if (auto it = region_live_.find(offset); it != region_live_.end()) return it->second;
  return caching_.block_size(offset);
}

std::vector<std::pair<size_t, size_t>> PlannedAllocator::compact(const std::function<bool(size_t)>& movable, size_t need) {
  std::vector<std::pair<size_t, size_t>> moves;
  if (region_reserved_ && region_live_.empty()) {
    // No planned block is live (between iterations: policy auto packs the arena there): pack
    // what lies outside the plan. When nothing moves the plan still holds; otherwise it is made
    // again from where the blocks now are, at the iteration's end (not a plan given up).
    const auto footprint = footprint_;
    release_footprint();
    moves = caching_.compact(movable);
    if (moves.empty()) {
      for (const auto& [off, len] : footprint)
        if (!caching_.reserve(off, len)) throw std::logic_error("planned allocator: footprint lost at " + std::to_string(off));
      footprint_ = footprint;
      for (const auto& f : footprint_) footprint_bytes_ += f.second;
      region_reserved_ = true;
    } else {
      have_plan_ = false;
      plan_.clear();
      moved_under_plan_ = true;
      ++replans_after_packing_;
    }
  } else {
    // The OOM ladder compacts when the free bytes would do but are scattered: give the plan up
    // for now (its live blocks become caching blocks where they are) so the arena can be packed.
    dissolve_plan();
    moves = caching_.compact(movable, need);
  }
  std::unordered_map<size_t, size_t> moved;
  for (const auto& [from, to] : moves) {
    if (auto it = live_records_.find(from); it != live_records_.end()) {
      moved[to] = it->second;
      live_records_.erase(it);
    }
  }
  for (const auto& [to, k] : moved) live_records_[to] = k;
  update_stats();
  return moves;
}

void PlannedAllocator::begin_iteration(int iteration) {
  in_iteration_ = true;
  clock_ = 0;
  seen_.clear();
  iteration_fallbacks_ = 0;
  records_.clear();
  live_records_.clear();
  outside_.clear();
  live_at_begin_ = stats_.allocated;
  if (region_reserved_) ++iterations_planned_;
}

void PlannedAllocator::end_iteration(bool repeats) {
  if (!in_iteration_) return;
  in_iteration_ = false;
  ++iterations_;
  // The lower bound from the recorded lifetimes: blocks from before the iteration (freed in it or
  // still alive), and this iteration's blocks (still alive ones until the end).
  std::vector<BlockLifetime> all = outside_;
  size_t outside_freed = 0;
  for (const auto& b : outside_) outside_freed += b.size;
  const size_t outside_alive = live_at_begin_ - outside_freed;
  if (outside_alive > 0) all.push_back({outside_alive, -1, clock_ + 1});
  for (const auto& r : records_) all.push_back({r.size, r.start, r.end < 0 ? clock_ + 1 : r.end});
  lower_bound_ = lifetime_lower_bound(all);
  last_arena_ = stats_.peak_reserved;
  if (iterations_ == 1) {
    recorded_arena_ = last_arena_;
    recorded_lower_bound_ = lower_bound_;
  }
  // Plan after the first iteration that repeats (a policy's measuring iteration does not); plan
  // again after one that did not follow the plan, or when packing moved blocks under it. Live
  // blocks inside the footprint would lose their protection when it is released: wait then.
  const bool want = !have_plan_ || iteration_fallbacks_ > 0;
  if (!want || !repeats) return;
  if (plans_tried_ > 0 && !moved_under_plan_ && replans_ >= static_cast<uint64_t>(kMaxReplans)) return;
  if (region_live_.empty()) {
    if (plans_tried_ > 0 && !moved_under_plan_) ++replans_;
    moved_under_plan_ = false;
    ++plans_tried_;
    make_plan();
  }
}

void PlannedAllocator::dissolve_plan() {
  if (!region_reserved_) return;
  release_footprint();
  for (const auto& [off, len] : region_live_)
    if (!caching_.reserve(off, len)) throw std::logic_error("planned allocator: live block lost at " + std::to_string(off));
  region_live_.clear();
  have_plan_ = false;
  plan_.clear();
  ++dissolved_;
  update_stats();
}

void PlannedAllocator::release_footprint() {
  if (region_reserved_)
    for (const auto& [off, len] : footprint_) caching_.free(off);
  region_reserved_ = false;
  footprint_.clear();
  footprint_bytes_ = 0;
}

void PlannedAllocator::make_plan() {
  release_footprint();
  have_plan_ = false;
  plan_.clear();
  std::vector<BlockLifetime> blocks;
  // Obstacles: whatever is alive now stays put, alive for the whole next iteration.
  const int64_t forever = clock_ + 1;
  const auto obstacles = caching_.live_blocks();
  for (const auto& [off, len] : obstacles) blocks.push_back({len, -1, forever, static_cast<int64_t>(off)});
  for (const auto& [off, len] : region_live_) blocks.push_back({len, -1, forever, static_cast<int64_t>(off)});
  plan_obstacles_ = blocks.size();
  std::vector<size_t> index;  // request -> its block in `blocks`, SIZE_MAX when not planned
  for (const auto& r : records_) {
    index.push_back(r.end < 0 ? SIZE_MAX : blocks.size());
    if (r.end >= 0) blocks.push_back({r.size, r.start, r.end});
  }
  if (blocks.size() == plan_obstacles_) {
    update_stats();
    return;
  }
  PlanResult p = planner_(blocks);
  plan_lower_bound_ = lifetime_lower_bound(blocks);
  plan_made_by_ = p.planner;
  plan_arena_ = p.arena;
  plan_fits_ = p.arena <= capacity_;
  // A plan larger than the budget (a policy that keeps live bytes right at it) still serves the
  // blocks that fit; the others are left to the fallback, which finds room by then or asks the
  // policy to evict, as the caching allocator would.
  std::vector<bool> overflow(blocks.size(), false);
  plan_overflow_ = 0;
  for (size_t i = plan_obstacles_; i < blocks.size(); ++i) {
    overflow[i] = p.offsets[i] + blocks[i].size > capacity_;
    plan_overflow_ += overflow[i];
  }
  if (plan_overflow_ == blocks.size() - plan_obstacles_) {
    update_stats();
    return;
  }
  // The footprint: planned block ranges, merged.
  std::vector<std::pair<size_t, size_t>> ranges;
  for (size_t i = plan_obstacles_; i < blocks.size(); ++i)
    if (!overflow[i]) ranges.emplace_back(p.offsets[i], p.offsets[i] + blocks[i].size);
  std::sort(ranges.begin(), ranges.end());
  for (const auto& [a, b] : ranges) {
    if (!footprint_.empty() && a <= footprint_.back().first + footprint_.back().second) {
      auto& last = footprint_.back();
      last.second = std::max(last.first + last.second, b) - last.first;
    } else {
      footprint_.emplace_back(a, b - a);
    }
  }
  for (size_t i = 0; i < footprint_.size(); ++i) {
    if (!caching_.reserve(footprint_[i].first, footprint_[i].second)) {
      // Cannot happen (planned blocks avoid every obstacle); undo rather than risk an overlap.
      for (size_t j = 0; j < i; ++j) caching_.free(footprint_[j].first);
      footprint_.clear();
      update_stats();
      return;
    }
    footprint_bytes_ += footprint_[i].second;
  }
  region_reserved_ = true;
  for (size_t k = 0; k < records_.size(); ++k) {
    if (index[k] == SIZE_MAX) plan_.push_back({records_[k].size, 0, Slot::kCrossing});
    else if (overflow[index[k]]) plan_.push_back({records_[k].size, 0, Slot::kOverflow});
    else plan_.push_back({records_[k].size, p.offsets[index[k]], Slot::kPlanned});
  }
  by_tag_.clear();
  for (size_t k = 0; k < records_.size(); ++k) by_tag_[records_[k].tag].push_back(k);
  have_plan_ = true;
  update_stats();
}

nlohmann::json PlannedAllocator::report() const {
  if (iterations_ == 0) return nullptr;
  auto ratio = [](size_t a, size_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  nlohmann::json j = {
      {"allocator", "planned"},
      {"planner", planner_name_},
      {"arena_bytes", last_arena_},
      {"lower_bound_bytes", lower_bound_},
      {"arena_over_lower_bound", ratio(last_arena_, lower_bound_)},
      {"planned_requests", planned_requests_},
      {"fallback_requests", fallback_requests_},
      {"iterations_planned", iterations_planned_},
      {"replans", replans_},
      {"plans_given_up", dissolved_},
      {"replans_after_packing", replans_after_packing_},
      {"caching",
       {{"arena_bytes", recorded_arena_},
        {"lower_bound_bytes", recorded_lower_bound_},
        {"arena_over_lower_bound", ratio(recorded_arena_, recorded_lower_bound_)},
        {"fragmentation_at_peak",
         recorded_arena_ ? 1.0 - static_cast<double>(recorded_lower_bound_) / static_cast<double>(recorded_arena_)
                         : 0.0},
        {"note", "the recorded first iteration, served by the caching allocator"}}},
  };
  if (have_plan_) {
    j["plan"] = {{"made_by", plan_made_by_},
                 {"arena_bytes", plan_arena_},
                 {"lower_bound_bytes", plan_lower_bound_},
                 {"arena_over_lower_bound", ratio(plan_arena_, plan_lower_bound_)},
                 {"footprint_bytes", footprint_bytes_},
                 {"footprint_ranges", footprint_.size()},
                 {"fixed_blocks", plan_obstacles_},
                 {"requests", plan_.size()},
                 {"fits_budget", plan_fits_},
                 {"blocks_over_budget", plan_overflow_},
                 {"planned_blocks",
                  std::count_if(plan_.begin(), plan_.end(), [](const Slot& s) { return s.kind == Slot::kPlanned; })}};
  } else {
    j["plan"] = {{"fits", plan_fits_}, {"arena_bytes", plan_arena_}};
  }
  return j;
}

}  // namespace vtensor
