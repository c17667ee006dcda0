// Host-memory budget (--host-budget): resnet-tiny at half its unmanaged peak, where lru must
// swap, under a host budget below what lru swaps. lru-recompute still trains by dropping
// (bit-identical to none); lru runs out of host memory; planned swap-outs that do not fit are
// skipped and counted; the host figures match between cpu and sim.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/backend/backend.h"
#include "vtensor/memory/host_pool.h"
#include "vtensor/train/trainer.h"

#include "tests/support/cli.h"
#include "tests/support/training.h"

using namespace vtensor;

namespace {

constexpr int kIters = 3;

TrainConfig config(const std::string& policy, size_t budget, size_t host_budget, const std::string& backend = "cpu") {
  TrainConfig cfg;
  cfg.model.name = "resnet-tiny";
  cfg.policy = policy;
  cfg.budget = budget;
  cfg.host_budget = host_budget;
  cfg.backend = backend;
  if (backend == "sim") cfg.gpu = "p100-16g";
  cfg.iters = kIters;
  return cfg;
}

size_t peak_host(const test::RunOutcome& r) {
  size_t p = 0;
  for (const auto& s : r.iters) p = std::max(p, s.peak_host);
  return p;
}

// The device budget that forces lru to swap, the reference run, and lru's host peak there.
struct Setting {
  size_t budget = 0, lru_host = 0;
  test::RunOutcome none;
};

const Setting& setting() {
  static const Setting s = [] {
    Setting out;
    out.none = test::run_training(config("none", 0, 0));
    out.budget = align_up(out.none.peak / 2);
    out.lru_host = peak_host(test::run_training(config("lru", out.budget, 0)));
    return out;
  }();
  return s;
}

TEST(HostBudget, UnlimitedLruSwapsAndReportsItsHostPeak) {
  const Setting& s = setting();
  EXPECT_EQ(peak_host(s.none), 0u) << "none never swaps";
  EXPECT_GT(s.lru_host, 0u) << "half the peak should make lru swap";
}

TEST(HostBudget, LruRecomputeDropsInsteadAndStaysBitIdentical) {
  const Setting& s = setting();
  const size_t host = s.lru_host / 4;
  test::RunOutcome r = test::run_training(config("lru-recompute", s.budget, host));
  test::expect_bit_identical(s.none, r);
  uint64_t recomputed = 0;
  for (const auto& it : r.iters) {
    EXPECT_LE(it.peak_allocated, s.budget);
    EXPECT_LE(it.peak_host, host);
    recomputed += it.counters.recomputed_ops;
  }
  EXPECT_GT(recomputed, 0u);
}

TEST(HostBudget, LruBelowWhatItSwapsRunsOutOfHostMemory) {
  const Setting& s = setting();
  const size_t host = s.lru_host / 4;
  Trainer t(config("lru", s.budget, host));
  try {
    t.run();
    FAIL() << "expected an OutOfMemoryError naming host memory";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.memory(), MemoryKind::kHost);
    EXPECT_EQ(e.budget(), host);
    EXPECT_LE(e.in_use(), host);
    EXPECT_GT(e.in_use() + e.requested(), host) << "the refused swap must not have fitted";
    const std::string m = e.what();
    EXPECT_NE(m.find("out of host memory"), std::string::npos) << m;
    EXPECT_NE(m.find("--host-budget"), std::string::npos) << m;
    EXPECT_NE(m.find("lru"), std::string::npos) << m;
  }
  EXPECT_LE(t.memory().host_pool().held(), host);
}

TEST(HostBudget, LruWithEnoughHostIsUnchanged) {
  const Setting& s = setting();
  test::RunOutcome r = test::run_training(config("lru", s.budget, s.lru_host));
  test::expect_bit_identical(s.none, r);
  EXPECT_EQ(peak_host(r), s.lru_host);
  for (const auto& it : r.iters) EXPECT_EQ(it.counters.host_skipped_swaps, 0u);
}

TEST(HostBudget, PlannedSwapOutsThatDoNotFitAreSkippedAndCounted) {
  // vdnn-all offloads every feature map whatever the device budget; with room on the host for
  // only part of them the rest stay resident.
  const Setting& s = setting();
  const size_t all = peak_host(test::run_training(config("vdnn-all", 0, 0)));
  ASSERT_GT(all, 0u);
  const size_t host = all / 3;
  test::RunOutcome r = test::run_training(config("vdnn-all", 0, host));
  test::expect_bit_identical(s.none, r);
  uint64_t skipped = 0, moved = 0;
  for (const auto& it : r.iters) {
    EXPECT_LE(it.peak_host, host);
    skipped += it.counters.host_skipped_swaps;
    moved += it.counters.swapped_out_bytes;
  }
  EXPECT_GT(skipped, 0u);
  EXPECT_GT(moved, 0u) << "what fits is still swapped";
}

TEST(HostBudget, PeakHostIsTheSameOnCpuAndSim) {
  const Setting& s = setting();
  for (const size_t host : {size_t{0}, s.lru_host}) {
    for (const std::string policy : {"lru", "lru-recompute"}) {
      SCOPED_TRACE(policy + " host budget " + std::to_string(host));
      Trainer cpu(config(policy, s.budget, host)), sim(config(policy, s.budget, host, "sim"));
      const auto a = cpu.run(), b = sim.run();
      ASSERT_EQ(a.iterations.size(), b.iterations.size());
      for (size_t i = 0; i < a.iterations.size(); ++i) {
        EXPECT_EQ(a.iterations[i].peak_host, b.iterations[i].peak_host) << "iteration " << i;
        EXPECT_EQ(a.iterations[i].counters.host_skipped_swaps, b.iterations[i].counters.host_skipped_swaps);
      }
      EXPECT_EQ(a.host_peak, b.host_peak);
      if (policy == "lru") EXPECT_GT(a.host_peak, 0u);
    }
  }
}

TEST(HostPool, CachedBuffersCountAndAreGivenBackWhenTheBudgetNeedsRoom) {
  auto backend = make_backend("cpu", {.arena_bytes = size_t{1} << 20});
  HostPool pool(*backend);
  pool.set_budget(1000);
  void* a = pool.acquire(600);
  EXPECT_FALSE(pool.fits(500));
  pool.release(a, 600);
  EXPECT_EQ(pool.held(), 600u) << "a cached buffer stays held";
  EXPECT_TRUE(pool.fits(500)) << "cached buffers can be given back";
  void* b = pool.acquire(500);  // gives the 600-byte buffer back first
  EXPECT_EQ(pool.held(), 500u);
  EXPECT_EQ(pool.cached(), 0u);
  EXPECT_EQ(pool.peak_held(), 600u);
  EXPECT_THROW(pool.acquire(501), std::logic_error);
  pool.release(b, 500);
}

// ---- CLI

using test::run_cli;

std::string train_args(size_t budget, const std::string& host) {
  return "train --model resnet-tiny --iters 3 --quiet --budget " + std::to_string(budget) + " --host-budget " + host;
}

TEST(HostBudgetCli, LruOutOfHostMemoryExitsThreeAndWritesNoReport) {
  const Setting& s = setting();
  const std::string report = test::temp_path("host_budget", "oom.json");
  auto r = run_cli(train_args(s.budget, std::to_string(s.lru_host / 4)) + " --policy lru --report " + report);
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("out of host memory"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(report));
  EXPECT_FALSE(std::filesystem::exists(report + ".tmp"));
}

TEST(HostBudgetCli, LruRecomputeTrainsAndReportsTheHostPeakAndBudget) {
  const Setting& s = setting();
  const size_t host = s.lru_host / 4;
  const std::string report = test::temp_path("host_budget", "ok.json");
  auto r = run_cli(train_args(s.budget, std::to_string(host)) + " --policy lru-recompute --report " + report);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("host budget"), std::string::npos) << r.output;
  std::ifstream in(report);
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["config"]["host_budget_bytes"].get<size_t>(), host);
  EXPECT_EQ(j["summary"]["host_budget_bytes"].get<size_t>(), host);
  EXPECT_LE(j["summary"]["peak_host_bytes"].get<size_t>(), host);
  for (const auto& it : j["iterations"]) EXPECT_TRUE(it.contains("peak_host_bytes"));
  std::filesystem::remove(report);
}

TEST(HostBudgetCli, BadValuesExitTwoNamingTheOption) {
  for (const std::string bad : {"abc", "0", "12XB"}) {
    SCOPED_TRACE(bad);
    for (const std::string& cmd : std::vector<std::string>{
             "train --model mlp-tiny --iters 1", "maxbatch --model mlp-tiny --gpu p100-16g",
          "sweep --model mlp-tiny --gpu p100-16g --out " + test::temp_path("host_budget", "bad.csv"),
          "replay --trace dtr:none --gpu p100-16g"}) {
      auto r = run_cli(cmd + " --host-budget " + bad);
      EXPECT_EQ(r.code, 2) << cmd << ": " << r.output;
      EXPECT_NE(r.output.find("--host-budget"), std::string::npos) << cmd << ": " << r.output;
    }
  }
}

}  // namespace
