// The cuda backend's kernel launches: launch dispatches an op to the function of its family,
// which runs it on the compute stream (cuBLAS, cuDNN or our kernels).
#include <cmath>
#include <stdexcept>

#include "vtensor/backend/cpu/kernels.h"
#include "vtensor/backend/cuda/cuda_backend.h"
#include "vtensor/backend/cuda/cuda_check.h"
#include "vtensor/backend/cuda/kernels.h"

namespace vtensor {

namespace {

int dim(const Shape& s, size_t i) { return static_cast<int>(s[i]); }
int spatial(const Shape& s) { return s.rank() == 4 ? dim(s, 2) * dim(s, 3) : 1; }
int batch_dims(const Shape& s) { return static_cast<int>(s.numel() / (s[s.rank() - 2] * s[s.rank() - 1])); }
int last(const Shape& s) { return static_cast<int>(s[s.rank() - 1]); }
int rows(const Shape& s) { return static_cast<int>(s.numel() / s[s.rank() - 1]); }

const Shape& in_shape(const Graph& g, const Op& op, size_t i) { return g.tensor(op.inputs[i]).shape; }
const Shape& out_shape(const Graph& g, const Op& op, size_t i) { return g.tensor(op.outputs[i]).shape; }
size_t numel(const Shape& s) { return static_cast<size_t>(s.numel()); }

// A device-to-device copy on s; nothing to do when empty or in place.
void device_copy(cudaStream_t s, size_t n, const float* x, float* y) {
  if (n && x != y) VT_CHECK(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
}

cuda::ConvShape conv_shape(const Shape& x, const Shape& w, const Op& op) {
  return {dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), dim(w, 0), dim(w, 2), dim(w, 3), op.attrs.stride, op.attrs.pad};
}

// The conv op's input shape x and filter shape w, whichever direction it runs.
std::pair<const Shape*, const Shape*> conv_operands(const Graph& g, const Op& op) {
  switch (op.kind) {
    case OpKind::kConv2d: return {&g.tensor(op.inputs[0]).shape, &g.tensor(op.inputs[1]).shape};
    case OpKind::kConv2dBwdData: return {&g.tensor(op.outputs[0]).shape, &g.tensor(op.inputs[1]).shape};
    case OpKind::kConv2dBwdFilter: return {&g.tensor(op.inputs[1]).shape, &g.tensor(op.outputs[0]).shape};
    default: return {nullptr, nullptr};
  }
}

}  // namespace

size_t CudaBackend::workspace_bytes(const Graph& g, const Op& op, ConvAlgo algo) {
  if (op.kind == OpKind::kSoftmaxCE) return static_cast<size_t>(dim(g.tensor(op.inputs[0]).shape, 0)) * sizeof(double);
  // A recomputation hands cuDNN throw-away running statistics here (see launch_norm).
  if (op.kind == OpKind::kBatchNorm) return 2 * static_cast<size_t>(dim(g.tensor(op.inputs[0]).shape, 1)) * sizeof(float);
  auto [x, w] = conv_operands(g, op);
  if (!x) return 0;
  return conv_->workspace_bytes(op.kind, conv_shape(*x, *w, op), algo);
}

void CudaBackend::launch(const Graph& g, const Op& op, const KernelArgs& a) {
  // What this launch enqueues counts as the op's time in a measured iteration (not a recomputation).
  struct Attribution {
    cuda::OpTimer& t;
    bool on;
    Attribution(cuda::OpTimer& timer, int op_index, bool recompute) : t(timer), on(timer.active() && !recompute) {
      if (on) t.push(op_index);
    }
    ~Attribution() {
      if (on) t.pop();
    }
  } attribution(op_timer_, op.index, a.recompute);
  size_t ws_bytes = a.workspace ? workspace_bytes(g, op, a.conv_algo) : 0;
  switch (op_family(op.kind)) {
    case OpFamily::kData: return launch_data(g, op, a);
    case OpFamily::kConv: return launch_conv(g, op, a, ws_bytes);
    case OpFamily::kNorm: return launch_norm(g, op, a, ws_bytes);
    case OpFamily::kPool: return launch_pool(g, op, a);
    case OpFamily::kLinear: return launch_linear(g, op, a);
    case OpFamily::kMatmul: return launch_matmul(g, op, a);
    case OpFamily::kElementwise: return launch_elementwise(g, op, a);
    case OpFamily::kLayout: return launch_layout(g, op, a);
    case OpFamily::kSoftmax: return launch_softmax(g, op, a, ws_bytes);
    case OpFamily::kEmbedding: return launch_embedding(g, op, a);
    case OpFamily::kOptimizer: return launch_optimizer(g, op, a);
    case OpFamily::kReplay:
      throw std::invalid_argument("the cuda backend cannot run replayed op '" + op.name +
                                  "' (a trace has no kernels); replay with --backend sim");
  }
}

void CudaBackend::launch_data(const Graph& g, const Op& op, const KernelArgs& a) {
  const cudaStream_t s = stream(Stream::kCompute);
  if (op.kind == OpKind::kData) {
    const Shape& xs = out_shape(g, op, 0);
    const int n = dim(xs, 0);
    cuda::synthetic_batch(s, n, n ? numel(xs) / static_cast<size_t>(n) : 0, op.attrs.num_classes, op.attrs.seed,
                          a.iteration, a.outputs[0], a.outputs[1]);
  } else {
    const int r = dim(out_shape(g, op, 0), 0);
    cuda::synthetic_tokens(s, r, op.attrs.period, op.attrs.num_classes, op.attrs.mlm, op.attrs.seed, a.iteration,
                           a.outputs[0], a.outputs[1]);
  }
}

void CudaBackend::launch_conv(const Graph& g, const Op& op, const KernelArgs& a, size_t ws_bytes) {
  const cudaStream_t s = stream(Stream::kCompute);
  switch (op.kind) {
    case OpKind::kConv2d: {
      const Shape& x = in_shape(g, op, 0);
      const cuda::ConvShape cs = conv_shape(x, in_shape(g, op, 1), op);
      conv_->forward(cs, a.conv_algo, a.inputs[0], a.inputs[1], a.outputs[0], a.workspace, ws_bytes);
      if (op.attrs.has_bias)
        cuda::add_bias_channels(s, cs.N, cs.K, static_cast<int>(numel(out_shape(g, op, 0)) / (size_t(cs.N) * cs.K)),
                                a.inputs[2], a.outputs[0]);
      break;
    }
    case OpKind::kConv2dBwdData:
      conv_->backward_data(conv_shape(out_shape(g, op, 0), in_shape(g, op, 1), op), a.conv_algo, a.inputs[0],
                           a.inputs[1], a.outputs[0], a.workspace, ws_bytes);
      break;
    case OpKind::kConv2dBwdFilter: {
      const cuda::ConvShape cs = conv_shape(in_shape(g, op, 1), out_shape(g, op, 0), op);
      conv_->backward_filter(cs, a.conv_algo, a.inputs[0], a.inputs[1], a.outputs[0], a.workspace, ws_bytes);
      if (op.attrs.has_bias)
        cuda::channel_sum(s, cs.N, cs.K, static_cast<int>(numel(in_shape(g, op, 0)) / (size_t(cs.N) * cs.K)),
                          a.inputs[0], a.outputs[1]);
      break;
    }
    default: break;
  }
}

void CudaBackend::launch_norm(const Graph& g, const Op& op, const KernelArgs& a, size_t ws_bytes) {
  const cudaStream_t s = stream(Stream::kCompute);
  switch (op.kind) {
    case OpKind::kBatchNorm: {
      const Shape& x = in_shape(g, op, 0);
      // A recomputation must not update the running statistics again: cuDNN updates a
      // throw-away pair in the workspace instead.
      float* scratch = static_cast<float*>(a.workspace);
      if (a.recompute && (!scratch || ws_bytes < 2 * size_t(dim(x, 1)) * sizeof(float)))
        throw std::logic_error("cuda batch norm: no workspace for a recomputation's running statistics");
      cuda::batchnorm_forward(cudnn_, dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.inputs[1], a.inputs[2],
                              a.outputs[0], a.outputs[1], a.outputs[2], a.recompute ? scratch : a.inputs[3],
                              a.recompute ? scratch + dim(x, 1) : a.inputs[4], op.attrs.momentum, op.attrs.eps);
      break;
    }
    case OpKind::kBatchNormBwd: {
      const Shape& x = in_shape(g, op, 1);
      cuda::batchnorm_backward(cudnn_, dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.inputs[1], a.inputs[2],
                               a.inputs[3], a.inputs[4], op.attrs.eps, a.outputs[0], a.outputs[1], a.outputs[2]);
      break;
    }
    case OpKind::kLayerNorm: {
      const Shape& x = in_shape(g, op, 0);
      cuda::layernorm_forward(s, rows(x), last(x), a.inputs[0], a.inputs[1], a.inputs[2], op.attrs.eps, a.outputs[0],
                              a.outputs[1], a.outputs[2]);
      break;
    }
    case OpKind::kLayerNormBwd: {
      const Shape& x = in_shape(g, op, 1);
      cuda::layernorm_backward(s, rows(x), last(x), a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3], a.inputs[4],
                               a.outputs[0], a.outputs[1], a.outputs[2]);
      break;
    }
    default: break;
  }
}

void CudaBackend::launch_pool(const Graph& g, const Op& op, const KernelArgs& a) {
  const cudaStream_t s = stream(Stream::kCompute);
  switch (op.kind) {
    case OpKind::kMaxPool:
    case OpKind::kMaxPoolBwd: {
      const bool fwd = op.kind == OpKind::kMaxPool;
      const Shape& x = fwd ? in_shape(g, op, 0) : in_shape(g, op, 1);
      const Shape& y = fwd ? out_shape(g, op, 0) : in_shape(g, op, 0);
      const int k = op.attrs.kernel, st = op.attrs.stride, pad = op.attrs.pad;
      if (fwd)
        cuda::maxpool_forward(s, dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), k, st, pad, dim(y, 2), dim(y, 3),
                              a.inputs[0], a.outputs[0]);
      else
        cuda::maxpool_backward(s, dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), k, st, pad, dim(y, 2), dim(y, 3),
                               a.inputs[0], a.inputs[1], a.outputs[0]);
      break;
    }
    case OpKind::kGlobalAvgPool: {
      const Shape& x = in_shape(g, op, 0);
      cuda::global_avgpool_forward(s, dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.outputs[0]);
      break;
    }
    case OpKind::kGlobalAvgPoolBwd: {
      const Shape& x = out_shape(g, op, 0);
      cuda::global_avgpool_backward(s, dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.outputs[0]);
      break;
    }
    default: break;
  }
}

void CudaBackend::launch_linear(const Graph& g, const Op& op, const KernelArgs& a) {
  const cudaStream_t s = stream(Stream::kCompute);
  if (op.kind == OpKind::kLinear) {
    const int M = dim(in_shape(g, op, 0), 0), In = dim(in_shape(g, op, 0), 1), Out = dim(in_shape(g, op, 1), 0);
    cuda::gemm(cublas_, false, true, M, Out, In, 1.f, a.inputs[0], In, 0, a.inputs[1], In, 0, 0.f, a.outputs[0], Out,
               0);
    if (op.attrs.has_bias) cuda::add_bias_rows(s, M, Out, a.inputs[2], a.outputs[0]);
    return;
  }
  const int M = dim(in_shape(g, op, 1), 0), In = dim(in_shape(g, op, 1), 1), Out = dim(in_shape(g, op, 2), 0);
  size_t o = 0;
  float* dx = op.attrs.has_dx ? a.outputs[o++] : nullptr;
  float* dw = a.outputs[o++];
  float* db = op.attrs.has_bias ? a.outputs[o++] : nullptr;
  const float* dy = a.inputs[0];
  if (dx) cuda::gemm(cublas_, false, false, M, In, Out, 1.f, dy, Out, 0, a.inputs[2], In, 0, 0.f, dx, In, 0);
  cuda::gemm(cublas_, true, false, Out, In, M, 1.f, dy, Out, 0, a.inputs[1], In, 0, 0.f, dw, In, 0);
  if (db) cuda::column_sum(s, M, Out, dy, db);
}

void CudaBackend::launch_matmul(const Graph& g, const Op& op, const KernelArgs& a) {
  const bool fwd = op.kind == OpKind::kBatchedMatmul;
  const Shape& sa = in_shape(g, op, fwd ? 0 : 1);
  const Shape& sc = fwd ? out_shape(g, op, 0) : in_shape(g, op, 0);
  const int B = batch_dims(sa), M = dim(sa, sa.rank() - 2), K = last(sa), N = last(sc);
  const bool tb = op.attrs.trans_b;
  const float alpha = op.attrs.alpha;
  const long long sA = (long long)M * K, sB = (long long)K * N, sC = (long long)M * N;
  const int ldb = tb ? K : N;
  if (fwd) {
    cuda::gemm(cublas_, false, tb, M, N, K, alpha, a.inputs[0], K, sA, a.inputs[1], ldb, sB, 0.f, a.outputs[0], N, sC,
               B);
    return;
  }
  const float *dc = a.inputs[0], *am = a.inputs[1], *bm = a.inputs[2];
  float* da = a.outputs[0];
  float* db = a.outputs.size() > 1 ? a.outputs[1] : nullptr;
  if (da) cuda::gemm(cublas_, false, !tb, M, K, N, alpha, dc, N, sC, bm, ldb, sB, 0.f, da, K, sA, B);
  if (db) {
    if (tb)
      cuda::gemm(cublas_, true, false, N, K, M, alpha, dc, N, sC, am, K, sA, 0.f, db, K, sB, B);
    else
      cuda::gemm(cublas_, true, false, K, N, M, alpha, am, K, sA, dc, N, sC, 0.f, db, N, sB, B);
  }
}

void CudaBackend::launch_elementwise(const Graph& g, const Op& op, const KernelArgs& a) {
  const cudaStream_t s = stream(Stream::kCompute);
  auto n = [&] { return numel(in_shape(g, op, 0)); };
  switch (op.kind) {
    case OpKind::kRelu: cuda::relu_forward(s, n(), a.inputs[0], a.outputs[0]); break;
    case OpKind::kReluBwd: cuda::relu_backward(s, n(), a.inputs[0], a.inputs[1], a.outputs[0]); break;
    case OpKind::kAdd: cuda::add_forward(s, n(), a.inputs[0], a.inputs[1], a.outputs[0]); break;
    case OpKind::kDropout:
    case OpKind::kDropoutBwd: {
      const float p = op.attrs.p;
      if (!(p >= 0.0f && p <= 1.0f)) throw std::invalid_argument("dropout: p must be in [0, 1]");
      if (p == 0.0f)
        device_copy(s, n(), a.inputs[0], a.outputs[0]);
      else
        cuda::dropout_forward(s, n(), p, cpu::mix64(op.attrs.seed + a.iteration), a.inputs[0], a.outputs[0]);
      break;
    }
    case OpKind::kGelu: cuda::gelu_forward(s, n(), a.inputs[0], a.outputs[0]); break;
    case OpKind::kGeluBwd: cuda::gelu_backward(s, n(), a.inputs[0], a.inputs[1], a.outputs[0]); break;
    default: break;
  }
}

void CudaBackend::launch_layout(const Graph& g, const Op& op, const KernelArgs& a) {
  const cudaStream_t s = stream(Stream::kCompute);
  switch (op.kind) {
    case OpKind::kFlatten:
    case OpKind::kReshapeBwd: device_copy(s, numel(in_shape(g, op, 0)), a.inputs[0], a.outputs[0]); break;
    case OpKind::kReshape:
      if (a.outputs[0] != a.inputs[0]) throw std::logic_error("reshape: a view must share its input's storage");
      break;
    case OpKind::kTranspose: {
      const Shape& x = in_shape(g, op, 0);
      cuda::transpose12(s, dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), a.inputs[0], a.outputs[0]);
      break;
    }
    default: break;
  }
}

void CudaBackend::launch_softmax(const Graph& g, const Op& op, const KernelArgs& a, size_t ws_bytes) {
  const cudaStream_t s = stream(Stream::kCompute);
  const Shape& l = in_shape(g, op, 0);
  switch (op.kind) {
    case OpKind::kSoftmaxCE:
      if (dim(l, 0) > 0 && (!a.workspace || ws_bytes < size_t(dim(l, 0)) * sizeof(double)))
        throw std::logic_error("cuda softmax_ce: no workspace for the row losses");
      cuda::softmax_ce_forward(s, dim(l, 0), dim(l, 1), a.inputs[0], a.inputs[1], static_cast<double*>(a.workspace),
                               a.outputs[0]);
      break;
    case OpKind::kSoftmaxCEBwd:
      cuda::softmax_ce_backward(s, dim(l, 0), dim(l, 1), a.inputs[0], a.inputs[1], a.outputs[0]);
      break;
    case OpKind::kSoftmax:
      cuda::softmax_forward(s, rows(l), last(l), op.attrs.causal, a.inputs[0], a.outputs[0]);
      break;
    case OpKind::kSoftmaxBwd:
      cuda::softmax_backward(s, rows(l), last(l), a.inputs[0], a.inputs[1], a.outputs[0]);
      break;
    default: break;
  }
}

void CudaBackend::launch_embedding(const Graph& g, const Op& op, const KernelArgs& a) {
  const cudaStream_t s = stream(Stream::kCompute);
  if (op.kind == OpKind::kEmbedding) {
    const Shape& t = in_shape(g, op, 0);
    const float* ids = op.inputs.size() > 1 ? a.inputs[1] : nullptr;
    cuda::embedding_forward(s, dim(out_shape(g, op, 0), 0), dim(t, 0), dim(t, 1), ids, op.attrs.period, a.inputs[0],
                            a.outputs[0]);
    return;
  }
  const Shape& t = out_shape(g, op, 0);
  const size_t plain = op.inputs.size() - (op.attrs.accumulate ? 1 : 0);  // dy [, ids]
  const float* ids = plain > 1 ? a.inputs[1] : nullptr;
  const float* acc = op.attrs.accumulate ? a.inputs.back() : nullptr;
  if (acc)
    device_copy(s, numel(t), acc, a.outputs[0]);
  else
    VT_CHECK(cudaMemsetAsync(a.outputs[0], 0, numel(t) * sizeof(float), s));
  cuda::embedding_backward_add(s, dim(in_shape(g, op, 0), 0), dim(t, 0), dim(t, 1), a.inputs[0], ids, op.attrs.period,
                               a.outputs[0]);
}

void CudaBackend::launch_optimizer(const Graph& g, const Op& op, const KernelArgs& a) {
  const cudaStream_t s = stream(Stream::kCompute);
  if (op.kind == OpKind::kSgdMomentum) {
    cuda::sgd_momentum(s, numel(in_shape(g, op, 0)), op.attrs.lr, op.attrs.sgd_momentum, op.attrs.weight_decay,
                       a.inputs[0], a.inputs[1], a.inputs[2]);
    return;
  }
  const int64_t step = static_cast<int64_t>(a.iteration) + 1;
  const float c1 = float(1.0 - std::pow(double(op.attrs.beta1), double(step)));
  const float c2 = float(1.0 - std::pow(double(op.attrs.beta2), double(step)));
  cuda::adam(s, numel(in_shape(g, op, 0)), op.attrs.lr, op.attrs.beta1, op.attrs.beta2, op.attrs.adam_eps,
             op.attrs.weight_decay, op.attrs.decoupled_wd, c1, c2, a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3]);
}

}  // namespace vtensor
