// CPU reference kernels: im2col + OpenBLAS sgemm for conv and linear, plain loops for the rest.
// No threading of our own and a fixed summation order everywhere, so results are bit-reproducible.
#include "vtensor/backend/cpu/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace vtensor::cpu {

namespace {

// Outputs i in [0, n_out) with 0 <= i * stride + offset < size form the range [lo, hi).
inline void valid_range(int n_out, int stride, int offset, int size, int& lo, int& hi) {
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  hi = size - offset <= 0 ? 0 : (size - offset + stride - 1) / stride;
  lo = std::min(lo, n_out);
  hi = std::clamp(hi, lo, n_out);
}

// 1x1, stride 1, no padding: the im2col matrix of a sample is the sample itself.
inline bool is_pointwise(const Conv2dParams& p) {
  return p.R == 1 && p.S == 1 && p.stride == 1 && p.pad == 0;
}

// Columns [j0, j1) of the im2col matrix of one sample, ld = j1 - j0:
// col[(c*R + r)*S + s][j - j0] = x[c][p*stride - pad + r][q*stride - pad + s] with j = p*Q + q, 0 outside.
void im2col_cols(const Conv2dParams& p, const float* x, float* col, int j0, int j1) {
  const size_t bw = size_t(j1 - j0);
  const int op_lo = j0 / p.Q, op_hi = (j1 - 1) / p.Q;
  for (int c = 0; c < p.C; ++c) {
    const float* xc = x + size_t(c) * p.H * p.W;
    for (int r = 0; r < p.R; ++r) {
      for (int s = 0; s < p.S; ++s) {
        float* row = col + (size_t(c * p.R + r) * p.S + s) * bw;
        int q_lo, q_hi;
        valid_range(p.Q, p.stride, s - p.pad, p.W, q_lo, q_hi);
        for (int op = op_lo; op <= op_hi; ++op) {
          const int a = std::max(j0 - op * p.Q, 0), b = std::min(j1 - op * p.Q, p.Q);
          float* out = row + (size_t(op) * p.Q + a - j0);
          const int h = op * p.stride - p.pad + r;
          if (h < 0 || h >= p.H) {
            std::fill(out, out + (b - a), 0.0f);
            continue;
          }
          const float* xr = xc + size_t(h) * p.W;
          const int v_lo = std::clamp(q_lo, a, b), v_hi = std::clamp(q_hi, v_lo, b);  // valid q in the block
          std::fill(out, out + (v_lo - a), 0.0f);
          for (int q = v_lo; q < v_hi; ++q) out[q - a] = xr[q * p.stride + s - p.pad];
          std::fill(out + (v_hi - a), out + (b - a), 0.0f);
        }
      }
    }
  }
}

// Adds columns [j0, j1) of an im2col matrix (ld = j1 - j0) back to the x positions they came from.
void col2im_cols(const Conv2dParams& p, const float* col, float* dx, int j0, int j1) {
  const size_t bw = size_t(j1 - j0);
  const int op_lo = j0 / p.Q, op_hi = (j1 - 1) / p.Q;
  for (int c = 0; c < p.C; ++c) {
    float* dxc = dx + size_t(c) * p.H * p.W;
    for (int r = 0; r < p.R; ++r) {
      for (int s = 0; s < p.S; ++s) {
        const float* row = col + (size_t(c * p.R + r) * p.S + s) * bw;
        int q_lo, q_hi;
        valid_range(p.Q, p.stride, s - p.pad, p.W, q_lo, q_hi);
        for (int op = op_lo; op <= op_hi; ++op) {
          const int h = op * p.stride - p.pad + r;
          if (h < 0 || h >= p.H) continue;
          const int a = std::max({j0 - op * p.Q, 0, q_lo}), b = std::min({j1 - op * p.Q, p.Q, q_hi});
          const float* in = row + (size_t(op) * p.Q + size_t(std::max(a, 0)) - j0);
          float* dr = dxc + size_t(h) * p.W;
          for (int q = a; q < b; ++q) dr[q * p.stride + s - p.pad] += in[q - a];
        }
      }
    }
  }
}

// The column blocks [j0, j1) of a sample's P*Q output columns, in order.
template <typename F>
void for_each_block(int PQ, F&& f) {
  for (int j0 = 0; j0 < PQ; j0 += kConvColumnBlock) f(j0, std::min(PQ, j0 + kConvColumnBlock));
}

// Row-major C[M,N] = op(A) * op(B) + beta * C; empty shapes are handled here, not by BLAS.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int i = 0; i < M; ++i) {
      float* c = C + size_t(i) * ldc;
      for (int j = 0; j < N; ++j) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

// Index (h * W + w) of the first maximum of the window over valid positions, or -1 when the window
// lies entirely in padding. Padding is -inf, so it never beats a real value; a NaN propagates.
inline std::ptrdiff_t window_argmax(const float* xc, int H, int W, int k, int stride, int pad, int op,
                                    int oq) {
  const int h0 = op * stride - pad, w0 = oq * stride - pad;
  const int r_lo = std::max(0, -h0), r_hi = std::min(k, H - h0);
  const int s_lo = std::max(0, -w0), s_hi = std::min(k, W - w0);
  std::ptrdiff_t best_i = -1;
  float best = -std::numeric_limits<float>::infinity();
  for (int r = r_lo; r < r_hi; ++r) {
    const float* xr = xc + size_t(h0 + r) * W;
    for (int s = s_lo; s < s_hi; ++s) {
      const float v = xr[w0 + s];
      if (best_i < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
        best = v;
        best_i = std::ptrdiff_t(h0 + r) * W + (w0 + s);
      }
    }
  }
  return best_i;
}

void check_dropout_p(float p) {
  if (!(p >= 0.0f && p <= 1.0f)) throw std::invalid_argument("dropout: p must be in [0, 1]");
}

int checked_label(float label, int K) {
  if (!(label >= 0.0f && label < float(K))) {
    throw std::invalid_argument("softmax_ce: label " + std::to_string(label) + " out of [0, " +
                                std::to_string(K) + ")");
  }
  return int(label);
}

}  // namespace

Conv2dParams make_conv2d_params(int N, int C, int H, int W, int K, int R, int S, int stride, int pad) {
  if (N < 0 || C <= 0 || H <= 0 || W <= 0 || K <= 0 || R <= 0 || S <= 0 || stride <= 0 || pad < 0) {
    throw std::invalid_argument("conv2d: bad parameters");
  }
  if (H + 2 * pad < R || W + 2 * pad < S) throw std::invalid_argument("conv2d: filter larger than input");
  const int P = (H + 2 * pad - R) / stride + 1;
  const int Q = (W + 2 * pad - S) / stride + 1;
  return Conv2dParams{N, C, H, W, K, R, S, stride, pad, P, Q};
}

size_t conv2d_workspace_floats(const Conv2dParams& p, ConvAlgo algo) {
  const size_t CRS = size_t(p.C) * p.R * p.S, PQ = size_t(p.P) * p.Q;
  if (algo == ConvAlgo::kFast) return CRS * PQ;
  return is_pointwise(p) ? 0 : CRS * std::min<size_t>(PQ, kConvColumnBlock);
}

// Under kFast the whole sample's im2col matrix is laid out block after block (block [j0, j1)
// at offset CRS * j0, ld = j1 - j0), so each sgemm sees the same operands as under kLean.
void conv2d_forward(const Conv2dParams& p, const float* x, const float* w, const float* b, float* y,
                    float* workspace, ConvAlgo algo) {
  const int CRS = p.C * p.R * p.S, PQ = p.P * p.Q;
  const size_t x_stride = size_t(p.C) * p.H * p.W, y_stride = size_t(p.K) * PQ;
  const bool fast = algo == ConvAlgo::kFast;
  for (int n = 0; n < p.N; ++n) {
    const float* xn = x + n * x_stride;
    float* yn = y + n * y_stride;
    if (is_pointwise(p)) {
      gemm(false, false, p.K, PQ, CRS, w, CRS, xn, PQ, 0.0f, yn, PQ);
    } else {
      if (fast) for_each_block(PQ, [&](int j0, int j1) { im2col_cols(p, xn, workspace + size_t(CRS) * j0, j0, j1); });
      for_each_block(PQ, [&](int j0, int j1) {
        float* col = fast ? workspace + size_t(CRS) * j0 : workspace;
        if (!fast) im2col_cols(p, xn, col, j0, j1);
        gemm(false, false, p.K, j1 - j0, CRS, w, CRS, col, j1 - j0, 0.0f, yn + j0, PQ);
      });
    }
    if (b) {
      for (int k = 0; k < p.K; ++k) {
        float* yk = yn + size_t(k) * PQ;
        const float bk = b[k];
        for (int i = 0; i < PQ; ++i) yk[i] += bk;
      }
    }
  }
}

void conv2d_backward_data(const Conv2dParams& p, const float* dy, const float* w, float* dx,
                          float* workspace, ConvAlgo algo) {
  const int CRS = p.C * p.R * p.S, PQ = p.P * p.Q;
  const size_t x_stride = size_t(p.C) * p.H * p.W, y_stride = size_t(p.K) * PQ;
  const bool fast = algo == ConvAlgo::kFast;
  for (int n = 0; n < p.N; ++n) {
    const float* dyn = dy + n * y_stride;
    float* dxn = dx + n * x_stride;
    if (is_pointwise(p)) {
      gemm(true, false, CRS, PQ, p.K, w, CRS, dyn, PQ, 0.0f, dxn, PQ);
      continue;
    }
    std::fill(dxn, dxn + x_stride, 0.0f);
    // col[CRS, block] = w^T[CRS, K] * dy_n[K, block], then added back into dx, block by block.
    auto col_of = [&](int j0) { return fast ? workspace + size_t(CRS) * j0 : workspace; };
    for_each_block(PQ, [&](int j0, int j1) {
      gemm(true, false, CRS, j1 - j0, p.K, w, CRS, dyn + j0, PQ, 0.0f, col_of(j0), j1 - j0);
      if (!fast) col2im_cols(p, col_of(j0), dxn, j0, j1);
    });
    if (fast) for_each_block(PQ, [&](int j0, int j1) { col2im_cols(p, col_of(j0), dxn, j0, j1); });
  }
}

void conv2d_backward_filter(const Conv2dParams& p, const float* dy, const float* x, float* dw, float* db,
                            float* workspace, ConvAlgo algo) {
  const int CRS = p.C * p.R * p.S, PQ = p.P * p.Q;
  const size_t x_stride = size_t(p.C) * p.H * p.W, y_stride = size_t(p.K) * PQ;
  const bool fast = algo == ConvAlgo::kFast;
  std::fill(dw, dw + size_t(p.K) * CRS, 0.0f);
  for (int n = 0; n < p.N; ++n) {
    const float* xn = x + n * x_stride;
    const float* dyn = dy + n * y_stride;
    if (is_pointwise(p)) {
      // dw[K, CRS] += dy_n[K, PQ] * x_n^T[PQ, CRS]
      gemm(false, true, p.K, CRS, PQ, dyn, PQ, xn, PQ, n == 0 ? 0.0f : 1.0f, dw, CRS);
      continue;
    }
    if (fast) for_each_block(PQ, [&](int j0, int j1) { im2col_cols(p, xn, workspace + size_t(CRS) * j0, j0, j1); });
    // dw[K, CRS] += dy_n[K, block] * col^T[block, CRS]
    for_each_block(PQ, [&](int j0, int j1) {
      float* col = fast ? workspace + size_t(CRS) * j0 : workspace;
      if (!fast) im2col_cols(p, xn, col, j0, j1);
      const float beta = (n == 0 && j0 == 0) ? 0.0f : 1.0f;
      gemm(false, true, p.K, CRS, j1 - j0, dyn + j0, PQ, col, j1 - j0, beta, dw, CRS);
    });
  }
  if (db) {
    for (int k = 0; k < p.K; ++k) {
      double acc = 0.0;
      for (int n = 0; n < p.N; ++n) {
        const float* dyk = dy + n * y_stride + size_t(k) * PQ;
        for (int i = 0; i < PQ; ++i) acc += dyk[i];
      }
      db[k] = float(acc);
    }
  }
}

void batchnorm_forward(int N, int C, int HW, const float* x, const float* gamma, const float* beta, float* y,
                       float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                       float momentum, float eps, bool update_running) {
  const double M = double(N) * HW;
  std::vector<double> sum(C, 0.0), sq(C, 0.0);
  // Two passes (mean, then squared deviations), each over n, c, hw so memory is read in order.
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      const float* xr = x + (size_t(n) * C + c) * HW;
      double acc = sum[c];
      for (int i = 0; i < HW; ++i) acc += xr[i];
      sum[c] = acc;
    }
  }
  std::vector<double> mean(C);
  for (int c = 0; c < C; ++c) mean[c] = M > 0 ? sum[c] / M : 0.0;
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      const float* xr = x + (size_t(n) * C + c) * HW;
      const double mu = mean[c];
      double acc = sq[c];
      for (int i = 0; i < HW; ++i) {
        const double d = double(xr[i]) - mu;
        acc += d * d;
      }
      sq[c] = acc;
    }
  }
  std::vector<float> scale(C);
  for (int c = 0; c < C; ++c) {
    const double var = M > 0 ? sq[c] / M : 0.0;
    const double invstd = 1.0 / std::sqrt(var + double(eps));
    save_mean[c] = float(mean[c]);
    save_invstd[c] = float(invstd);
    scale[c] = float(invstd * double(gamma[c]));
    if (update_running) {
      const double unbiased = M > 1 ? var * M / (M - 1) : var;
      running_mean[c] = float((1.0 - momentum) * double(running_mean[c]) + double(momentum) * mean[c]);
      running_var[c] = float((1.0 - momentum) * double(running_var[c]) + double(momentum) * unbiased);
    }
  }
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      const size_t off = (size_t(n) * C + c) * HW;
      const float mu = save_mean[c], sc = scale[c], bt = beta[c];
      for (int i = 0; i < HW; ++i) y[off + i] = (x[off + i] - mu) * sc + bt;
    }
  }
}

void batchnorm_backward(int N, int C, int HW, const float* dy, const float* x, const float* gamma,
                        const float* save_mean, const float* save_invstd, float* dx, float* dgamma,
                        float* dbeta) {
  const double M = double(N) * HW;
  std::vector<double> sum_dy(C, 0.0), sum_dy_xhat(C, 0.0);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      const size_t off = (size_t(n) * C + c) * HW;
      const double mu = save_mean[c], is = save_invstd[c];
      double a = sum_dy[c], b = sum_dy_xhat[c];
      for (int i = 0; i < HW; ++i) {
        const double g = dy[off + i];
        a += g;
        b += g * ((double(x[off + i]) - mu) * is);
      }
      sum_dy[c] = a;
      sum_dy_xhat[c] = b;
    }
  }
  for (int c = 0; c < C; ++c) {
    dbeta[c] = float(sum_dy[c]);
    dgamma[c] = float(sum_dy_xhat[c]);
  }
  if (M <= 0) return;
  // dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      const size_t off = (size_t(n) * C + c) * HW;
      const double mu = save_mean[c], is = save_invstd[c];
      const double k = double(gamma[c]) * is, mean_dy = sum_dy[c] / M, mean_dyx = sum_dy_xhat[c] / M;
      for (int i = 0; i < HW; ++i) {
        const double xhat = (double(x[off + i]) - mu) * is;
        dx[off + i] = float(k * (double(dy[off + i]) - mean_dy - xhat * mean_dyx));
      }
    }
  }
}

void relu_forward(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(size_t n, const float* dy, const float* y, float* dx) {
  for (size_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void maxpool2d_forward(int N, int C, int H, int W, int k, int stride, int pad, int P, int Q, const float* x,
                       float* y) {
  const size_t HWs = size_t(H) * W, PQ = size_t(P) * Q;
  for (size_t nc = 0; nc < size_t(N) * C; ++nc) {
    const float* xc = x + nc * HWs;
    float* yc = y + nc * PQ;
    for (int op = 0; op < P; ++op) {
      for (int oq = 0; oq < Q; ++oq) {
        const std::ptrdiff_t i = window_argmax(xc, H, W, k, stride, pad, op, oq);
        yc[size_t(op) * Q + oq] = i < 0 ? -std::numeric_limits<float>::infinity() : xc[i];
      }
    }
  }
}

void maxpool2d_backward(int N, int C, int H, int W, int k, int stride, int pad, int P, int Q,
                        const float* dy, const float* x, float* dx) {
  const size_t HWs = size_t(H) * W, PQ = size_t(P) * Q;
  std::fill(dx, dx + size_t(N) * C * HWs, 0.0f);
  for (size_t nc = 0; nc < size_t(N) * C; ++nc) {
    const float* xc = x + nc * HWs;
    const float* dyc = dy + nc * PQ;
    float* dxc = dx + nc * HWs;
    for (int op = 0; op < P; ++op) {
      for (int oq = 0; oq < Q; ++oq) {
        const std::ptrdiff_t i = window_argmax(xc, H, W, k, stride, pad, op, oq);
        if (i >= 0) dxc[i] += dyc[size_t(op) * Q + oq];
      }
    }
  }
}

void global_avgpool_forward(int N, int C, int HW, const float* x, float* y) {
  for (size_t nc = 0; nc < size_t(N) * C; ++nc) {
    const float* xr = x + nc * HW;
    double acc = 0.0;
    for (int i = 0; i < HW; ++i) acc += xr[i];
    y[nc] = HW > 0 ? float(acc / HW) : 0.0f;
  }
}

void global_avgpool_backward(int N, int C, int HW, const float* dy, float* dx) {
  for (size_t nc = 0; nc < size_t(N) * C; ++nc) {
    const float g = dy[nc] / float(HW);
    float* dr = dx + nc * HW;
    for (int i = 0; i < HW; ++i) dr[i] = g;
  }
}

void linear_forward(int M, int In, int Out, const float* x, const float* w, const float* b, float* y) {
  gemm(false, true, M, Out, In, x, In, w, In, 0.0f, y, Out);
  if (b) {
    for (int m = 0; m < M; ++m) {
      float* yr = y + size_t(m) * Out;
      for (int o = 0; o < Out; ++o) yr[o] += b[o];
    }
  }
}

void linear_backward(int M, int In, int Out, const float* dy, const float* x, const float* w, float* dx,
                     float* dw, float* db) {
  if (dx) gemm(false, false, M, In, Out, dy, Out, w, In, 0.0f, dx, In);  // dx[M,In] = dy * w
  gemm(true, false, Out, In, M, dy, Out, x, In, 0.0f, dw, In);           // dw[Out,In] = dy^T * x
  if (db) {
    std::vector<double> acc(Out, 0.0);
    for (int m = 0; m < M; ++m) {
      const float* dyr = dy + size_t(m) * Out;
      for (int o = 0; o < Out; ++o) acc[o] += dyr[o];
    }
    for (int o = 0; o < Out; ++o) db[o] = float(acc[o]);
  }
}

void add_forward(size_t n, const float* a, const float* b, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void copy(size_t n, const float* x, float* y) {
  if (n > 0 && x != y) std::memmove(y, x, n * sizeof(float));
}

bool dropout_keep(uint64_t seed, size_t i, float p) { return uniform01(seed, i) >= p; }

void dropout_forward(size_t n, float p, uint64_t seed, const float* x, float* y) {
  check_dropout_p(p);
  if (p == 0.0f) {
    copy(n, x, y);
    return;
  }
  const float keep_div = 1.0f - p;
  for (size_t i = 0; i < n; ++i) y[i] = dropout_keep(seed, i, p) ? x[i] / keep_div : 0.0f;
}

void dropout_backward(size_t n, float p, uint64_t seed, const float* dy, float* dx) {
  dropout_forward(n, p, seed, dy, dx);  // the same mask and scale
}

void softmax_ce_forward(int N, int K, const float* logits, const float* labels, float* loss) {
  double total = 0.0;
  for (int n = 0; n < N; ++n) {
    const float* z = logits + size_t(n) * K;
    const int label = checked_label(labels[n], K);
    float mx = z[0];
    for (int j = 1; j < K; ++j) mx = std::max(mx, z[j]);
    double se = 0.0;
    for (int j = 0; j < K; ++j) se += std::exp(double(z[j]) - mx);
    total += std::log(se) - (double(z[label]) - mx);
  }
  *loss = N > 0 ? float(total / N) : 0.0f;
}

void softmax_ce_backward(int N, int K, const float* logits, const float* labels, float* dlogits) {
  for (int n = 0; n < N; ++n) {
    const float* z = logits + size_t(n) * K;
    float* d = dlogits + size_t(n) * K;
    const int label = checked_label(labels[n], K);
    float mx = z[0];
    for (int j = 1; j < K; ++j) mx = std::max(mx, z[j]);
    double se = 0.0;
    for (int j = 0; j < K; ++j) se += std::exp(double(z[j]) - mx);
    const double inv = 1.0 / se;
    for (int j = 0; j < K; ++j) {
      const double prob = std::exp(double(z[j]) - mx) * inv;
      d[j] = float((prob - (j == label ? 1.0 : 0.0)) / N);
    }
  }
}

void sgd_momentum(size_t n, float lr, float momentum, float weight_decay, float* w, const float* g,
                  float* m) {
  for (size_t i = 0; i < n; ++i) {
    const float mi = momentum * m[i] + (g[i] + weight_decay * w[i]);
    m[i] = mi;
    w[i] -= lr * mi;
  }
}

uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

float uniform01(uint64_t seed, uint64_t i) {
  return float(mix64(seed ^ mix64(i)) >> 40) * 0x1p-24f;
}

}  // namespace vtensor::cpu
