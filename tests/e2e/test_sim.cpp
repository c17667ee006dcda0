// The sim backend: the same memory figures as the cpu backend for the same model, batch,
// budget and policy (no values, a virtual clock), and paper-scale graphs in seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "vtensor/backend/sim/cost_model.h"
#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/train/trainer.h"

using namespace vtensor;

namespace {

std::vector<IterationStats> run(const std::string& model, const std::string& policy, const std::string& backend,
                                size_t budget, int iters) {
  TrainConfig cfg;
  cfg.model.name = model;
  cfg.policy = policy;
  cfg.backend = backend;
  if (backend == "sim") cfg.gpu = "p100-16g";
  cfg.budget = budget;
  cfg.iters = iters;
  Trainer t(cfg);
  return t.run().iterations;
}

size_t peak(const std::vector<IterationStats>& r) {
  size_t p = 0;
  for (const auto& s : r) p = std::max(p, s.peak_allocated);
  return p;
}

// Budgets where every policy still fits but lru / lru-recompute must swap or drop.
double fraction(const std::string& model) { return model == "vgg-tiny" ? 0.62 : model == "mlp-tiny" ? 0.7 : 0.5; }

class SimVsCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(SimVsCpu, EveryMemoryFigureIsIdentical) {
  const std::string model = GetParam();
  const int iters = 3;
  const size_t unmanaged = peak(run(model, "none", "cpu", 0, 1));
  for (const std::string policy : {"none", "lru", "lru-recompute"}) {
    SCOPED_TRACE(policy);
    const size_t budget = policy == "none" ? align_up(unmanaged) : align_up(static_cast<size_t>(unmanaged * fraction(model)));
    auto cpu = run(model, policy, "cpu", budget, iters);
    auto sim = run(model, policy, "sim", budget, iters);
    ASSERT_EQ(cpu.size(), sim.size());
    uint64_t moved = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      SCOPED_TRACE("iteration " + std::to_string(i));
      const auto &a = cpu[i], &b = sim[i];
      EXPECT_EQ(a.peak_allocated, b.peak_allocated);
      EXPECT_EQ(a.peak_reserved, b.peak_reserved);
      EXPECT_EQ(a.counters.swapped_out_bytes, b.counters.swapped_out_bytes);
      EXPECT_EQ(a.counters.swapped_in_bytes, b.counters.swapped_in_bytes);
      EXPECT_EQ(a.counters.swap_outs, b.counters.swap_outs);
      EXPECT_EQ(a.counters.prefetches, b.counters.prefetches);
      EXPECT_EQ(a.counters.dropped, b.counters.dropped);
      EXPECT_EQ(a.counters.recomputed_ops, b.counters.recomputed_ops);
      EXPECT_EQ(a.counters.evictions, b.counters.evictions);
      EXPECT_EQ(a.counters.compactions, b.counters.compactions);
      EXPECT_EQ(a.peak_host, b.peak_host);
      EXPECT_TRUE(a.has_loss);
      EXPECT_FALSE(b.has_loss);
      EXPECT_GT(b.time_ms, 0.0);
      moved += b.counters.swapped_out_bytes + b.counters.dropped;
    }
    if (policy != "none") EXPECT_GT(moved, 0u) << "the budget should force evictions";
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, SimVsCpu, ::testing::Values("mlp-tiny", "vgg-tiny", "resnet-tiny"));

TEST(Sim, ValuesAreNotAvailable) {
  TrainConfig cfg;
  cfg.model.name = "mlp-tiny";
  cfg.backend = "sim";
  cfg.gpu = "v100-16g";
  cfg.iters = 1;
  Trainer t(cfg);
  auto r = t.run();
  EXPECT_EQ(t.config().budget, size_t{16} << 30);  // the GPU's memory by default
  EXPECT_THROW(t.read_params(), std::invalid_argument);
  EXPECT_NE(report_json(r).find("\"loss\": null"), std::string::npos);
  EXPECT_NE(format_iteration_line(r.iterations[0], 1).find("loss n/a"), std::string::npos);
}

TEST(Sim, BadGpuAndBackendCombinationsAreRejected) {
  TrainConfig cfg;
  cfg.model.name = "mlp-tiny";
  cfg.backend = "sim";
  cfg.gpu = "gtx-9000";
  EXPECT_THROW({ Trainer t(cfg); }, std::invalid_argument);
  cfg.gpu = "";
  EXPECT_THROW({ Trainer t(cfg); }, std::invalid_argument);
  cfg.backend = "cpu";
  cfg.gpu = "p100-16g";
  EXPECT_THROW({ Trainer t(cfg); }, std::invalid_argument);
}

// Without memory pressure an iteration is exactly the sum of the cost model's per-op predictions.
TEST(Sim, AnUnconstrainedIterationIsTheSumOfItsOpPredictions) {
  TrainConfig cfg;
  cfg.model.name = "resnet-tiny";
  cfg.backend = "sim";
  cfg.gpu = "titan-x-12g";
  cfg.iters = 2;
  Trainer t(cfg);
  auto r = t.run();
  double sum = 0;
  for (const Op& op : t.graph().ops()) sum += predict_op(find_gpu("titan-x-12g"), t.graph(), op).total_ms;
  for (const auto& s : r.iterations) EXPECT_NEAR(s.time_ms, sum, sum * 1e-9);
  EXPECT_TRUE(r.iterations.back().recompute_by_kind.empty());  // nothing re-run: no kinds, and no line
  EXPECT_EQ(format_recompute_line(r.iterations.back()), "");
}

// Paper scale: ResNet-50 at batch 1000 on a 16 GiB P100 (Capuchin's setting) runs in seconds.
TEST(Sim, ResNet50AtBatch1000FitsOnP100WithRecomputation) {
  TrainConfig cfg;
  cfg.model.name = "resnet50";
  cfg.model.batch = 1000;
  cfg.backend = "sim";
  cfg.gpu = "p100-16g";
  cfg.policy = "none";
  cfg.iters = 1;
  EXPECT_THROW({ Trainer(cfg).run(); }, OutOfMemoryError);
  cfg.policy = "lru-recompute";
  cfg.iters = 2;
  Trainer t(cfg);
  auto r = t.run();
  for (const auto& s : r.iterations) {
    EXPECT_LE(s.peak_allocated, size_t{16} << 30);
    EXPECT_GT(s.counters.recomputed_ops, 0u);
    EXPECT_GT(s.time_ms, 1000.0);  // hundreds of GFLOP per iteration at 9.3 TFLOP/s
  }
  // The recomputations by op kind add up to the counters, and an op counts once before its
  // repeats: no kind re-ran more distinct ops than the graph has of it.
  const IterationStats& last = r.iterations.back();
  ASSERT_FALSE(last.recompute_by_kind.empty());
  uint64_t ops = 0;
  double ms = 0;
  for (size_t i = 0; i < last.recompute_by_kind.size(); ++i) {
    const RecomputeByKind& k = last.recompute_by_kind[i];
    if (i) EXPECT_LE(k.ms, last.recompute_by_kind[i - 1].ms);
    const auto of_kind =
        std::count_if(t.graph().ops().begin(), t.graph().ops().end(), [&](const Op& op) { return recompute_kind(op) == k.kind; });
    EXPECT_LE(k.count - k.repeats, static_cast<uint64_t>(of_kind)) << k.kind;
    EXPECT_GT(k.restored_bytes, 0u);
    EXPECT_LE(k.repeat_ms, k.ms);
    ops += k.count, ms += k.ms;
  }
  EXPECT_EQ(ops, last.counters.recomputed_ops);
  EXPECT_NEAR(ms, last.counters.recompute_ms, 1e-9 * ms);
  const auto rep = nlohmann::json::parse(report_json(r))["iterations"].back()["recompute_by_kind"];
  ASSERT_EQ(rep.size(), last.recompute_by_kind.size());
  EXPECT_EQ(rep[0]["kind"], last.recompute_by_kind[0].kind);
  EXPECT_NE(format_recompute_line(last).find(last.recompute_by_kind[0].kind), std::string::npos);
}

}  // namespace

// A planned policy's guided iterations against its rehearsal's prediction: the report's
// summary.replay_ratio (the CLI warns above kReplayWarnRatio). On sim auto's plan is its rehearsal.
TEST(Replay, TheRatioIsTheGuidedIterationsOverThePrediction) {
  TrainResult r;
  r.policy_report = nlohmann::json{{"predicted_time_ms", 10.0}};
  for (double ms : {100.0, 20.0, 30.0}) {
    IterationStats s;
    s.time_ms = ms;
    r.iterations.push_back(s);
  }
  ASSERT_TRUE(replay_ratio(r).has_value());
  EXPECT_DOUBLE_EQ(*replay_ratio(r), 2.5);  // (20 + 30) / 2 over 10: the measured first one left out
  EXPECT_NE(report_json(r).find("\"replay_ratio\": 2.5"), std::string::npos);
  r.iterations.resize(1);
  EXPECT_FALSE(replay_ratio(r).has_value());
  r.policy_report = nlohmann::json{{"mode", "capuchin"}};
  EXPECT_FALSE(replay_ratio(r).has_value());

  TrainConfig cfg;
  cfg.model.name = "resnet-tiny";
  cfg.backend = "sim", cfg.gpu = "p100-16g";
  cfg.policy = "auto";
  cfg.policy_options.set("auto-clock", "wall");
  cfg.policy_options.set("auto-seconds", 1);
  cfg.iters = 3;
  cfg.budget = 3u << 20;
  Trainer t(cfg);
  const TrainResult a = t.run();
  ASSERT_TRUE(replay_ratio(a).has_value());
  EXPECT_NEAR(*replay_ratio(a), 1.0, 0.02) << "on sim auto's guided iterations are what it rehearsed";
}
