// PlannedAllocator: the lifetime-aware memory pool of Zhang et al. (arXiv 1903.06631, section 3.1).
// Training repeats the same allocation sequence every iteration, so one recorded iteration gives
// every block's size and lifetime; a planner (planners.h) places the blocks so that no two alive
// at the same time overlap, and later iterations are served from the plan.
//   Recording: an iteration is served by an inner CachingAllocator while each request (size, the
//     event at which it is allocated and freed) is recorded. Blocks alive across the iteration
//     boundary (parameters, optimizer state, and anything a policy keeps or brings back across
//     it) stay where the caching allocator put them: they are not planned.
//   Arena layout: blocks alive at the end of the recorded iteration (persistent tensors first:
//     they are the first requests, so they sit at the bottom) are fixed obstacles, taken as alive
//     for the whole next iteration; the planner places the iteration's blocks around them. The
//     plan's footprint (the union of its block ranges) is reserved in the caching allocator, so
//     a fallback allocation can never land on a planned block.
//   Serving: the n-th request of an iteration for a tensor (its tag; scratch shares tag -1) gets
//     the offset planned for that tensor's n-th request when its size matches and the range
//     overlaps no live block of the footprint: an O(1) plan lookup and an O(log n) check in a
//     map of live ranges. Matching by tensor rather than by position keeps one added or missing
//     request (an extra swap-in) from shifting every later one. Anything else (new shapes, a
//     policy that evicts differently this iteration) falls back to the caching allocator on the
//     space outside the footprint, then to a free gap inside it, and is counted.
//   Re-planning: an iteration with fallbacks is recorded again and re-planned (at most
//     kMaxReplans times), so a policy whose requests settle after a few iterations gets a plan
//     that includes its swap-ins and recomputations.
// Deviations from the paper: the paper plans once from the first iteration and has no fallback
// path; we keep the caching allocator as the fallback so changing shapes and policies stay
// correct. A plan larger than the budget serves the blocks below the budget and leaves the rest
// to the fallback. Planned offsets are fixed, so when the OOM ladder needs compaction the plan
// is given up for the rest of the iteration (its live blocks become caching blocks, which can
// move) and made again at the iteration's end.
#pragma once
#include <cstdint>
#include <map>
#include <unordered_map>

#include "vtensor/memory/caching_allocator.h"
#include "vtensor/memory/planners.h"

namespace vtensor {

class PlannedAllocator final : public DeviceAllocator {
 public:
  static constexpr int kMaxReplans = 3;

  // Throws std::invalid_argument for a bad capacity or an unknown planner.
  explicit PlannedAllocator(size_t capacity, const std::string& planner = "greedy-size");

  std::string name() const override { return "planned"; }
  std::optional<size_t> allocate(size_t bytes, int64_t tag = -1) override;
  void free(size_t offset) override;
  size_t block_size(size_t offset) const override;
  const AllocatorStats& stats() const override { return stats_; }
  void reset_peak() override;
  std::vector<std::pair<size_t, size_t>> compact(const std::function<bool(size_t)>& movable) override;
  void begin_iteration(int iteration) override;
  void end_iteration() override;
  nlohmann::json report() const override;

  bool has_plan() const { return have_plan_; }
  size_t plan_arena() const { return plan_arena_; }  // highest planned end, obstacles included
  uint64_t planned_requests() const { return planned_requests_; }
  uint64_t fallback_requests() const { return fallback_requests_; }
  size_t lower_bound() const { return lower_bound_; }  // of the last iteration, from its lifetimes

 private:
  struct Record {
    size_t size;
    int64_t start, end;  // events within the iteration; end -1 while alive
    int64_t tag;
  };
  struct Slot {
    enum Kind { kPlanned, kCrossing, kOverflow };  // crossing: alive across the boundary, not planned;
    size_t size;                                   // overflow: planned above the budget
    size_t offset;
    Kind kind;
  };
  std::optional<size_t> fit_in_region(size_t size) const;  // first free gap of the footprint
  bool region_free(size_t offset, size_t size) const;
  void make_plan();
  void release_footprint();
  void dissolve_plan();  // back to the caching allocator alone
  void update_stats();

  size_t capacity_;
  std::string planner_name_;
  PlannerFn planner_;
  CachingAllocator caching_;
  AllocatorStats stats_;

  // The iteration being recorded.
  bool in_iteration_ = false;
  int64_t clock_ = 0;
  std::vector<Record> records_;
  std::unordered_map<size_t, size_t> live_records_;  // offset -> request index
  std::vector<BlockLifetime> outside_;                // blocks from before the iteration
  size_t live_at_begin_ = 0;
  uint64_t iteration_fallbacks_ = 0;

  // The plan.
  bool have_plan_ = false, region_reserved_ = false, plan_fits_ = true;
  std::vector<Slot> plan_;
  std::vector<std::pair<size_t, size_t>> footprint_;  // (offset, size), merged, ascending
  size_t footprint_bytes_ = 0, plan_arena_ = 0, plan_lower_bound_ = 0, plan_obstacles_ = 0, plan_overflow_ = 0;
  std::string plan_made_by_;
  std::map<size_t, size_t> region_live_;  // offset -> size of live blocks inside the region
  std::unordered_map<int64_t, std::vector<size_t>> by_tag_;  // tag -> its requests in the plan
  std::unordered_map<int64_t, size_t> seen_;                 // tag -> requests so far this iteration

  // Figures.
  uint64_t planned_requests_ = 0, fallback_requests_ = 0, replans_ = 0, iterations_planned_ = 0, dissolved_ = 0;
  size_t lower_bound_ = 0, last_arena_ = 0, recorded_arena_ = 0, recorded_lower_bound_ = 0;
  int iterations_ = 0;
};

}  // namespace vtensor
