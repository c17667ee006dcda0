// cuDNN convolution and batch norm for the cuda backend, and the row-major GEMM wrappers over
// cuBLAS. Convolution algorithms (vDNN's choice between fast and memory-lean):
//   ConvAlgo::kFast: cuDNN's heuristic (the _v7 query, no trial runs), the first algorithm it
//     ranks that is supported here; in deterministic mode the first deterministic one.
//   ConvAlgo::kLean: the supported candidate with the smallest workspace, preferring
//     IMPLICIT_GEMM forward (no workspace) and ALGO_1 for backward data and filter
//     (deterministic, small workspace); never more workspace than kFast.
// Workspace sizes come from cuDNN's own query for the chosen algorithm; plans (descriptors and
// choices) are cached per shape. Math is strict fp32 (CUDNN_FMA_MATH: no TF32).
#pragma once
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <tuple>

#include "vtensor/ops/op.h"

namespace vtensor::cuda {

struct ConvShape {
  int N, C, H, W, K, R, S, stride, pad;
  auto key() const { return std::tie(N, C, H, W, K, R, S, stride, pad); }
  bool operator<(const ConvShape& o) const { return key() < o.key(); }
};

class ConvPlans {
 public:
  ConvPlans(cudnnHandle_t h, bool deterministic) : h_(h), deterministic_(deterministic) {}
  ~ConvPlans();
  ConvPlans(const ConvPlans&) = delete;
  ConvPlans& operator=(const ConvPlans&) = delete;

  // Workspace bytes of op kind (kConv2d, kConv2dBwdData, kConv2dBwdFilter) under algo.
  size_t workspace_bytes(OpKind kind, const ConvShape& s, ConvAlgo algo);
  void forward(const ConvShape& s, ConvAlgo algo, const float* x, const float* w, float* y, void* ws, size_t ws_bytes);
  void backward_data(const ConvShape& s, ConvAlgo algo, const float* dy, const float* w, float* dx, void* ws,
                     size_t ws_bytes);
  void backward_filter(const ConvShape& s, ConvAlgo algo, const float* dy, const float* x, float* dw, void* ws,
                       size_t ws_bytes);

 private:
  struct Plan {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    // [algo]: chosen algorithm and its workspace, -1 until chosen
    int fwd[2] = {-1, -1}, bwd_data[2] = {-1, -1}, bwd_filter[2] = {-1, -1};
    size_t fwd_ws[2] = {0, 0}, bwd_data_ws[2] = {0, 0}, bwd_filter_ws[2] = {0, 0};
  };
  Plan& plan(const ConvShape& s);
  void choose(Plan& p, OpKind kind, ConvAlgo algo);
  cudnnHandle_t h_;
  bool deterministic_;
  std::map<ConvShape, Plan> plans_;
};

// Batch norm, training mode, spatial, over x[N, C, HW]: saves mean and 1/sqrt(var + eps) and
// updates running_mean / running_var (unbiased variance, factor momentum).
void batchnorm_forward(cudnnHandle_t h, int N, int C, int HW, const float* x, const float* gamma, const float* beta,
                       float* y, float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                       float momentum, float eps);
void batchnorm_backward(cudnnHandle_t h, int N, int C, int HW, const float* dy, const float* x, const float* gamma,
                        const float* save_mean, const float* save_invstd, float eps, float* dx, float* dgamma,
                        float* dbeta);

// Row-major C[M,N] = alpha op(A) op(B) + beta C, batched with strides when batch > 1.
void gemm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          long long stride_a, const float* B, int ldb, long long stride_b, float beta, float* C, int ldc,
          long long stride_c, int batch = 1);

}  // namespace vtensor::cuda
