// End-to-end: gradient checkpointing (policy `checkpoint`) trains the tiny presets bit for bit
// like `none` below its peak, re-runs exactly the ops its plan expects (at most one forward
// pass), and runs out of memory with the usual error under a budget below what it needs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/models/models.h"
#include "vtensor/policy/checkpoint.h"
#include "vtensor/policy/vdnn.h"
#include "vtensor/train/trainer.h"

#include "tests/support/training.h"

using namespace vtensor;

namespace {

bool is_transformer(const std::string& model) { return model.rfind("gpt", 0) == 0 || model.rfind("bert", 0) == 0; }

TrainConfig config(const std::string& model, const std::string& policy, size_t budget, int iters) {
  TrainConfig cfg;
  cfg.model.name = model;
  cfg.policy = policy;
  cfg.budget = budget;
  cfg.iters = iters;
  if (is_transformer(model)) {  // Adam: m and v must match too
    cfg.optimizer.kind = OptimizerKind::kAdam;
    cfg.optimizer.lr = 1e-3f;
  }
  return cfg;
}

class CheckpointTiny : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointTiny, MatchesNoneBitForBitBelowItsPeak) {
  const int iters = 3;
  const test::RunOutcome base = test::run_training(config(GetParam(), "none", 0, iters));
  const test::RunOutcome r = test::run_training(config(GetParam(), "checkpoint", 0, iters));
  test::expect_bit_identical(base, r);
  EXPECT_LT(r.peak, base.peak) << "checkpointing must lower the peak";
  EXPECT_EQ(r.swapped_out, 0u) << "checkpointing never swaps";

  const auto& rep = r.result.policy_report;
  ASSERT_TRUE(rep.is_object());
  const int layers = rep["layers"], segments = rep["segments"], forward_ops = rep["forward_ops"];
  const int expected = rep["expected_recomputed_ops_per_iteration"];
  EXPECT_GE(segments, 2);
  EXPECT_LE(segments, layers);
  EXPECT_LE(rep["planned_peak_bytes"].get<size_t>(), rep["sqrt_plan_peak_bytes"].get<size_t>())
      << "the search compares the sqrt(L) plan too";
  EXPECT_GT(rep["dropped_bytes_per_iteration"].get<size_t>(), 0u);
  // Chen's scheme: each segment but the last runs its forward once more, so at most one extra
  // forward pass; the memory manager re-runs each of those ops exactly once.
  EXPECT_GT(expected, 0);
  EXPECT_LT(expected, forward_ops);
  for (const auto& s : r.iters) {
    EXPECT_EQ(s.counters.recomputed_ops, static_cast<uint64_t>(expected)) << "iteration " << s.iteration;
    EXPECT_EQ(s.counters.evictions, 0u) << "no eviction on demand";
  }
  EXPECT_GT(rep["recompute_ms"].get<double>(), 0.0);
  EXPECT_EQ(rep["planned_peak_bytes"].get<size_t>(), r.peak) << "the planned peak replays the executor exactly";

  // The restores by recomputation (recompute_chains): each names the backward op that needed it
  // and the tensor, and together they are the iteration's recomputations. A segment's tensor
  // needed first re-runs the segment's ops before it: one chain of several ops (not on vgg-tiny,
  // whose segments drop one convolution's output at a time, its source a checkpoint).
  const IterationStats& last = r.iters.back();
  uint64_t ops = 0, restored = 0;
  double ms = 0;
  for (const RecomputeChain& c : last.recompute_chains) {
    ASSERT_GE(c.op, 0);
    EXPECT_GE(c.ops, 1u);
    EXPECT_FALSE(c.tensor.empty());
    EXPECT_NE(c.op_name.find(".bwd"), std::string::npos) << c.op_name << ": checkpointing restores in the backward";
    ops += c.ops, ms += c.ms, restored += c.restored_bytes;
  }
  EXPECT_EQ(ops, last.counters.recomputed_ops);
  EXPECT_NEAR(ms, last.counters.recompute_ms, 1e-9 * ms);
  uint64_t by_kind = 0;
  for (const RecomputeByKind& k : last.recompute_by_kind) by_kind += k.restored_bytes;
  EXPECT_EQ(restored, by_kind);
  const auto json_chains = nlohmann::json::parse(report_json(r.result))["iterations"].back()["recompute_chains"];
  ASSERT_EQ(json_chains.size(), last.recompute_chains.size());
  if (GetParam() != "vgg-tiny") {
    EXPECT_LT(last.recompute_chains.size(), last.counters.recomputed_ops) << "no chain re-ran a source";
    const std::string line = format_chain_line(last);
    EXPECT_EQ(line.rfind("longest recompute chain: ", 0), 0u) << line;
  }
}

// Below what the plan needs, the usual OutOfMemoryError (nothing evicted on demand), naming the
// planned peak as the smallest budget known to work; at exactly that budget it trains.
TEST_P(CheckpointTiny, OutOfMemoryBelowWhatItNeeds) {
  const test::RunOutcome r = test::run_training(config(GetParam(), "checkpoint", 0, 2));
  const size_t planned = r.result.policy_report["planned_peak_bytes"];
  const size_t too_small = align_up(planned * 9 / 10);
  try {
    test::run_training(config(GetParam(), "checkpoint", too_small, 2));
    FAIL() << "trained at 90% of its planned peak";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("policy 'checkpoint' found nothing more to evict"), std::string::npos)
        << e.what();
    EXPECT_EQ(e.budget(), too_small);
    ASSERT_TRUE(e.smallest_working_budget().has_value());
    EXPECT_EQ(*e.smallest_working_budget(), planned);
  }
  const test::RunOutcome fits = test::run_training(config(GetParam(), "checkpoint", planned, 2));
  EXPECT_EQ(fits.peak, planned) << "a static plan reaches the same peak under any budget that fits";
}

INSTANTIATE_TEST_SUITE_P(Models, CheckpointTiny, ::testing::Values("resnet-tiny", "vgg-tiny", "gpt-tiny", "bert-tiny"));

// The plan on its own: checkpoints are read by a later segment, the last segment keeps its
// tensors, every drop comes after the tensor's last forward access and before backward.
TEST(CheckpointPlan, SegmentsCheckpointsAndDropPoints) {
  for (const char* model : {"resnet-tiny", "gpt-tiny", "bert-base", "resnet50"}) {
    SCOPED_TRACE(model);
    ModelConfig m;
    m.name = model;
    m.batch = 2;
    Graph g = build_model(m);
    build_backward(g, OptimizerConfig{});
    const CheckpointPlan p = plan_checkpoint(g);
    ASSERT_GE(p.segments.size(), 2u);
    EXPECT_NEAR(static_cast<double>(p.segments.size()), std::sqrt(static_cast<double>(p.layers)), 1.0);
    std::vector<int> seg_of_op(g.num_ops(), -1);
    for (size_t s = 0; s < p.segments.size(); ++s) {
      const auto& seg = p.segments[s];
      ASSERT_LE(seg.first_op, seg.last_op);
      if (s > 0) EXPECT_EQ(seg.first_op, p.segments[s - 1].last_op + 1) << "segments are consecutive";
      for (int o = seg.first_op; o <= seg.last_op; ++o) seg_of_op[static_cast<size_t>(o)] = static_cast<int>(s);
      if (s + 1 < p.segments.size()) EXPECT_FALSE(seg.checkpoints.empty());
    }
    EXPECT_EQ(p.segments.back().dropped, 0) << "the last segment is kept";
    size_t bytes = 0;
    int first_backward = -1;
    for (const Op& op : g.ops())
      if ((op.backward || op.optimizer) && first_backward < 0) first_backward = op.index;
    for (const Action& a : p.plan.actions) {
      EXPECT_EQ(a.kind, ActionKind::kDrop);
      EXPECT_LT(a.op, first_backward);
      const TensorInfo& t = g.tensor(a.tensor);
      EXPECT_EQ(t.kind, TensorKind::kActivation);
      bytes += t.bytes();
      for (const Op& op : g.ops()) {
        for (TensorId in : op.inputs)
          if (in == a.tensor && !op.backward && !op.optimizer) EXPECT_LE(op.index, a.op) << t.name;
      }
      for (const auto& seg : p.segments)
        for (TensorId c : seg.checkpoints) EXPECT_NE(c, a.tensor) << "a checkpoint is never dropped";
    }
    EXPECT_EQ(bytes, p.dropped_bytes);
    EXPECT_LE(p.expected_recomputed_ops, p.segment_recompute_ops) << "no more than Chen's re-run of each segment";
    EXPECT_LT(p.segment_recompute_ops, p.forward_ops);
    // Every checkpoint is read by a forward op of a later segment.
    for (size_t s = 0; s < p.segments.size(); ++s)
      for (TensorId c : p.segments[s].checkpoints) {
        bool later = false;
        for (const Op& op : g.ops())
          for (TensorId in : op.inputs) {
            TensorId b = in;
            while (g.tensor(b).view_of != kNoTensor) b = g.tensor(b).view_of;
            if (b == c && seg_of_op[static_cast<size_t>(op.index)] > static_cast<int>(s)) later = true;
          }
        EXPECT_TRUE(later) << g.tensor(c).name;
      }
  }
}

// With no drops the replay is the unmanaged run: vDNN's independent replay and the measured
// peak of `none` agree with it.
TEST(CheckpointPlan, PeakOfAnEmptyPlanIsNonesPeak) {
  for (const char* model : {"resnet-tiny", "vgg-tiny", "gpt-tiny", "bert-tiny"}) {
    SCOPED_TRACE(model);
    const TrainConfig cfg = config(model, "none", 0, 1);
    Graph g = build_model(cfg.model);
    build_backward(g, cfg.optimizer);
    const size_t predicted = predict_drop_plan_peak(g, Plan{});
    EXPECT_EQ(predicted, predict_peak(g, Plan{}, {}));
    EXPECT_EQ(predicted, test::run_training(cfg).peak);
  }
}

TEST(CheckpointPlan, NegativeSegmentCountIsRejected) {
  ModelConfig m;
  m.name = "mlp-tiny";
  Graph g = build_model(m);
  build_backward(g, OptimizerConfig{});
  EXPECT_THROW(plan_checkpoint(g, -1), std::invalid_argument);
  EXPECT_EQ(plan_checkpoint(g, 1).segments.size(), 1u);
  EXPECT_TRUE(plan_checkpoint(g, 1).plan.actions.empty()) << "one segment is the last: nothing dropped";
}

// --checkpoint-segments: the segment count is the user's; more segments keep more checkpoints
// and drop more, and each count still matches `none` bit for bit.
TEST(CheckpointSegments, CountFromTheConfigAndStillLossless) {
  const test::RunOutcome base = test::run_training(config("resnet-tiny", "none", 0, 2));
  for (int k : {1, 2, 4, 8}) {
    SCOPED_TRACE(k);
    TrainConfig cfg = config("resnet-tiny", "checkpoint", 0, 2);
    cfg.policy_options.set("checkpoint-segments", k);
    const test::RunOutcome r = test::run_training(cfg);
    const auto& rep = r.result.policy_report;
    EXPECT_EQ(rep["segments"].get<int>(), k);
    EXPECT_EQ(rep["checkpoints"].get<int>() >= k - 1, true) << "every segment but the last hands on a checkpoint";
    test::expect_bit_identical(base, r);
    if (k == 1) {  // one segment is the last: kept whole
      EXPECT_EQ(rep["dropped_bytes_per_iteration"].get<size_t>(), 0u);
      EXPECT_EQ(r.peak, base.peak);
    } else {
      EXPECT_LT(r.peak, base.peak);
    }
  }
}

// Paper scale on the sim backend: the memory manager re-runs exactly the ops the plan expects.
// The budget is the searched plan's lowest peak, so the search keeps a plan that drops.
TEST(CheckpointSim, RecomputedOpsMatchThePlanAtPaperScale) {
  for (const char* model : {"resnet50", "bert-base"}) {
    SCOPED_TRACE(model);
    TrainConfig cfg = config(model, "checkpoint", 0, 2);
    cfg.backend = "sim";
    cfg.gpu = "p100-16g";
    cfg.model.batch = 8;
    Graph g = build_model(cfg.model);
    build_backward(g, cfg.optimizer);
    plan_checkpoint_search(g, &cfg.budget);
    const TrainResult r = Trainer(cfg).run();
    const int expected = r.policy_report["expected_recomputed_ops_per_iteration"];
    EXPECT_GT(expected, 0);
    for (const auto& s : r.iterations) EXPECT_EQ(s.counters.recomputed_ops, static_cast<uint64_t>(expected));
    EXPECT_EQ(r.policy_report["planned_peak_bytes"].get<size_t>(), test::max_peak(r.iterations));
    TrainConfig none = cfg;
    none.policy = "none";
    none.budget = 0;  // the whole GPU
    EXPECT_LT(test::max_peak(r.iterations), test::max_peak(Trainer(none).run().iterations));
  }
}

}  // namespace

namespace {

Graph build(const std::string& model, int batch) {
  ModelConfig m;
  m.name = model;
  m.batch = batch;
  Graph g = build_model(m);
  build_backward(g, OptimizerConfig{});
  return g;
}

bool same_plan(const CheckpointPlan& a, const CheckpointPlan& b) {
  if (a.plan.actions.size() != b.plan.actions.size() || a.segments.size() != b.segments.size()) return false;
  for (size_t i = 0; i < a.plan.actions.size(); ++i)
    if (a.plan.actions[i].tensor != b.plan.actions[i].tensor || a.plan.actions[i].op != b.plan.actions[i].op) return false;
  for (size_t s = 0; s < a.segments.size(); ++s)
    if (a.segments[s].first_op != b.segments[s].first_op || a.segments[s].checkpoints != b.segments[s].checkpoints) return false;
  return a.rule == b.rule && a.threshold_bytes == b.threshold_bytes;
}

// The search compares the sqrt(L) plan among others and keeps the lowest predicted peak, so it
// is never above it; its reported peak is the replay of its own plan; the same graph, built
// twice, gives the same plan.
TEST(CheckpointSearch, NeverAboveTheSqrtPlanAndDeterministic) {
  for (const char* model : {"resnet-tiny", "vgg-tiny", "gpt-tiny", "bert-tiny", "vgg16", "resnet50", "bert-base"}) {
    SCOPED_TRACE(model);
    const int batch = std::string(model).find("tiny") == std::string::npos ? 64 : 0;  // 0: the preset's
    const Graph g = build(model, batch);
    size_t peak = 0;
    const CheckpointPlan p = plan_checkpoint_search(g, &peak);
    EXPECT_EQ(peak, predict_drop_plan_peak(g, p.plan));
    EXPECT_LE(peak, predict_drop_plan_peak(g, plan_checkpoint(g).plan));
    EXPECT_LT(peak, predict_drop_plan_peak(g, Plan{}));
    EXPECT_GT(p.candidates, static_cast<int>(std::lround(std::sqrt(static_cast<double>(p.layers)))));
    ASSERT_GE(p.segments.size(), 2u);
    EXPECT_EQ(p.segments.back().dropped, 0) << "the last segment is kept";
    const Graph again = build(model, batch);
    size_t peak_again = 0;
    EXPECT_TRUE(same_plan(p, plan_checkpoint_search(again, &peak_again)));
    EXPECT_EQ(peak, peak_again);
  }
}

// VGG-16 at paper scale (sim): the sqrt(L) plan keeps the huge first conv outputs as
// checkpoints; the searched plan drops them and fits a budget the sqrt(L) plan runs out in,
// training with the planned peak and recomputing what it planned.
TEST(CheckpointSearch, FitsABudgetTheSqrtPlanDoesNot) {
  const int batch = 64;
  const Graph g = build("vgg16", batch);
  size_t searched = 0;
  const CheckpointPlan p = plan_checkpoint_search(g, &searched);
  const CheckpointPlan fixed = plan_checkpoint(g);
  const size_t sqrt_peak = predict_drop_plan_peak(g, fixed.plan);
  ASSERT_LT(searched, sqrt_peak);
  // The sqrt(L) plan's largest checkpoint (a first-block conv output, the largest activation of
  // the network) is dropped by the searched plan.
  TensorId largest = kNoTensor;
  for (const auto& s : fixed.segments)
    for (TensorId c : s.checkpoints)
      if (largest == kNoTensor || g.tensor(c).bytes() > g.tensor(largest).bytes()) largest = c;
  ASSERT_NE(largest, kNoTensor);
  bool dropped = false;
  for (const Action& a : p.plan.actions) dropped |= a.tensor == largest;
  EXPECT_TRUE(dropped) << g.tensor(largest).name;
  for (const auto& s : p.segments)
    for (TensorId c : s.checkpoints) EXPECT_LT(g.tensor(c).bytes(), g.tensor(largest).bytes()) << g.tensor(c).name;

  TrainConfig cfg = config("vgg16", "checkpoint", searched, 2);
  cfg.backend = "sim";
  cfg.gpu = "p100-16g";
  cfg.model.batch = batch;
  const TrainResult r = Trainer(cfg).run();
  EXPECT_EQ(test::max_peak(r.iterations), searched);
  EXPECT_EQ(r.policy_report["planned_peak_bytes"].get<size_t>(), searched);
  EXPECT_EQ(r.policy_report["sqrt_plan_peak_bytes"].get<size_t>(), sqrt_peak);
  const int expected = r.policy_report["expected_recomputed_ops_per_iteration"];
  for (const auto& s : r.iterations) EXPECT_EQ(s.counters.recomputed_ops, static_cast<uint64_t>(expected));

  cfg.policy_options.set("checkpoint-segments", static_cast<int>(fixed.segments.size()));
  try {
    Trainer(cfg).run();
    FAIL() << "the sqrt(L) plan trained under the searched plan's peak";
  } catch (const OutOfMemoryError& e) {
    ASSERT_TRUE(e.smallest_working_budget().has_value());
    EXPECT_EQ(*e.smallest_working_budget(), sqrt_peak);
  }
}

}  // namespace

namespace {

// With a budget the search keeps, among the plans that fit, the one recomputing the fewest
// FLOPs: more budget never costs more recomputation, a budget none's peak fits recomputes
// nothing, and a budget below every plan falls back to the lowest peak.
TEST(CheckpointBudget, CheapestPlanThatFits) {
  for (const char* model : {"resnet50", "bert-base", "vgg16"}) {
    SCOPED_TRACE(model);
    const Graph g = build(model, 32);
    size_t lowest = 0;
    const CheckpointPlan low = plan_checkpoint_search(g, &lowest);
    EXPECT_EQ(low.choice, "lowest peak");
    const size_t none_peak = predict_drop_plan_peak(g, Plan{});
    ASSERT_LT(lowest, none_peak);
    double prev_flops = -1;
    int prev_ops = -1;
    for (int step = 0; step <= 8; ++step) {  // budgets from the lowest peak up to none's
      const size_t budget = lowest + (none_peak - lowest) * static_cast<size_t>(step) / 8;
      SCOPED_TRACE(budget);
      size_t peak = 0;
      const CheckpointPlan p = plan_checkpoint_search(g, &peak, budget);
      EXPECT_EQ(p.choice, "fewest recomputed FLOPs within the budget");
      EXPECT_LE(peak, budget);
      EXPECT_EQ(peak, predict_drop_plan_peak(g, p.plan));
      EXPECT_LE(p.expected_recompute_flops, low.expected_recompute_flops);
      if (prev_flops >= 0) EXPECT_LE(p.expected_recompute_flops, prev_flops) << "more budget, no more recomputation";
      if (step == 0) EXPECT_EQ(peak, lowest) << "only the lowest-peak plans fit";
      if (step == 8) {
        EXPECT_EQ(p.rule, "no drops");
        EXPECT_TRUE(p.plan.actions.empty());
        EXPECT_EQ(p.expected_recomputed_ops, 0);
      }
      if (step > 0 && step < 8) EXPECT_GT(p.expected_recomputed_ops, 0) << "none's peak does not fit";
      prev_flops = p.expected_recompute_flops;
      prev_ops = p.expected_recomputed_ops;
    }
    EXPECT_EQ(prev_ops, 0);
    size_t peak = 0;
    const CheckpointPlan below = plan_checkpoint_search(g, &peak, lowest - 1);
    EXPECT_EQ(below.choice, "lowest peak (none fits the budget)");
    EXPECT_EQ(peak, lowest);
    EXPECT_TRUE(same_plan(below, low));
    size_t again = 0;  // deterministic
    EXPECT_TRUE(same_plan(plan_checkpoint_search(g, &again, (lowest + none_peak) / 2),
                          plan_checkpoint_search(build(model, 32), &peak, (lowest + none_peak) / 2)));
    EXPECT_EQ(again, peak);
  }
}

// On the cpu backend: a generous budget recomputes less than a tight one (nothing at none's
// peak); every budget trains bit-identical to none with the planned peak measured.
TEST(CheckpointBudget, TrainsWithinTheBudgetAndRecomputesLessWhenGenerous) {
  for (const char* model : {"resnet-tiny", "gpt-tiny"}) {
    SCOPED_TRACE(model);
    const int iters = 2;
    const test::RunOutcome base = test::run_training(config(model, "none", 0, iters));
    const test::RunOutcome unaware = test::run_training(config(model, "checkpoint", 0, iters));
    const auto& urep = unaware.result.policy_report;
    EXPECT_EQ(urep["choice"].get<std::string>(), "lowest peak") << "no --budget on cpu: unlimited";
    const size_t tight = urep["planned_peak_bytes"];
    const size_t mid = align_up((tight + base.peak) / 2);
    std::vector<double> flops;
    std::vector<int> ops;
    for (size_t budget : {tight, mid, base.peak}) {
      SCOPED_TRACE(budget);
      const test::RunOutcome r = test::run_training(config(model, "checkpoint", budget, iters));
      test::expect_bit_identical(base, r);
      const auto& rep = r.result.policy_report;
      EXPECT_EQ(rep["choice"].get<std::string>(), "fewest recomputed FLOPs within the budget");
      EXPECT_LE(r.peak, budget);
      if (budget == tight) EXPECT_EQ(r.peak, tight) << "only the lowest-peak plans fit";
      EXPECT_EQ(rep["planned_peak_bytes"].get<size_t>(), r.peak) << "planned = measured";
      const int expected = rep["expected_recomputed_ops_per_iteration"];
      for (const auto& s : r.iters) EXPECT_EQ(s.counters.recomputed_ops, static_cast<uint64_t>(expected));
      flops.push_back(rep["expected_recompute_flops_per_iteration"].get<double>());
      ops.push_back(expected);
    }
    EXPECT_GT(ops[0], 0);
    EXPECT_LE(flops[1], flops[0]);
    EXPECT_EQ(ops[2], 0) << "none's peak fits: nothing dropped";
    EXPECT_EQ(flops[2], 0.0);
  }
}

}  // namespace
