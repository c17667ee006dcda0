// Launchers of the cuda backend's own kernels (kernels/*.cu), callable from host code.
// Each mirrors the cpu kernel of the same name (vtensor/backend/cpu/kernels*.h): the same
// formulas, the same float/double choices (built without FMA contraction), and where the
// cpu's order is cheap to keep (pooling, embedding gradient rows, elementwise ops) the same
// order, so those results are bit-identical to the cpu's. Reductions (block trees, column
// sums by warps) use a fixed order: deterministic, close to the cpu but not its bits.
// Every launch is checked (VT_CHECK_LAUNCH names the kernel).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vtensor::cuda {

// Data (cpu_backend.cpp's synthetic_batch / synthetic_tokens, the same bits).
void synthetic_batch(cudaStream_t s, int n, size_t per, int num_classes, uint64_t seed, uint64_t iteration, float* x,
                     float* labels);
void synthetic_tokens(cudaStream_t s, int rows, int T, int V, bool mlm, uint64_t seed, uint64_t iteration,
                      float* tokens, float* targets);
// Parameter initialisation on the device is not needed: values are made on the host (cpu code).

void relu_forward(cudaStream_t s, size_t n, const float* x, float* y);
void relu_backward(cudaStream_t s, size_t n, const float* dy, const float* y, float* dx);
void add_forward(cudaStream_t s, size_t n, const float* a, const float* b, float* y);
void dropout_forward(cudaStream_t s, size_t n, float p, uint64_t seed, const float* x, float* y);

// y[m, o] += b[o] over [M, Out]; y[n, k, i] += b[k] over [N, K, PQ].
void add_bias_rows(cudaStream_t s, int M, int Out, const float* b, float* y);
void add_bias_channels(cudaStream_t s, int N, int K, int PQ, const float* b, float* y);
// db[o] = sum_m dy[m, o]; db[k] = sum_{n, i} dy[n, k, i] (double accumulators, fixed order).
void column_sum(cudaStream_t s, int M, int Out, const float* dy, float* db);
void channel_sum(cudaStream_t s, int N, int K, int PQ, const float* dy, float* db);

void maxpool_forward(cudaStream_t s, int N, int C, int H, int W, int k, int stride, int pad, int P, int Q,
                     const float* x, float* y);
void maxpool_backward(cudaStream_t s, int N, int C, int H, int W, int k, int stride, int pad, int P, int Q,
                      const float* dy, const float* x, float* dx);
void global_avgpool_forward(cudaStream_t s, int N, int C, int HW, const float* x, float* y);
void global_avgpool_backward(cudaStream_t s, int N, int C, int HW, const float* dy, float* dx);

// row_loss: N doubles of workspace. Labels out of [0, K) give a NaN loss (the cpu throws).
void softmax_ce_forward(cudaStream_t s, int N, int K, const float* logits, const float* labels, double* row_loss,
                        float* loss);
void softmax_ce_backward(cudaStream_t s, int N, int K, const float* logits, const float* labels, float* dlogits);

void sgd_momentum(cudaStream_t s, size_t n, float lr, float momentum, float weight_decay, float* w, const float* g,
                  float* m);
// c1, c2: the bias corrections 1 - beta^t, computed on the host as the cpu does.
void adam(cudaStream_t s, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled,
          float c1, float c2, float* w, const float* g, float* m, float* v);

// Transformers.
void embedding_forward(cudaStream_t s, int N, int V, int C, const float* ids, int period, const float* table, float* y);
// dtable must already hold acc (or zeros); rows of dy are added in order n = 0 .. N-1.
void embedding_backward_add(cudaStream_t s, int N, int V, int C, const float* dy, const float* ids, int period,
                            float* dtable);
void layernorm_forward(cudaStream_t s, int R, int C, const float* x, const float* gamma, const float* beta, float eps,
                       float* y, float* save_mean, float* save_invstd);
void layernorm_backward(cudaStream_t s, int R, int C, const float* dy, const float* x, const float* gamma,
                        const float* save_mean, const float* save_invstd, float* dx, float* dgamma, float* dbeta);
void gelu_forward(cudaStream_t s, size_t n, const float* x, float* y);
void gelu_backward(cudaStream_t s, size_t n, const float* dy, const float* x, float* dx);
void softmax_forward(cudaStream_t s, int R, int C, bool causal, const float* x, float* y);
void softmax_backward(cudaStream_t s, int R, int C, const float* dy, const float* y, float* dx);
void transpose12(cudaStream_t s, int A, int B, int C, int D, const float* x, float* y);

// Compression codecs (formats in vtensor/backend/codec.h, the same bytes as vtensor/backend/cpu/codecs.h).
// count_nonzero_bits: writes the count to *count (device memory).
void count_nonzero_bits(cudaStream_t s, size_t n, const float* x, unsigned long long* count);
// kBitmask: tiles of 1024 words (32 elements each), one block per tile, in three passes (masks
// and each tile's count; the tiles' starts; the values); values that would land past `capacity`
// are not written. The compressed size goes to *total (device). `scratch` (device memory, at
// least bitmask_scratch_bytes(n), used in stream order) holds the tiles' counts.
size_t bitmask_scratch_bytes(size_t n);
void compress_bitmask(cudaStream_t s, size_t n, const float* x, void* dst, size_t capacity, void* scratch,
                      size_t scratch_bytes, unsigned long long* total);
void compress_sign(cudaStream_t s, size_t n, const float* x, void* dst);
void decompress_bitmask(cudaStream_t s, size_t n, const void* src, float* y, void* scratch, size_t scratch_bytes);
void decompress_sign(cudaStream_t s, size_t n, const void* src, float* y);
// Lossy (opt-in): bf16 / fp16 rounded to nearest even; int8 with one scale (max finite |x| / 127)
// in the first 4 bytes, found by an atomic max before the quantisation.
void compress_half(cudaStream_t s, bool bf16, size_t n, const float* x, void* dst);
void decompress_half(cudaStream_t s, bool bf16, size_t n, const void* src, float* y);
void compress_int8(cudaStream_t s, size_t n, const float* x, void* dst);
void decompress_int8(cudaStream_t s, size_t n, const void* src, float* y);

// Device-to-device copies of up to kMaxCopySegments ranges in one launch (a compaction's small
// moves, gathered into the staging buffer and scattered back: Backend::move_device_batch). No
// destination may overlap another segment's source.
constexpr int kMaxCopySegments = 64;
struct CopySegments {
  int n = 0;
  const char* src[kMaxCopySegments] = {};
  char* dst[kMaxCopySegments] = {};
  size_t bytes[kMaxCopySegments] = {};
};
void copy_segments(cudaStream_t s, const CopySegments& segs);

}  // namespace vtensor::cuda
