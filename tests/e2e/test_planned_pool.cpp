// The planned pool (Zhang et al.) on real training: bit-identical to the caching allocator under
// every policy, served from the plan, and within 2% of the lower bound without a budget.
#include <gtest/gtest.h>

#include <cstring>

#include "vtensor/memory/allocator.h"
#include "vtensor/train/trainer.h"

#include "tests/support/training.h"

using namespace vtensor;

namespace {

using PoolRun = test::RunOutcome;

PoolRun train(const std::string& model, const std::string& policy, const std::string& allocator, size_t budget, int iters,
          const std::string& planner = "") {
  TrainConfig cfg;
  cfg.model.name = model;
  cfg.policy = policy;
  cfg.allocator = allocator;
  cfg.planner = planner;
  cfg.budget = budget;
  cfg.iters = iters;
  return test::run_training(cfg);
}

using test::expect_bit_identical;

class PlannedPool : public ::testing::TestWithParam<std::string> {};

TEST_P(PlannedPool, UnlimitedBudgetIsServedFromThePlanNearTheLowerBound) {
  const int iters = 4;
  PoolRun caching = train(GetParam(), "none", "caching", 0, iters);
  PoolRun planned = train(GetParam(), "none", "planned", 0, iters);
  expect_bit_identical(caching, planned);
  const auto& r = planned.result.allocator_report;
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["fallback_requests"].get<uint64_t>(), 0u);
  EXPECT_GT(r["planned_requests"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["iterations_planned"].get<uint64_t>(), static_cast<uint64_t>(iters - 1));
  // The lower bound from the recorded lifetimes is the peak of live bytes.
  const auto& last = planned.result.iterations.back();
  EXPECT_EQ(r["lower_bound_bytes"].get<size_t>(), last.peak_allocated);
  EXPECT_EQ(r["arena_bytes"].get<size_t>(), last.peak_reserved);
  EXPECT_LE(r["arena_over_lower_bound"].get<double>(), 1.02);
  EXPECT_GE(r["arena_over_lower_bound"].get<double>(), 1.0);
  // The caching allocator's figures are beside it, and the same as its own run's.
  const auto& c = caching.result.allocator_report;
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c["lower_bound_bytes"], r["lower_bound_bytes"]);
  EXPECT_EQ(r["caching"]["arena_bytes"], c["arena_bytes"]);
  EXPECT_LE(r["arena_bytes"].get<size_t>(), c["arena_bytes"].get<size_t>());
}

TEST_P(PlannedPool, BitIdenticalToCachingUnderBudgetedPolicies) {
  const int iters = 5;
  const size_t peak = train(GetParam(), "none", "caching", 0, 1).result.iterations[0].peak_allocated;
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(peak) * (GetParam() == "vgg-tiny" ? 0.62 : 0.5)));
  for (const std::string policy : {"lru", "lru-recompute"}) {
    SCOPED_TRACE(policy);
    PoolRun caching = train(GetParam(), policy, "caching", budget, iters);
    PoolRun planned = train(GetParam(), policy, "planned", budget, iters);
    expect_bit_identical(caching, planned);
    for (const auto& s : planned.result.iterations) EXPECT_LE(s.peak_allocated, budget);
    const auto& r = planned.result.allocator_report;
    // Passive eviction does not repeat exactly, so part of each iteration falls back; both paths ran.
    EXPECT_GT(r["planned_requests"].get<uint64_t>(), 0u);
    EXPECT_GE(r["arena_over_lower_bound"].get<double>(), 1.0);
  }
}

TEST_P(PlannedPool, EveryPlannerTrainsTheSame) {
  PoolRun base = train(GetParam(), "none", "caching", 0, 3);
  for (const std::string planner : {"greedy-size", "greedy-breadth", "greedy-area", "best"}) {
    SCOPED_TRACE(planner);
    PoolRun r = train(GetParam(), "none", "planned", 0, 3, planner);
    expect_bit_identical(base, r);
    EXPECT_GE(r.result.allocator_report["arena_over_lower_bound"].get<double>(), 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PlannedPool, ::testing::Values("resnet-tiny", "vgg-tiny"));

TEST(PlannedPool, PlannerWithoutPlannedAllocatorIsRejected) {
  TrainConfig cfg;
  cfg.model.name = "mlp-tiny";
  cfg.planner = "best";
  try {
    Trainer t(cfg);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--planner"), std::string::npos) << e.what();
  }
}

}  // namespace
