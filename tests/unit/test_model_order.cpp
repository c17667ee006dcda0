// The op order of a model's graph is part of every figure (plans, traces, op indices in reports):
// it must not depend on the compiler. Builder calls passed as two arguments of one call are
// evaluated in an unspecified order (gcc right to left, clang left to right); the sanitizer
// build uses clang and the default build gcc, so a regression fails in one of them.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "vtensor/models/models.h"

namespace vtensor {
namespace {

int producer_of(const Graph& g, TensorId t) { return g.tensors()[static_cast<size_t>(t)].producer; }

TEST(ModelOrder, TransformerOpsComeInTheOrderTheDocsWereMeasuredIn) {
  for (const std::string name : {"gpt-tiny", "bert-tiny"}) {
    SCOPED_TRACE(name);
    ModelConfig cfg;
    cfg.name = name;
    const Graph g = build_model(resolve_model(cfg));
    const auto& ops = g.ops();
    // The embedding: the position table is looked up first, then the tokens, then added.
    const Op* add = nullptr;
    for (const auto& op : ops)
      if (op.kind == OpKind::kAdd) { add = &op; break; }
    ASSERT_NE(add, nullptr);
    ASSERT_EQ(add->inputs.size(), 2u);
    EXPECT_GT(producer_of(g, add->inputs[0]), producer_of(g, add->inputs[1])) << "token embedding before positions";
    // Attention: the key heads are laid out before the query heads, the value heads after the scores.
    const Op* scores = nullptr;
    const Op* context = nullptr;
    for (const auto& op : ops) {
      if (op.kind != OpKind::kBatchedMatmul) continue;
      if (!scores) scores = &op;
      else { context = &op; break; }
    }
    ASSERT_NE(scores, nullptr);
    ASSERT_NE(context, nullptr);
    EXPECT_GT(producer_of(g, scores->inputs[0]), producer_of(g, scores->inputs[1])) << "query heads before key heads";
    EXPECT_GT(producer_of(g, context->inputs[0]), producer_of(g, context->inputs[1])) << "value heads before the softmax";
  }
}

}  // namespace
}  // namespace vtensor

namespace vtensor {
namespace {

// Reports, timelines and a saved plan's pins name tensors: every tensor of every model, gradients
// and optimizer state included, has a name of its own (a ResNet block's three convolution weights
// were all `layer1.0.weight` before; now layer1.0.weight, layer1.0.weight_2, layer1.0.weight_3).
TEST(ModelNames, EveryTensorAndOpOfEveryModelHasItsOwnName) {
  for (const ModelInfo& m : model_registry()) {
    SCOPED_TRACE(m.name);
    ModelConfig cfg;
    cfg.name = m.name;
    cfg.batch = 2;
    Graph g = build_model(resolve_model(cfg));
    build_backward(g, {});
    std::map<std::string, TensorId> seen;
    for (const TensorInfo& t : g.tensors()) {
      const auto [it, fresh] = seen.emplace(t.name, t.id);
      EXPECT_TRUE(fresh) << "'" << t.name << "' names tensors " << it->second << " and " << t.id;
    }
    std::map<std::string, int> ops;
    for (const Op& op : g.ops()) {
      const auto [it, fresh] = ops.emplace(op.name, op.index);
      EXPECT_TRUE(fresh) << "'" << op.name << "' names ops " << it->second << " and " << op.index;
    }
  }
  ModelConfig cfg;
  cfg.name = "resnet-tiny";
  const Graph g = build_model(resolve_model(cfg));
  int weights = 0;
  for (const TensorInfo& t : g.tensors()) weights += t.name.rfind("layer1.0.weight", 0) == 0;
  EXPECT_EQ(weights, 2) << "resnet-tiny's first block: two convolutions, layer1.0.weight and layer1.0.weight_2";
  int convs = 0;
  for (const Op& op : g.ops()) convs += op.name.rfind("layer1.0.conv2d", 0) == 0;
  EXPECT_EQ(convs, 2) << "layer1.0.conv2d and layer1.0.conv2d_2";
}

}  // namespace
}  // namespace vtensor
