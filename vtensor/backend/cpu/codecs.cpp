#include "vtensor/backend/cpu/codecs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace vtensor::cpu {
namespace {

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint16_t to_bf16(float v) {
  const uint32_t b = bits_of(v);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);  // NaN stays NaN
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

uint16_t to_fp16(float v) {
  const uint32_t b = bits_of(v), sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (a < 0x38800000u) {  // below the smallest normal half: a denormal (or zero), rounded to nearest even
    const float f = from_bits(a) * 16777216.0f;  // units of 2^-24, the denormal step
    const auto q = static_cast<uint32_t>(std::nearbyint(f));
    return static_cast<uint16_t>(sign | q);
  }
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round the 13 dropped bits to nearest even
  return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
}

float from_fp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) return from_bits(sign) + (sign ? -1.0f : 1.0f) * static_cast<float>(m) / 16777216.0f;
  if (e == 31) return from_bits(sign | 0x7f800000u | (m << 13));
  return from_bits(sign | ((e + 112) << 23) | (m << 13));
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
  if (c == Codec::kBf16 || c == Codec::kFp16 || c == Codec::kInt8) {
    const size_t need = codec_bytes(c, n, 0);
    if (need > capacity) return need;
    if (c == Codec::kInt8) {
      float amax = 0;
      for (size_t i = 0; i < n; ++i)
        if (std::isfinite(src[i])) amax = std::max(amax, std::fabs(src[i]));
      const float scale = amax > 0 ? amax / 127.0f : 1.0f;
      std::memcpy(out, &scale, 4);
      auto* q = reinterpret_cast<int8_t*>(out + 4);
      for (size_t i = 0; i < n; ++i) {
        const float r = std::isnan(src[i]) ? 0.0f : std::nearbyint(std::clamp(src[i] / scale, -127.0f, 127.0f));
        q[i] = static_cast<int8_t>(r);
      }
      return need;
    }
    auto* h = reinterpret_cast<uint16_t*>(out);
    for (size_t i = 0; i < n; ++i) h[i] = c == Codec::kBf16 ? to_bf16(src[i]) : to_fp16(src[i]);
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
  if (c == Codec::kBf16 || c == Codec::kFp16) {
    const auto* h = static_cast<const uint16_t*>(src);
    for (size_t i = 0; i < n; ++i) dst[i] = c == Codec::kBf16 ? from_bits(static_cast<uint32_t>(h[i]) << 16) : from_fp16(h[i]);
    return;
  }
  if (c == Codec::kInt8) {
    float scale;
    std::memcpy(&scale, src, 4);
    const auto* q = reinterpret_cast<const int8_t*>(static_cast<const char*>(src) + 4);
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(q[i]) * scale;
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
