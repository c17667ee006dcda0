// The cuda backend's own kernels (device code only). Built with --fmad=false so that float
// expressions round as the cpu kernels' do (no contraction into FMA), and with IEEE division
// and square root (no fast math). See kernels.h for what each mirrors.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "vtensor/backend/cuda/cuda_check.h"
#include "vtensor/backend/cuda/kernels.h"
#include "vtensor/backend/cuda/kernels/common.cuh"

namespace vtensor::cuda {

namespace {

// ---------------------------------------------------------------- data

__global__ void synthetic_batch_k(int n, size_t per, int num_classes, uint64_t seed, uint64_t batch_seed, float* x,
                                  float* labels) {
  VT_GRID_STRIDE(idx, size_t(n) * per) {
    const size_t i = idx / per, j = idx % per;
    const int label = static_cast<int>(uniform01(batch_seed, i) * num_classes);
    if (j == 0) labels[i] = static_cast<float>(label);
    const uint64_t pattern_seed = mix64(seed ^ (0xc1a55ull + static_cast<uint64_t>(label)));
    const uint64_t noise_seed = mix64(batch_seed + 1 + i);
    x[idx] = (2.f * uniform01(pattern_seed, j) - 1.f) + 0.5f * (uniform01(noise_seed, j) - 0.5f);
  }
}

__global__ void synthetic_tokens_k(int rows, int T, int V, bool mlm, uint64_t batch_seed, float* tokens,
                                   float* targets) {
  VT_GRID_STRIDE(i, size_t(rows)) {
    const int b = static_cast<int>(i / T), t = static_cast<int>(i % T);
    const int start = static_cast<int>(uniform01(batch_seed, 2 * static_cast<uint64_t>(b)) * (V - 1));
    const int stride = 1 + static_cast<int>(uniform01(batch_seed, 2 * static_cast<uint64_t>(b) + 1) * 3);
    const int cur = 1 + (start + stride * t) % (V - 1), next = 1 + (start + stride * (t + 1)) % (V - 1);
    tokens[i] = static_cast<float>(cur);
    targets[i] = static_cast<float>(mlm ? cur : next);
    if (mlm && uniform01(batch_seed ^ 0x3a5cull, i) < 0.15f) tokens[i] = 0.f;
  }
}

// ---------------------------------------------------------------- elementwise

__global__ void relu_forward_k(size_t n, const float* x, float* y) {
  VT_GRID_STRIDE(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void relu_backward_k(size_t n, const float* dy, const float* y, float* dx) {
  VT_GRID_STRIDE(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
__global__ void add_k(size_t n, const float* a, const float* b, float* y) {
  VT_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}
__global__ void dropout_k(size_t n, float p, uint64_t seed, const float* x, float* y) {
  const float keep_div = 1.0f - p;
  VT_GRID_STRIDE(i, n) y[i] = uniform01(seed, i) >= p ? x[i] / keep_div : 0.0f;
}
__global__ void add_bias_rows_k(size_t n, int Out, const float* b, float* y) {
  VT_GRID_STRIDE(i, n) y[i] += b[i % Out];
}
__global__ void add_bias_channels_k(size_t n, int K, int PQ, const float* b, float* y) {
  VT_GRID_STRIDE(i, n) y[i] += b[(i / PQ) % K];
}
// Column sums over many rows: a block covers kColTile columns with kRowWarps warps; warp w
// sums rows w, w + kRowWarps, ... (coalesced), then warp 0 adds the warps' sums in order.
constexpr int kColTile = 32, kRowWarps = 32;  // 1024 threads per block
__global__ void column_sum_k(int M, int Out, const float* dy, float* db) {
  __shared__ double sh[kRowWarps][kColTile];
  const int lane = threadIdx.x % kColTile, wid = threadIdx.x / kColTile;
  const int o = blockIdx.x * kColTile + lane;
  double acc = 0.0;
  if (o < Out)
    for (int m = wid; m < M; m += kRowWarps) acc += dy[size_t(m) * Out + o];
  sh[wid][lane] = acc;
  __syncthreads();
  if (wid == 0 && o < Out) {
    double t = 0.0;
    for (int w = 0; w < kRowWarps; ++w) t += sh[w][lane];
    db[o] = float(t);
  }
}
__global__ void channel_sum_k(int N, int K, int PQ, const float* dy, float* db) {
  __shared__ double sh[kThreads];
  const int k = blockIdx.x;
  double acc = 0.0;
  for (int n = 0; n < N; ++n) {
    const float* r = dy + (size_t(n) * K + k) * PQ;
    for (int i = threadIdx.x; i < PQ; i += kThreads) acc += r[i];
  }
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) db[k] = float(acc);
}

__global__ void sgd_k(size_t n, float lr, float momentum, float weight_decay, float* w, const float* g, float* m) {
  VT_GRID_STRIDE(i, n) {
    const float mi = momentum * m[i] + (g[i] + weight_decay * w[i]);
    m[i] = mi;
    w[i] -= lr * mi;
  }
}
__global__ void adam_k(size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled,
                       float c1, float c2, float* w, const float* g, float* m, float* v) {
  VT_GRID_STRIDE(i, n) {
    float gi = g[i];
    if (!decoupled) gi += weight_decay * w[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float wi = w[i];
    if (decoupled) wi -= lr * weight_decay * wi;
    w[i] = wi - lr * (mi / c1) / (sqrtf(vi / c2) + eps);
  }
}

// ---------------------------------------------------------------- pooling

// First maximum in window order over valid positions, -1 when the window is all padding
// (cpu kernels.cpp window_argmax).
__device__ long long window_argmax(const float* xc, int H, int W, int k, int stride, int pad, int op, int oq) {
  const int h0 = op * stride - pad, w0 = oq * stride - pad;
  const int r_lo = max(0, -h0), r_hi = min(k, H - h0);
  const int s_lo = max(0, -w0), s_hi = min(k, W - w0);
  long long best_i = -1;
  float best = -INFINITY;
  for (int r = r_lo; r < r_hi; ++r) {
    const float* xr = xc + size_t(h0 + r) * W;
    for (int s = s_lo; s < s_hi; ++s) {
      const float v = xr[w0 + s];
      if (best_i < 0 || v > best || (isnan(v) && !isnan(best))) {
        best = v;
        best_i = (long long)(h0 + r) * W + (w0 + s);
      }
    }
  }
  return best_i;
}

__global__ void maxpool_forward_k(size_t n, int H, int W, int k, int stride, int pad, int P, int Q, const float* x,
                                  float* y) {
  VT_GRID_STRIDE(i, n) {
    const size_t nc = i / (size_t(P) * Q);
    const int op = static_cast<int>((i / Q) % P), oq = static_cast<int>(i % Q);
    const float* xc = x + nc * size_t(H) * W;
    const long long a = window_argmax(xc, H, W, k, stride, pad, op, oq);
    y[i] = a < 0 ? -INFINITY : xc[a];
  }
}

// One thread per input element: adds dy of every window whose argmax it is, windows in
// (op, oq) order as the cpu does, so the sums are bit-identical.
__global__ void maxpool_backward_k(size_t n, int H, int W, int k, int stride, int pad, int P, int Q, const float* dy,
                                   const float* x, float* dx) {
  VT_GRID_STRIDE(i, n) {
    const size_t nc = i / (size_t(H) * W);
    const int h = static_cast<int>((i / W) % H), w = static_cast<int>(i % W);
    const long long self = (long long)h * W + w;
    const float* xc = x + nc * size_t(H) * W;
    const float* dyc = dy + nc * size_t(P) * Q;
    // windows op with op*stride - pad <= h <= op*stride - pad + k - 1
    const int op_lo = max(0, (h + pad - k + 1 + stride - 1 + stride * k) / stride - k);
    const int op_hi = min(P - 1, (h + pad) / stride);
    const int oq_lo = max(0, (w + pad - k + 1 + stride - 1 + stride * k) / stride - k);
    const int oq_hi = min(Q - 1, (w + pad) / stride);
    float acc = 0.0f;
    for (int op = op_lo; op <= op_hi; ++op)
      for (int oq = oq_lo; oq <= oq_hi; ++oq)
        if (window_argmax(xc, H, W, k, stride, pad, op, oq) == self) acc += dyc[size_t(op) * Q + oq];
    dx[i] = acc;
  }
}

__global__ void global_avgpool_forward_k(size_t n, int HW, const float* x, float* y) {
  VT_GRID_STRIDE(nc, n) {
    const float* xr = x + nc * HW;
    double acc = 0.0;
    for (int i = 0; i < HW; ++i) acc += xr[i];
    y[nc] = HW > 0 ? float(acc / HW) : 0.0f;
  }
}
__global__ void global_avgpool_backward_k(size_t n, int HW, const float* dy, float* dx) {
  VT_GRID_STRIDE(i, n) dx[i] = dy[i / HW] / float(HW);
}

// ---------------------------------------------------------------- softmax cross-entropy

__device__ bool label_ok(float label, int K) { return label >= 0.0f && label < float(K); }

// One block per row: row_loss[n] = log(sum exp(z - max)) - (z[label] - max).
__global__ void softmax_ce_rows_k(int K, const float* logits, const float* labels, double* row_loss) {
  __shared__ double shd[kThreads];
  __shared__ float shf[kThreads];
  const int n = blockIdx.x;
  const float* z = logits + size_t(n) * K;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < K; j += kThreads) mx = fmaxf(mx, z[j]);
  mx = block_max(mx, shf);
  double se = 0.0;
  for (int j = threadIdx.x; j < K; j += kThreads) se += exp(double(z[j]) - mx);
  se = block_sum(se, shd);
  if (threadIdx.x == 0) {
    const float l = labels[n];
    row_loss[n] = label_ok(l, K) ? log(se) - (double(z[int(l)]) - mx) : NAN;
  }
}
__global__ void mean_k(int N, const double* row_loss, float* loss) {
  __shared__ double sh[kThreads];
  double acc = 0.0;
  for (int i = threadIdx.x; i < N; i += kThreads) acc += row_loss[i];
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) *loss = N > 0 ? float(acc / N) : 0.0f;
}
__global__ void softmax_ce_backward_k(int N, int K, const float* logits, const float* labels, float* dlogits) {
  __shared__ double shd[kThreads];
  __shared__ float shf[kThreads];
  const int n = blockIdx.x;
  const float* z = logits + size_t(n) * K;
  float* d = dlogits + size_t(n) * K;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < K; j += kThreads) mx = fmaxf(mx, z[j]);
  mx = block_max(mx, shf);
  double se = 0.0;
  for (int j = threadIdx.x; j < K; j += kThreads) se += exp(double(z[j]) - mx);
  se = block_sum(se, shd);
  const double inv = 1.0 / se;
  const float l = labels[n];
  const int label = label_ok(l, K) ? int(l) : -1;
  for (int j = threadIdx.x; j < K; j += kThreads) {
    const double prob = exp(double(z[j]) - mx) * inv;
    d[j] = label < 0 ? NAN : float((prob - (j == label ? 1.0 : 0.0)) / N);
  }
}

// ---------------------------------------------------------------- transformers

__global__ void embedding_forward_k(size_t n, int C, const float* ids, int period, const float* table, float* y) {
  VT_GRID_STRIDE(i, n) {
    const size_t r = i / C;
    const int idx = ids ? int(ids[r]) : int(r % period);
    y[i] = table[size_t(idx) * C + i % C];
  }
}
// Token ids: one thread per column c, rows of dy added in order, as on the cpu (only C-way
// parallel: ids may repeat, and a fixed order without atomics needs one adder per column).
__global__ void embedding_backward_k(int N, int C, const float* dy, const float* ids, int period, float* dtable) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int n = 0; n < N; ++n) {
    const int idx = ids ? int(ids[n]) : n % period;
    dtable[size_t(idx) * C + c] += dy[size_t(n) * C + c];
  }
}

// Positions (no ids): row p gets rows p, p + period, ... of dy, in that order (the cpu's),
// one thread per (p, c): parallel over period x C and still the cpu's bits.
__global__ void embedding_backward_positions_k(size_t n, int N, int C, int period, const float* dy, float* dtable) {
  VT_GRID_STRIDE(i, n) {
    const int p = static_cast<int>(i / C), c = static_cast<int>(i % C);
    float acc = dtable[i];
    for (int r = p; r < N; r += period) acc += dy[size_t(r) * C + c];
    dtable[i] = acc;
  }
}

__global__ void layernorm_forward_k(int C, const float* x, const float* gamma, const float* beta, float eps, float* y,
                                    float* save_mean, float* save_invstd) {
  __shared__ double sh[kThreads];
  const int r = blockIdx.x;
  const float* xr = x + size_t(r) * C;
  double sum = 0.0;
  for (int c = threadIdx.x; c < C; c += kThreads) sum += xr[c];
  sum = block_sum(sum, sh);
  const double mean = C > 0 ? sum / C : 0.0;
  double sq = 0.0;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    const double d = double(xr[c]) - mean;
    sq += d * d;
  }
  sq = block_sum(sq, sh);
  const double invstd = 1.0 / sqrt((C > 0 ? sq / C : 0.0) + double(eps));
  if (threadIdx.x == 0) {
    save_mean[r] = float(mean);
    save_invstd[r] = float(invstd);
  }
  const float mu = float(mean), is = float(invstd);
  float* yr = y + size_t(r) * C;
  for (int c = threadIdx.x; c < C; c += kThreads) yr[c] = (xr[c] - mu) * is * gamma[c] + beta[c];
}
__global__ void layernorm_backward_dx_k(int C, const float* dy, const float* x, const float* gamma,
                                        const float* save_mean, const float* save_invstd, float* dx) {
  __shared__ double sh[kThreads];
  const int r = blockIdx.x;
  const float* xr = x + size_t(r) * C;
  const float* dyr = dy + size_t(r) * C;
  const double mu = save_mean[r], is = save_invstd[r];
  double s1 = 0.0, s2 = 0.0;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    const double xhat = (double(xr[c]) - mu) * is, dxhat = double(dyr[c]) * gamma[c];
    s1 += dxhat;
    s2 += dxhat * xhat;
  }
  s1 = block_sum(s1, sh);
  s2 = block_sum(s2, sh);
  float* dxr = dx + size_t(r) * C;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    const double xhat = (double(xr[c]) - mu) * is, dxhat = double(dyr[c]) * gamma[c];
    dxr[c] = float(is / C * (C * dxhat - s1 - xhat * s2));
  }
}
// Column sums as in column_sum_k: dgamma = sum_r dy * xhat, dbeta = sum_r dy.
__global__ void layernorm_backward_params_k(int R, int C, const float* dy, const float* x, const float* save_mean,
                                            const float* save_invstd, float* dgamma, float* dbeta) {
  __shared__ double shg[kRowWarps][kColTile], shb[kRowWarps][kColTile];
  const int lane = threadIdx.x % kColTile, wid = threadIdx.x / kColTile;
  const int c = blockIdx.x * kColTile + lane;
  double dg = 0.0, db = 0.0;
  if (c < C) {
    for (int r = wid; r < R; r += kRowWarps) {
      const double g = dy[size_t(r) * C + c];
      const double xhat = (double(x[size_t(r) * C + c]) - double(save_mean[r])) * double(save_invstd[r]);
      dg += g * xhat;
      db += g;
    }
  }
  shg[wid][lane] = dg;
  shb[wid][lane] = db;
  __syncthreads();
  if (wid == 0 && c < C) {
    double tg = 0.0, tb = 0.0;
    for (int w = 0; w < kRowWarps; ++w) tg += shg[w][lane], tb += shb[w][lane];
    dgamma[c] = float(tg);
    dbeta[c] = float(tb);
  }
}

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;
__global__ void gelu_forward_k(size_t n, const float* x, float* y) {
  VT_GRID_STRIDE(i, n) {
    const double v = x[i];
    y[i] = float(0.5 * v * (1.0 + tanh(kGeluK * (v + kGeluC * v * v * v))));
  }
}
__global__ void gelu_backward_k(size_t n, const float* dy, const float* x, float* dx) {
  VT_GRID_STRIDE(i, n) {
    const double v = x[i];
    const double t = tanh(kGeluK * (v + kGeluC * v * v * v));
    const double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kGeluK * (1.0 + 3.0 * kGeluC * v * v);
    dx[i] = float(double(dy[i]) * d);
  }
}

__global__ void softmax_forward_k(int C, bool causal, const float* x, float* y) {
  __shared__ double shd[kThreads];
  __shared__ float shf[kThreads];
  const int r = blockIdx.x;
  const float* xr = x + size_t(r) * C;
  float* yr = y + size_t(r) * C;
  const int n = causal ? (r % C) + 1 : C;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n; j += kThreads) mx = fmaxf(mx, xr[j]);
  mx = block_max(mx, shf);
  double se = 0.0;
  for (int j = threadIdx.x; j < n; j += kThreads) se += exp(double(xr[j]) - mx);
  se = block_sum(se, shd);
  const double inv = 1.0 / se;
  for (int j = threadIdx.x; j < C; j += kThreads) yr[j] = j < n ? float(exp(double(xr[j]) - mx) * inv) : 0.0f;
}
__global__ void softmax_backward_k(int C, const float* dy, const float* y, float* dx) {
  __shared__ double sh[kThreads];
  const int r = blockIdx.x;
  const float* dyr = dy + size_t(r) * C;
  const float* yr = y + size_t(r) * C;
  double dot = 0.0;
  for (int j = threadIdx.x; j < C; j += kThreads) dot += double(dyr[j]) * yr[j];
  dot = block_sum(dot, sh);
  float* dxr = dx + size_t(r) * C;
  for (int j = threadIdx.x; j < C; j += kThreads) dxr[j] = float(double(yr[j]) * (double(dyr[j]) - dot));
}

// y[a, c, b, d] = x[a, b, c, d]; one thread per element of y.
__global__ void transpose12_k(size_t n, int B, int C, int D, const float* x, float* y) {
  VT_GRID_STRIDE(i, n) {
    const int d = static_cast<int>(i % D);
    const int b = static_cast<int>((i / D) % B);
    const int c = static_cast<int>((i / (size_t(D) * B)) % C);
    const size_t a = i / (size_t(D) * B * C);
    y[i] = x[((a * B + b) * C + c) * D + d];
  }
}

}  // namespace

// ---------------------------------------------------------------- launchers

void synthetic_batch(cudaStream_t s, int n, size_t per, int num_classes, uint64_t seed, uint64_t iteration, float* x,
                     float* labels) {
  const size_t total = size_t(n) * per;
  if (total == 0) return;
  synthetic_batch_k<<<blocks_for(total), kThreads, 0, s>>>(n, per, num_classes, seed, mix64(seed + iteration % 8),
                                                           x, labels);
  VT_CHECK_LAUNCH("synthetic_batch_k");
}

void synthetic_tokens(cudaStream_t s, int rows, int T, int V, bool mlm, uint64_t seed, uint64_t iteration,
                      float* tokens, float* targets) {
  if (rows <= 0) return;
  synthetic_tokens_k<<<blocks_for(size_t(rows)), kThreads, 0, s>>>(rows, T, V, mlm, mix64(seed + iteration % 8), tokens,
                                                                    targets);
  VT_CHECK_LAUNCH("synthetic_tokens_k");
}


void relu_forward(cudaStream_t s, size_t n, const float* x, float* y) { VT_ELEMENTWISE(relu_forward_k, n, x, y); }
void relu_backward(cudaStream_t s, size_t n, const float* dy, const float* y, float* dx) {
  VT_ELEMENTWISE(relu_backward_k, n, dy, y, dx);
}
void add_forward(cudaStream_t s, size_t n, const float* a, const float* b, float* y) { VT_ELEMENTWISE(add_k, n, a, b, y); }
void dropout_forward(cudaStream_t s, size_t n, float p, uint64_t seed, const float* x, float* y) {
  VT_ELEMENTWISE(dropout_k, n, p, seed, x, y);
}
void add_bias_rows(cudaStream_t s, int M, int Out, const float* b, float* y) {
  VT_ELEMENTWISE(add_bias_rows_k, size_t(M) * Out, Out, b, y);
}
void add_bias_channels(cudaStream_t s, int N, int K, int PQ, const float* b, float* y) {
  VT_ELEMENTWISE(add_bias_channels_k, size_t(N) * K * PQ, K, PQ, b, y);
}
void column_sum(cudaStream_t s, int M, int Out, const float* dy, float* db) {
  if (Out <= 0) return;
  column_sum_k<<<(Out + kColTile - 1) / kColTile, kColTile * kRowWarps, 0, s>>>(M, Out, dy, db);
  VT_CHECK_LAUNCH("column_sum_k");
}
void channel_sum(cudaStream_t s, int N, int K, int PQ, const float* dy, float* db) {
  if (K <= 0) return;
  channel_sum_k<<<K, kThreads, 0, s>>>(N, K, PQ, dy, db);
  VT_CHECK_LAUNCH("channel_sum_k");
}
void maxpool_forward(cudaStream_t s, int N, int C, int H, int W, int k, int stride, int pad, int P, int Q,
                     const float* x, float* y) {
  VT_ELEMENTWISE(maxpool_forward_k, size_t(N) * C * P * Q, H, W, k, stride, pad, P, Q, x, y);
}
void maxpool_backward(cudaStream_t s, int N, int C, int H, int W, int k, int stride, int pad, int P, int Q,
                      const float* dy, const float* x, float* dx) {
  VT_ELEMENTWISE(maxpool_backward_k, size_t(N) * C * H * W, H, W, k, stride, pad, P, Q, dy, x, dx);
}
void global_avgpool_forward(cudaStream_t s, int N, int C, int HW, const float* x, float* y) {
  VT_ELEMENTWISE(global_avgpool_forward_k, size_t(N) * C, HW, x, y);
}
void global_avgpool_backward(cudaStream_t s, int N, int C, int HW, const float* dy, float* dx) {
  VT_ELEMENTWISE(global_avgpool_backward_k, size_t(N) * C * HW, HW, dy, dx);
}
void softmax_ce_forward(cudaStream_t s, int N, int K, const float* logits, const float* labels, double* row_loss,
                        float* loss) {
  if (N > 0) {
    softmax_ce_rows_k<<<N, kThreads, 0, s>>>(K, logits, labels, row_loss);
    VT_CHECK_LAUNCH("softmax_ce_rows_k");
  }
  mean_k<<<1, kThreads, 0, s>>>(N, row_loss, loss);
  VT_CHECK_LAUNCH("mean_k");
}
void softmax_ce_backward(cudaStream_t s, int N, int K, const float* logits, const float* labels, float* dlogits) {
  if (N <= 0) return;
  softmax_ce_backward_k<<<N, kThreads, 0, s>>>(N, K, logits, labels, dlogits);
  VT_CHECK_LAUNCH("softmax_ce_backward_k");
}
void sgd_momentum(cudaStream_t s, size_t n, float lr, float momentum, float weight_decay, float* w, const float* g,
                  float* m) {
  VT_ELEMENTWISE(sgd_k, n, lr, momentum, weight_decay, w, g, m);
}
void adam(cudaStream_t s, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled,
          float c1, float c2, float* w, const float* g, float* m, float* v) {
  VT_ELEMENTWISE(adam_k, n, lr, beta1, beta2, eps, weight_decay, decoupled, c1, c2, w, g, m, v);
}
void embedding_forward(cudaStream_t s, int N, int V, int C, const float* ids, int period, const float* table,
                       float* y) {
  VT_ELEMENTWISE(embedding_forward_k, size_t(N) * C, C, ids, period, table, y);
}
void embedding_backward_add(cudaStream_t s, int N, int V, int C, const float* dy, const float* ids, int period,
                            float* dtable) {
  if (C <= 0) return;
  if (!ids) {
    VT_ELEMENTWISE(embedding_backward_positions_k, size_t(std::min(period, N)) * C, N, C, period, dy, dtable);
    return;
  }
  embedding_backward_k<<<(C + kThreads - 1) / kThreads, kThreads, 0, s>>>(N, C, dy, ids, period, dtable);
  VT_CHECK_LAUNCH("embedding_backward_k");
}
void layernorm_forward(cudaStream_t s, int R, int C, const float* x, const float* gamma, const float* beta, float eps,
                       float* y, float* save_mean, float* save_invstd) {
  if (R <= 0) return;
  layernorm_forward_k<<<R, kThreads, 0, s>>>(C, x, gamma, beta, eps, y, save_mean, save_invstd);
  VT_CHECK_LAUNCH("layernorm_forward_k");
}
void layernorm_backward(cudaStream_t s, int R, int C, const float* dy, const float* x, const float* gamma,
                        const float* save_mean, const float* save_invstd, float* dx, float* dgamma, float* dbeta) {
  if (R > 0) {
    layernorm_backward_dx_k<<<R, kThreads, 0, s>>>(C, dy, x, gamma, save_mean, save_invstd, dx);
    VT_CHECK_LAUNCH("layernorm_backward_dx_k");
  }
  if (C > 0) {
    layernorm_backward_params_k<<<(C + kColTile - 1) / kColTile, kColTile * kRowWarps, 0, s>>>(
        R, C, dy, x, save_mean, save_invstd, dgamma, dbeta);
    VT_CHECK_LAUNCH("layernorm_backward_params_k");
  }
}
void gelu_forward(cudaStream_t s, size_t n, const float* x, float* y) { VT_ELEMENTWISE(gelu_forward_k, n, x, y); }
void gelu_backward(cudaStream_t s, size_t n, const float* dy, const float* x, float* dx) {
  VT_ELEMENTWISE(gelu_backward_k, n, dy, x, dx);
}
void softmax_forward(cudaStream_t s, int R, int C, bool causal, const float* x, float* y) {
  if (R <= 0) return;
  softmax_forward_k<<<R, kThreads, 0, s>>>(C, causal, x, y);
  VT_CHECK_LAUNCH("softmax_forward_k");
}
void softmax_backward(cudaStream_t s, int R, int C, const float* dy, const float* y, float* dx) {
  if (R <= 0) return;
  softmax_backward_k<<<R, kThreads, 0, s>>>(C, dy, y, dx);
  VT_CHECK_LAUNCH("softmax_backward_k");
}
void transpose12(cudaStream_t s, int A, int B, int C, int D, const float* x, float* y) {
  VT_ELEMENTWISE(transpose12_k, size_t(A) * B * C * D, B, C, D, x, y);
}

// ---------------------------------------------------------------- moves

// blockIdx.y picks the segment; its blocks stride over it, 16 bytes at a time where both ends
// are 16-byte aligned (the arena's blocks and the staging slots are 256-byte aligned).
__global__ void copy_segments_k(CopySegments t) {
  const int k = blockIdx.y;
  const char* src = t.src[k];
  char* dst = t.dst[k];
  const size_t n = t.bytes[k];
  size_t tail = 0;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0) {
    const size_t nv = n / 16;
    VT_GRID_STRIDE(i, nv) reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    tail = nv * 16;
  }
  VT_GRID_STRIDE(i, n - tail) dst[tail + i] = src[tail + i];
}
void copy_segments(cudaStream_t s, const CopySegments& segs) {
  if (segs.n <= 0) return;
  size_t most = 0;
  for (int k = 0; k < segs.n; ++k) most = segs.bytes[k] > most ? segs.bytes[k] : most;
  copy_segments_k<<<dim3(blocks_for((most + 15) / 16 < 64 * kThreads ? (most + 15) / 16 : 64 * kThreads), segs.n),
                    kThreads, 0, s>>>(segs);
  VT_CHECK_LAUNCH("copy_segments_k");
}

}  // namespace vtensor::cuda
