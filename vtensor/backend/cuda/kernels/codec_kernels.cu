// The cuda backend's codec kernels (codec.h): the lossless bitmask and sign codecs and the
// opt-in lossy ones (half, bfloat16, int8), device code only, built as kernels.cu is.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "vtensor/backend/cuda/kernels.h"
#include "vtensor/backend/cuda/kernels/common.cuh"

namespace vtensor::cuda {

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


}  // namespace vtensor::cuda
