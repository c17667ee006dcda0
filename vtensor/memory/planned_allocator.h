// PlannedAllocator: the lifetime-aware memory pool of Zhang et al. (arXiv 1903.06631, 3.1).
// Training repeats one allocation sequence per iteration, so a recorded iteration gives every
// block's size and lifetime; a planner (planners.h) places the blocks so that no two alive at
// once overlap, and later iterations are served from the plan.
//   Recording: an inner CachingAllocator serves the iteration while requests are recorded;
//   blocks alive across the boundary stay where they are and are obstacles for the plan, whose
//   footprint is reserved so that a fallback never lands on a planned block. Only an iteration
//   the policy repeats is planned from (not a measuring one its plan then replaces).
//   Serving: a tensor's n-th request gets its planned offset when the size matches and the range
//   is free (O(1) lookup, O(log n) check); anything else falls back to the caching allocator and
//   is counted; an iteration with fallbacks is planned again (at most kMaxReplans times).
// Deviations: the paper plans once with no fallback; ours keeps the caching allocator so new
// shapes and policies stay correct, serves a plan larger than the budget only below it, and
// gives the plan up for the iteration when compaction is needed with planned blocks live;
// packing between iterations (policy auto) keeps it, or plans again where blocks moved.
// Full notes: docs/design.md.
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
  std::vector<std::pair<size_t, size_t>> compact(const std::function<bool(size_t)>& movable, size_t need = 0) override;
  void begin_iteration(int iteration) override;
  void end_iteration(bool repeats) override;
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
  bool moved_under_plan_ = false;  // packing between iterations moved blocks the plan avoided
  uint64_t planned_requests_ = 0, fallback_requests_ = 0, replans_ = 0, iterations_planned_ = 0, dissolved_ = 0;
  uint64_t plans_tried_ = 0, replans_after_packing_ = 0;
  size_t lower_bound_ = 0, last_arena_ = 0, recorded_arena_ = 0, recorded_lower_bound_ = 0;
  int iterations_ = 0;
};

}  // namespace vtensor
