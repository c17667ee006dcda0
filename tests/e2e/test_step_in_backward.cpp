// The optimizer step inside the backward (OptimizerConfig::in_backward, --step-in-backward): each
// parameter's step runs once its gradient is complete and nothing after it reads the parameter;
// the run has the same bits as the step after the backward (SGD, Adam, AdamW) and never a higher
// peak, and the lossless policies under it match `none` under it bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "vtensor/core/graph.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/models/models.h"
#include "vtensor/train/trainer.h"

#include "tests/support/cli.h"
#include "tests/support/training.h"

using namespace vtensor;

namespace {

using test::RunOutcome;

TrainConfig config(const std::string& model, bool in_backward, const std::string& policy = "none", size_t budget = 0,
                   OptimizerKind optimizer = OptimizerKind::kSgd) {
  TrainConfig cfg;
  cfg.optimizer.kind = optimizer;
  if (optimizer != OptimizerKind::kSgd) cfg.optimizer.lr = 1e-3f;
  cfg.model.name = model;
  cfg.policy = policy;
  cfg.budget = budget;
  cfg.iters = 4;
  cfg.optimizer.in_backward = in_backward;
  return cfg;
}

// Optimizer state by (parameter, input slot of its step): the steps, which create it, run in
// another order under in_backward (and names repeat, e.g. a block's two weights).
std::map<std::pair<TensorId, size_t>, std::vector<float>> state_by_param(const TrainConfig& cfg) {
  Trainer t(cfg);
  t.run();
  std::map<std::pair<TensorId, size_t>, std::vector<float>> out;
  for (const Op& op : t.graph().ops())
    if (op.optimizer)
      for (size_t k = 2; k < op.inputs.size(); ++k) out[{op.inputs[0], k}] = t.read(op.inputs[k]);
  return out;
}

class StepInBackward : public ::testing::TestWithParam<std::string> {};

TEST_P(StepInBackward, EachStepFollowsItsGradientsLastWriterAndNothingAfterReadsTheParameter) {
  ModelConfig m;
  m.name = GetParam();
  Graph g = build_model(resolve_model(m));
  const int num_forward = static_cast<int>(g.num_ops());
  OptimizerConfig opt;
  opt.in_backward = true;
  build_backward(g, opt);
  int steps = 0;
  bool interleaved = false;  // some backward op after some step
  for (const Op& op : g.ops()) {
    if (!op.optimizer) {
      interleaved |= steps > 0;
      continue;
    }
    ++steps;
    const TensorId p = op.inputs[0], grad = op.inputs[1];
    // Right after the backward of its first reader: only that backward's ops (of its layer) and
    // other steps lie between the gradient's last writer and the step.
    for (int k = g.tensor(grad).producer + 1; k < op.index; ++k)
      EXPECT_TRUE(g.op(k).optimizer || g.op(k).layer == op.layer) << g.op(k).name << " before " << op.name;
    for (int k = op.index + 1; k < static_cast<int>(g.num_ops()); ++k)
      for (TensorId t : g.op(k).inputs) {
        EXPECT_NE(t, p) << g.op(k).name << " reads " << g.tensor(p).name << " after its step";
        EXPECT_NE(t, grad) << g.op(k).name << " reads " << g.tensor(grad).name << " after the step";
      }
    EXPECT_GT(op.index, num_forward);
  }
  EXPECT_EQ(steps, static_cast<int>(g.params.size()));
  EXPECT_TRUE(interleaved) << "every step after the backward: nothing moved";
}

TEST_P(StepInBackward, SameBitsAsTheStepAfterTheBackwardAndNoHigherPeak) {
  for (const OptimizerKind opt : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    SCOPED_TRACE(to_string(opt));
    const TrainConfig after_cfg = config(GetParam(), false, "none", 0, opt), in_cfg = config(GetParam(), true, "none", 0, opt);
    const RunOutcome after = test::run_training(after_cfg);
    const RunOutcome in = test::run_training(in_cfg);
    ASSERT_EQ(after.iters.size(), in.iters.size());
    for (size_t i = 0; i < after.iters.size(); ++i)
      EXPECT_EQ(0, std::memcmp(&after.iters[i].loss, &in.iters[i].loss, sizeof(float))) << "iteration " << i;
    test::expect_same_bits(after.params, in.params, "parameter");
    test::expect_same_bits(after.buffers, in.buffers, "buffer");
    const auto state_after = state_by_param(after_cfg), state_in = state_by_param(in_cfg);
    EXPECT_EQ(state_after.size(), state_in.size());
    EXPECT_TRUE(state_after == state_in) << "optimizer state differs";
    EXPECT_LE(in.peak, after.peak);
  }
}

// Under the step in the backward, the planning policies at 60% of its peak match `none` under it.
TEST_P(StepInBackward, LosslessPoliciesUnderItMatchNoneUnderIt) {
  const RunOutcome base = test::run_training(config(GetParam(), true));
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(base.peak) * 0.6));
  for (const std::string policy : {"capuchin", "auto"}) {
    SCOPED_TRACE(policy);
    TrainConfig cfg = config(GetParam(), true, policy, budget);
    if (policy == "auto") cfg.policy_options.set("auto-lp", 0).set("auto-search", 16).set("auto-window", 0).set("auto-room", 0);
    const RunOutcome r = test::run_training(cfg);
    test::expect_bit_identical(base, r);
    EXPECT_LE(r.peak, budget);
    EXPECT_GT(r.swapped_out + r.result.iterations.back().counters.recomputed_ops, 0u) << "nothing moved";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, StepInBackward,
                         ::testing::Values("mlp-tiny", "vgg-tiny", "resnet-tiny", "gpt-tiny", "bert-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// The gradients die inside the backward: on gpt-tiny, whose peak is at the end of the backward
// (the vocabulary's embedding gradients are alive then), the peak falls.
TEST(StepInBackwardPeak, FallsWhereThePeakIsAtTheEndOfTheBackward) {
  EXPECT_LT(test::run_training(config("gpt-tiny", true)).peak, test::run_training(config("gpt-tiny", false)).peak);
}

// The flag on the command line: train reports it; a trace keeps its op order, so sweep --trace
// refuses it and writes nothing.
TEST(StepInBackwardCli, TrainReportsItAndATraceRefusesIt) {
  const std::string report = ::testing::TempDir() + "sib_report.json";
  std::filesystem::remove(report);
  auto [code, out] = test::run_cli("train --model gpt-tiny --iters 1 --quiet --step-in-backward --report " + report);
  ASSERT_EQ(code, 0) << out;
  std::ifstream f(report);
  const auto j = nlohmann::json::parse(f);
  EXPECT_TRUE(j["config"]["step_in_backward"].get<bool>());
  std::filesystem::remove(report);

  auto [flag_code, flag_out] =
      test::run_cli("sweep --trace dtr:transformer --gpu p100-16g --budgets 100% --step-in-backward --out " + report);
  EXPECT_EQ(flag_code, 2) << flag_out;
  EXPECT_NE(flag_out.find("--step-in-backward applies to --model only"), std::string::npos) << flag_out;
  EXPECT_FALSE(std::filesystem::exists(report));
}

}  // namespace
