// vDNN end to end: the three variants train bit-identically to `none` while offloading, the
// planned peak is the measured one, vdnn-dyn walks its ladder, and a budget below what
// vdnn-all needs is an OutOfMemoryError that says how much it needs.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/models/models.h"
#include "vtensor/train/experiments.h"
#include "vtensor/train/trainer.h"

#include "tests/support/cli.h"

#include "tests/support/training.h"

using namespace vtensor;

namespace {

using VdnnRun = test::RunOutcome;

VdnnRun train(const std::string& model, const std::string& policy, size_t budget, int iters, int batch = 0,
              bool inplace_relu_grad = false) {
  TrainConfig cfg;
  cfg.inplace_relu_grad = inplace_relu_grad;
  cfg.model.name = model;
  cfg.model.batch = batch;
  cfg.policy = policy;
  cfg.budget = budget;
  cfg.iters = iters;
  return test::run_training(cfg);
}

using test::expect_bit_identical;

constexpr int kIters = 4;

class Vdnn : public ::testing::TestWithParam<std::string> {};

// Below none's peak, so `none` could not run there.
TEST_P(Vdnn, AllAndConvOffloadBelowNonesPeakBitForBit) {
  const VdnnRun base = train(GetParam(), "none", 0, kIters);
  const size_t budget = base.peak - kAllocAlignment;
  for (const std::string policy : {"vdnn-all", "vdnn-conv"}) {
    SCOPED_TRACE(policy);
    const VdnnRun r = train(GetParam(), policy, budget, kIters);
    expect_bit_identical(base, r);
    EXPECT_GT(r.swapped_out, 0u);
    EXPECT_EQ(r.swapped_in, r.swapped_out);  // everything offloaded comes back
    EXPECT_LT(r.peak, base.peak);
    EXPECT_LE(r.peak, budget);
    EXPECT_EQ(r.peak, r.result.policy_report["predicted_peak_bytes"].get<size_t>()) << "the plan's peak is the measured one";
    size_t layers_offloaded = 0, bytes = 0;
    for (const auto& l : r.result.policy_report["layers"]) {
      layers_offloaded += l["offloaded"].get<bool>();
      bytes += l["offloaded_bytes"].get<size_t>();
    }
    EXPECT_GT(layers_offloaded, 0u);
    EXPECT_EQ(bytes * kIters, r.swapped_out);
  }
}

// ReLU backward writing dx over a dying dy (vDNN's cuDNN ReLU): same bits as `none` without it,
// every relu backward of the CNNs shares, the peak does not rise, and the vDNN plans still
// predict the measured peak exactly below the in-place `none`'s peak.
TEST_P(Vdnn, InplaceReluGradientIsBitIdenticalAndPlannedExactly) {
  const VdnnRun base = train(GetParam(), "none", 0, kIters);
  const VdnnRun shared = train(GetParam(), "none", 0, kIters, 0, true);
  expect_bit_identical(base, shared);
  EXPECT_LE(shared.peak, base.peak);
  if (GetParam() == "vgg-tiny") EXPECT_LT(shared.peak, base.peak);  // its peak is a relu backward
  const size_t budget = shared.peak - kAllocAlignment;
  for (const std::string policy : {"vdnn-all", "vdnn-conv", "vdnn-dyn"}) {
    SCOPED_TRACE(policy);
    const VdnnRun r = train(GetParam(), policy, budget, kIters, 0, true);
    expect_bit_identical(base, r);
    EXPECT_GT(r.swapped_out, 0u);
    EXPECT_EQ(r.swapped_in, r.swapped_out);
    EXPECT_LE(r.peak, budget);
    EXPECT_EQ(r.peak, r.result.policy_report["predicted_peak_bytes"].get<size_t>()) << "the plan's peak is the measured one";
    if (policy == "vdnn-dyn") EXPECT_EQ(r.result.policy_report["configurations"][0]["predicted_peak_bytes"].get<size_t>(), shared.peak);
  }
}

TEST_P(Vdnn, ShareReluGradientsMakesDxAViewOfADyingDy) {
  ModelConfig mc;
  mc.name = GetParam();
  Graph g = build_model(resolve_model(mc));
  build_backward(g, {});
  int relu_bwd = 0;
  for (const Op& op : g.ops()) relu_bwd += op.kind == OpKind::kReluBwd;
  ASSERT_GT(relu_bwd, 0);
  EXPECT_EQ(share_relu_gradients(g), relu_bwd);  // in these CNNs every dy dies at its relu backward
  std::vector<int> last_read(g.num_tensors(), -1);
  for (const Op& op : g.ops())
    for (TensorId in : op.inputs) last_read[static_cast<size_t>(in)] = op.index;
  for (const Op& op : g.ops()) {
    if (op.kind != OpKind::kReluBwd) continue;
    EXPECT_EQ(g.tensor(op.outputs[0]).view_of, op.inputs[0]) << op.name;
    EXPECT_EQ(last_read[static_cast<size_t>(op.inputs[0])], op.index) << op.name;
  }
  EXPECT_EQ(share_relu_gradients(g), 0);  // already shared

  // A dy read again after its relu backward keeps its own storage.
  Graph h;
  auto t = [&](const char* n, TensorKind k) { return h.add_tensor({.name = n, .shape = {4, 4}, .kind = k}); };
  const TensorId x = t("x", TensorKind::kData), y = t("y", TensorKind::kActivation), dy = t("dy", TensorKind::kGradient),
                 dx = t("dx", TensorKind::kGradient), s = t("s", TensorKind::kGradient);
  h.add_op({.kind = OpKind::kData, .name = "data", .outputs = {x}});
  h.add_op({.kind = OpKind::kRelu, .name = "relu", .inputs = {x}, .outputs = {y}});
  h.add_op({.kind = OpKind::kRelu, .name = "dy", .inputs = {y}, .outputs = {dy}});
  h.add_op({.kind = OpKind::kReluBwd, .name = "relu.bwd", .backward = true, .inputs = {dy, y}, .outputs = {dx}});
  h.add_op({.kind = OpKind::kAdd, .name = "later", .backward = true, .inputs = {dx, dy}, .outputs = {s}});
  h.loss = s;
  EXPECT_EQ(share_relu_gradients(h), 0);
  EXPECT_EQ(h.tensor(dx).view_of, kNoTensor);
}

// The sim backend's memory figures are the cpu's under vDNN with the in-place relu backward too,
// so the paper-scale tables (sim) count the same bytes as a real run would.
TEST_P(Vdnn, SimCountsTheSameBytesAsCpu) {
  for (const std::string policy : {"vdnn-all", "vdnn-conv"}) {
    SCOPED_TRACE(policy);
    std::vector<IterationStats> its[2];
    for (int sim = 0; sim < 2; ++sim) {
      TrainConfig cfg;
      cfg.model.name = GetParam();
      cfg.policy = policy;
      cfg.iters = 2;
      cfg.inplace_relu_grad = true;
      if (sim) {
        cfg.backend = "sim";
        cfg.gpu = "titan-x-12g";
        cfg.budget = kDefaultCpuBudget;
      }
      its[sim] = Trainer(cfg).run().iterations;
    }
    for (size_t i = 0; i < its[0].size(); ++i) {
      EXPECT_EQ(its[0][i].peak_allocated, its[1][i].peak_allocated);
      EXPECT_EQ(its[0][i].counters.swapped_out_bytes, its[1][i].counters.swapped_out_bytes);
      EXPECT_EQ(its[0][i].counters.swapped_in_bytes, its[1][i].counters.swapped_in_bytes);
      EXPECT_GT(its[1][i].counters.swapped_out_bytes, 0u);
    }
  }
}

// A trace recorded with the in-place relu backward carries its views: the replay counts the same bytes.
TEST_P(Vdnn, ATraceWithSharedReluGradientsReplaysToTheSamePeak) {
  for (const std::string policy : {"none", "lru"}) {
    SCOPED_TRACE(policy);
    const std::string trace =
        (std::filesystem::temp_directory_path() / ("vtensor_vdnn_" + std::to_string(getpid()) + "_" + policy + ".jsonl")).string();
    TrainConfig cfg;
    cfg.model.name = GetParam();
    cfg.policy = policy;
    cfg.iters = 2;
    cfg.inplace_relu_grad = true;
    cfg.trace_path = trace;
    if (policy == "lru") cfg.budget = align_up(train(GetParam(), "none", 0, 1, 0, true).peak * 3 / 4);
    const TrainResult cpu = Trainer(cfg).run();
    const TrainResult sim = replay_trace({.trace = trace, .policy = policy, .gpu = "p100-16g", .budget = cfg.budget, .iters = 2});
    std::filesystem::remove(trace);
    ASSERT_EQ(cpu.iterations.size(), sim.iterations.size());
    for (size_t i = 0; i < cpu.iterations.size(); ++i) {
      EXPECT_EQ(cpu.iterations[i].peak_allocated, sim.iterations[i].peak_allocated) << "iteration " << i;
      EXPECT_EQ(cpu.iterations[i].counters.swapped_out_bytes, sim.iterations[i].counters.swapped_out_bytes) << "iteration " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Vdnn, ::testing::Values("resnet-tiny", "vgg-tiny"));

// The paper's headline at full size on the sim backend (memory only, no values): VGG-16 at batch
// 256 does not fit a 12 GiB Titan X unmanaged; with cuDNN's in-place ReLU backward, vdnn-all
// trains it there, and without it vdnn-all names the budget it would need.
TEST(VdnnPaperScale, Vgg16At256FitsTwelveGiBWithTheInplaceReluBackward) {
  auto run = [](const std::string& policy, bool inplace) {
    TrainConfig cfg;
    cfg.model.name = "vgg16";
    cfg.model.batch = 256;
    cfg.policy = policy;
    cfg.iters = 2;
    cfg.backend = "sim";
    cfg.gpu = "titan-x-12g";
    cfg.inplace_relu_grad = inplace;
    return Trainer(cfg).run();
  };
  EXPECT_THROW(run("none", true), OutOfMemoryError);
  try {
    run("vdnn-all", false);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    ASSERT_TRUE(e.smallest_working_budget().has_value());
    EXPECT_GT(*e.smallest_working_budget(), e.budget());
  }
  const TrainResult r = run("vdnn-all", true);
  for (const auto& it : r.iterations) EXPECT_LE(it.peak_allocated, r.config.budget);
  EXPECT_EQ(r.iterations.back().peak_allocated, r.policy_report["predicted_peak_bytes"].get<size_t>());
}

// Runs vdnn-dyn at the budget each rung of its ladder plans for, where no earlier rung fits
// there; checks it takes that rung and trains bit-identically. Returns the rungs taken.
std::vector<size_t> walk_ladder(const std::string& model, int batch) {
  const VdnnRun base = train(model, "none", 0, kIters, batch);
  const VdnnRun probe = train(model, "vdnn-dyn", 0, 1, batch);
  const auto& configs = probe.result.policy_report["configurations"];
  EXPECT_EQ(configs.size(), 5u);
  EXPECT_TRUE(configs[0]["chosen"].get<bool>());
  EXPECT_EQ(configs[0]["predicted_peak_bytes"].get<size_t>(), base.peak);
  std::vector<size_t> taken;
  for (size_t k = 1; k < configs.size(); ++k) {
    const size_t budget = configs[k]["predicted_peak_bytes"].get<size_t>();
    bool earlier_fits = false;
    for (size_t e = 0; e < k; ++e) earlier_fits |= configs[e]["predicted_peak_bytes"].get<size_t>() <= budget;
    if (earlier_fits) continue;
    SCOPED_TRACE("rung " + std::to_string(k + 1));
    const VdnnRun r = train(model, "vdnn-dyn", budget, kIters, batch);
    expect_bit_identical(base, r);
    EXPECT_TRUE(r.result.policy_report["configurations"][k]["chosen"].get<bool>());
    EXPECT_EQ(r.result.policy_report["offload"], configs[k]["offload"]);
    EXPECT_EQ(r.result.policy_report["conv_algorithm"], configs[k]["conv_algorithm"]);
    EXPECT_EQ(r.peak, budget);  // the plan's peak is the measured one
    EXPECT_LT(r.peak, base.peak);
    EXPECT_GT(r.swapped_out, 0u);
    taken.push_back(k);
  }
  return taken;
}

TEST(VdnnDyn, TakesTheFirstConfigurationThatFits) {
  EXPECT_FALSE(walk_ladder("vgg-tiny", 0).empty());
  const auto taken = walk_ladder("resnet-tiny", 0);
  EXPECT_NE(std::find(taken.begin(), taken.end(), size_t{1}), taken.end()) << "conv offload never taken";
  EXPECT_NE(std::find(taken.begin(), taken.end(), size_t{2}), taken.end()) << "all offload never taken";
}

// At batch 2 a conv workspace is part of the peak: the lean algorithms are what makes it fit.
TEST(VdnnDyn, TakesTheLeanConvAlgorithmsWhenOnlyTheyFit) {
  const auto taken = walk_ladder("resnet-tiny", 2);
  EXPECT_NE(std::find(taken.begin(), taken.end(), size_t{3}), taken.end()) << "conv offload + lean never taken";
  EXPECT_NE(std::find(taken.begin(), taken.end(), size_t{4}), taken.end()) << "all offload + lean never taken";
}

TEST(VdnnBudget, BelowWhatVdnnAllNeedsIsOutOfMemory) {
  const VdnnRun all = train("resnet-tiny", "vdnn-all", 0, 1);
  const size_t need = all.result.policy_report["predicted_peak_bytes"].get<size_t>();
  const size_t budget = need - 4 * kAllocAlignment;
  for (const std::string policy : {"vdnn-all", "vdnn-conv", "vdnn-dyn"}) {
    SCOPED_TRACE(policy);
    try {
      train("resnet-tiny", policy, budget, 2);
      FAIL() << "expected OutOfMemoryError";
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.budget(), budget);
      ASSERT_TRUE(e.smallest_working_budget().has_value());
      EXPECT_GT(*e.smallest_working_budget(), budget);
      const std::string msg = e.what();
      EXPECT_NE(msg.find(policy), std::string::npos) << msg;
      EXPECT_NE(msg.find("needs a budget of at least"), std::string::npos) << msg;
      if (policy == "vdnn-all") EXPECT_EQ(*e.smallest_working_budget(), need);
    }
  }
  // At exactly the planned need it runs.
  EXPECT_NO_THROW(train("resnet-tiny", "vdnn-all", need, 2));
}

}  // namespace

namespace {

std::pair<int, std::string> run_cli(const std::string& args) {
  auto r = vtensor::test::run_cli(args);
  return {r.code, r.output};
}

// The chosen configuration is printed and in the report; a budget too small exits 3 with the need.
TEST(VdnnCli, DynPrintsAndReportsItsChoice) {
  const size_t none_peak = train("resnet-tiny", "none", 0, 1).peak;
  const std::string report = (std::filesystem::temp_directory_path() / ("vtensor_vdnn_" + std::to_string(getpid()) + ".json")).string();
  auto [code, out] = run_cli("train --model resnet-tiny --iters 2 --quiet --policy vdnn-dyn --budget " +
                             std::to_string(none_peak - kAllocAlignment) + " --report " + report);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("policy vdnn-dyn: chose '"), std::string::npos) << out;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  std::filesystem::remove(report);
  const auto& pr = j["policy_report"];
  EXPECT_NE(pr["offload"], "none");
  EXPECT_NE(out.find(std::string("chose '") + pr["offload"].get<std::string>() + " offload"), std::string::npos) << out;
  EXPECT_LE(j["summary"]["peak_allocated_bytes"].get<size_t>(), none_peak - kAllocAlignment);
  size_t offloaded = 0;
  for (const auto& l : pr["layers"]) {
    EXPECT_TRUE(l.contains("prefetch_stall_ms"));
    offloaded += l["offloaded_bytes"].get<size_t>();
  }
  EXPECT_EQ(offloaded, pr["offloaded_bytes_per_iteration"].get<size_t>());
  EXPECT_GT(offloaded, 0u);

  auto [flag_code, flag_out] = run_cli("sweep --trace dtr:transformer --gpu p100-16g --budgets 100% --inplace-relu-grad --out " + report);
  EXPECT_EQ(flag_code, 2) << flag_out;
  EXPECT_NE(flag_out.find("--inplace-relu-grad applies to --model only"), std::string::npos) << flag_out;
  EXPECT_FALSE(std::filesystem::exists(report));

  auto [oom_code, oom_out] = run_cli("train --model resnet-tiny --iters 1 --quiet --policy vdnn-all --budget 1MiB");
  EXPECT_EQ(oom_code, 3) << oom_out;
  EXPECT_NE(oom_out.find("vdnn-all with all offload, fast conv algorithms needs a budget of at least"), std::string::npos)
      << oom_out;
}

}  // namespace
