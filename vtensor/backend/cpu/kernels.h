// CPU reference kernels. Plain functions over float pointers so the backend, the
// gradient checks and (later) the cuda tests' reference all call the same code.
// Every kernel is deterministic: the same inputs give the same bits, whatever the
// addresses, which is what lets recomputation and swapping stay bit-identical.
#pragma once
#include <cstddef>
#include <cstdint>

#include "vtensor/ops/op.h"

namespace vtensor::cpu {

// NCHW activations, KCRS filters. P, Q are the output height and width.
struct Conv2dParams {
  int N, C, H, W;   // input
  int K, R, S;      // filters: K output channels of C x R x S
  int stride, pad;
  int P, Q;         // output spatial size
};
Conv2dParams make_conv2d_params(int N, int C, int H, int W, int K, int R, int S, int stride, int pad);
// Conv kernels run one sgemm per sample and block of kConvColumnBlock output columns (of
// P*Q), the same calls under both algorithms: ConvAlgo::kFast first lays out the im2col
// matrix of the whole sample, kLean only the block in use, so they give the same bits and
// kLean needs a workspace of at most C*R*S*kConvColumnBlock floats. 1x1 stride-1 convs need
// no im2col and take no workspace under kLean.
constexpr int kConvColumnBlock = 128;
// Scratch floats the conv kernels need under an algorithm.
size_t conv2d_workspace_floats(const Conv2dParams& p, ConvAlgo algo = ConvAlgo::kFast);
// y[N,K,P,Q] = conv(x, w) (+ b[K] when b is non-null).
void conv2d_forward(const Conv2dParams& p, const float* x, const float* w, const float* b, float* y,
                    float* workspace, ConvAlgo algo = ConvAlgo::kFast);
// dx[N,C,H,W] from dy[N,K,P,Q] and w. Overwrites dx.
void conv2d_backward_data(const Conv2dParams& p, const float* dy, const float* w, float* dx,
                          float* workspace, ConvAlgo algo = ConvAlgo::kFast);
// dw[K,C,R,S] (and db[K] when non-null) from dy and x. Overwrites dw / db.
void conv2d_backward_filter(const Conv2dParams& p, const float* dy, const float* x, float* dw, float* db,
                            float* workspace, ConvAlgo algo = ConvAlgo::kFast);

// Batch norm, training mode, over x[N,C,HW] (HW = 1 for [N,C]). Saves the batch mean and
// 1/sqrt(var + eps) for backward. Running stats (unbiased var) are updated only when
// update_running is true, so a recomputation does not update them twice.
void batchnorm_forward(int N, int C, int HW, const float* x, const float* gamma, const float* beta, float* y,
                       float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                       float momentum, float eps, bool update_running);
void batchnorm_backward(int N, int C, int HW, const float* dy, const float* x, const float* gamma,
                        const float* save_mean, const float* save_invstd, float* dx, float* dgamma,
                        float* dbeta);

void relu_forward(size_t n, const float* x, float* y);
// dx = dy where y > 0 else 0.
void relu_backward(size_t n, const float* dy, const float* y, float* dx);

// Max pool with a k x k window; padding counts as -inf. Backward recomputes the argmax
// (first maximum in window order) from x, so no index tensor is kept.
void maxpool2d_forward(int N, int C, int H, int W, int k, int stride, int pad, int P, int Q, const float* x,
                       float* y);
void maxpool2d_backward(int N, int C, int H, int W, int k, int stride, int pad, int P, int Q,
                        const float* dy, const float* x, float* dx);

// Global average pool x[N,C,HW] -> y[N,C].
void global_avgpool_forward(int N, int C, int HW, const float* x, float* y);
void global_avgpool_backward(int N, int C, int HW, const float* dy, float* dx);

// y[M,Out] = x[M,In] * w[Out,In]^T + b[Out] (b nullable).
void linear_forward(int M, int In, int Out, const float* x, const float* w, const float* b, float* y);
// dx (nullable), dw, db (nullable); all overwritten.
void linear_backward(int M, int In, int Out, const float* dy, const float* x, const float* w, float* dx,
                     float* dw, float* db);

void add_forward(size_t n, const float* a, const float* b, float* y);
void copy(size_t n, const float* x, float* y);

// Inverted dropout with a counter-based mask: element i is kept iff hash(seed, i) >= p,
// so forward, recompute and backward all see the same mask without storing it.
bool dropout_keep(uint64_t seed, size_t i, float p);
void dropout_forward(size_t n, float p, uint64_t seed, const float* x, float* y);
void dropout_backward(size_t n, float p, uint64_t seed, const float* dy, float* dx);

// Mean softmax cross-entropy over N rows of K logits; labels hold class indices as floats.
void softmax_ce_forward(int N, int K, const float* logits, const float* labels, float* loss);
// dlogits = (softmax(logits) - onehot(labels)) / N.
void softmax_ce_backward(int N, int K, const float* logits, const float* labels, float* dlogits);

// m = momentum * m + (g + weight_decay * w); w -= lr * m.
void sgd_momentum(size_t n, float lr, float momentum, float weight_decay, float* w, const float* g, float* m);

// Deterministic 64-bit mixing (splitmix64) used by dropout and synthetic data.
uint64_t mix64(uint64_t x);
// Uniform float in [0, 1) from (seed, i).
float uniform01(uint64_t seed, uint64_t i);

}  // namespace vtensor::cpu
