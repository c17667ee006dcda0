// The cpu compression codecs (vtensor/backend/codec.h): bitmask round-trips every bit pattern
// (random, all zeros, no zeros, NaN, -0.0, denormals, lengths that are not whole words), gives
// the same bytes through any workspace, reports its size and writes nothing past the capacity;
// sign keeps exactly x > 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "vtensor/backend/codec.h"
#include "vtensor/backend/cpu/codecs.h"

using namespace vtensor;

namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

std::vector<float> random_values(size_t n, double zero_fraction, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng) < zero_fraction ? 0.0f : from_bits(rng());  // any bit pattern
  return v;
}

// Adversarial: zeros of both signs, NaNs (quiet, signalling, with payloads), infinities,
// denormals, the largest and smallest normals.
std::vector<float> adversarial(size_t n) {
  const uint32_t pats[] = {0x00000000u, 0x80000000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u,
                           0xff800000u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x7f7fffffu, 0x00800000u,
                           0x3f800000u, 0xbf800000u};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from_bits(pats[(i * 7 + i / 3) % (sizeof pats / sizeof pats[0])]);
  return v;
}

std::vector<uint8_t> compress_all(Codec c, const std::vector<float>& x, size_t workspace_bytes, size_t* size) {
  std::vector<uint8_t> out(codec_bound(c, x.size()) + 64, 0xab);
  std::vector<uint8_t> ws(workspace_bytes);
  *size = cpu::compress(c, x.data(), x.size(), out.data(), codec_bound(c, x.size()), ws.data(), ws.size());
  out.resize(*size);
  return out;
}

void expect_bitmask_round_trip(const std::vector<float>& x) {
  size_t size = 0;
  const auto packed = compress_all(Codec::kBitmask, x, codec_chunk_workspace(64), &size);
  EXPECT_EQ(size, codec_bytes(Codec::kBitmask, x.size(), cpu::count_nonzero_bits(x.data(), x.size())));
  std::vector<float> y(x.size(), 42.0f);
  cpu::decompress(Codec::kBitmask, packed.data(), x.size(), y.data());
  EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * 4)) << "not bit-identical";
}

}  // namespace

TEST(Codecs, BitmaskRoundTripsRandomData) {
  for (size_t n : {1, 31, 32, 33, 1000, 4096, 10007})
    for (double zeros : {0.0, 0.3, 0.5, 0.9}) {
      SCOPED_TRACE(std::to_string(n) + " elements, zero fraction " + std::to_string(zeros));
      expect_bitmask_round_trip(random_values(n, zeros, static_cast<uint32_t>(n * 10 + zeros * 100)));
    }
}

TEST(Codecs, BitmaskRoundTripsAdversarialData) {
  expect_bitmask_round_trip(std::vector<float>(1000, 0.0f));   // all zeros
  expect_bitmask_round_trip(std::vector<float>(1000, -0.0f));  // -0.0 is not zero by bits: kept
  expect_bitmask_round_trip(std::vector<float>(999, std::numeric_limits<float>::quiet_NaN()));
  expect_bitmask_round_trip(std::vector<float>(77, std::numeric_limits<float>::denorm_min()));
  expect_bitmask_round_trip(random_values(5000, 0.0, 7));  // no zeros at all
  expect_bitmask_round_trip(adversarial(4099));
}

TEST(Codecs, BitmaskSizesAreMaskPlusNonZeros) {
  std::vector<float> x(1000, 0.0f);
  size_t size = 0;
  compress_all(Codec::kBitmask, x, codec_chunk_workspace(32), &size);
  EXPECT_EQ(size, (1000u + 31) / 32 * 4);  // all zeros: the mask alone (ratio 1/32)
  for (size_t i = 0; i < 1000; i += 4) x[i] = 1.5f;
  compress_all(Codec::kBitmask, x, codec_chunk_workspace(32), &size);
  EXPECT_EQ(size, (1000u + 31) / 32 * 4 + 250 * 4);  // density 1/4: 1/4 + 1/32 of the bytes
}

TEST(Codecs, AnyWorkspaceGivesTheSameBytes) {
  // The sliding workspace is only where chunks are packed: 32 elements at a time or the whole
  // tensor at once, the output is the same.
  const auto x = random_values(10000, 0.5, 3);
  size_t a = 0, b = 0, c = 0;
  const auto small = compress_all(Codec::kBitmask, x, codec_chunk_workspace(32), &a);
  const auto mid = compress_all(Codec::kBitmask, x, 4096, &b);
  const auto whole = compress_all(Codec::kBitmask, x, codec_chunk_workspace(10016), &c);
  ASSERT_EQ(a, b);
  ASSERT_EQ(a, c);
  EXPECT_EQ(small, mid);
  EXPECT_EQ(small, whole);
}

TEST(Codecs, OverflowReportsTheSizeAndWritesNothingPastCapacity) {
  const auto x = random_values(2000, 0.1, 11);  // dense
  const size_t need = codec_bytes(Codec::kBitmask, x.size(), cpu::count_nonzero_bits(x.data(), x.size()));
  const size_t capacity = need / 2;
  std::vector<uint8_t> out(need + 16, 0xcd), ws(codec_chunk_workspace(64));
  const size_t got = cpu::compress(Codec::kBitmask, x.data(), x.size(), out.data(), capacity, ws.data(), ws.size());
  EXPECT_EQ(got, need);
  for (size_t i = capacity; i < out.size(); ++i) ASSERT_EQ(out[i], 0xcd) << "byte " << i << " written past the capacity";
}

TEST(Codecs, SignKeepsExactlyGreaterThanZero) {
  for (const auto& x : {random_values(3001, 0.4, 5), adversarial(1025), std::vector<float>(64, -0.0f),
                        std::vector<float>(65, std::numeric_limits<float>::denorm_min())}) {
    size_t size = 0;
    const auto packed = compress_all(Codec::kSign, x, 0, &size);
    EXPECT_EQ(size, (x.size() + 31) / 32 * 4);
    std::vector<float> y(x.size());
    cpu::decompress(Codec::kSign, packed.data(), x.size(), y.data());
    for (size_t i = 0; i < x.size(); ++i) {
      // What ReLU backward reads: y > 0. NaN and -0.0 are not > 0; denormals are.
      ASSERT_EQ(x[i] > 0.0f, y[i] > 0.0f) << "element " << i;
      ASSERT_TRUE(y[i] == 0.0f || y[i] == 1.0f);
    }
  }
}

TEST(Codecs, NamesParseAndUnknownOnesSayWhatIsAccepted) {
  EXPECT_EQ(parse_codec("bitmask"), Codec::kBitmask);
  EXPECT_EQ(parse_codec("sign"), Codec::kSign);
  try {
    parse_codec("zstd");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'zstd'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bitmask, sign"), std::string::npos);
  }
}

// ---------------------------------------------------------------- lossy codecs (opt-in)

namespace {

std::vector<float> lossy_round_trip(Codec c, const std::vector<float>& x) {
  size_t size = 0;
  const auto packed = compress_all(c, x, 0, &size);
  EXPECT_EQ(size, codec_bytes(c, x.size(), 0));
  std::vector<float> y(x.size());
  cpu::decompress(c, packed.data(), x.size(), y.data());
  return y;
}

}  // namespace

TEST(LossyCodecs, HalfPrecisionRoundsToNearestEvenAndKeepsSpecials) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {1.0f, -2.5f, 65504.0f, 65519.0f, 65520.0f, 1e9f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -26),
                                -0.0f, inf, -inf, nan, 1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11)};
  const auto h = lossy_round_trip(Codec::kFp16, x);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.5f);
  EXPECT_EQ(h[2], 65504.0f);  // the largest half
  EXPECT_EQ(h[3], 65504.0f);  // rounds down
  EXPECT_EQ(h[4], inf);       // rounds up past the largest half
  EXPECT_EQ(h[5], inf);
  EXPECT_EQ(h[6], std::ldexp(1.0f, -24));  // the smallest denormal half
  EXPECT_EQ(h[7], 0.0f);                   // a quarter of it: to zero
  EXPECT_TRUE(std::signbit(h[8]) && h[8] == 0.0f);
  EXPECT_EQ(h[9], inf);
  EXPECT_EQ(h[10], -inf);
  EXPECT_TRUE(std::isnan(h[11]));
  EXPECT_EQ(h[12], 1.0f);                                // a tie: to even
  EXPECT_EQ(h[13], 1.0f + 2 * std::ldexp(1.0f, -10));  // a tie: to even (up)
  const auto b = lossy_round_trip(Codec::kBf16, x);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -2.5f);
  EXPECT_EQ(b[9], inf);
  EXPECT_TRUE(std::isnan(b[11]));
  EXPECT_TRUE(std::signbit(b[8]));
  for (size_t i = 0; i < x.size(); ++i)  // bf16 keeps the float's range: 8 bits of mantissa
    if (std::isfinite(x[i])) EXPECT_LE(std::fabs(b[i] - x[i]), std::fabs(x[i]) * std::ldexp(1.0f, -8)) << i;
}

TEST(LossyCodecs, Int8ErrorIsAtMostHalfAStep) {
  const auto x = random_values(5000, 0.2, 21);
  std::vector<float> v;
  for (float f : x) v.push_back(std::isfinite(f) ? std::fmod(f, 1000.0f) : 3.0f);
  const auto y = lossy_round_trip(Codec::kInt8, v);
  float amax = 0;
  for (float f : v) amax = std::max(amax, std::fabs(f));
  const float step = amax / 127.0f;
  for (size_t i = 0; i < v.size(); ++i) ASSERT_LE(std::fabs(y[i] - v[i]), step * 0.5f * 1.0001f) << i;
  const auto z = lossy_round_trip(Codec::kInt8, std::vector<float>(100, 0.0f));
  for (float f : z) EXPECT_EQ(f, 0.0f);
}

TEST(LossyCodecs, NamesParseAndUnknownOnesSayWhatIsAccepted) {
  EXPECT_EQ(parse_lossy("bf16"), Codec::kBf16);
  EXPECT_EQ(parse_lossy("fp16"), Codec::kFp16);
  EXPECT_EQ(parse_lossy("int8"), Codec::kInt8);
  EXPECT_FALSE(codec_lossless(Codec::kInt8));
  EXPECT_TRUE(codec_lossless(Codec::kBitmask));
  try {
    parse_lossy("fp8");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown lossy mode 'fp8'; accepted: bf16, fp16, int8"), std::string::npos);
  }
}
