// Planners (property tests on random lifetime sets) and the planned pool's serving and fallback.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>

#include "vtensor/memory/planned_allocator.h"
#include "vtensor/memory/planners.h"

namespace vtensor {
namespace {

constexpr size_t kA = kAllocAlignment;

// Random lifetimes over `events` instants; about one block in eight is pre-placed (fixed) in a
// band of its own at the bottom, alive the whole time, like a persistent tensor.
std::vector<BlockLifetime> random_blocks(std::mt19937_64& rng, size_t n, bool with_fixed) {
  std::uniform_int_distribution<int> units(1, 64), when(0, 200), len(1, 60), coin(0, 7);
  std::vector<BlockLifetime> out;
  size_t fixed_top = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t size = static_cast<size_t>(units(rng)) * kA;
    if (with_fixed && coin(rng) == 0) {
      out.push_back({size, -1, 1000, static_cast<int64_t>(fixed_top)});
      fixed_top += size;
      continue;
    }
    const int64_t s = when(rng);
    out.push_back({size, s, s + len(rng)});
  }
  return out;
}

void expect_valid(const std::vector<BlockLifetime>& b, const PlanResult& p, const std::string& planner) {
  ASSERT_EQ(p.offsets.size(), b.size()) << planner;
  size_t top = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    top = std::max(top, p.offsets[i] + b[i].size);
    if (b[i].fixed_offset >= 0) {
      EXPECT_EQ(p.offsets[i], static_cast<size_t>(b[i].fixed_offset)) << planner;
    }
    for (size_t j = i + 1; j < b.size(); ++j) {
      const bool in_time = b[i].start < b[j].end && b[j].start < b[i].end;
      const bool in_space = p.offsets[i] < p.offsets[j] + b[j].size && p.offsets[j] < p.offsets[i] + b[i].size;
      EXPECT_FALSE(in_time && in_space) << planner << ": blocks " << i << " and " << j << " overlap";
    }
  }
  EXPECT_EQ(p.arena, top) << planner;
  EXPECT_GE(p.arena, lifetime_lower_bound(b)) << planner;
}

TEST(Planners, RandomLifetimeSetsArePlannedWithoutOverlapAboveTheLowerBound) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 60; ++round) {
    const auto blocks = random_blocks(rng, 5 + static_cast<size_t>(round) * 2, round % 2 == 1);
    for (const auto& name : planner_names()) {
      SCOPED_TRACE("round " + std::to_string(round));
      const PlannerFn plan = find_planner(name);
      const PlanResult a = plan(blocks), b = plan(blocks);
      expect_valid(blocks, a, name);
      EXPECT_EQ(a.offsets, b.offsets) << name << ": same input, different plan";
      EXPECT_EQ(a.arena, b.arena);
    }
  }
}

// After placement every planner settles its blocks: no planned block could sit lower without
// overlapping a block alive with it (best-fit alone leaves blocks in higher, tighter gaps).
TEST(Planners, NoPlannedBlockCanMoveDown) {
  std::mt19937_64 rng(13);
  for (int round = 0; round < 30; ++round) {
    const auto blocks = random_blocks(rng, 10 + static_cast<size_t>(round) * 3, round % 2 == 1);
    for (const auto& name : planner_names()) {
      const PlanResult p = find_planner(name)(blocks);
      for (size_t i = 0; i < blocks.size(); ++i) {
        if (blocks[i].fixed_offset >= 0) continue;
        std::vector<std::pair<size_t, size_t>> busy;
        for (size_t j = 0; j < blocks.size(); ++j)
          if (j != i && blocks[i].start < blocks[j].end && blocks[j].start < blocks[i].end)
            busy.emplace_back(p.offsets[j], p.offsets[j] + blocks[j].size);
        std::sort(busy.begin(), busy.end());
        size_t lowest = 0;
        for (const auto& [off, end] : busy) {
          if (off >= lowest + blocks[i].size) break;
          lowest = std::max(lowest, end);
        }
        EXPECT_EQ(p.offsets[i], lowest) << name << ", round " << round << ", block " << i;
      }
    }
  }
}

// The planners find each block's neighbours by a sweep and merge the fixed blocks alive with
// every other into one floor; placing against every pair instead must give the same plans.
PlanResult pairwise_plan(const std::vector<BlockLifetime>& b, const std::vector<size_t>& order) {
  auto overlap = [&](size_t i, size_t j) { return b[i].start < b[j].end && b[j].start < b[i].end; };
  auto busy_of = [&](size_t i, const std::vector<size_t>& off, const std::vector<bool>& placed) {
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j = 0; j < b.size(); ++j)
      if (j != i && placed[j] && overlap(i, j)) busy.emplace_back(off[j], off[j] + b[j].size);
    std::sort(busy.begin(), busy.end());
    return busy;
  };
  PlanResult r;
  r.offsets.assign(b.size(), 0);
  std::vector<bool> placed(b.size(), false);
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i].fixed_offset >= 0) r.offsets[i] = static_cast<size_t>(b[i].fixed_offset), placed[i] = true;
  for (size_t i : order) {
    if (b[i].fixed_offset >= 0) continue;
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& [off, end] : busy_of(i, r.offsets, placed)) {
      if (off > cursor && off - cursor >= b[i].size && off - cursor < best_gap) best = cursor, best_gap = off - cursor;
      cursor = std::max(cursor, end);
    }
    r.offsets[i] = best != SIZE_MAX ? best : cursor;
    placed[i] = true;
  }
  std::vector<size_t> settle;
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i].fixed_offset < 0) settle.push_back(i);
  for (bool moved = true; moved;) {
    moved = false;
    std::stable_sort(settle.begin(), settle.end(), [&](size_t x, size_t y) { return r.offsets[x] < r.offsets[y]; });
    for (size_t i : settle) {
      size_t cursor = 0;
      for (const auto& [off, end] : busy_of(i, r.offsets, placed)) {
        if (off >= cursor + b[i].size) break;
        cursor = std::max(cursor, end);
      }
      if (cursor < r.offsets[i]) r.offsets[i] = cursor, moved = true;
    }
  }
  for (size_t i = 0; i < b.size(); ++i) r.arena = std::max(r.arena, r.offsets[i] + b[i].size);
  return r;
}

TEST(Planners, GreedySizeIsThePairwisePlacement) {
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int> units(1, 64), when(0, 300), len(0, 80), coin(0, 9);
  for (int round = 0; round < 40; ++round) {
    std::vector<BlockLifetime> b;
    size_t fixed_top = 0;
    for (int i = 0; i < 20 + round * 5; ++i) {
      const size_t size = static_cast<size_t>(units(rng)) * kA;
      const int c = coin(rng);
      if (c == 0) {  // alive throughout: on the floor
        b.push_back({size, -1, 10000, static_cast<int64_t>(fixed_top)});
        fixed_top += size + (round % 3 == 0 ? kA : 0);  // with holes between them on some rounds
      } else if (c == 1) {  // fixed, but alive for part of the time only: not on the floor
        const int64_t s = when(rng);
        b.push_back({size, s, s + 1 + len(rng), static_cast<int64_t>(fixed_top)});
        fixed_top += size;
      } else {  // zero-length lifetimes included
        const int64_t s = when(rng);
        b.push_back({size, s, s + len(rng)});
      }
    }
    std::vector<size_t> order(b.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      if (b[x].size != b[y].size) return b[x].size > b[y].size;
      if (b[x].start != b[y].start) return b[x].start < b[y].start;
      return b[x].end - b[x].start > b[y].end - b[y].start;
    });
    const PlanResult want = pairwise_plan(b, order), got = plan_greedy_size(b);
    EXPECT_EQ(got.offsets, want.offsets) << "round " << round;
    EXPECT_EQ(got.arena, want.arena) << "round " << round;
  }
}

TEST(Planners, BestIsTheSmallestOfTheOthers) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 20; ++round) {
    const auto blocks = random_blocks(rng, 40, false);
    const PlanResult best = plan_best(blocks);
    size_t smallest = SIZE_MAX;
    for (const auto& name : planner_names())
      if (name != "best") smallest = std::min(smallest, find_planner(name)(blocks).arena);
    EXPECT_EQ(best.arena, smallest);
    EXPECT_NE(best.planner, "best");
  }
}

TEST(Planners, LowerBoundIsTheLargestLiveSum) {
  // [0,10) 1 unit, [5,15) 2 units, [10,20) 4 units: live sums 1, 3, 6, 4 -> 6 units.
  std::vector<BlockLifetime> b = {{kA, 0, 10}, {2 * kA, 5, 15}, {4 * kA, 10, 20}};
  EXPECT_EQ(lifetime_lower_bound(b), 6 * kA);
  EXPECT_EQ(plan_greedy_size(b).arena, 6 * kA);  // reachable here
  EXPECT_EQ(lifetime_lower_bound({}), 0u);
}

TEST(Planners, UnknownNameNamesTheAccepted) {
  try {
    find_planner("tetris");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--planner"), std::string::npos) << msg;
    EXPECT_NE(msg.find("greedy-size, greedy-breadth, greedy-area, best"), std::string::npos) << msg;
  }
}

// ---- the planned pool ----

// One iteration's requests: allocate sizes[i] at step i, free it at frees_at[i] (or never).
struct Op {
  bool alloc;
  size_t index;
};

// Runs `ops` as an iteration and checks that no two live blocks overlap; returns offsets.
std::vector<size_t> run_iteration(PlannedAllocator& a, int it, const std::vector<size_t>& sizes, const std::vector<Op>& ops) {
  a.begin_iteration(it);
  std::vector<size_t> off(sizes.size(), SIZE_MAX);
  std::map<size_t, size_t> live;  // offset -> end
  for (const Op& op : ops) {
    if (op.alloc) {
      auto o = a.allocate(sizes[op.index], static_cast<int64_t>(op.index));
      EXPECT_TRUE(o.has_value());
      if (!o) continue;
      off[op.index] = *o;
      const size_t end = *o + align_up(sizes[op.index]);
      auto next = live.lower_bound(*o);
      if (next != live.end()) {
        EXPECT_LE(end, next->first) << "overlaps the block above";
      }
      if (next != live.begin()) {
        EXPECT_LE(std::prev(next)->second, *o) << "overlaps the block below";
      }
      live[*o] = end;
    } else if (off[op.index] != SIZE_MAX) {
      a.free(off[op.index]);
      live.erase(off[op.index]);
    }
  }
  a.end_iteration(true);
  return off;
}

std::vector<Op> random_sequence(std::mt19937_64& rng, size_t n) {
  // Allocate 0..n-1 in order; each is freed a random number of steps later.
  std::vector<std::pair<size_t, size_t>> frees;  // (after alloc #, index)
  std::uniform_int_distribution<size_t> d(1, 8);  // freed after the next d allocations
  for (size_t i = 0; i < n; ++i) frees.emplace_back(std::min(n, i + d(rng)), i);
  std::sort(frees.begin(), frees.end());
  std::vector<Op> ops;
  size_t f = 0;
  for (size_t i = 0; i <= n; ++i) {
    while (f < frees.size() && frees[f].first == i) ops.push_back({false, frees[f++].second});
    if (i < n) ops.push_back({true, i});
  }
  return ops;
}

TEST(PlannedAllocator, LaterIterationsAreServedFromThePlanWithinTheLowerBound) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<size_t> sz(1, 40 * kA);
  std::vector<size_t> sizes(80);
  for (auto& s : sizes) s = sz(rng);
  const auto ops = random_sequence(rng, sizes.size());
  PlannedAllocator a(64 << 20);
  auto persistent = a.allocate(3 * kA, -1);  // before the first iteration, like the parameters
  ASSERT_TRUE(persistent.has_value());
  run_iteration(a, 0, sizes, ops);
  ASSERT_TRUE(a.has_plan());
  const auto first = a.stats().peak_reserved;
  EXPECT_EQ(a.planned_requests(), 0u);
  const auto o1 = run_iteration(a, 1, sizes, ops);
  const auto o2 = run_iteration(a, 2, sizes, ops);
  EXPECT_EQ(o1, o2) << "the plan serves the same offsets every iteration";
  EXPECT_EQ(a.planned_requests(), 2 * sizes.size());
  EXPECT_EQ(a.fallback_requests(), 0u);
  EXPECT_LE(a.stats().peak_reserved, first);
  EXPECT_GE(a.plan_arena(), a.lower_bound());
  const auto r = a.report();
  EXPECT_EQ(r["allocator"], "planned");
  EXPECT_EQ(r["lower_bound_bytes"].get<size_t>(), a.lower_bound());
  EXPECT_GE(r["arena_over_lower_bound"].get<double>(), 1.0);
}

TEST(PlannedAllocator, MismatchedRequestsFallBackWithoutOverlappingLiveBlocks) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<size_t> sz(1, 40 * kA);
  std::vector<size_t> sizes(60);
  for (auto& s : sizes) s = sz(rng);
  const auto ops = random_sequence(rng, sizes.size());
  PlannedAllocator a(64 << 20);
  run_iteration(a, 0, sizes, ops);
  ASSERT_TRUE(a.has_plan());
  // Other shapes, another free order: every live block is checked against every other.
  for (int it = 1; it < 6; ++it) {
    std::vector<size_t> other = sizes;
    for (size_t i = 0; i < other.size(); i += static_cast<size_t>(it) + 1) other[i] = sz(rng);
    run_iteration(a, it, other, random_sequence(rng, other.size()));
  }
  EXPECT_GT(a.fallback_requests(), 0u);
  EXPECT_GT(a.planned_requests(), 0u);
  EXPECT_EQ(a.stats().allocated, 0u);
}

TEST(PlannedAllocator, FreeOfUnknownOffsetThrows) {
  PlannedAllocator a(1 << 20);
  EXPECT_THROW(a.free(4 * kA), std::logic_error);
  EXPECT_THROW(PlannedAllocator(1 << 20, "tetris"), std::invalid_argument);
  EXPECT_EQ(make_allocator("planned", 1 << 20, "best")->name(), "planned");
}


TEST(CachingAllocatorReserve, TakesAnExactRangeInsideOneFreeBlock) {
  CachingAllocator a(16 * kA);
  const size_t x = a.allocate(2 * kA).value();  // [0, 2)
  EXPECT_TRUE(a.reserve(5 * kA, 3 * kA));        // [5, 8) from the middle of [2, 16)
  a.check_invariants();
  EXPECT_EQ(a.block_size(5 * kA), 3 * kA);
  EXPECT_EQ(a.stats().allocated, 5 * kA);
  EXPECT_FALSE(a.reserve(kA, kA));               // overlaps the live block at 0
  EXPECT_FALSE(a.reserve(7 * kA, 2 * kA));       // overlaps the reservation
  EXPECT_FALSE(a.reserve(15 * kA, 2 * kA));      // runs past the capacity
  EXPECT_FALSE(a.reserve(3 * kA + 1, kA));       // misaligned
  EXPECT_TRUE(a.reserve(2 * kA, 3 * kA));        // exactly the gap [2, 5)
  a.check_invariants();
  const auto live = a.live_blocks();
  ASSERT_EQ(live.size(), 3u);
  EXPECT_EQ(live[0], std::make_pair(x, 2 * kA));
  EXPECT_EQ(live[1], std::make_pair(2 * kA, 3 * kA));
  EXPECT_EQ(live[2], std::make_pair(5 * kA, 3 * kA));
  a.free(2 * kA);
  a.free(5 * kA);
  a.check_invariants();
  EXPECT_EQ(a.stats().largest_free_block, 14 * kA);
}


TEST(PlannedAllocator, CompactionGivesThePlanUpAndKeepsLiveBlocks) {
  PlannedAllocator a(64 * kA);
  auto once = [&](int it, bool check_plan) {
    a.begin_iteration(it);
    const size_t x = a.allocate(8 * kA, 1).value();
    const size_t y = a.allocate(4 * kA, 2).value();
    a.free(x);
    const size_t z = a.allocate(2 * kA, 3).value();
    if (check_plan) {
      EXPECT_TRUE(a.has_plan());
      // Mid-iteration compaction: the plan is dissolved, live blocks stay readable and movable.
      auto moves = a.compact([](size_t) { return true; });
      EXPECT_FALSE(a.has_plan());
      size_t ny = y, nz = z;
      for (const auto& [from, to] : moves) {
        if (from == y) ny = to;
        if (from == z) nz = to;
      }
      EXPECT_EQ(a.block_size(ny), 4 * kA);
      EXPECT_EQ(a.block_size(nz), 2 * kA);
      a.free(ny);
      a.free(nz);
    } else {
      a.free(y);
      a.free(z);
    }
    a.end_iteration(true);
  };
  once(0, false);
  once(1, true);
  EXPECT_TRUE(a.has_plan()) << "made again at the iteration's end";
  EXPECT_EQ(a.stats().allocated, 0u);
  EXPECT_EQ(a.report()["plans_given_up"].get<uint64_t>(), 1u);
}

// A policy's measuring iteration (end_iteration(false)) is not planned from: the plan comes
// from the first iteration that repeats.
TEST(PlannedAllocator, NoPlanFromAnIterationThatDoesNotRepeat) {
  PlannedAllocator a(64 * kA);
  auto once = [&](int it, bool repeats) {
    a.begin_iteration(it);
    const size_t x = a.allocate(8 * kA, 1).value();
    const size_t y = a.allocate(4 * kA, 2).value();
    a.free(x);
    a.free(y);
    a.end_iteration(repeats);
  };
  once(0, false);
  EXPECT_FALSE(a.has_plan());
  once(1, true);
  EXPECT_TRUE(a.has_plan());
  once(2, true);
  EXPECT_EQ(a.planned_requests(), 2u);
  EXPECT_EQ(a.report()["replans"].get<uint64_t>(), 0u) << "the first plan is not a replan";
}

// The recorded iteration freed A before B took its place; the next one asks for B first, is
// refused (the OOM ladder then waits for A's swap-out to end, as the recorded one did) and gets
// B's planned place once A is gone: a wait, not a request served off the plan.
TEST(PlannedAllocator, AWaitInTheOomLadderIsNotAFallback) {
  PlannedAllocator a(4 * kA);
  a.begin_iteration(0);
  const size_t x = a.allocate(4 * kA, 1).value();
  a.free(x);
  a.free(a.allocate(4 * kA, 2).value());
  a.end_iteration(true);
  ASSERT_TRUE(a.has_plan());
  a.begin_iteration(1);
  const size_t x1 = a.allocate(4 * kA, 1).value();
  EXPECT_FALSE(a.allocate(4 * kA, 2).has_value()) << "no room until A is freed";
  a.free(x1);
  const auto y1 = a.allocate(4 * kA, 2);
  ASSERT_TRUE(y1.has_value());
  a.free(*y1);
  a.end_iteration(true);
  EXPECT_EQ(a.planned_requests(), 2u);
  EXPECT_EQ(a.fallback_requests(), 0u);
  EXPECT_TRUE(a.has_plan());
  EXPECT_EQ(a.report()["replans"].get<uint64_t>(), 0u);
}

// Packing between iterations (policy auto compacts the arena at each iteration's end, with no
// planned block live): the plan holds when nothing moves, and is made again from the packed
// layout when something did, without being counted as given up.
TEST(PlannedAllocator, PackingBetweenIterationsKeepsThePlan) {
  PlannedAllocator a(64 * kA);
  const size_t p = a.allocate(2 * kA, 100).value();  // persistent, below q
  const size_t q = a.allocate(2 * kA, 101).value();
  ASSERT_LT(p, q);
  auto once = [&](int it, bool free_p) {
    a.begin_iteration(it);
    const size_t x = a.allocate(8 * kA, 1).value();
    const size_t y = a.allocate(4 * kA, 2).value();
    a.free(x);
    a.free(y);
    if (free_p) a.free(p);  // leaves a hole under q
    auto moves = a.compact([](size_t) { return true; });
    a.end_iteration(true);
    return moves;
  };
  EXPECT_TRUE(once(0, false).empty());
  ASSERT_TRUE(a.has_plan());
  EXPECT_TRUE(once(1, false).empty()) << "already packed";
  EXPECT_TRUE(a.has_plan());
  EXPECT_EQ(a.planned_requests(), 2u);
  const auto moves = once(2, true);
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0].first, q);
  EXPECT_TRUE(a.has_plan()) << "planned again around the packed blocks";
  const auto r = a.report();
  EXPECT_EQ(r["plans_given_up"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["replans_after_packing"].get<uint64_t>(), 1u);
  EXPECT_EQ(r["replans"].get<uint64_t>(), 0u);
  a.begin_iteration(3);
  const size_t x = a.allocate(8 * kA, 1).value();
  EXPECT_GE(x, 2 * kA) << "the plan avoids q where it now is";
  a.free(x);
  a.end_iteration(true);
}

}  // namespace
}  // namespace vtensor
