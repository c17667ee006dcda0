// GPT-2 and BERT graphs. Activations are [B*T, C] rows; attention reshapes them to
// [B, T, H, D] (a view), transposes to [B, H, T, D] (a copy), and runs scaled dot-product
// attention as bmm -> softmax -> bmm (no fused kernel). Dropout is off (the papers' memory
// figures do not depend on it and lossless comparisons are simpler without it).
#include "vtensor/models/transformer.h"

#include <cmath>
#include <stdexcept>

namespace vtensor {
namespace {

struct Dims {
  int batch, seq, width, heads;
};

TensorId attention(GraphBuilder& b, TensorId x, const Dims& d, bool causal) {
  const int head_dim = d.width / d.heads;
  TensorId q = b.linear(x, d.width), k = b.linear(x, d.width), v = b.linear(x, d.width);
  auto heads = [&](TensorId t) { return b.transpose12(b.reshape(t, {d.batch, d.seq, d.heads, head_dim})); };
  // Builder calls are sequenced by hand: as two arguments of one call their order would be the
  // compiler's (gcc and clang differ), and with it the op order, the plans and every figure.
  // This is the order the gcc builds behind docs/ produced (right to left).
  const TensorId kh = heads(k);
  const TensorId qh = heads(q);
  TensorId scores = b.bmm(qh, kh, true, 1.f / std::sqrt(static_cast<float>(head_dim)));
  const TensorId vh = heads(v);
  TensorId out = b.bmm(b.softmax(scores, causal), vh, false);
  out = b.reshape(b.transpose12(out), {int64_t(d.batch) * d.seq, d.width});
  return b.linear(out, d.width);
}

TensorId mlp(GraphBuilder& b, TensorId x, int width) { return b.linear(b.gelu(b.linear(x, 4 * width)), width); }

Dims check(const ModelConfig& c, const TransformerShape& s) {
  if (c.width % s.heads != 0)
    throw std::invalid_argument("--width " + std::to_string(c.width) + " must be a multiple of the " +
                                std::to_string(s.heads) + " attention heads of " + c.name);
  return {c.batch, c.image_size, c.width, s.heads};
}

// Token embedding plus learned positions; returns {hidden, token table}.
std::pair<TensorId, TensorId> embed(GraphBuilder& b, const ModelConfig& c, const TransformerShape& s, TensorId tokens) {
  TensorId wte = b.param("wte", {c.classes, c.width}, Init::kUniformFanIn);
  TensorId wpe = b.param("wpe", {std::max(s.n_ctx, c.image_size), c.width}, Init::kUniformFanIn);
  const TensorId pos = b.position_embedding(wpe, c.batch * c.image_size, c.image_size);  // first: see attention()
  TensorId h = b.add(b.embedding(wte, tokens), pos);
  return {h, wte};
}

}  // namespace

void build_gpt(GraphBuilder& b, const ModelConfig& c, const TransformerShape& s) {
  const Dims d = check(c, s);
  b.layer("embed", LayerKind::kOther);
  auto [tokens, targets] = b.token_data(c.batch, c.image_size, c.classes, false);
  auto [h, wte] = embed(b, c, s, tokens);
  for (int l = 0; l < s.layers; ++l) {
    b.layer("h" + std::to_string(l) + ".attn", LayerKind::kLinear);
    h = b.add(h, attention(b, b.layernorm(h), d, true));
    b.layer("h" + std::to_string(l) + ".mlp", LayerKind::kLinear);
    h = b.add(h, mlp(b, b.layernorm(h), c.width));
  }
  b.layer("lm_head", LayerKind::kLinear);
  b.softmax_ce(b.linear(b.layernorm(h), wte, kNoTensor), targets);
}

void build_bert(GraphBuilder& b, const ModelConfig& c, const TransformerShape& s) {
  const Dims d = check(c, s);
  b.layer("embed", LayerKind::kOther);
  auto [tokens, targets] = b.token_data(c.batch, c.image_size, c.classes, true);
  auto [h, wte] = embed(b, c, s, tokens);
  h = b.layernorm(h, 1e-12f);
  for (int l = 0; l < s.layers; ++l) {
    b.layer("layer" + std::to_string(l) + ".attn", LayerKind::kLinear);
    h = b.layernorm(b.add(h, attention(b, h, d, false)), 1e-12f);
    b.layer("layer" + std::to_string(l) + ".ffn", LayerKind::kLinear);
    h = b.layernorm(b.add(h, mlp(b, h, c.width)), 1e-12f);
  }
  b.layer("mlm_head", LayerKind::kLinear);
  TensorId t = b.layernorm(b.gelu(b.linear(h, c.width)), 1e-12f);
  TensorId bias = b.param("decoder_bias", {c.classes}, Init::kZeros);
  b.softmax_ce(b.linear(t, wte, bias), targets);
}

}  // namespace vtensor
