#include "vtensor/backend/cpu/codecs.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace vtensor::cpu {
namespace {

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

}  // namespace

size_t count_nonzero_bits(const float* x, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) k += bits_of(x[i]) != 0;
  return k;
}

size_t compress(Codec c, const float* src, size_t n, void* dst, size_t capacity, void* workspace, size_t workspace_bytes) {
  auto* out = static_cast<char*>(dst);
  if (c == Codec::kSign) {
    const size_t need = codec_bytes(c, n, 0);
    if (need > capacity) return need;
    auto* words = reinterpret_cast<uint32_t*>(out);
    for (size_t w = 0; w * kCodecWordBits < n; ++w) {
      uint32_t m = 0;
      const size_t end = std::min(n, (w + 1) * kCodecWordBits);
      for (size_t i = w * kCodecWordBits; i < end; ++i)
        if (src[i] > 0.0f) m |= uint32_t{1} << (i % kCodecWordBits);
      words[w] = m;
    }
    return need;
  }
  if (c != Codec::kBitmask) throw std::logic_error("cpu compress: codec " + std::string(to_string(c)));
  const size_t chunk = codec_chunk_elements(workspace_bytes);
  if (codec_chunk_workspace(chunk) > workspace_bytes) throw std::logic_error("cpu compress: workspace too small");
  const size_t mask_bytes = codec_mask_bytes(n);
  size_t values_at = mask_bytes;  // where the next chunk's values go
  auto* ws = static_cast<uint32_t*>(workspace);
  for (size_t c0 = 0; c0 < n; c0 += chunk) {
    const size_t len = std::min(chunk, n - c0), words = (len + kCodecWordBits - 1) / kCodecWordBits;
    uint32_t* vals = ws + words;  // the chunk in the workspace: its mask words, then its values
    size_t k = 0;
    for (size_t w = 0; w < words; ++w) {
      uint32_t m = 0;
      const size_t end = std::min(len, (w + 1) * kCodecWordBits);
      for (size_t i = w * kCodecWordBits; i < end; ++i) {
        const uint32_t b = bits_of(src[c0 + i]);
        if (b != 0) {
          m |= uint32_t{1} << (i % kCodecWordBits);
          vals[k++] = b;
        }
      }
      ws[w] = m;
    }
    const size_t mask_at = c0 / kCodecWordBits * 4;  // chunks are whole words but the last
    if (mask_at + words * 4 <= capacity) std::memcpy(out + mask_at, ws, words * 4);
    if (values_at + k * 4 <= capacity) std::memcpy(out + values_at, vals, k * 4);
    values_at += k * 4;
  }
  return values_at;
}

void decompress(Codec c, const void* src, size_t n, float* dst) {
  const auto* words = static_cast<const uint32_t*>(src);
  if (c == Codec::kSign) {
    for (size_t i = 0; i < n; ++i) dst[i] = (words[i / kCodecWordBits] >> (i % kCodecWordBits)) & 1u ? 1.0f : 0.0f;
    return;
  }
  if (c != Codec::kBitmask) throw std::logic_error("cpu decompress: codec " + std::string(to_string(c)));
  const uint32_t* vals = words + codec_mask_bytes(n) / 4;
  for (size_t i = 0; i < n; ++i) {
    const bool nz = (words[i / kCodecWordBits] >> (i % kCodecWordBits)) & 1u;
    const uint32_t b = nz ? *vals++ : 0u;
    std::memcpy(dst + i, &b, 4);
  }
}

}  // namespace vtensor::cpu
