// vDNN plans from the graph alone: what is offloaded, when it is copied out and back.
#include <gtest/gtest.h>

#include <map>

#include "vtensor/models/models.h"
#include "vtensor/policy/vdnn.h"

using namespace vtensor;

namespace {

Graph training_graph(const std::string& model) {
  ModelConfig c;
  c.name = model;
  Graph g = build_model(c);
  build_backward(g, {});
  return g;
}

class VdnnPlanTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VdnnPlanTest, SwapOutAfterLastForwardUsePrefetchBeforeFirstBackwardUse) {
  const Graph g = training_graph(GetParam());
  for (VdnnOffload mode : {VdnnOffload::kConv, VdnnOffload::kAll}) {
    SCOPED_TRACE(to_string(mode));
    const VdnnPlan p = plan_vdnn(g, mode);
    std::map<TensorId, int> out_at, in_at;
    for (const Action& a : p.plan.actions) {
      auto& m = a.kind == ActionKind::kSwapOut ? out_at : in_at;
      ASSERT_TRUE(a.kind == ActionKind::kSwapOut || a.kind == ActionKind::kPrefetch);
      EXPECT_TRUE(m.emplace(a.tensor, a.op).second) << "tensor " << a.tensor << " planned twice";
    }
    ASSERT_FALSE(out_at.empty());
    for (const auto& [t, at] : out_at) {
      int last_fwd = -1, first_bwd = -1;
      for (const Op& op : g.ops())
        for (TensorId in : op.inputs)
          if (in == t) {
            if (!op.backward && !op.optimizer) last_fwd = op.index;
            else if (op.backward && first_bwd < 0) first_bwd = op.index;
          }
      EXPECT_EQ(at, last_fwd) << g.tensor(t).name;
      ASSERT_TRUE(in_at.count(t)) << g.tensor(t).name << " is never prefetched";
      EXPECT_GT(in_at[t], at);
      EXPECT_LT(in_at[t], first_bwd) << g.tensor(t).name << " is prefetched after its first backward use";
      EXPECT_TRUE(g.op(in_at[t] + 1).backward);  // at the start of a layer's backward
    }
    for (const VdnnLayer& l : p.layers) {
      if (mode == VdnnOffload::kConv && l.kind != LayerKind::kConv) EXPECT_FALSE(l.offloaded) << l.name;
      if (l.offloaded) EXPECT_GE(l.prefetch_after_op, 0) << l.name;
    }
    // The classifier's backward runs first: its input stays on the device.
    EXPECT_FALSE(p.layers.back().offloaded);
  }
  EXPECT_TRUE(plan_vdnn(g, VdnnOffload::kNone).plan.actions.empty());
}

TEST_P(VdnnPlanTest, AllOffloadsAtLeastWhatConvOffloads) {
  const Graph g = training_graph(GetParam());
  const VdnnPlan conv = plan_vdnn(g, VdnnOffload::kConv), all = plan_vdnn(g, VdnnOffload::kAll);
  EXPECT_GT(conv.offloaded_bytes(), 0u);
  EXPECT_GE(all.offloaded_bytes(), conv.offloaded_bytes());
  const size_t none_peak = predict_peak(g, {}, {});
  EXPECT_LT(predict_peak(g, conv.plan, {}), none_peak);
  EXPECT_LE(predict_peak(g, all.plan, {}), predict_peak(g, conv.plan, {}));
  EXPECT_LE(predict_peak(g, all.plan, conv_algorithms_for(g, ConvAlgo::kLean)), predict_peak(g, all.plan, {}));
}

// Where a conv workspace is part of the peak (small batch: one sample's im2col is large next to
// the batch's maps), the lean conv algorithms lower it.
TEST(VdnnPlan, LeanConvAlgorithmsLowerAWorkspaceBoundPeak) {
  ModelConfig c;
  c.name = "resnet-tiny";
  c.batch = 2;
  Graph g = build_model(c);
  build_backward(g, {});
  const Plan all = plan_vdnn(g, VdnnOffload::kAll).plan;
  EXPECT_LT(predict_peak(g, all, conv_algorithms_for(g, ConvAlgo::kLean)), predict_peak(g, all, {}));
}

INSTANTIATE_TEST_SUITE_P(Models, VdnnPlanTest, ::testing::Values("resnet-tiny", "vgg-tiny", "vgg16", "resnet50"));

}  // namespace
