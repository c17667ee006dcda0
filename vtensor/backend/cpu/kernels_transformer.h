// CPU reference kernels for transformers: embedding, layer norm, GELU, batched matmul,
// softmax (optionally causal), the head transpose, and Adam. Same contract as kernels.h:
// deterministic (fixed summation order, no threads of our own), float pointers in and out.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vtensor::cpu {

// y[n, :] = table[index(n), :], index(n) = ids[n] when ids is non-null, else n % period
// (positions of a [B*T] batch: period = T). ids hold token indices as floats.
void embedding_forward(int N, int V, int C, const float* ids, int period, const float* table, float* y);
// dtable = acc (zeros when acc is null) + the rows of dy added into the rows they read, rows in
// order: no races, a fixed summation order.
void embedding_backward(int N, int V, int C, const float* dy, const float* ids, int period, float* dtable,
                        const float* acc = nullptr);

// Layer norm over the last dimension of x[R, C]; saves the row mean and 1/sqrt(var + eps).
void layernorm_forward(int R, int C, const float* x, const float* gamma, const float* beta, float eps, float* y,
                       float* save_mean, float* save_invstd);
void layernorm_backward(int R, int C, const float* dy, const float* x, const float* gamma, const float* save_mean,
                        const float* save_invstd, float* dx, float* dgamma, float* dbeta);

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(size_t n, const float* x, float* y);
void gelu_backward(size_t n, const float* dy, const float* x, float* dx);

// c[b] = alpha * a[b] (M x K) * op(b[b]), op(b) = b (K x N) or b^T when trans_b (b is N x K).
void bmm_forward(int batch, int M, int N, int K, bool trans_b, float alpha, const float* a, const float* b, float* c);
// da, db (each nullable) from dc; overwritten.
void bmm_backward(int batch, int M, int N, int K, bool trans_b, float alpha, const float* dc, const float* a,
                  const float* b, float* da, float* db);

// Softmax over the last dimension of x[R, C], numerically stable (max subtracted). Causal:
// the rows are [.., T, T] score matrices (C = T) and row r sees columns j <= r % T only;
// masked entries are exactly 0.
void softmax_forward(int R, int C, bool causal, const float* x, float* y);
// dx = y * (dy - sum_j dy_j y_j); masked entries (y = 0) get 0.
void softmax_backward(int R, int C, const float* dy, const float* y, float* dx);

// y[a, c, b, d] = x[a, b, c, d]: swaps the two middle dimensions (heads <-> sequence).
void transpose12(int A, int B, int C, int D, const float* x, float* y);

// Adam (Kingma & Ba) with bias correction for step t >= 1. decoupled: AdamW's
// w -= lr * wd * w; else L2: g += wd * w.
void adam(size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step,
          float* w, const float* g, float* m, float* v);

}  // namespace vtensor::cpu
