// maxbatch and sweep on the sim backend, through the library and the command line.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "vtensor/memory/allocator.h"
#include "vtensor/train/experiments.h"

#include "tests/support/cli.h"

using namespace vtensor;

namespace {

TrainConfig sim_config(const std::string& model, const std::string& policy, size_t budget) {
  TrainConfig cfg;
  cfg.model.name = model;
  cfg.policy = policy;
  cfg.backend = "sim";
  cfg.gpu = "p100-16g";
  cfg.budget = budget;
  cfg.iters = 3;
  return cfg;
}

TEST(MaxBatch, TheFoundBatchTrainsAndTheNextDoesNot) {
  const size_t budget = size_t{4} << 20;
  for (const std::string policy : {"none", "lru-recompute"}) {
    SCOPED_TRACE(policy);
    const TrainConfig cfg = sim_config("vgg-tiny", policy, budget);
    int probes = 0;
    MaxBatchResult r = max_batch(cfg, 1 << 20, [&](int, const RunSummary&) { ++probes; });
    ASSERT_GT(r.batch, 1);
    EXPECT_EQ(static_cast<size_t>(probes), r.probes.size());
    EXPECT_LE(r.at_batch.peak_allocated, budget);
    EXPECT_GT(r.at_batch.iteration_ms, 0.0);
    TrainConfig next = cfg;
    next.model.batch = r.batch + 1;
    EXPECT_FALSE(run_summary(next).ok);
    next.model.batch = r.batch;
    EXPECT_TRUE(run_summary(next).ok);
  }
  // Recomputation trains a larger batch than none in the same budget.
  EXPECT_GT(max_batch(sim_config("vgg-tiny", "lru-recompute", budget)).batch,
            max_batch(sim_config("vgg-tiny", "none", budget)).batch);
}

TEST(Sweep, OomIsARowNotAnAbort) {
  auto rows = sweep(sim_config("resnet-tiny", "none", 0), {"none", "lru"}, parse_budgets("100%,40%", "--budgets"), {});
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& r : rows) {
    EXPECT_GT(r.unmanaged_peak, 0u);
    if (r.budget_label == "100%") EXPECT_TRUE(r.run.ok) << r.policy;
    if (r.run.ok) EXPECT_LE(r.run.peak_allocated, r.budget);
  }
  EXPECT_FALSE(rows[2].run.ok);  // none at 40%
  EXPECT_TRUE(rows[3].run.ok);   // lru at 40%
  EXPECT_GT(rows[3].run.swapped_out_bytes, 0u);
  EXPECT_GT(rows[3].run.peak_host, 0u);  // lru's swaps hold host memory
  EXPECT_EQ(rows[0].run.peak_host, 0u);  // none never swaps
  EXPECT_THROW(parse_budgets("50%,abc", "--budgets"), std::invalid_argument);
  EXPECT_THROW(parse_batches("8,-1", "--batches"), std::invalid_argument);
  EXPECT_THROW(sweep(sim_config("resnet-tiny", "none", 0), {"nope"}, parse_budgets("50%", "b"), {}), std::invalid_argument);
}

TEST(Sweep, OnCpuEachRunIsComparedBitForBitWithTheUnmanagedRun) {
  TrainConfig cfg;
  cfg.model.name = "mlp-tiny";
  cfg.iters = 4;
  auto rows = sweep(cfg, {"lru", "lru-recompute", "capuchin"}, parse_budgets("50%", "--budgets"), {});
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& r : rows) {
    SCOPED_TRACE(r.policy);
    ASSERT_TRUE(r.run.ok) << r.run.error;
    EXPECT_LE(r.run.peak_allocated, r.budget);
    EXPECT_EQ(r.run.losses.size(), 4u);
    EXPECT_EQ(r.identical, "yes");
    EXPECT_GT(r.unmanaged_ms, 0.0);
  }
  // sim holds no values: nothing to compare.
  auto sim_rows = sweep(sim_config("mlp-tiny", "none", 0), {"lru"}, parse_budgets("50%", "--budgets"), {});
  EXPECT_EQ(sim_rows.at(0).identical, "");
}

TEST(Sweep, UnderUnifiedMemoryThePeakIsTheDevicePagesAndMigrationsCountAsMoved) {
  TrainConfig cfg;
  cfg.model.name = "resnet-tiny";
  cfg.iters = 3;
  cfg.policy_options.set("um-page-size", size_t{16} << 10);
  auto rows = sweep(cfg, {"um", "um-prefetch"}, parse_budgets("50%", "--budgets"), {});
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    SCOPED_TRACE(r.policy);
    ASSERT_TRUE(r.run.ok) << r.run.error;
    EXPECT_LE(r.run.peak_device, r.budget);           // the frames the budget holds
    EXPECT_GT(r.run.peak_allocated, r.budget);        // the managed range holds every tensor
    EXPECT_GT(r.run.swapped_in_bytes, 0u);            // pages migrated in
    EXPECT_EQ(r.run.swapped_in_bytes % (size_t{16} << 10), 0u);
    EXPECT_EQ(r.identical, "yes");
  }
}

TEST(Sweep, SameValuesComparesBitsNotNumbers) {
  RunSummary a;
  a.losses = {1.5f, 0.0f};
  a.weights_digest = 42;
  RunSummary b = a;
  EXPECT_TRUE(same_values(a, b));
  b.losses[1] = -0.0f;  // equal as numbers, not as bits
  EXPECT_FALSE(same_values(a, b));
  b = a;
  b.weights_digest = 43;
  EXPECT_FALSE(same_values(a, b));
  b = a;
  b.losses.pop_back();
  EXPECT_FALSE(same_values(a, b));
  a.losses[0] = b.losses[0] = std::nanf("");  // the same NaN bits: identical
  b.losses.push_back(0.0f);
  EXPECT_TRUE(same_values(a, b));
  EXPECT_FALSE(same_values(RunSummary{}, RunSummary{}));  // no values (sim)
}

using Result = vtensor::test::CliResult;
Result run(const std::string& args) { return vtensor::test::run_cli(args); }

std::string temp_path(const std::string& name) { return vtensor::test::temp_path("exp", name); }

TEST(CliExperiments, SweepWritesCsvAndJson) {
  for (const std::string ext : {".csv", ".json"}) {
    const std::string out = temp_path("sweep" + ext);
    Result r = run("sweep --model mlp-tiny --gpu v100-16g --policies none,lru-recompute --budgets 100%,50% --batches 8,16 --out " + out);
    ASSERT_EQ(r.code, 0) << r.output;
    std::ifstream in(out);
    ASSERT_TRUE(in.good());
    if (ext == ".csv") {
      std::string line;
      int lines = 0, oom = 0;
      while (std::getline(in, line)) {
        ++lines;
        if (line.find(",oom,") != std::string::npos) ++oom;
      }
      EXPECT_EQ(lines, 1 + 2 * 2 * 2);
      in.clear();
      in.seekg(0);
      std::getline(in, line);
      EXPECT_NE(line.find(",peak_host_bytes"), std::string::npos) << line;
      EXPECT_GE(oom, 2);  // none at 50%, both batches
    } else {
      auto j = nlohmann::json::parse(in);
      ASSERT_EQ(j.size(), 8u);
      EXPECT_EQ(j[0]["status"], "ok");
      EXPECT_TRUE(j[0].contains("peak_host_bytes")) << j[0].dump();
    }
    std::filesystem::remove(out);
  }
  Result bad = run("sweep --model mlp-tiny --gpu v100-16g --budgets 50%,x --out " + temp_path("x.csv"));
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--budgets"), std::string::npos) << bad.output;
  Result ext = run("sweep --model mlp-tiny --gpu v100-16g --out " + temp_path("x.txt"));
  EXPECT_EQ(ext.code, 2) << ext.output;
}

TEST(CliExperiments, SweepOnCpuReportsBitIdentity) {
  const std::string out = temp_path("cpu_sweep.csv");
  Result r = run("sweep --backend cpu --model mlp-tiny --iters 3 --policies lru,lru-recompute --budgets 50% --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("none (unmanaged)"), std::string::npos) << r.output;
  std::ifstream in(out);
  std::string header, line;
  std::getline(in, header);
  EXPECT_NE(header.find(",bit_identical,unmanaged_ms"), std::string::npos) << header;
  int rows = 0;
  while (std::getline(in, line)) {
    ++rows;
    EXPECT_NE(line.find(",yes,"), std::string::npos) << line;
  }
  EXPECT_EQ(rows, 2);
  std::filesystem::remove(out);
  const std::pair<std::string, std::string> bad[] = {
      {"--backend cuda --model mlp-tiny", "accepted: sim, cpu"},
      {"--backend sim --model mlp-tiny", "needs --gpu"},
      {"--backend cpu --gpu p100-16g --model mlp-tiny", "--gpu applies to --backend sim only"},
      {"--backend cpu --trace dtr:lstm", "--backend sim only"}};
  for (const auto& [args, message] : bad) {
    const std::string never = temp_path("never.csv");
    Result e = run("sweep " + args + " --out " + never);
    EXPECT_EQ(e.code, 2) << args << ": " << e.output;
    EXPECT_NE(e.output.find(message), std::string::npos) << args << ": " << e.output;
    EXPECT_FALSE(std::filesystem::exists(never));
  }
}

TEST(CliExperiments, MaxbatchPrintsProbesAndTheResult) {
  const std::string report = temp_path("maxbatch.json");
  Result r = run("maxbatch --model vgg-tiny --gpu titan-x-12g --policy none --budget 4MiB --report " + report);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("out of memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("max batch "), std::string::npos) << r.output;
  std::ifstream in(report);
  auto j = nlohmann::json::parse(in);
  EXPECT_GT(j["max_batch"].get<int>(), 1);
  EXPECT_LE(j["peak_allocated_bytes"].get<size_t>(), size_t{4} << 20);
  EXPECT_NE(r.output.find("max batch " + std::to_string(j["max_batch"].get<int>())), std::string::npos);
  // The check above the result: probed (and listed with the probes); any that trained is said.
  const auto checked = j["checked_above"].get<std::vector<int>>();
  EXPECT_FALSE(checked.empty());
  for (int b : checked) {
    EXPECT_GT(b, j["max_batch"].get<int>());
    bool probed = false;
    for (const auto& p : j["probes"]) probed |= p["batch"].get<int>() == b;
    EXPECT_TRUE(probed) << b;
  }
  for (int b : j["non_monotonic"].get<std::vector<int>>())
    EXPECT_NE(r.output.find("non-monotonic: batch " + std::to_string(b) + " also trains"), std::string::npos) << r.output;
  std::filesystem::remove(report);
  Result bad = run("maxbatch --model vgg-tiny --gpu gtx-9000");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("p100-16g"), std::string::npos) << bad.output;
}

TEST(CliExperiments, CostsListsEveryOp) {
  const std::string out = temp_path("costs.csv");
  Result r = run("costs --model resnet-tiny --gpu v100-16g --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(out);
  std::string line;
  int lines = 0, compute = 0;
  while (std::getline(in, line)) {
    ++lines;
    if (line.size() > 8 && line.substr(line.size() - 8) == ",compute") ++compute;
  }
  EXPECT_GT(lines, 100);
  EXPECT_GT(compute, 0);
  EXPECT_NE(r.output.find("ms of predicted compute"), std::string::npos) << r.output;
  std::filesystem::remove(out);
}

TEST(CliExperiments, ReplayRefusesAMalformedTraceAndReportsNothing) {
  const std::string trace = temp_path("t.jsonl"), report = temp_path("replay.json");
  ASSERT_EQ(run("train --model mlp-tiny --iters 2 --quiet --trace " + trace).code, 0);
  {
    std::ofstream(trace, std::ios::app) << "{\"type\": \"access\", \"iter\": 1\n";
  }
  Result r = run("replay --trace " + trace + " --gpu p100-16g --report " + report);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("line "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("iter 1/"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(report));
  Result sim = run("train --model mlp-tiny --iters 2 --backend sim --gpu a100-40g --report " + report);
  ASSERT_EQ(sim.code, 0) << sim.output;
  EXPECT_NE(sim.output.find("loss n/a"), std::string::npos) << sim.output;
  std::ifstream in(report);
  auto j = nlohmann::json::parse(in);
  EXPECT_TRUE(j["iterations"][0]["loss"].is_null());
  EXPECT_TRUE(j["summary"]["final_loss"].is_null());
  EXPECT_EQ(j["config"]["gpu"], "a100-40g");
  std::filesystem::remove(trace);
  std::filesystem::remove(report);
}

}  // namespace
