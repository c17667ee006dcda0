// What the cuda backend's kernel files share: the block size, the grid-stride loop, the
// counter-based RNG, block reductions in a fixed order, and the elementwise launcher.
#pragma once
#include <cstddef>
#include <cstdint>

#include "vtensor/backend/cuda/cuda_check.h"

namespace vtensor::cuda {
namespace {  // each kernel file has its own copy

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

}  // namespace
}  // namespace vtensor::cuda

#define VT_ELEMENTWISE(kernel, n, ...)                                    \
  do {                                                                    \
    if ((n) == 0) return;                                                 \
    kernel<<<blocks_for(n), kThreads, 0, s>>>((n), __VA_ARGS__);          \
    VT_CHECK_LAUNCH(#kernel);                                             \
  } while (0)
