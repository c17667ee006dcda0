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

namespace vtensor::cuda {

namespace {

constexpr int kThreads = 256;  // block size of every kernel here (reductions assume it)

unsigned blocks_for(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b > (1u << 20) ? (1u << 20) : b));
}

#define VT_GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
__device__ __forceinline__ float uniform01(uint64_t seed, uint64_t i) {
  return float(mix64(seed ^ mix64(i)) >> 40) * 0x1p-24f;
}

// Sum of one double per thread over the block, in a fixed tree order; every thread gets it.
__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}
__device__ float block_max(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

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

#define VT_ELEMENTWISE(kernel, n, ...)                                    \
  do {                                                                    \
    if ((n) == 0) return;                                                 \
    kernel<<<blocks_for(n), kThreads, 0, s>>>((n), __VA_ARGS__);          \
    VT_CHECK_LAUNCH(#kernel);                                             \
  } while (0)

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

// ---------------------------------------------------------------- compression codecs (codec.h)

namespace {

constexpr unsigned kTileWords = 1024;  // one thread per 32-element word, one block per tile

// Exclusive scan of v over the block (kTileWords threads); returns the block's sum.
__device__ unsigned long long block_exclusive_scan(unsigned long long& v, unsigned long long* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned off = 1; off < kTileWords; off <<= 1) {
    const unsigned long long add = threadIdx.x >= off ? sh[threadIdx.x - off] : 0;
    __syncthreads();
    sh[threadIdx.x] += add;
    __syncthreads();
  }
  const unsigned long long total = sh[kTileWords - 1];
  v = sh[threadIdx.x] - v;
  __syncthreads();
  return total;
}

// The bitmask codec in three passes over tiles of kTileWords words, one block per tile, so that
// every multiprocessor takes part (one block walking the whole tensor ran at a few GB/s).
// Pass 1: each warp builds 32 mask words from coalesced loads (a ballot per word); thread j of
// the block ends up owning word j of the tile; the block's non-zero count goes to counts[tile].
__global__ void bitmask_masks_k(size_t n, const float* x, uint32_t* mask, unsigned long long* counts) {
  __shared__ unsigned long long sh[kTileWords];
  const size_t words = (n + 31) / 32;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const size_t first = size_t(blockIdx.x) * kTileWords + size_t(warp) * 32;  // this warp's first word
  uint32_t mine = 0;
  for (unsigned k = 0; k < 32; ++k) {
    const size_t e = (first + k) * 32 + lane;
    const uint32_t m = __ballot_sync(0xffffffffu, e < n && __float_as_uint(x[e]) != 0u);
    if (lane == k) mine = m;
  }
  const size_t w = first + lane;  // = blockIdx.x * kTileWords + threadIdx.x
  if (w < words) mask[w] = mine;
  unsigned long long c = __popc(mine);
  const unsigned long long tile = block_exclusive_scan(c, sh);
  if (threadIdx.x == 0) counts[blockIdx.x] = tile;
}

// Pass 2, one block: counts[] becomes each tile's exclusive start; *total (when given) the
// compressed size in bytes (mask words and values).
__global__ void bitmask_tile_starts_k(size_t tiles, size_t words, unsigned long long* counts, unsigned long long* total) {
  __shared__ unsigned long long sh[kTileWords];
  unsigned long long run = 0;
  for (size_t t0 = 0; t0 < tiles; t0 += kTileWords) {
    const size_t t = t0 + threadIdx.x;
    unsigned long long v = t < tiles ? counts[t] : 0;
    const unsigned long long sum = block_exclusive_scan(v, sh);
    if (t < tiles) counts[t] = run + v;
    run += sum;
  }
  if (total && threadIdx.x == 0) *total = (words + run) * 4;
}

// Pass 3 of compression: each thread writes its word's non-zero values after the tile's start and
// the words before it in the tile. Values past `room_words` are not written (the size still counts them).
__global__ void bitmask_values_k(size_t n, const float* x, const uint32_t* mask, const unsigned long long* starts,
                                 uint32_t* values, size_t room_words) {
  __shared__ unsigned long long sh[kTileWords];
  const size_t words = (n + 31) / 32;
  const size_t w = size_t(blockIdx.x) * kTileWords + threadIdx.x;
  const uint32_t m = w < words ? mask[w] : 0u;
  unsigned long long at = __popc(m);
  block_exclusive_scan(at, sh);  // every thread of the block takes part
  if (w >= words) return;
  at += starts[blockIdx.x];
  for (int i = 0; i < 32; ++i)
    if ((m >> i) & 1u) {
      if (at < room_words) values[at] = __float_as_uint(x[w * 32 + i]);
      ++at;
    }
}

// Decompression, pass 1: each tile's non-zero count from its mask words.
__global__ void bitmask_counts_k(size_t words, const uint32_t* mask, unsigned long long* counts) {
  __shared__ unsigned long long sh[kTileWords];
  const size_t w = size_t(blockIdx.x) * kTileWords + threadIdx.x;
  unsigned long long c = w < words ? __popc(mask[w]) : 0u;
  const unsigned long long tile = block_exclusive_scan(c, sh);
  if (threadIdx.x == 0) counts[blockIdx.x] = tile;
}

// Decompression, pass 3: each thread expands its word from the values after its start.
__global__ void bitmask_expand_k(size_t n, const uint32_t* mask, const uint32_t* values, const unsigned long long* starts,
                                 float* y) {
  __shared__ unsigned long long sh[kTileWords];
  const size_t words = (n + 31) / 32;
  const size_t w = size_t(blockIdx.x) * kTileWords + threadIdx.x;
  const uint32_t m = w < words ? mask[w] : 0u;
  unsigned long long at = __popc(m);
  block_exclusive_scan(at, sh);
  if (w >= words) return;
  at += starts[blockIdx.x];
  for (int i = 0; i < 32 && w * 32 + i < n; ++i) y[w * 32 + i] = __uint_as_float((m >> i) & 1u ? values[at++] : 0u);
}

__global__ void count_nonzero_k(size_t n, const float* x, unsigned long long* count) {
  unsigned long long c = 0;
  VT_GRID_STRIDE(i, n) c += __float_as_uint(x[i]) != 0u;
  atomicAdd(count, c);
}

__global__ void sign_words_k(size_t words, size_t n, const float* x, uint32_t* out) {
  VT_GRID_STRIDE(w, words) {
    uint32_t m = 0;
    for (int i = 0; i < 32 && w * 32 + i < n; ++i)
      if (x[w * 32 + i] > 0.0f) m |= 1u << i;
    out[w] = m;
  }
}

__global__ void sign_expand_k(size_t n, const uint32_t* words, float* y) {
  VT_GRID_STRIDE(i, n) y[i] = (words[i / 32] >> (i % 32)) & 1u ? 1.0f : 0.0f;
}

}  // namespace

void count_nonzero_bits(cudaStream_t s, size_t n, const float* x, unsigned long long* count) {
  VT_CHECK(cudaMemsetAsync(count, 0, sizeof *count, s));
  if (n == 0) return;
  count_nonzero_k<<<blocks_for(n), kThreads, 0, s>>>(n, x, count);
  VT_CHECK_LAUNCH("count_nonzero_k");
}

size_t bitmask_scratch_bytes(size_t n) { return ((n + 31) / 32 + kTileWords - 1) / kTileWords * sizeof(unsigned long long); }

void compress_bitmask(cudaStream_t s, size_t n, const float* x, void* dst, size_t capacity, void* scratch,
                      size_t scratch_bytes, unsigned long long* total) {
  const size_t mask_bytes = (n + 31) / 32 * 4;
  if (n == 0 || capacity < mask_bytes) {  // not even the mask fits: report the smallest size it could be
    const unsigned long long need = mask_bytes;
    VT_CHECK(cudaMemcpyAsync(total, &need, 8, cudaMemcpyHostToDevice, s));
    VT_CHECK(cudaStreamSynchronize(s));  // `need` lives on this stack
    return;
  }
  if (scratch_bytes < bitmask_scratch_bytes(n)) throw std::logic_error("compress_bitmask: scratch too small");
  const size_t words = mask_bytes / 4, tiles = (words + kTileWords - 1) / kTileWords;
  auto* mask = static_cast<uint32_t*>(dst);
  auto* counts = static_cast<unsigned long long*>(scratch);
  bitmask_masks_k<<<static_cast<unsigned>(tiles), kTileWords, 0, s>>>(n, x, mask, counts);
  VT_CHECK_LAUNCH("bitmask_masks_k");
  bitmask_tile_starts_k<<<1, kTileWords, 0, s>>>(tiles, words, counts, total);
  VT_CHECK_LAUNCH("bitmask_tile_starts_k");
  bitmask_values_k<<<static_cast<unsigned>(tiles), kTileWords, 0, s>>>(n, x, mask, counts, mask + words,
                                                                        (capacity - mask_bytes) / 4);
  VT_CHECK_LAUNCH("bitmask_values_k");
}

void compress_sign(cudaStream_t s, size_t n, const float* x, void* dst) {
  const size_t words = (n + 31) / 32;
  if (words == 0) return;
  sign_words_k<<<blocks_for(words), kThreads, 0, s>>>(words, n, x, static_cast<uint32_t*>(dst));
  VT_CHECK_LAUNCH("sign_words_k");
}

void decompress_bitmask(cudaStream_t s, size_t n, const void* src, float* y, void* scratch, size_t scratch_bytes) {
  if (n == 0) return;
  if (scratch_bytes < bitmask_scratch_bytes(n)) throw std::logic_error("decompress_bitmask: scratch too small");
  const size_t words = (n + 31) / 32, tiles = (words + kTileWords - 1) / kTileWords;
  const auto* mask = static_cast<const uint32_t*>(src);
  auto* counts = static_cast<unsigned long long*>(scratch);
  bitmask_counts_k<<<static_cast<unsigned>(tiles), kTileWords, 0, s>>>(words, mask, counts);
  VT_CHECK_LAUNCH("bitmask_counts_k");
  bitmask_tile_starts_k<<<1, kTileWords, 0, s>>>(tiles, words, counts, nullptr);
  VT_CHECK_LAUNCH("bitmask_tile_starts_k");
  bitmask_expand_k<<<static_cast<unsigned>(tiles), kTileWords, 0, s>>>(n, mask, mask + words, counts, y);
  VT_CHECK_LAUNCH("bitmask_expand_k");
}

void decompress_sign(cudaStream_t s, size_t n, const void* src, float* y) {
  VT_ELEMENTWISE(sign_expand_k, n, static_cast<const uint32_t*>(src), y);
}

// ---------------------------------------------------------------- lossy codecs (opt-in)

namespace {

__global__ void to_half_k(size_t n, bool bf16, const float* x, uint16_t* h) {
  VT_GRID_STRIDE(i, n) h[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x[i])) : __half_as_ushort(__float2half_rn(x[i]));
}
__global__ void from_half_k(size_t n, bool bf16, const uint16_t* h, float* y) {
  VT_GRID_STRIDE(i, n) y[i] = bf16 ? __bfloat162float(__ushort_as_bfloat16(h[i])) : __half2float(__ushort_as_half(h[i]));
}
// Max finite |x| as float bits: for non-negative floats the bit order is the value order.
__global__ void absmax_k(size_t n, const float* x, unsigned int* amax) {
  unsigned int m = 0;
  VT_GRID_STRIDE(i, n) {
    const float a = fabsf(x[i]);
    if (isfinite(a)) m = max(m, __float_as_uint(a));
  }
  atomicMax(amax, m);
}
__global__ void quantize_k(size_t n, const float* x, float* scale_slot, int8_t* q) {
  const float amax = *scale_slot;  // the absmax bits, read as a float
  const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
  VT_GRID_STRIDE(i, n) q[i] = static_cast<int8_t>(isnan(x[i]) ? 0.0f : nearbyintf(fminf(fmaxf(x[i] / scale, -127.0f), 127.0f)));
}
__global__ void store_scale_k(float* scale_slot) {
  const float amax = *scale_slot;
  *scale_slot = amax > 0.0f ? amax / 127.0f : 1.0f;
}
__global__ void dequantize_k(size_t n, const float* scale_slot, const int8_t* q, float* y) {
  const float scale = *scale_slot;
  VT_GRID_STRIDE(i, n) y[i] = static_cast<float>(q[i]) * scale;
}

}  // namespace

void compress_half(cudaStream_t s, bool bf16, size_t n, const float* x, void* dst) {
  VT_ELEMENTWISE(to_half_k, n, bf16, x, static_cast<uint16_t*>(dst));
}
void decompress_half(cudaStream_t s, bool bf16, size_t n, const void* src, float* y) {
  VT_ELEMENTWISE(from_half_k, n, bf16, static_cast<const uint16_t*>(src), y);
}
void compress_int8(cudaStream_t s, size_t n, const float* x, void* dst) {
  auto* slot = static_cast<float*>(dst);
  VT_CHECK(cudaMemsetAsync(slot, 0, 4, s));
  if (n) {
    absmax_k<<<blocks_for(n), kThreads, 0, s>>>(n, x, reinterpret_cast<unsigned int*>(slot));
    VT_CHECK_LAUNCH("absmax_k");
    quantize_k<<<blocks_for(n), kThreads, 0, s>>>(n, x, slot, reinterpret_cast<int8_t*>(slot + 1));
    VT_CHECK_LAUNCH("quantize_k");
  }
  store_scale_k<<<1, 1, 0, s>>>(slot);
  VT_CHECK_LAUNCH("store_scale_k");
}
void decompress_int8(cudaStream_t s, size_t n, const void* src, float* y) {
  const auto* slot = static_cast<const float*>(src);
  VT_ELEMENTWISE(dequantize_k, n, slot, reinterpret_cast<const int8_t*>(slot + 1), y);
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
