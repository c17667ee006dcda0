#include "vtensor/backend/cuda/cudnn_ops.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "vtensor/backend/cuda/cuda_check.h"

namespace vtensor::cuda {

namespace {

int idx(ConvAlgo a) { return a == ConvAlgo::kLean ? 1 : 0; }

// kFast: the first supported candidate in the heuristic's order. kLean: the candidate with the
// smallest workspace, the preferred lean algorithm first among equals, so a lean choice never
// needs more workspace than the fast one. ws(algo, bytes) is false when the algorithm is not
// supported for this shape (or not under FMA math).
template <typename Perf, typename WsFn>
void pick(const std::vector<Perf>& perf, bool deterministic, bool lean, int preferred_lean, WsFn ws, int& algo,
          size_t& bytes, const char* what) {
  int best = -1;
  size_t best_bytes = 0, b = 0;
  if (lean && ws(preferred_lean, b)) best = preferred_lean, best_bytes = b;
  for (const Perf& p : perf) {
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    // Tensor-core math on fp32 means TF32: not ours (the descriptor says CUDNN_FMA_MATH).
    if (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (!ws(static_cast<int>(p.algo), b)) continue;
    if (!lean) {
      algo = static_cast<int>(p.algo);
      bytes = b;
      return;
    }
    if (best < 0 || b < best_bytes) best = static_cast<int>(p.algo), best_bytes = b;
  }
  if (best < 0)
    throw std::runtime_error(std::string("cuDNN: no supported ") + (deterministic ? "deterministic " : "") + what +
                             " algorithm for this convolution");
  algo = best;
  bytes = best_bytes;
}

}  // namespace

ConvPlans::~ConvPlans() {
  for (auto& [s, p] : plans_) {
    VT_CHECK_NOTHROW(cudnnDestroyTensorDescriptor(p.x));
    VT_CHECK_NOTHROW(cudnnDestroyTensorDescriptor(p.y));
    VT_CHECK_NOTHROW(cudnnDestroyFilterDescriptor(p.w));
    VT_CHECK_NOTHROW(cudnnDestroyConvolutionDescriptor(p.conv));
  }
}

ConvPlans::Plan& ConvPlans::plan(const ConvShape& s) {
  auto it = plans_.find(s);
  if (it != plans_.end()) return it->second;
  Plan p;
  const int P = (s.H + 2 * s.pad - s.R) / s.stride + 1, Q = (s.W + 2 * s.pad - s.S) / s.stride + 1;
  VT_CHECK(cudnnCreateTensorDescriptor(&p.x));
  VT_CHECK(cudnnCreateTensorDescriptor(&p.y));
  VT_CHECK(cudnnCreateFilterDescriptor(&p.w));
  VT_CHECK(cudnnCreateConvolutionDescriptor(&p.conv));
  VT_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.N, s.C, s.H, s.W));
  VT_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.N, s.K, P, Q));
  VT_CHECK(cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.K, s.C, s.R, s.S));
  VT_CHECK(cudnnSetConvolution2dDescriptor(p.conv, s.pad, s.pad, s.stride, s.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                           CUDNN_DATA_FLOAT));
  VT_CHECK(cudnnSetConvolutionMathType(p.conv, CUDNN_FMA_MATH));
  return plans_.emplace(s, p).first->second;
}

void ConvPlans::choose(Plan& p, OpKind kind, ConvAlgo algo) {
  const int i = idx(algo);
  // Deterministic runs take the lean choice for kFast too: one algorithm per convolution whatever
  // the budget, so a policy that falls back to lean for want of workspace never changes the bits.
  const bool lean = algo == ConvAlgo::kLean || deterministic_;
  if (kind == OpKind::kConv2d) {
    if (p.fwd[i] >= 0) return;
    int n = 0;
    VT_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h_, &n));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(n));
    VT_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h_, p.x, p.w, p.conv, p.y, n, &n, perf.data()));
    perf.resize(static_cast<size_t>(n));
    pick(perf, deterministic_, lean, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
         [&](int a, size_t& b) {
           return cudnnGetConvolutionForwardWorkspaceSize(h_, p.x, p.w, p.conv, p.y,
                                                          static_cast<cudnnConvolutionFwdAlgo_t>(a), &b) ==
                  CUDNN_STATUS_SUCCESS;
         },
         p.fwd[i], p.fwd_ws[i], "forward");
  } else if (kind == OpKind::kConv2dBwdData) {
    if (p.bwd_data[i] >= 0) return;
    int n = 0;
    VT_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h_, &n));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(n));
    VT_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h_, p.w, p.y, p.conv, p.x, n, &n, perf.data()));
    perf.resize(static_cast<size_t>(n));
    pick(perf, deterministic_, lean, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
         [&](int a, size_t& b) {
           return cudnnGetConvolutionBackwardDataWorkspaceSize(h_, p.w, p.y, p.conv, p.x,
                                                               static_cast<cudnnConvolutionBwdDataAlgo_t>(a), &b) ==
                  CUDNN_STATUS_SUCCESS;
         },
         p.bwd_data[i], p.bwd_data_ws[i], "backward-data");
  } else if (kind == OpKind::kConv2dBwdFilter) {
    if (p.bwd_filter[i] >= 0) return;
    int n = 0;
    VT_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h_, &n));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(n));
    VT_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h_, p.x, p.y, p.conv, p.w, n, &n, perf.data()));
    perf.resize(static_cast<size_t>(n));
    pick(perf, deterministic_, lean, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
         [&](int a, size_t& b) {
           return cudnnGetConvolutionBackwardFilterWorkspaceSize(h_, p.x, p.y, p.conv, p.w,
                                                                 static_cast<cudnnConvolutionBwdFilterAlgo_t>(a), &b) ==
                  CUDNN_STATUS_SUCCESS;
         },
         p.bwd_filter[i], p.bwd_filter_ws[i], "backward-filter");
  } else {
    throw std::logic_error("ConvPlans: not a convolution op");
  }
}

size_t ConvPlans::workspace_bytes(OpKind kind, const ConvShape& s, ConvAlgo algo) {
  Plan& p = plan(s);
  choose(p, kind, algo);
  const int i = idx(algo);
  return kind == OpKind::kConv2d ? p.fwd_ws[i] : kind == OpKind::kConv2dBwdData ? p.bwd_data_ws[i] : p.bwd_filter_ws[i];
}

namespace {
void check_ws(size_t need, size_t have, const char* what) {
  if (need > have)
    throw std::logic_error(std::string("cuda backend: ") + what + " needs " + std::to_string(need) +
                           " workspace bytes, the memory manager gave " + std::to_string(have));
}
}  // namespace

void ConvPlans::forward(const ConvShape& s, ConvAlgo algo, const float* x, const float* w, float* y, void* ws,
                        size_t ws_bytes) {
  Plan& p = plan(s);
  choose(p, OpKind::kConv2d, algo);
  const int i = idx(algo);
  check_ws(p.fwd_ws[i], ws_bytes, "conv forward");
  const float one = 1.f, zero = 0.f;
  VT_CHECK(cudnnConvolutionForward(h_, &one, p.x, x, p.w, w, p.conv, static_cast<cudnnConvolutionFwdAlgo_t>(p.fwd[i]),
                                   ws, p.fwd_ws[i], &zero, p.y, y));
}

void ConvPlans::backward_data(const ConvShape& s, ConvAlgo algo, const float* dy, const float* w, float* dx, void* ws,
                              size_t ws_bytes) {
  Plan& p = plan(s);
  choose(p, OpKind::kConv2dBwdData, algo);
  const int i = idx(algo);
  check_ws(p.bwd_data_ws[i], ws_bytes, "conv backward data");
  const float one = 1.f, zero = 0.f;
  VT_CHECK(cudnnConvolutionBackwardData(h_, &one, p.w, w, p.y, dy, p.conv,
                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(p.bwd_data[i]), ws,
                                        p.bwd_data_ws[i], &zero, p.x, dx));
}

void ConvPlans::backward_filter(const ConvShape& s, ConvAlgo algo, const float* dy, const float* x, float* dw, void* ws,
                                size_t ws_bytes) {
  Plan& p = plan(s);
  choose(p, OpKind::kConv2dBwdFilter, algo);
  const int i = idx(algo);
  check_ws(p.bwd_filter_ws[i], ws_bytes, "conv backward filter");
  const float one = 1.f, zero = 0.f;
  VT_CHECK(cudnnConvolutionBackwardFilter(h_, &one, p.x, x, p.y, dy, p.conv,
                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.bwd_filter[i]), ws,
                                          p.bwd_filter_ws[i], &zero, p.w, dw));
}

// ---------------------------------------------------------------- batch norm

namespace {
// x [N, C, HW, 1] and the derived [1, C, 1, 1] parameter descriptor, destroyed on scope exit.
struct BnDescs {
  cudnnTensorDescriptor_t x = nullptr, p = nullptr;
  BnDescs(int N, int C, int HW) {
    VT_CHECK(cudnnCreateTensorDescriptor(&x));
    VT_CHECK(cudnnCreateTensorDescriptor(&p));
    VT_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, HW, 1));
    VT_CHECK(cudnnDeriveBNTensorDescriptor(p, x, CUDNN_BATCHNORM_SPATIAL));
  }
  ~BnDescs() {
    VT_CHECK_NOTHROW(cudnnDestroyTensorDescriptor(x));
    VT_CHECK_NOTHROW(cudnnDestroyTensorDescriptor(p));
  }
};
}  // namespace

void batchnorm_forward(cudnnHandle_t h, int N, int C, int HW, const float* x, const float* gamma, const float* beta,
                       float* y, float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                       float momentum, float eps) {
  BnDescs d(N, C, HW);
  const float one = 1.f, zero = 0.f;
  VT_CHECK(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x, d.x, y, d.p, gamma,
                                                  beta, double(momentum), running_mean, running_var, double(eps),
                                                  save_mean, save_invstd));
}

void batchnorm_backward(cudnnHandle_t h, int N, int C, int HW, const float* dy, const float* x, const float* gamma,
                        const float* save_mean, const float* save_invstd, float eps, float* dx, float* dgamma,
                        float* dbeta) {
  BnDescs d(N, C, HW);
  const float one = 1.f, zero = 0.f;
  VT_CHECK(cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, d.x, x, d.x, dy, d.x,
                                           dx, d.p, gamma, dgamma, dbeta, double(eps), save_mean, save_invstd));
}

// ---------------------------------------------------------------- GEMM

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
void gemm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          long long stride_a, const float* B, int ldb, long long stride_b, float beta, float* C, int ldc,
          long long stride_c, int batch) {
  if (M <= 0 || N <= 0 || batch <= 0) return;
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    VT_CHECK(cublasSgemm(h, tb, ta, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
  } else {
    VT_CHECK(cublasSgemmStridedBatched(h, tb, ta, N, M, K, &alpha, B, ldb, stride_b, A, lda, stride_a, &beta, C, ldc,
                                       stride_c, batch));
  }
}

}  // namespace vtensor::cuda
