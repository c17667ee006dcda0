// Transformer kernels: plain loops with double accumulators where rows are summed, and OpenBLAS
// sgemm per batch entry for bmm. No threading of our own, so results are bit-reproducible.
#include "vtensor/backend/cpu/kernels_transformer.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace vtensor::cpu {

namespace {

int row_index(const float* ids, int period, int n, int V) {
  const int idx = ids ? int(ids[n]) : n % period;
  if (ids && !(ids[n] >= 0.0f && ids[n] < float(V)))
    throw std::invalid_argument("embedding: index " + std::to_string(ids[n]) + " out of [0, " + std::to_string(V) + ")");
  if (idx < 0 || idx >= V) throw std::invalid_argument("embedding: position " + std::to_string(idx) + " >= table rows");
  return idx;
}

void sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
           float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int i = 0; i < M; ++i) std::fill(C + size_t(i) * ldc, C + size_t(i) * ldc + N, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
              B, ldb, 0.0f, C, ldc);
}

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;

}  // namespace

void embedding_forward(int N, int V, int C, const float* ids, int period, const float* table, float* y) {
  for (int n = 0; n < N; ++n) {
    const float* row = table + size_t(row_index(ids, period, n, V)) * C;
    std::copy(row, row + C, y + size_t(n) * C);
  }
}

void embedding_backward(int N, int V, int C, const float* dy, const float* ids, int period, float* dtable,
                        const float* acc) {
  if (acc) {
    std::copy(acc, acc + size_t(V) * C, dtable);
  } else {
    std::fill(dtable, dtable + size_t(V) * C, 0.0f);
  }
  for (int n = 0; n < N; ++n) {
    float* row = dtable + size_t(row_index(ids, period, n, V)) * C;
    const float* g = dy + size_t(n) * C;
    for (int c = 0; c < C; ++c) row[c] += g[c];
  }
}

void layernorm_forward(int R, int C, const float* x, const float* gamma, const float* beta, float eps, float* y,
                       float* save_mean, float* save_invstd) {
  for (int r = 0; r < R; ++r) {
    const float* xr = x + size_t(r) * C;
    double sum = 0.0;
    for (int c = 0; c < C; ++c) sum += xr[c];
    const double mean = C > 0 ? sum / C : 0.0;
    double sq = 0.0;
    for (int c = 0; c < C; ++c) {
      const double d = double(xr[c]) - mean;
      sq += d * d;
    }
    const double invstd = 1.0 / std::sqrt((C > 0 ? sq / C : 0.0) + double(eps));
    save_mean[r] = float(mean);
    save_invstd[r] = float(invstd);
    const float mu = float(mean), is = float(invstd);
    float* yr = y + size_t(r) * C;
    for (int c = 0; c < C; ++c) yr[c] = (xr[c] - mu) * is * gamma[c] + beta[c];
  }
}

void layernorm_backward(int R, int C, const float* dy, const float* x, const float* gamma, const float* save_mean,
                        const float* save_invstd, float* dx, float* dgamma, float* dbeta) {
  std::vector<double> dg(static_cast<size_t>(C), 0.0), db(static_cast<size_t>(C), 0.0);
  std::vector<double> xhat(static_cast<size_t>(C)), dxhat(static_cast<size_t>(C));
  for (int r = 0; r < R; ++r) {
    const float* xr = x + size_t(r) * C;
    const float* dyr = dy + size_t(r) * C;
    const double mu = save_mean[r], is = save_invstd[r];
    double s1 = 0.0, s2 = 0.0;
    for (int c = 0; c < C; ++c) {
      xhat[c] = (double(xr[c]) - mu) * is;
      dxhat[c] = double(dyr[c]) * gamma[c];
      s1 += dxhat[c];
      s2 += dxhat[c] * xhat[c];
      dg[c] += double(dyr[c]) * xhat[c];
      db[c] += dyr[c];
    }
    float* dxr = dx + size_t(r) * C;
    for (int c = 0; c < C; ++c) dxr[c] = float(is / C * (C * dxhat[c] - s1 - xhat[c] * s2));
  }
  for (int c = 0; c < C; ++c) {
    dgamma[c] = float(dg[c]);
    dbeta[c] = float(db[c]);
  }
}

void gelu_forward(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = float(0.5 * v * (1.0 + std::tanh(kGeluK * (v + kGeluC * v * v * v))));
  }
}

void gelu_backward(size_t n, const float* dy, const float* x, float* dx) {
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double t = std::tanh(kGeluK * (v + kGeluC * v * v * v));
    const double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kGeluK * (1.0 + 3.0 * kGeluC * v * v);
    dx[i] = float(double(dy[i]) * d);
  }
}

void bmm_forward(int batch, int M, int N, int K, bool trans_b, float alpha, const float* a, const float* b, float* c) {
  for (int i = 0; i < batch; ++i) {
    const float* ai = a + size_t(i) * M * K;
    const float* bi = b + size_t(i) * K * N;
    sgemm(false, trans_b, M, N, K, alpha, ai, K, bi, trans_b ? K : N, c + size_t(i) * M * N, N);
  }
}

void bmm_backward(int batch, int M, int N, int K, bool trans_b, float alpha, const float* dc, const float* a,
                  const float* b, float* da, float* db) {
  for (int i = 0; i < batch; ++i) {
    const float* ai = a + size_t(i) * M * K;
    const float* bi = b + size_t(i) * K * N;
    const float* dci = dc + size_t(i) * M * N;
    // da[M,K] = alpha dc[M,N] op(b)^T
    if (da) sgemm(false, !trans_b, M, K, N, alpha, dci, N, bi, trans_b ? K : N, da + size_t(i) * M * K, K);
    if (!db) continue;
    float* dbi = db + size_t(i) * K * N;
    if (trans_b) {
      sgemm(true, false, N, K, M, alpha, dci, N, ai, K, dbi, K);  // db[N,K] = alpha dc^T a
    } else {
      sgemm(true, false, K, N, M, alpha, ai, K, dci, N, dbi, N);  // db[K,N] = alpha a^T dc
    }
  }
}

void softmax_forward(int R, int C, bool causal, const float* x, float* y) {
  for (int r = 0; r < R; ++r) {
    const float* xr = x + size_t(r) * C;
    float* yr = y + size_t(r) * C;
    const int n = causal ? (r % C) + 1 : C;
    float mx = xr[0];
    for (int j = 1; j < n; ++j) mx = std::max(mx, xr[j]);
    double se = 0.0;
    for (int j = 0; j < n; ++j) se += std::exp(double(xr[j]) - mx);
    const double inv = 1.0 / se;
    for (int j = 0; j < n; ++j) yr[j] = float(std::exp(double(xr[j]) - mx) * inv);
    for (int j = n; j < C; ++j) yr[j] = 0.0f;
  }
}

void softmax_backward(int R, int C, const float* dy, const float* y, float* dx) {
  for (int r = 0; r < R; ++r) {
    const float* dyr = dy + size_t(r) * C;
    const float* yr = y + size_t(r) * C;
    double dot = 0.0;
    for (int j = 0; j < C; ++j) dot += double(dyr[j]) * yr[j];
    float* dxr = dx + size_t(r) * C;
    for (int j = 0; j < C; ++j) dxr[j] = float(double(yr[j]) * (double(dyr[j]) - dot));
  }
}

void transpose12(int A, int B, int C, int D, const float* x, float* y) {
  for (int a = 0; a < A; ++a)
    for (int b = 0; b < B; ++b)
      for (int c = 0; c < C; ++c) {
        const float* src = x + ((size_t(a) * B + b) * C + c) * D;
        std::copy(src, src + D, y + ((size_t(a) * C + c) * B + b) * D);
      }
}

void adam(size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step,
          float* w, const float* g, float* m, float* v) {
  if (step < 1) throw std::invalid_argument("adam: step must be >= 1");
  const float c1 = float(1.0 - std::pow(double(beta1), double(step)));
  const float c2 = float(1.0 - std::pow(double(beta2), double(step)));
  for (size_t i = 0; i < n; ++i) {
    float gi = g[i];
    if (!decoupled) gi += weight_decay * w[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float wi = w[i];
    if (decoupled) wi -= lr * weight_decay * wi;
    w[i] = wi - lr * (mi / c1) / (std::sqrt(vi / c2) + eps);
  }
}

}  // namespace vtensor::cpu
