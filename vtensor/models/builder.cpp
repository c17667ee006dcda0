#include "vtensor/models/builder.h"

#include <stdexcept>

#include "vtensor/backend/cpu/kernels.h"

namespace vtensor {

void GraphBuilder::layer(const std::string& name, LayerKind kind) { layer_ = g_.add_layer(name, kind); }

std::string GraphBuilder::name(const std::string& what) const {
  const std::string prefix = layer_ >= 0 ? g_.layers()[static_cast<size_t>(layer_)].name + "." : "";
  return prefix + what;
}

TensorId GraphBuilder::activation(const std::string& n, Shape shape, bool requires_grad) {
  return g_.add_tensor({.name = tensor_name(n), .shape = std::move(shape), .kind = TensorKind::kActivation,
                        .requires_grad = requires_grad});
}

int GraphBuilder::emit(Op op) {
  op.layer = layer_;
  op.name = op_namer_(op.name.empty() ? name(to_string(op.kind)) : op.name);
  return g_.add_op(std::move(op));
}

std::pair<TensorId, TensorId> GraphBuilder::data(int n, int c, int h, int w, int num_classes) {
  if (n <= 0 || c <= 0 || num_classes < 2) throw std::invalid_argument("data: batch, channels must be > 0, classes >= 2");
  Shape xs = h > 0 ? Shape{n, c, h, w} : Shape{n, c};
  TensorId x = g_.add_tensor({.name = "input", .shape = xs, .kind = TensorKind::kData});
  TensorId y = g_.add_tensor({.name = "labels", .shape = {n}, .kind = TensorKind::kData});
  Op op{.kind = OpKind::kData, .name = "data", .outputs = {x, y}};
  op.attrs.seed = cpu::mix64(seed_ ^ 0xda7aull);
  op.attrs.num_classes = num_classes;
  op.flops = static_cast<double>(xs.numel());
  emit(op);
  return {x, y};
}

TensorId GraphBuilder::param(const std::string& n, Shape shape, Init init, TensorKind kind) {
  TensorId id = g_.add_tensor({.name = tensor_name(n), .shape = std::move(shape), .kind = kind,
                               .requires_grad = kind == TensorKind::kParam, .init = init});
  if (kind == TensorKind::kParam) g_.params.push_back(id);
  return id;
}

TensorId GraphBuilder::conv2d(TensorId x, int k, int r, int stride, int pad, bool bias) {
  const Shape s = g_.tensor(x).shape;
  if (s.rank() != 4) throw std::invalid_argument("conv2d expects an NCHW input, got " + s.str());
  auto p = cpu::make_conv2d_params(static_cast<int>(s[0]), static_cast<int>(s[1]), static_cast<int>(s[2]),
                                   static_cast<int>(s[3]), k, r, r, stride, pad);
  if (p.P <= 0 || p.Q <= 0) throw std::invalid_argument("conv2d: input " + s.str() + " too small for the kernel");
  TensorId w = param("weight", {k, s[1], r, r}, Init::kHeNormal);
  Op op{.kind = OpKind::kConv2d, .inputs = {x, w}};
  if (bias) op.inputs.push_back(param("bias", {k}, Init::kZeros));
  TensorId y = activation("conv_out", {s[0], k, p.P, p.Q}, true);
  op.outputs = {y};
  op.attrs.stride = stride;
  op.attrs.pad = pad;
  op.attrs.kernel = r;
  op.attrs.has_bias = bias;
  op.workspace_bytes = cpu::conv2d_workspace_floats(p, ConvAlgo::kFast) * sizeof(float);
  op.workspace_lean_bytes = cpu::conv2d_workspace_floats(p, ConvAlgo::kLean) * sizeof(float);
  op.flops = 2.0 * p.N * p.K * p.P * p.Q * p.C * p.R * p.S;
  emit(op);
  return y;
}

TensorId GraphBuilder::batchnorm(TensorId x) {
  const Shape s = g_.tensor(x).shape;
  const int64_t c = s[1];
  TensorId gamma = param("bn_weight", {c}, Init::kOnes), beta = param("bn_bias", {c}, Init::kZeros);
  TensorId rm = param("running_mean", {c}, Init::kZeros, TensorKind::kBuffer);
  TensorId rv = param("running_var", {c}, Init::kOnes, TensorKind::kBuffer);
  TensorId y = activation("bn_out", s, true);
  TensorId sm = activation("bn_save_mean", {c}, false), si = activation("bn_save_invstd", {c}, false);
  Op op{.kind = OpKind::kBatchNorm, .inputs = {x, gamma, beta, rm, rv}, .outputs = {y, sm, si}, .inplace = {rm, rv}};
  op.flops = 8.0 * static_cast<double>(s.numel());
  emit(op);
  return y;
}

TensorId GraphBuilder::relu(TensorId x) {
  const TensorInfo t = g_.tensor(x);
  TensorId y = activation("relu_out", t.shape, t.requires_grad);
  emit({.kind = OpKind::kRelu, .inputs = {x}, .outputs = {y}, .flops = static_cast<double>(t.shape.numel())});
  return y;
}

TensorId GraphBuilder::maxpool(TensorId x, int k, int stride, int pad) {
  const TensorInfo t = g_.tensor(x);
  const Shape s = t.shape;
  if (s.rank() != 4) throw std::invalid_argument("maxpool expects an NCHW input, got " + s.str());
  const int64_t P = (s[2] + 2 * pad - k) / stride + 1, Q = (s[3] + 2 * pad - k) / stride + 1;
  if (P <= 0 || Q <= 0) throw std::invalid_argument("maxpool: input " + s.str() + " too small");
  TensorId y = activation("pool_out", {s[0], s[1], P, Q}, t.requires_grad);
  Op op{.kind = OpKind::kMaxPool, .inputs = {x}, .outputs = {y}};
  op.attrs.kernel = k;
  op.attrs.stride = stride;
  op.attrs.pad = pad;
  op.flops = static_cast<double>(s[0] * s[1] * P * Q * k * k);
  emit(op);
  return y;
}

TensorId GraphBuilder::global_avgpool(TensorId x) {
  const TensorInfo t = g_.tensor(x);
  const Shape s = t.shape;
  TensorId y = activation("gap_out", {s[0], s[1]}, t.requires_grad);
  emit({.kind = OpKind::kGlobalAvgPool, .inputs = {x}, .outputs = {y}, .flops = static_cast<double>(s.numel())});
  return y;
}

TensorId GraphBuilder::linear(TensorId x, int out, bool bias) {
  const TensorInfo t = g_.tensor(x);
  if (t.shape.rank() != 2) throw std::invalid_argument("linear expects [N, features], got " + t.shape.str());
  const int64_t n = t.shape[0], in = t.shape[1];
  TensorId w = param("weight", {out, in}, Init::kUniformFanIn);
  Op op{.kind = OpKind::kLinear, .inputs = {x, w}};
  if (bias) op.inputs.push_back(param("bias", {out}, Init::kZeros));
  TensorId y = activation("fc_out", {n, out}, true);
  op.outputs = {y};
  op.attrs.has_bias = bias;
  op.flops = 2.0 * static_cast<double>(n * in * out);
  emit(op);
  return y;
}

TensorId GraphBuilder::add(TensorId a, TensorId b) {
  const TensorInfo ta = g_.tensor(a);
  if (!(ta.shape == g_.tensor(b).shape))
    throw std::invalid_argument("add: shapes differ " + ta.shape.str() + " vs " + g_.tensor(b).shape.str());
  TensorId y = activation("add_out", ta.shape, ta.requires_grad || g_.tensor(b).requires_grad);
  emit({.kind = OpKind::kAdd, .inputs = {a, b}, .outputs = {y}, .flops = static_cast<double>(ta.shape.numel())});
  return y;
}

TensorId GraphBuilder::flatten(TensorId x) {
  const TensorInfo t = g_.tensor(x);
  TensorId y = activation("flat_out", {t.shape[0], t.shape.numel() / t.shape[0]}, t.requires_grad);
  emit({.kind = OpKind::kFlatten, .inputs = {x}, .outputs = {y}, .flops = static_cast<double>(t.shape.numel())});
  return y;
}

TensorId GraphBuilder::dropout(TensorId x, float p) {
  if (!(p >= 0.f && p < 1.f)) throw std::invalid_argument("dropout probability must be in [0, 1)");
  const TensorInfo t = g_.tensor(x);
  TensorId y = activation("dropout_out", t.shape, t.requires_grad);
  Op op{.kind = OpKind::kDropout, .inputs = {x}, .outputs = {y}, .flops = static_cast<double>(t.shape.numel())};
  op.attrs.p = p;
  op.attrs.seed = cpu::mix64(seed_ + 0x5eedull * static_cast<uint64_t>(++counter_));
  emit(op);
  return y;
}

TensorId GraphBuilder::softmax_ce(TensorId logits, TensorId labels) {
  const TensorInfo t = g_.tensor(logits);
  TensorId loss = g_.add_tensor({.name = "loss", .shape = {1}, .kind = TensorKind::kActivation, .requires_grad = true});
  emit({.kind = OpKind::kSoftmaxCE, .inputs = {logits, labels}, .outputs = {loss},
        .flops = 4.0 * static_cast<double>(t.shape.numel())});
  g_.loss = loss;
  return loss;
}

std::pair<TensorId, TensorId> GraphBuilder::token_data(int batch, int seq, int vocab, bool mlm) {
  if (batch <= 0 || seq <= 0) throw std::invalid_argument("token data: --batch and --seq must be > 0");
  if (vocab < 4) throw std::invalid_argument("token data: the vocabulary (--classes) must be at least 4");
  const int64_t n = int64_t(batch) * seq;
  TensorId x = g_.add_tensor({.name = "tokens", .shape = {n}, .kind = TensorKind::kData});
  TensorId y = g_.add_tensor({.name = "targets", .shape = {n}, .kind = TensorKind::kData});
  Op op{.kind = OpKind::kTokenData, .name = "data", .outputs = {x, y}};
  op.attrs.seed = cpu::mix64(seed_ ^ 0x70c3ull);
  op.attrs.num_classes = vocab;
  op.attrs.period = seq;
  op.attrs.mlm = mlm;
  op.flops = static_cast<double>(n);
  emit(op);
  return {x, y};
}

TensorId GraphBuilder::embedding(TensorId table, TensorId ids) {
  const Shape ts = g_.tensor(table).shape, is = g_.tensor(ids).shape;
  if (ts.rank() != 2 || is.rank() != 1) throw std::invalid_argument("embedding expects table [V, C] and ids [N]");
  TensorId y = activation("emb_out", {is[0], ts[1]}, g_.tensor(table).requires_grad);
  emit({.kind = OpKind::kEmbedding, .inputs = {table, ids}, .outputs = {y}, .flops = double(is[0] * ts[1])});
  return y;
}

TensorId GraphBuilder::position_embedding(TensorId table, int rows, int period) {
  const Shape ts = g_.tensor(table).shape;
  if (ts.rank() != 2 || period <= 0 || period > ts[0])
    throw std::invalid_argument("position embedding: sequence length " + std::to_string(period) + " exceeds the table's " +
                                std::to_string(ts.rank() ? ts[0] : 0) + " positions");
  TensorId y = activation("pos_out", {rows, ts[1]}, g_.tensor(table).requires_grad);
  Op op{.kind = OpKind::kEmbedding, .inputs = {table}, .outputs = {y}, .flops = double(rows * ts[1])};
  op.attrs.period = period;
  emit(op);
  return y;
}

TensorId GraphBuilder::layernorm(TensorId x, float eps) {
  const TensorInfo t = g_.tensor(x);
  const int64_t c = t.shape[t.shape.rank() - 1], rows = t.shape.numel() / c;
  TensorId gamma = param("ln_weight", {c}, Init::kOnes), beta = param("ln_bias", {c}, Init::kZeros);
  TensorId y = activation("ln_out", t.shape, true);
  TensorId sm = activation("ln_save_mean", {rows}, false), si = activation("ln_save_invstd", {rows}, false);
  Op op{.kind = OpKind::kLayerNorm, .inputs = {x, gamma, beta}, .outputs = {y, sm, si}};
  op.attrs.eps = eps;
  op.flops = 8.0 * static_cast<double>(t.shape.numel());
  emit(op);
  return y;
}

TensorId GraphBuilder::gelu(TensorId x) {
  const TensorInfo t = g_.tensor(x);
  TensorId y = activation("gelu_out", t.shape, t.requires_grad);
  emit({.kind = OpKind::kGelu, .inputs = {x}, .outputs = {y}, .flops = 8.0 * static_cast<double>(t.shape.numel())});
  return y;
}

TensorId GraphBuilder::linear(TensorId x, TensorId w, TensorId bias) {
  const TensorInfo t = g_.tensor(x);
  const Shape ws = g_.tensor(w).shape;
  if (t.shape.rank() != 2 || ws.rank() != 2 || ws[1] != t.shape[1])
    throw std::invalid_argument("linear expects x [N, In] and weight [Out, In], got " + t.shape.str() + " and " + ws.str());
  Op op{.kind = OpKind::kLinear, .inputs = {x, w}};
  if (bias != kNoTensor) op.inputs.push_back(bias);
  TensorId y = activation("fc_out", {t.shape[0], ws[0]}, true);
  op.outputs = {y};
  op.attrs.has_bias = bias != kNoTensor;
  op.flops = 2.0 * static_cast<double>(t.shape[0] * ws[0] * ws[1]);
  emit(op);
  return y;
}

TensorId GraphBuilder::bmm(TensorId a, TensorId b, bool trans_b, float alpha) {
  const TensorInfo ta = g_.tensor(a), tb = g_.tensor(b);
  const Shape sa = ta.shape, sb = tb.shape;
  const size_t r = sa.rank();
  bool ok = r >= 3 && sb.rank() == r;
  for (size_t i = 0; ok && i + 2 < r; ++i) ok = sa[i] == sb[i];
  const int64_t K = ok ? sa[r - 1] : 0;
  const int64_t N = ok ? (trans_b ? sb[r - 2] : sb[r - 1]) : 0;
  if (!ok || (trans_b ? sb[r - 1] : sb[r - 2]) != K)
    throw std::invalid_argument("bmm: shapes " + sa.str() + " and " + sb.str() + " do not multiply");
  std::vector<int64_t> out(sa.dims().begin(), sa.dims().end() - 1);
  out.push_back(N);
  TensorId y = activation("bmm_out", Shape(out), ta.requires_grad || tb.requires_grad);
  Op op{.kind = OpKind::kBatchedMatmul, .inputs = {a, b}, .outputs = {y}};
  op.attrs.trans_b = trans_b;
  op.attrs.alpha = alpha;
  op.flops = 2.0 * static_cast<double>(sa.numel() / K) * static_cast<double>(N * K);
  emit(op);
  return y;
}

TensorId GraphBuilder::softmax(TensorId x, bool causal) {
  const TensorInfo t = g_.tensor(x);
  const size_t r = t.shape.rank();
  if (causal && (r < 2 || t.shape[r - 1] != t.shape[r - 2]))
    throw std::invalid_argument("causal softmax expects [.., T, T] scores, got " + t.shape.str());
  TensorId y = activation("softmax_out", t.shape, t.requires_grad);
  Op op{.kind = OpKind::kSoftmax, .inputs = {x}, .outputs = {y}, .flops = 5.0 * static_cast<double>(t.shape.numel())};
  op.attrs.causal = causal;
  emit(op);
  return y;
}

TensorId GraphBuilder::reshape(TensorId x, Shape shape) {
  const TensorInfo t = g_.tensor(x);
  if (shape.numel() != t.shape.numel())
    throw std::invalid_argument("reshape: " + t.shape.str() + " has a different size than " + shape.str());
  TensorInfo v{.name = tensor_name("view"), .shape = std::move(shape), .kind = TensorKind::kActivation,
               .requires_grad = t.requires_grad};
  v.view_of = x;
  TensorId y = g_.add_tensor(v);
  emit({.kind = OpKind::kReshape, .inputs = {x}, .outputs = {y}});
  return y;
}

TensorId GraphBuilder::transpose12(TensorId x) {
  const TensorInfo t = g_.tensor(x);
  if (t.shape.rank() != 4) throw std::invalid_argument("transpose expects [A, B, C, D], got " + t.shape.str());
  const Shape s = t.shape;
  TensorId y = activation("transpose_out", {s[0], s[2], s[1], s[3]}, t.requires_grad);
  emit({.kind = OpKind::kTranspose, .inputs = {x}, .outputs = {y}, .flops = static_cast<double>(s.numel())});
  return y;
}

}  // namespace vtensor
