// Builds forward graphs layer by layer with shape inference; models call it.
#pragma once
#include <string>
#include <utility>

#include "vtensor/core/graph.h"

namespace vtensor {

class GraphBuilder {
 public:
  explicit GraphBuilder(Graph& g, uint64_t seed = 1) : g_(g), seed_(seed) {}

  // Ops built after this belong to a new layer of the model.
  void layer(const std::string& name, LayerKind kind);

  // Synthetic batch: images [N, C, H, W] (or features [N, C] when h == 0) and labels [N].
  std::pair<TensorId, TensorId> data(int n, int c, int h, int w, int num_classes);
  TensorId param(const std::string& name, Shape shape, Init init, TensorKind kind = TensorKind::kParam);

  TensorId conv2d(TensorId x, int out_channels, int kernel, int stride, int pad, bool bias = false);
  TensorId batchnorm(TensorId x);
  TensorId relu(TensorId x);
  TensorId maxpool(TensorId x, int kernel, int stride, int pad = 0);
  TensorId global_avgpool(TensorId x);
  TensorId linear(TensorId x, int out_features, bool bias = true);
  TensorId add(TensorId a, TensorId b);
  TensorId flatten(TensorId x);
  TensorId dropout(TensorId x, float p);
  TensorId softmax_ce(TensorId logits, TensorId labels);

  // Transformers. Token activations are [B*T, C] so linear, layer norm and GELU see rows.
  // Synthetic token batch: tokens [B*T] and targets [B*T] (next token, or the unmasked token when mlm).
  std::pair<TensorId, TensorId> token_data(int batch, int seq, int vocab, bool mlm);
  TensorId embedding(TensorId table, TensorId ids);             // table[V, C], ids[N] -> [N, C]
  TensorId position_embedding(TensorId table, int rows, int period);  // row n reads table[n % period]
  TensorId layernorm(TensorId x, float eps = 1e-5f);
  TensorId gelu(TensorId x);
  // Linear with a weight (and bias) made elsewhere: tied embeddings.
  TensorId linear(TensorId x, TensorId weight, TensorId bias);
  // alpha * a op(b) over the leading (batch) dims: a[.., M, K], b[.., K, N] or [.., N, K] when trans_b.
  TensorId bmm(TensorId a, TensorId b, bool trans_b, float alpha = 1.f);
  TensorId softmax(TensorId x, bool causal);
  TensorId reshape(TensorId x, Shape shape);  // a view of x
  TensorId transpose12(TensorId x);          // [A,B,C,D] -> [A,C,B,D], a copy

  Graph& graph() { return g_; }

 private:
  TensorId activation(const std::string& name, Shape shape, bool requires_grad);
  std::string name(const std::string& what) const;
  // A tensor's name: name(what), numbered from the second of that name on (a ResNet block or an
  // attention layer makes several weights and outputs of one kind: layer1.0.weight, layer1.0.weight_2).
  std::string tensor_name(const std::string& what) { return namer_(name(what)); }
  int emit(Op op);  // named name(kind) unless named, numbered as tensors are (layer1.0.conv2d_2)

  Graph& g_;
  uint64_t seed_;
  int layer_ = -1;
  int counter_ = 0;
  UniqueNamer namer_, op_namer_;
};

}  // namespace vtensor
