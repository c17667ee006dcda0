// zero-overhead-swap (Zhang et al.) on real training: bit-identical to `none`, the peak it
// predicts from the measured iteration is the peak it reaches, and the limit mode meets a budget.
#include <gtest/gtest.h>

#include <cstring>

#include "vtensor/memory/allocator.h"
#include "vtensor/train/trainer.h"

#include "tests/support/training.h"

using namespace vtensor;

namespace {

using SwapRun = test::RunOutcome;

SwapRun train(const std::string& policy, size_t budget, int iters, const std::string& allocator = "caching",
              const std::string& model = "resnet-tiny", const std::string& backend = "cpu") {
  TrainConfig cfg;
  cfg.backend = backend;
  if (backend == "sim") cfg.gpu = "p100-16g";
  cfg.model.name = model;
  cfg.policy = policy;
  cfg.allocator = allocator;
  cfg.budget = budget;
  cfg.iters = iters;
  return test::run_training(cfg);  // no values on the sim backend
}

using test::expect_bit_identical;

class NoOverhead : public ::testing::TestWithParam<std::string> {};

TEST_P(NoOverhead, ReachesThePredictedPeakBitForBit) {
  const int iters = 4;
  SwapRun none = train("none", 0, iters, "caching", GetParam());
  SwapRun zos = train("zero-overhead-swap", 0, iters, "caching", GetParam());
  expect_bit_identical(none, zos);
  const auto& rep = zos.result.policy_report;
  ASSERT_TRUE(rep.is_object());
  EXPECT_EQ(rep["mode"], "no-overhead");
  EXPECT_GT(rep["copy_ms_per_byte"].get<double>(), 0.0);
  ASSERT_GT(rep["chosen"].size(), 0u) << rep.dump();
  const size_t none_peak = none.result.iterations[0].peak_allocated;
  EXPECT_EQ(rep["predicted_peak_before_bytes"].get<size_t>(), none_peak);
  const size_t predicted = rep["predicted_peak_after_bytes"].get<size_t>();
  EXPECT_LT(predicted, none_peak);
  for (int i = 1; i < iters; ++i) {  // guided iterations: the memory model is exact
    const auto& s = zos.result.iterations[static_cast<size_t>(i)];
    EXPECT_EQ(s.peak_allocated, predicted) << "iteration " << i;
    EXPECT_EQ(s.counters.swap_outs, rep["chosen"].size());
    EXPECT_EQ(s.counters.prefetches, rep["chosen"].size());
    EXPECT_EQ(s.counters.evictions, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, NoOverhead, ::testing::Values("resnet-tiny", "vgg-tiny"));

// On the sim backend's virtual clock the no-overhead mode must not slow an iteration down at all:
// its copies hide behind compute even though they queue on one copy stream per direction.
class NoOverheadSim : public ::testing::TestWithParam<std::string> {};

TEST_P(NoOverheadSim, NeverStallsOnTheVirtualClock) {
  const int iters = 3;
  SwapRun none = train("none", 0, iters, "caching", GetParam(), "sim");
  SwapRun zos = train("zero-overhead-swap", 0, iters, "caching", GetParam(), "sim");
  ASSERT_GT(zos.result.policy_report["chosen"].size(), 0u) << zos.result.policy_report.dump();
  for (int i = 1; i < iters; ++i) {
    const auto &a = none.result.iterations[static_cast<size_t>(i)], &b = zos.result.iterations[static_cast<size_t>(i)];
    EXPECT_GT(b.counters.swap_outs, 0u);
    EXPECT_LT(b.peak_allocated, a.peak_allocated);
    EXPECT_EQ(b.counters.stall_ms, 0.0) << "iteration " << i;
    EXPECT_NEAR(b.time_ms, a.time_ms, a.time_ms * 1e-9) << "iteration " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, NoOverheadSim, ::testing::Values("resnet-tiny", "gpt-tiny", "resnet50"));

TEST(ZeroOverheadSwap, LimitModeMeetsABudgetBelowNonesPeak) {
  const int iters = 4;
  SwapRun none = train("none", 0, iters);
  const size_t budget = align_up(none.result.iterations[0].peak_allocated * 8 / 10);
  SwapRun lim = train("zero-overhead-swap-limit", budget, iters);
  expect_bit_identical(none, lim);
  const auto& rep = lim.result.policy_report;
  EXPECT_EQ(rep["mode"], "stick-to-limit");
  ASSERT_GT(rep["chosen"].size(), 0u) << rep.dump();
  EXPECT_LE(rep["predicted_peak_after_bytes"].get<size_t>(), budget);
  for (const auto& s : lim.result.iterations) EXPECT_LE(s.peak_allocated, budget);
  const auto& first = lim.result.iterations.front();
  const auto& last = lim.result.iterations.back();
  EXPECT_GT(last.counters.prefetches, 0u);
  // The measured iteration evicts passively; the planned ones far less.
  EXPECT_LT(last.counters.evictions, first.counters.evictions);
}

// On the sim clock (deterministic) resnet-tiny at 80% of its peak: the first plan leaves the
// caching allocator short of room, the policy plans again for less and then evicts nothing.
TEST(ZeroOverheadSwap, LimitModePlansAgainWhenTheAllocatorStillEvicts) {
  const int iters = 5;
  SwapRun none = train("none", 0, 1, "caching", "resnet-tiny", "sim");
  const size_t budget = align_up(none.result.iterations[0].peak_allocated * 8 / 10);
  SwapRun lim = train("zero-overhead-swap-limit", budget, iters, "caching", "resnet-tiny", "sim");
  const auto& rep = lim.result.policy_report;
  const auto& it = lim.result.iterations;
  ASSERT_GT(it[1].counters.evictions, 0u) << "the first plan no longer leaves evictions: pick another budget";
  EXPECT_GE(rep["replans"].get<int>(), 1);
  EXPECT_LT(rep["planned_for_budget_bytes"].get<size_t>(), budget);
  EXPECT_EQ(it.back().counters.evictions, 0u);
  for (const auto& s : it) EXPECT_LE(s.peak_reserved, budget);
}

TEST(ZeroOverheadSwap, WithThePlannedPool) {
  const int iters = 4;
  SwapRun none = train("none", 0, iters);
  SwapRun zos = train("zero-overhead-swap", 0, iters, "planned");
  expect_bit_identical(none, zos);
  const auto& a = zos.result.allocator_report;
  EXPECT_GT(a["planned_requests"].get<uint64_t>(), 0u);
  EXPECT_LE(zos.result.iterations.back().peak_allocated, none.result.iterations.back().peak_allocated);
}

}  // namespace
