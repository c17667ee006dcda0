// The maximum-batch search (vtensor/train/experiments.h) with fake probes, no training: doubling,
// bisection, and the check above the result for batches that train though a smaller one failed.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "vtensor/train/experiments.h"

using namespace vtensor;

namespace {

// A probe that trains exactly the batches `trains` accepts, and counts its calls.
struct FakeProbe {
  std::function<bool(int)> trains;
  std::vector<int> asked;
  RunSummary operator()(int batch) {
    asked.push_back(batch);
    RunSummary s;
    s.ok = trains(batch);
    s.peak_allocated = static_cast<size_t>(batch) * 1000;
    s.iteration_ms = batch;
    return s;
  }
};

MaxBatchResult search(FakeProbe& p, int limit = 1 << 20) {
  return search_max_batch(limit, [&](int b) { return p(b); });
}

TEST(MaxBatchSearch, MonotoneFindsTheLargestAndChecksAbove) {
  FakeProbe p{[](int b) { return b <= 37; }};
  const MaxBatchResult r = search(p);
  EXPECT_EQ(r.batch, 37);
  EXPECT_EQ(r.at_batch.peak_allocated, 37000u);
  // 38 failed in the bisection; x1.25 = 47 (46.25 rounded up) and x1.5 = 56 (55.5) are checked.
  EXPECT_EQ(r.checked_above, (std::vector<int>{47, 56}));
  EXPECT_TRUE(r.non_monotonic.empty());
  ASSERT_EQ(r.probes.size(), p.asked.size());
  for (size_t i = 0; i < r.probes.size(); ++i) EXPECT_EQ(r.probes[i].first, p.asked[i]);
  EXPECT_EQ(std::vector<int>(p.asked.end() - 2, p.asked.end()), (std::vector<int>{47, 56}));
}

TEST(MaxBatchSearch, ALargerBatchThatTrainsIsReportedNotHidden) {
  // Fails at 38..44 but trains again at 45..47 (none of which the search probes).
  FakeProbe p{[](int b) { return b <= 37 || (b >= 45 && b <= 47); }};
  const MaxBatchResult r = search(p);
  EXPECT_EQ(r.batch, 37) << "the search's result stays what it found";
  EXPECT_EQ(r.at_batch.peak_allocated, 37000u);
  EXPECT_EQ(r.checked_above, (std::vector<int>{47, 56}));
  EXPECT_EQ(r.non_monotonic, std::vector<int>{47});
}

TEST(MaxBatchSearch, TheLimitStopsTheSearchAndTheCheck) {
  FakeProbe p{[](int b) { return b <= 100; }};
  const MaxBatchResult r = search(p, 40);
  EXPECT_EQ(r.batch, 40);
  EXPECT_TRUE(r.checked_above.empty());
  for (int b : p.asked) EXPECT_LE(b, 40);
  // The check stops at the limit too: 37 x1.25 = 47 is checked, x1.5 = 56 is not.
  FakeProbe q{[](int b) { return b <= 37; }};
  EXPECT_EQ(search(q, 50).checked_above, std::vector<int>{47});
}

TEST(MaxBatchSearch, SmallResultsCheckEachBatchOnce) {
  FakeProbe p{[](int b) { return b <= 3; }};
  const MaxBatchResult r = search(p);
  EXPECT_EQ(r.batch, 3);
  EXPECT_EQ(r.checked_above, (std::vector<int>{5}));  // 4 failed in the search; x1.25 = 4, x1.5 = 5
  std::vector<int> sorted = p.asked;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "a batch probed twice";
}

TEST(MaxBatchSearch, NothingFitsNothingChecked) {
  FakeProbe p{[](int) { return false; }};
  const MaxBatchResult r = search(p);
  EXPECT_EQ(r.batch, 0);
  EXPECT_TRUE(r.checked_above.empty());
  EXPECT_EQ(p.asked, std::vector<int>{1});
  EXPECT_THROW(search(p, 0), std::invalid_argument);
}

}  // namespace
