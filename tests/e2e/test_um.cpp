// End-to-end: unified memory (um, um-prefetch) trains tiny models below the unmanaged peak,
// bit-identical to `none` in losses, weights, buffers and optimizer state, with real faults
// and migrations, device residency within the budget at every op, and the pages of freed
// tensors never copied under um-prefetch (invalidation). The sim backend gives the same
// paging decisions; the CLI rejects bad page sizes and lookaheads with exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/support/cli.h"
#include "tests/support/training.h"
#include "vtensor/core/errors.h"

using namespace vtensor;
using vtensor::test::run_training;

namespace {

constexpr size_t kTestPage = size_t{64} << 10;  // tiny models span tens of pages

TrainConfig config(const std::string& model, const std::string& policy, size_t budget, OptimizerKind opt,
                   size_t page = kTestPage) {
  TrainConfig cfg;
  cfg.model.name = model;
  cfg.policy = policy;
  cfg.budget = budget;
  cfg.iters = 3;
  cfg.optimizer.kind = opt;
  if (opt != OptimizerKind::kSgd) cfg.optimizer.lr = 1e-3f;
  if (policy.rfind("um", 0) == 0) cfg.policy_options.set("um-page-size", page);
  return cfg;
}

// `percent` of the unmanaged peak: half, or more where one kernel's pages need it (vgg-tiny's
// largest kernel touches about 60% of its peak; smaller pages round less).
void check_model(const std::string& model, OptimizerKind opt, size_t percent = 50, size_t page = kTestPage) {
  const auto ref = run_training(config(model, "none", 0, opt));
  const size_t budget = align_up(ref.peak * percent / 100, page);
  ASSERT_LT(budget, ref.peak);
  for (const std::string policy : {"um", "um-prefetch"}) {
    SCOPED_TRACE(model + " " + policy);
    const auto run = run_training(config(model, policy, budget, opt, page));
    vtensor::test::expect_bit_identical(ref, run);
    for (const auto& s : run.iters) {
      ASSERT_TRUE(s.paged);
      EXPECT_LE(s.paging.peak_device_bytes, budget);  // checked at every fault, this is its maximum
      // um faults every iteration; um-prefetch in the first, while its table is learnt.
      if (policy == "um" || s.iteration == 0) EXPECT_GT(s.paging.faults, 0u);
      EXPECT_GT(s.paging.pages_out, 0u);  // the budget binds: pages really went to the host
      EXPECT_GT(s.paging.pages_in, 0u);
      EXPECT_EQ(s.peak_allocated, ref.iters[0].peak_allocated);  // the managed range holds what `none` held
      if (policy == "um") {
        EXPECT_EQ(s.paging.prefetches, 0u);
        EXPECT_EQ(s.paging.invalidated, 0u);
        EXPECT_GT(s.paging.dead_pages_out, 0u);  // without invalidation freed pages are copied back
      } else {
        EXPECT_GT(s.paging.invalidated, 0u);
        EXPECT_EQ(s.paging.dead_pages_out, 0u);      // invalidated pages never go out ...
        EXPECT_EQ(s.paging.invalid_migrations, 0u);  // ... nor back in
      }
    }
    if (policy == "um-prefetch") {
      const auto& last = run.iters.back().paging;
      EXPECT_GT(last.prefetch_hits, 0u);
      EXPECT_LT(last.faults, run_training(config(model, "um", budget, opt, page)).iters.back().paging.faults);
    }
  }
}

TEST(Um, ResnetTinyBitIdenticalAtHalfThePeak) { check_model("resnet-tiny", OptimizerKind::kSgd); }
TEST(Um, VggTinyBitIdenticalAtThreeQuartersOfThePeak) { check_model("vgg-tiny", OptimizerKind::kSgd, 75, 16 << 10); }
TEST(Um, GptTinyBitIdenticalAtHalfThePeak) { check_model("gpt-tiny", OptimizerKind::kAdam); }

TEST(Um, BudgetBelowOneKernelsPagesIsOutOfMemory) {
  TrainConfig cfg = config("resnet-tiny", "um", 2 * kTestPage, OptimizerKind::kSgd);
  try {
    run_training(cfg);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.budget(), 2 * kTestPage);
    EXPECT_GT(e.requested(), e.budget());
    EXPECT_NE(std::string(e.what()).find("pages"), std::string::npos) << e.what();
  }
}

TEST(Um, SimPagesLikeTheCpuAndPrefetchingHidesFaults) {
  // The same page decisions on sim (counts depend only on the op sequence), and a virtual time.
  const auto ref = run_training(config("resnet-tiny", "none", 0, OptimizerKind::kSgd));
  const size_t budget = align_up(ref.peak / 2, kTestPage);
  for (const std::string policy : {"um", "um-prefetch"}) {
    TrainConfig cpu = config("resnet-tiny", policy, budget, OptimizerKind::kSgd), sim = cpu;
    sim.backend = "sim";
    sim.gpu = "p100-16g";
    const auto a = run_training(cpu), b = run_training(sim);
    for (size_t i = 0; i < a.iters.size(); ++i) {
      EXPECT_EQ(a.iters[i].paging.faults, b.iters[i].paging.faults) << policy;
      EXPECT_EQ(a.iters[i].paging.pages_in, b.iters[i].paging.pages_in) << policy;
      EXPECT_EQ(a.iters[i].paging.pages_out, b.iters[i].paging.pages_out) << policy;
      EXPECT_EQ(a.iters[i].paging.invalidated, b.iters[i].paging.invalidated) << policy;
    }
  }
  TrainConfig um = config("resnet-tiny", "um", budget, OptimizerKind::kSgd), pre = um, none = um;
  for (auto* c : {&um, &pre, &none}) {
    c->backend = "sim";
    c->gpu = "p100-16g";
  }
  pre.policy = "um-prefetch";
  none.policy = "none";
  none.budget = 0;
  none.policy_options.erase("um-page-size");
  const double t_um = run_training(um).iters.back().time_ms, t_pre = run_training(pre).iters.back().time_ms,
               t_none = run_training(none).iters.back().time_ms;
  EXPECT_GT(t_um, t_none);   // faults cost time
  EXPECT_LT(t_pre, t_um);    // prefetching hides part of it
}

TEST(UmCli, BadPageSizeOrLookaheadExitsTwoAndWritesNothing) {
  const std::string report = vtensor::test::temp_path("um", "report.json");
  std::filesystem::remove(report);
  const std::string base = "train --model resnet-tiny --iters 1 --budget 2MiB --report " + report + " ";
  auto r = vtensor::test::run_cli(base + "--policy um --um-page-size 3000");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--um-page-size must be a power of two from 4.00 KiB to 1.00 GiB"), std::string::npos) << r.output;
  r = vtensor::test::run_cli(base + "--policy um-prefetch --um-lookahead 0");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--um-lookahead must be a kernel count from 1 to 64"), std::string::npos) << r.output;
  r = vtensor::test::run_cli(base + "--policy um-prefetch --um-lookahead 65");
  EXPECT_EQ(r.code, 2) << r.output;
  r = vtensor::test::run_cli(base + "--policy um --um-lookahead 4");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("applies to --policy um-prefetch only"), std::string::npos) << r.output;
  r = vtensor::test::run_cli(base + "--policy lru --um-page-size 64KiB");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_FALSE(std::filesystem::exists(report));
  r = vtensor::test::run_cli(base + "--policy um-prefetch --um-page-size 64KiB --um-lookahead 2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("um: faults"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(report));
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  const auto& um = j["iterations"][0]["unified_memory"];
  for (const char* key : {"faults", "pages_in", "pages_out", "prefetch_hits", "prefetch_late", "prefetch_useless",
                          "pre_evictions", "invalidated_pages", "stall_ms", "peak_device_bytes"})
    EXPECT_TRUE(um.contains(key)) << key;
  EXPECT_LE(um["peak_device_bytes"].get<size_t>(), size_t{2} << 20);
  EXPECT_EQ(j["policy_report"]["lookahead"], 2);
  std::filesystem::remove(report);
}

}  // namespace
