// Lossless on-device compression codecs (FreeLunch, Patel, Liu, Guan, MCHPC'21). Each codec is a
// kernel pair on every backend (cpu: cpu/codecs.cpp, cuda: kernels/kernels.cu, sim: a cost);
// this header fixes the formats and sizes that all of them share.
//   kBitmask: a ReLU or max-pool output is mostly zeros. Layout: ceil(n/32) mask words (bit i of
//     word w set when element 32w+i is non-zero), then the non-zero elements in order. "Non-zero"
//     is by bit pattern, so -0.0, NaN and denormals survive bit for bit. Size 4*ceil(n/32) + 4*nnz,
//     i.e. a ratio of density + 1/32. The layout does not depend on how the kernel is chunked, so
//     compressing through a small sliding workspace or through one of the tensor's size gives the
//     same bytes.
//   kSign: 1 bit per element, (x > 0). Decompresses to 1.0f / 0.0f. Only for a tensor whose every
//     later reader needs nothing but x > 0 (ReLU backward reads its output y only as y > 0); the
//     policy proves that from the graph. Size 4*ceil(n/32).
//   Lossy, opt-in only (--lossy), for tensors no lossless codec fits, read only by backward ops:
//   kBf16 (the upper 16 bits, rounded to nearest even), kFp16 (IEEE half, rounded to nearest
//   even, overflow to infinity), kInt8 (one float scale = max |x| / 127, then round(x / scale)).
// The paper also packs max-pool argmax into 8-bit window indices; our max-pool backward finds
// the maximum again from the input, so the graph has no argmax tensor to pack.
// Deviation: FreeLunch's lossless path is a zero-value compression of ReLU outputs on the GPU; we
// keep its format idea (mask + packed values) with our own layout, and add kSign.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vtensor {

// A backend's codec speed as the memory manager measured it (MemoryManager::measure_codec_rate):
// a call's fixed cost, and its time per byte read and written (the bitmask codec, compression and
// decompression averaged, as the planners charge both alike).
struct CodecRate {
  double latency_ms = 0;
  double ms_per_byte = 0;
  size_t probe_bytes = 0;  // the largest tensor it was timed on
};

enum class Codec { kNone, kBitmask, kSign, kBf16, kFp16, kInt8 };
const char* to_string(Codec c);
inline bool codec_lossless(Codec c) { return c == Codec::kBitmask || c == Codec::kSign || c == Codec::kNone; }
// "bitmask", "sign"; throws std::invalid_argument naming the accepted ones.
Codec parse_codec(const std::string& name);
// --lossy: "bf16", "fp16", "int8"; throws std::invalid_argument naming the accepted ones.
Codec parse_lossy(const std::string& name);

constexpr size_t kCodecWordBits = 32;
inline size_t codec_mask_bytes(size_t n) { return (n + kCodecWordBits - 1) / kCodecWordBits * 4; }
// Compressed size of n float elements of which `nonzeros` have a non-zero bit pattern.
inline size_t codec_bytes(Codec c, size_t n, size_t nonzeros) {
  switch (c) {
    case Codec::kBitmask: return codec_mask_bytes(n) + 4 * nonzeros;
    case Codec::kSign: return codec_mask_bytes(n);
    case Codec::kBf16:
    case Codec::kFp16: return 2 * n;
    case Codec::kInt8: return 4 + n;  // the scale, then one byte per element
    case Codec::kNone: return 4 * n;
  }
  return 4 * n;
}
// The most a codec can write (every element non-zero).
inline size_t codec_bound(Codec c, size_t n) { return codec_bytes(c, n, n); }
// Elements one sliding-workspace chunk of `workspace_bytes` holds at worst (a multiple of 32, >= 32).
inline size_t codec_chunk_elements(size_t workspace_bytes) {
  const size_t per_word = 4 + 4 * kCodecWordBits;  // one mask word and its 32 values
  const size_t words = workspace_bytes / per_word;
  return (words ? words : 1) * kCodecWordBits;
}
// The workspace one chunk of c elements needs at worst.
inline size_t codec_chunk_workspace(size_t chunk) { return codec_bound(Codec::kBitmask, chunk); }

}  // namespace vtensor
