#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "vtensor/memory/allocator.h"
#include "vtensor/memory/caching_allocator.h"

namespace vtensor {
namespace {

constexpr size_t kA = kAllocAlignment;

size_t must_alloc(CachingAllocator& a, size_t bytes, int64_t tag = -1) {
  auto off = a.allocate(bytes, tag);
  EXPECT_TRUE(off.has_value()) << "allocate(" << bytes << ") failed";
  return off.value_or(0);
}

// Expects `fn` to throw E with `needle` in its message.
template <typename E, typename Fn>
void expect_throw_with(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception mentioning '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// ---- basic ----

TEST(CachingAllocator, AlignUp) {
  EXPECT_EQ(align_up(0), 0u);
  EXPECT_EQ(align_up(1), kA);
  EXPECT_EQ(align_up(kA), kA);
  EXPECT_EQ(align_up(kA + 1), 2 * kA);
  EXPECT_EQ(align_up(10, 8), 16u);
  EXPECT_THROW(align_up(std::numeric_limits<size_t>::max()), std::overflow_error);
  EXPECT_THROW(align_up(5, 0), std::invalid_argument);
}

TEST(CachingAllocator, AllocFreeRoundsAndPacksLow) {
  CachingAllocator a(16 * kA);
  EXPECT_EQ(a.name(), "caching");
  size_t x = must_alloc(a, 1);
  size_t y = must_alloc(a, 0);  // zero bytes -> one alignment unit
  size_t z = must_alloc(a, kA + 1);
  EXPECT_EQ(x, 0u);
  EXPECT_EQ(y, kA);
  EXPECT_EQ(z, 2 * kA);
  EXPECT_EQ(a.block_size(x), kA);
  EXPECT_EQ(a.block_size(y), kA);
  EXPECT_EQ(a.block_size(z), 2 * kA);
  EXPECT_EQ(a.stats().allocated, 4 * kA);
  a.check_invariants();
  a.free(y);
  a.free(x);
  a.free(z);
  a.check_invariants();
  EXPECT_EQ(a.num_blocks(), 1u);
  EXPECT_EQ(a.stats().allocated, 0u);
  EXPECT_EQ(a.stats().largest_free_block, 16 * kA);
  EXPECT_EQ(a.stats().num_allocs, 3u);
  EXPECT_EQ(a.stats().num_frees, 3u);
}

TEST(CachingAllocator, BestFitPicksSmallestFittingHole) {
  CachingAllocator a(64 * kA);
  // Layout: [h1:4][s][h2:2][s][h3:3][s][rest]; free h1..h3 to leave holes of 4, 2 and 3 units.
  size_t h1 = must_alloc(a, 4 * kA);
  must_alloc(a, kA);
  size_t h2 = must_alloc(a, 2 * kA);
  must_alloc(a, kA);
  size_t h3 = must_alloc(a, 3 * kA);
  must_alloc(a, kA);
  a.free(h1);
  a.free(h2);
  a.free(h3);
  a.check_invariants();
  EXPECT_EQ(a.allocate(2 * kA), h2);      // exact fit
  EXPECT_EQ(a.allocate(2 * kA + 1), h3);  // 3 units: smallest that fits, not the lower 4-unit hole
  EXPECT_EQ(a.allocate(kA), h1);          // only the 4-unit hole is left below the tail
  EXPECT_EQ(a.block_size(h1), kA);        // split: 3 units remain free at h1 + kA
  EXPECT_EQ(a.allocate(3 * kA), h1 + kA);
  a.check_invariants();
}

TEST(CachingAllocator, TieBreakLowestOffset) {
  CachingAllocator a(32 * kA);
  std::vector<size_t> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(must_alloc(a, 2 * kA));
  // Three equal 2-unit holes, freed high to low so insertion order cannot fake the tie break.
  a.free(blocks[4]);
  a.free(blocks[2]);
  a.free(blocks[0]);
  EXPECT_EQ(a.allocate(2 * kA), blocks[0]);
  EXPECT_EQ(a.allocate(kA), blocks[2]);
  EXPECT_EQ(a.allocate(kA), blocks[2] + kA);
  EXPECT_EQ(a.allocate(2 * kA), blocks[4]);
  a.check_invariants();
}

TEST(CachingAllocator, SplitAndCoalesceAllOrders) {
  const std::vector<std::vector<int>> orders = {
      {0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (const auto& order : orders) {
    CachingAllocator a(32 * kA);
    size_t left_guard = must_alloc(a, kA);
    size_t b[3] = {must_alloc(a, kA), must_alloc(a, 2 * kA), must_alloc(a, 3 * kA)};
    size_t right_guard = must_alloc(a, kA);
    EXPECT_EQ(a.num_blocks(), 6u);  // five live blocks plus the split-off tail
    for (int i : order) {
      a.free(b[i]);
      a.check_invariants();
    }
    // The three freed blocks merged into one hole between the guards.
    EXPECT_EQ(a.num_blocks(), 4u);
    EXPECT_EQ(a.num_free_blocks(), 2u);
    EXPECT_EQ(a.allocate(6 * kA), b[0]);
    a.free(b[0]);
    // Freeing the right guard merges the hole with the tail: one free block from b[0] to the end.
    a.free(right_guard);
    EXPECT_EQ(a.num_blocks(), 2u);
    EXPECT_EQ(a.num_free_blocks(), 1u);
    EXPECT_EQ(a.stats().largest_free_block, 31 * kA);
    a.free(left_guard);
    EXPECT_EQ(a.num_blocks(), 1u);
    a.check_invariants();
  }
}

TEST(CachingAllocator, NoSplitWhenExactFit) {
  CachingAllocator a(4 * kA);
  size_t x = must_alloc(a, 2 * kA);
  must_alloc(a, 2 * kA);
  a.free(x);
  EXPECT_EQ(a.allocate(2 * kA - 7), x);
  EXPECT_EQ(a.num_blocks(), 2u);
  EXPECT_EQ(a.num_free_blocks(), 0u);
  a.check_invariants();
}

TEST(CachingAllocator, ExhaustionReturnsNulloptAndCountsOom) {
  CachingAllocator a(8 * kA);
  a.set_trace_enabled(true);
  must_alloc(a, 6 * kA);
  EXPECT_FALSE(a.allocate(2 * kA + 1, 42).has_value());
  EXPECT_EQ(a.stats().num_ooms, 1u);
  ASSERT_EQ(a.trace().size(), 2u);
  EXPECT_EQ(a.trace()[1].kind, AllocEvent::Kind::kOom);
  EXPECT_EQ(a.trace()[1].offset, 0u);
  EXPECT_EQ(a.trace()[1].size, 2 * kA + 1);  // the requested size
  EXPECT_EQ(a.trace()[1].tag, 42);
  // Larger than the arena, and large enough to overflow rounding.
  EXPECT_FALSE(a.allocate(9 * kA).has_value());
  EXPECT_FALSE(a.allocate(std::numeric_limits<size_t>::max()).has_value());
  EXPECT_EQ(a.stats().num_ooms, 3u);
  EXPECT_EQ(a.stats().allocated, 6 * kA);  // failures change nothing else
  a.check_invariants();
  EXPECT_EQ(a.allocate(2 * kA), 6 * kA);
  EXPECT_FALSE(a.allocate(0).has_value());
}

TEST(CachingAllocator, ExactCapacityAlloc) {
  CachingAllocator a(8 * kA);
  EXPECT_EQ(a.allocate(8 * kA), 0u);
  EXPECT_EQ(a.num_free_blocks(), 0u);
  EXPECT_EQ(a.stats().free_bytes, 0u);
  EXPECT_EQ(a.stats().largest_free_block, 0u);
  EXPECT_EQ(a.stats().reserved, 8 * kA);
  EXPECT_EQ(a.stats().fragmentation(), 0.0);
  a.check_invariants();
  a.free(0);
  EXPECT_EQ(a.allocate(8 * kA - 255), 0u);
  a.check_invariants();
}

TEST(CachingAllocator, DoubleFreeThrows) {
  CachingAllocator a(8 * kA);
  must_alloc(a, kA);
  size_t x = must_alloc(a, kA);  // at 256, so the offset in the message is meaningful
  must_alloc(a, kA);
  a.free(x);
  expect_throw_with<std::logic_error>([&] { a.free(x); }, std::to_string(x));
  expect_throw_with<std::logic_error>([&] { a.block_size(x); }, std::to_string(x));
  a.check_invariants();  // the failed free changed nothing
  EXPECT_EQ(a.stats().num_frees, 1u);
  EXPECT_EQ(x, kA);
}

TEST(CachingAllocator, UnknownOffsetThrows) {
  CachingAllocator a(8 * kA);
  size_t x = must_alloc(a, 2 * kA);
  expect_throw_with<std::logic_error>([&] { a.free(x + kA); }, std::to_string(x + kA));  // inside a block
  expect_throw_with<std::logic_error>([&] { a.free(12345); }, "12345");
  expect_throw_with<std::logic_error>([&] { a.block_size(777); }, "777");
  EXPECT_EQ(a.stats().num_frees, 0u);
  a.check_invariants();
}

TEST(CachingAllocator, BadCapacityThrows) {
  expect_throw_with<std::invalid_argument>([] { CachingAllocator a(0); }, "0");
  expect_throw_with<std::invalid_argument>([] { CachingAllocator a(1000); }, "1000");
  expect_throw_with<std::invalid_argument>([] { make_allocator("caching", 300); }, "300");
}

TEST(CachingAllocator, MakeAllocator) {
  auto a = make_allocator("caching", 4 * kA);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->name(), "caching");
  EXPECT_EQ(a->stats().capacity, 4 * kA);
  EXPECT_EQ(allocator_names(), (std::vector<std::string>{"caching", "planned"}));
  expect_throw_with<std::invalid_argument>([] { make_allocator("bfc", kA); },
                                           "unknown allocator 'bfc'; accepted: caching, planned");
}

// ---- stats ----

TEST(CachingAllocatorStats, PeaksAndReset) {
  CachingAllocator a(64 * kA);
  size_t x = must_alloc(a, 4 * kA);
  size_t y = must_alloc(a, 8 * kA);
  size_t z = must_alloc(a, 2 * kA);
  EXPECT_EQ(a.stats().reserved, 14 * kA);
  a.free(y);  // a hole below z: reserved stays at z's end
  EXPECT_EQ(a.stats().allocated, 6 * kA);
  EXPECT_EQ(a.stats().reserved, 14 * kA);
  a.free(z);  // the top block goes: reserved drops to x's end
  EXPECT_EQ(a.stats().reserved, 4 * kA);
  EXPECT_EQ(a.stats().peak_allocated, 14 * kA);
  EXPECT_EQ(a.stats().peak_reserved, 14 * kA);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_allocated, 4 * kA);
  EXPECT_EQ(a.stats().peak_reserved, 4 * kA);
  must_alloc(a, 2 * kA);
  EXPECT_EQ(a.stats().peak_allocated, 6 * kA);
  EXPECT_EQ(a.stats().peak_reserved, 6 * kA);
  a.free(x);
  a.free(4 * kA);
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(a.stats().allocated, 0u);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_reserved, 0u);
  EXPECT_EQ(a.stats().num_allocs, 4u);
  EXPECT_EQ(a.stats().num_frees, 4u);
  a.check_invariants();
}

TEST(CachingAllocatorStats, FragmentationOnKnownHoles) {
  CachingAllocator a(16 * kA);
  EXPECT_EQ(a.stats().fragmentation(), 0.0);
  // Eight 2-unit blocks; free every other one: four 2-unit holes, 8 units free, largest 2.
  std::vector<size_t> b;
  for (int i = 0; i < 8; ++i) b.push_back(must_alloc(a, 2 * kA));
  for (int i = 0; i < 8; i += 2) a.free(b[i]);
  EXPECT_EQ(a.stats().free_bytes, 8 * kA);
  EXPECT_EQ(a.stats().largest_free_block, 2 * kA);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation(), 0.75);
  EXPECT_FALSE(a.allocate(3 * kA).has_value());  // 8 units free, yet 3 do not fit
  a.free(b[1]);  // merges holes 0..2: 6 units of 10 free in one piece
  EXPECT_EQ(a.stats().largest_free_block, 6 * kA);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation(), 1.0 - 6.0 / 10.0);
  a.check_invariants();
}

// ---- property test ----

// Reference model: live blocks by offset. Best fit is recomputed from the gaps by brute force.
struct Shadow {
  size_t capacity;
  std::map<size_t, std::pair<size_t, size_t>> live;  // offset -> (requested, rounded)

  size_t high = 0;  // set_high_placement's size (0: none)

  // Offset the allocator must return for `rounded` bytes: smallest gap that fits, lowest offset;
  // at or over `high`, the same size's highest gap, its top end.
  std::optional<size_t> best_fit(size_t rounded) const {
    std::optional<size_t> best;
    size_t best_size = 0, pos = 0;
    const bool top = high > 0 && rounded >= high;
    auto consider = [&](size_t start, size_t end) {
      size_t gap = end - start;
      if (gap >= rounded && (!best || gap < best_size || (top && gap == best_size))) best = start, best_size = gap;
    };
    for (const auto& [off, sizes] : live) {
      consider(pos, off);
      pos = off + sizes.second;
    }
    consider(pos, capacity);
    if (best && top) *best += best_size - rounded;
    return best;
  }
};

void run_random_ops(uint64_t seed, size_t capacity, int num_ops, size_t high = 0) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " high " + std::to_string(high));
  std::mt19937_64 rng(seed);
  CachingAllocator a(capacity);
  a.set_high_placement(high);
  Shadow shadow{capacity, {}, high};
  std::vector<size_t> live_offsets;  // for picking a random live block
  size_t shadow_allocated = 0, max_live = 0;
  auto pick_size = [&]() -> size_t {
    switch (rng() % 16) {
      case 0: return 0;
      case 1: return capacity / 4 + rng() % capacity;  // large, often failing
      case 2: return capacity;
      case 3: return (rng() % 32) * kA;             // exact multiples
      default: return 1 + rng() % (capacity / 64);  // small, unaligned
    }
  };
  for (int op = 0; op < num_ops; ++op) {
    // Bias towards allocation while the arena is lightly used so the pressure varies.
    bool do_alloc = live_offsets.empty() || rng() % 100 < (a.stats().allocated < capacity / 2 ? 65u : 45u);
    if (do_alloc) {
      size_t bytes = pick_size();
      size_t rounded = bytes == 0 ? kA : align_up(bytes);
      auto expect = bytes > capacity ? std::nullopt : shadow.best_fit(rounded);
      auto off = a.allocate(bytes, op);
      ASSERT_EQ(off, expect) << "op " << op << " bytes " << bytes;
      if (off) {
        ASSERT_EQ(*off % kA, 0u);
        ASSERT_LE(*off + rounded, capacity);
        ASSERT_GE(a.block_size(*off), bytes);
        ASSERT_EQ(a.block_size(*off), rounded);
        // No overlap with the neighbours in the shadow.
        auto next = shadow.live.lower_bound(*off);
        if (next != shadow.live.end()) {
          ASSERT_LE(*off + rounded, next->first);
        }
        if (next != shadow.live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second.second, *off);
        }
        shadow.live[*off] = {bytes, rounded};
        live_offsets.push_back(*off);
        shadow_allocated += rounded;
        max_live = std::max(max_live, live_offsets.size());
      }
    } else {
      size_t i = rng() % live_offsets.size();
      size_t off = live_offsets[i];
      live_offsets[i] = live_offsets.back();
      live_offsets.pop_back();
      ASSERT_EQ(a.block_size(off), shadow.live.at(off).second);
      a.free(off);
      shadow_allocated -= shadow.live.at(off).second;
      shadow.live.erase(off);
    }
    ASSERT_EQ(a.stats().allocated, shadow_allocated);
    size_t reserved = 0;
    if (!shadow.live.empty()) reserved = shadow.live.rbegin()->first + shadow.live.rbegin()->second.second;
    ASSERT_EQ(a.stats().reserved, reserved);
    ASSERT_NO_THROW(a.check_invariants()) << "op " << op;
  }
  // The run exercised both pressure and many simultaneous blocks.
  EXPECT_GT(a.stats().num_ooms, 0u);
  EXPECT_GT(max_live, 20u);
  // Drain: everything coalesces back into one free block.
  for (size_t off : live_offsets) a.free(off);
  a.check_invariants();
  EXPECT_EQ(a.num_blocks(), 1u);
  EXPECT_EQ(a.stats().largest_free_block, capacity);
  EXPECT_EQ(a.stats().reserved, 0u);
}

TEST(CachingAllocatorProperty, RandomOpsMatchBestFitModel) {
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    run_random_ops(seed, 1 << 20, 20000);
    if (HasFatalFailure()) return;
  }
}

// With high placement (policy auto's finish may turn it on) the same, against the model that
// places a request of that size or more at the top of the highest best-fit gap.
TEST(CachingAllocatorProperty, RandomOpsMatchTheModelWithHighPlacement) {
  for (uint64_t seed : {6, 7, 8}) {
    run_random_ops(seed, 1 << 20, 20000, (1 << 20) / 64);
    if (HasFatalFailure()) return;
  }
  run_random_ops(14, 64 * kA, 20000, 2 * kA);
}

TEST(CachingAllocator, HighPlacementTakesTheTopOfTheHighestBestFitBlock) {
  {
    CachingAllocator a(64 * kA);
    a.set_high_placement(4 * kA);
    EXPECT_EQ(a.allocate(4 * kA), 60 * kA);  // the whole arena is one block: its top
    EXPECT_EQ(a.stats().reserved, 64 * kA);  // the address space in use reaches the top
    EXPECT_EQ(a.allocate(kA), 0u);           // under the size: low, as without it
    a.check_invariants();
  }
  CachingAllocator a(64 * kA);
  // Holes of 8 units at 8 and 24, 4 at 60.
  must_alloc(a, 8 * kA);
  const size_t h1 = must_alloc(a, 8 * kA);
  must_alloc(a, 8 * kA);
  const size_t h2 = must_alloc(a, 8 * kA);
  must_alloc(a, 28 * kA);
  a.free(h1);
  a.free(h2);
  a.set_high_placement(4 * kA);
  EXPECT_EQ(a.allocate(6 * kA), h2 + 2 * kA);  // best fit 8 units: the higher hole, its top end
  EXPECT_EQ(a.allocate(4 * kA), 60 * kA);      // an exact fit is the whole hole
  EXPECT_EQ(a.allocate(2 * kA), h2);           // small: best fit, low end
  EXPECT_EQ(a.allocate(kA), h1);
  a.check_invariants();
  a.set_high_placement(0);  // off: low again
  EXPECT_EQ(a.allocate(4 * kA), h1 + kA);
  a.check_invariants();
}

TEST(CachingAllocatorProperty, TinyArenaHighPressure) {
  for (uint64_t seed : {11, 12, 13}) {
    run_random_ops(seed, 64 * kA, 20000);
    if (HasFatalFailure()) return;
  }
}

TEST(CachingAllocatorProperty, SingleUnitArena) {
  CachingAllocator a(kA);
  a.check_invariants();
  EXPECT_EQ(a.allocate(0), 0u);
  a.check_invariants();
  EXPECT_FALSE(a.allocate(0).has_value());
}

// ---- trace ----

TEST(CachingAllocatorTrace, EventsMatchOps) {
  CachingAllocator a(8 * kA);
  a.allocate(kA, 99);  // tracing off: not recorded, but it still takes a sequence number
  a.set_trace_enabled(true);
  size_t x = must_alloc(a, 10, 1);
  size_t y = must_alloc(a, 3 * kA, 2);
  EXPECT_FALSE(a.allocate(5 * kA, 3).has_value());
  a.free(x);
  a.free(y);
  a.set_trace_enabled(false);
  a.free(0);

  struct Want {
    AllocEvent::Kind kind;
    size_t offset, size;
    int64_t tag;
  };
  const std::vector<Want> want = {
      {AllocEvent::Kind::kAlloc, kA, kA, 1},
      {AllocEvent::Kind::kAlloc, 2 * kA, 3 * kA, 2},
      {AllocEvent::Kind::kOom, 0, 5 * kA, 3},
      {AllocEvent::Kind::kFree, kA, kA, 1},  // frees carry the block's size and the alloc's tag
      {AllocEvent::Kind::kFree, 2 * kA, 3 * kA, 2},
  };
  const auto& t = a.trace();
  ASSERT_EQ(t.size(), want.size());
  for (size_t i = 0; i < t.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    EXPECT_EQ(t[i].kind, want[i].kind);
    EXPECT_EQ(t[i].offset, want[i].offset);
    EXPECT_EQ(t[i].size, want[i].size);
    EXPECT_EQ(t[i].tag, want[i].tag);
    EXPECT_EQ(t[i].seq, i + 1);
  }
  EXPECT_STREQ(to_string(AllocEvent::Kind::kAlloc), "alloc");
  EXPECT_STREQ(to_string(AllocEvent::Kind::kFree), "free");
  EXPECT_STREQ(to_string(AllocEvent::Kind::kOom), "oom");
  a.clear_trace();
  EXPECT_TRUE(a.trace().empty());
}

}  // namespace
}  // namespace vtensor

namespace {

TEST(CachingAllocatorCompact, SlidesMovableBlocksDownAroundFixedOnes) {
  vtensor::CachingAllocator a(16 * 256);
  auto b0 = *a.allocate(256), b1 = *a.allocate(512), b2 = *a.allocate(256), b3 = *a.allocate(256),
       b4 = *a.allocate(512);
  a.free(b0);
  a.free(b2);
  // Live: b1 [256,768) movable, b3 [1024,1280) fixed, b4 [1280,1792) movable.
  auto moves = a.compact([&](size_t off) { return off != b3; });
  a.check_invariants();
  ASSERT_EQ(moves.size(), 1u);  // b1 slides to 0; b4 already sits right after the fixed b3
  EXPECT_EQ(moves[0], std::make_pair(b1, size_t{0}));
  EXPECT_EQ(a.block_size(0), 512u);
  EXPECT_EQ(a.block_size(b3), 256u);
  EXPECT_EQ(a.block_size(b4), 512u);
  EXPECT_EQ(a.stats().allocated, 1280u);
  // The two holes merged into one in front of the fixed block: [512, 1024).
  EXPECT_EQ(a.allocate(512), std::optional<size_t>(512));
  a.check_invariants();
}

}  // namespace

namespace {

using vtensor::CachingAllocator;
constexpr size_t kU = vtensor::kAllocAlignment;

size_t moved_bytes(const CachingAllocator& before, const std::vector<std::pair<size_t, size_t>>& moves) {
  size_t bytes = 0;
  for (const auto& m : moves) bytes += before.block_size(m.first);
  return bytes;
}

// With a need, the OOM ladder's compaction moves what makes one block of that size and no more:
// here one small block into a hole elsewhere, where a full compaction slides everything above
// the first hole.
TEST(CachingAllocatorCompact, ANeedMovesOneSmallBlockIntoAHoleElsewhere) {
  CachingAllocator a(32 * kU);
  std::vector<size_t> b;
  for (size_t units : {1, 8, 1, 1, 2, 8, 11}) b.push_back(*a.allocate(units * kU));
  // Free: b0 [0,1) and b2 [9,10), b4 [11,13): the holes are 1, 1 and 2 units; b3 [10,11) between.
  a.free(b[0]);
  a.free(b[2]);
  a.free(b[4]);
  const CachingAllocator before = a;
  auto moves = a.compact([](size_t) { return true; }, 4 * kU);
  a.check_invariants();
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0], std::make_pair(b[3], size_t{0}));  // b3 into the 1-unit hole at 0
  EXPECT_EQ(a.stats().largest_free_block, 4 * kU);      // [9, 13)
  EXPECT_EQ(a.stats().allocated, before.stats().allocated);
  EXPECT_EQ(a.allocate(4 * kU), std::optional<size_t>(9 * kU));
  // The full compaction moves the four blocks above the first hole (b1, b3, b5, b6).
  CachingAllocator full = before;
  EXPECT_EQ(moved_bytes(before, full.compact([](size_t) { return true; })), 28 * kU);
  // A need the largest free block already meets moves nothing.
  CachingAllocator fits = before;
  EXPECT_TRUE(fits.compact([](size_t) { return true; }, 2 * kU).empty());
}

// Where the window's blocks fit nowhere else, the window slides: b1 down by one unit.
TEST(CachingAllocatorCompact, ANeedSlidesWhereNoHoleElsewhereTakesTheBlocks) {
  CachingAllocator a(8 * kU);
  std::vector<size_t> b;
  for (size_t units : {1, 2, 1, 4}) b.push_back(*a.allocate(units * kU));
  a.free(b[0]);
  a.free(b[2]);  // holes [0,1) and [3,4); b1 [1,3) fits in neither
  auto moves = a.compact([](size_t) { return true; }, 2 * kU);
  a.check_invariants();
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0], std::make_pair(b[1], size_t{0}));
  EXPECT_EQ(a.allocate(2 * kU), std::optional<size_t>(2 * kU));
  // Of the windows that hold the free bytes, the one with the fewest live bytes slides (a tie:
  // the lower): holes of one unit around A (2 units), B (4) and C (2); A slides, not B.
  CachingAllocator e(16 * kU);
  std::vector<size_t> f;
  for (size_t units : {1, 2, 1, 4, 1, 2, 1, 4}) f.push_back(*e.allocate(units * kU));
  for (size_t i : {0, 2, 4, 6}) e.free(f[i]);
  moves = e.compact([](size_t) { return true; }, 2 * kU);
  e.check_invariants();
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0], std::make_pair(f[1], size_t{0}));
  // An unmovable block is a barrier: no window holds two free units, so nothing moves.
  CachingAllocator c(8 * kU);
  std::vector<size_t> d;
  for (size_t units : {1, 2, 1, 4}) d.push_back(*c.allocate(units * kU));
  c.free(d[0]);
  c.free(d[2]);
  EXPECT_TRUE(c.compact([&](size_t off) { return off != d[1]; }, 2 * kU).empty());
  c.check_invariants();
}

// Random arenas: a compaction with a need makes a free block of that size whenever the full
// compaction does, moves no more bytes than it, and keeps the allocator consistent; the blocks
// keep their sizes and tags.
TEST(CachingAllocatorCompact, ANeedNeverMovesMoreThanTheFullCompactionAndAlwaysMakesTheBlock) {
  std::mt19937 rng(7);
  int made = 0;
  for (int round = 0; round < 400; ++round) {
    CachingAllocator a(256 * kU);
    std::vector<size_t> live;
    for (int k = 0; k < 120; ++k) {
      if (!live.empty() && rng() % 3 == 0) {
        const size_t i = rng() % live.size();
        a.free(live[i]);
        live.erase(live.begin() + static_cast<long>(i));
      } else if (auto off = a.allocate((1 + rng() % 12) * kU, k)) {
        live.push_back(*off);
      }
    }
    std::vector<size_t> fixed;
    for (size_t off : live)
      if (rng() % 8 == 0) fixed.push_back(off);
    const auto movable = [&](size_t off) { return std::find(fixed.begin(), fixed.end(), off) == fixed.end(); };
    if (a.stats().free_bytes == 0) continue;
    const size_t need = (1 + rng() % (a.stats().free_bytes / kU)) * kU;  // at most what is free
    CachingAllocator full = a;
    const auto full_moves = full.compact(movable);
    const CachingAllocator before = a;
    const auto moves = a.compact(movable, need);
    a.check_invariants();
    EXPECT_EQ(a.stats().allocated, before.stats().allocated);
    if (before.stats().largest_free_block >= need) {
      EXPECT_TRUE(moves.empty());
      continue;
    }
    EXPECT_EQ(a.stats().largest_free_block >= need, full.stats().largest_free_block >= need) << "round " << round;
    EXPECT_LE(moved_bytes(before, moves), moved_bytes(before, full_moves)) << "round " << round;
    for (const auto& [from, to] : moves) {
      EXPECT_TRUE(movable(from));
      EXPECT_EQ(a.block_size(to), before.block_size(from));
    }
    made += a.stats().largest_free_block >= need ? 1 : 0;
  }
  EXPECT_GT(made, 40);  // the case the test is about occurs
}

}  // namespace
