// The cuda compression codecs against the cpu ones (the reference): the same compressed bytes,
// the same decompressed bits, the same non-zero counts, the same overflow report; then compress
// and compress+swap training on cuda bit-identical to none on cuda. Every test skips, with the
// reason, when this build has no CUDA or the machine no GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "vtensor/backend/backend.h"
#include "vtensor/backend/cpu/codecs.h"
#include "vtensor/core/graph.h"
#include "vtensor/train/trainer.h"

#include "tests/support/gpu.h"

using namespace vtensor;

namespace {

std::vector<float> inputs(size_t n, int kind, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t b = rng();
    switch (kind) {
      case 0: b = (rng() & 1) ? 0u : b; break;                      // about half zeros
      case 1: b = 0u; break;                                         // all zeros
      case 2: b = b | 1u; break;                                     // no zeros
      case 3: b = (i % 4 == 0) ? 0x80000000u : (i % 4 == 1) ? 0x7fc00001u : (i % 4 == 2) ? 1u : 0u;  // -0, NaN, denormal
    }
    std::memcpy(&v[i], &b, 4);
  }
  return v;
}

TensorInfo tensor_of(size_t n) {
  TensorInfo t;
  t.id = 0;
  t.name = std::string("cuda codec test input");
  t.shape = Shape({static_cast<int64_t>(n)});
  return t;
}

TEST(CudaCodecs, SameBytesAndBitsAsCpu) {
  VT_REQUIRE_GPU();
  auto be = make_backend("cuda", {.arena_bytes = size_t{64} << 20});
  char* dev = static_cast<char*>(be->arena_base());
  for (size_t n : {1, 33, 1024, 32768 + 5, 1000003})
    for (int kind = 0; kind < 4; ++kind)
      for (Codec c : {Codec::kBitmask, Codec::kSign}) {
        SCOPED_TRACE(std::to_string(n) + " elements, kind " + std::to_string(kind) + ", " + to_string(c));
        const auto x = inputs(n, kind, static_cast<uint32_t>(n + kind));
        const TensorInfo t = tensor_of(n);
        const size_t bound = codec_bound(c, n), ws_bytes = codec_chunk_workspace(1024);
        std::vector<uint8_t> want(bound), ws(ws_bytes);
        const size_t want_size = cpu::compress(c, x.data(), n, want.data(), bound, ws.data(), ws.size());
        char* src = dev;
        char* packed = dev + 4 * n + 4096;
        char* work = packed + bound + 4096;
        char* back = work + ws_bytes + 4096;
        be->copy_to_device(src, x.data(), 4 * n);
        EXPECT_EQ(be->count_nonzeros(t, src).value(), cpu::count_nonzero_bits(x.data(), n));
        CodecResult r;
        be->stream_wait(Stream::kCompress, be->record(Stream::kCompute));
        be->compress_async(Stream::kCompress, c, t, src, packed, bound, work, ws_bytes, &r);
        be->record(Stream::kCompress)->wait();
        ASSERT_EQ(r.bytes, want_size);
        std::vector<uint8_t> got(want_size);
        be->copy_to_host(got.data(), packed, want_size);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want_size)) << "compressed bytes differ from the cpu's";
        CodecResult d;
        be->decompress_async(Stream::kCompress, c, t, packed, want_size, back, &d);
        be->record(Stream::kCompress)->wait();
        std::vector<float> y(n), ref(n);
        be->copy_to_host(y.data(), back, 4 * n);
        cpu::decompress(c, want.data(), n, ref.data());
        EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), 4 * n)) << "decompressed bits differ from the cpu's";
      }
}

// The bitmask codec runs one block per tile of 32 Ki elements and scans the tiles' counts 1024 at a
// time: a tensor of more than 1024 tiles, the last one partial, still gives the cpu's bytes and bits.
TEST(CudaCodecs, BitmaskOverMoreThan1024TilesMatchesCpu) {
  VT_REQUIRE_GPU();
  const size_t n = size_t{1100} * 32768 + 77;
  const size_t bound = codec_bound(Codec::kBitmask, n);
  const auto aligned = [](size_t o) { return (o + 255) / 256 * 256; };
  const size_t packed_at = aligned(4 * n), back_at = aligned(packed_at + bound);
  auto be = make_backend("cuda", {.arena_bytes = aligned(back_at + 4 * n)});
  char* dev = static_cast<char*>(be->arena_base());
  const auto x = inputs(n, 0, 11);
  std::vector<uint8_t> want(bound), ws(codec_chunk_workspace(1024));
  const size_t want_size = cpu::compress(Codec::kBitmask, x.data(), n, want.data(), bound, ws.data(), ws.size());
  be->copy_to_device(dev, x.data(), 4 * n);
  const TensorInfo t = tensor_of(n);
  CodecResult r, d;
  be->compress_async(Stream::kCompress, Codec::kBitmask, t, dev, dev + packed_at, bound, nullptr, 0, &r);
  be->decompress_async(Stream::kCompress, Codec::kBitmask, t, dev + packed_at, want_size, dev + back_at, &d);
  be->record(Stream::kCompress)->wait();
  ASSERT_EQ(r.bytes, want_size);
  std::vector<uint8_t> got(want_size);
  be->copy_to_host(got.data(), dev + packed_at, want_size);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want_size)) << "compressed bytes differ from the cpu's";
  std::vector<float> y(n);
  be->copy_to_host(y.data(), dev + back_at, 4 * n);
  EXPECT_EQ(0, std::memcmp(y.data(), x.data(), 4 * n)) << "decompressed bits differ from the input";
}

// Lossy codecs on finite values: the same bytes and the same decompressed bits as the cpu.
TEST(CudaCodecs, LossyCodecsMatchCpuOnFiniteValues) {
  VT_REQUIRE_GPU();
  auto be = make_backend("cuda", {.arena_bytes = size_t{64} << 20});
  char* dev = static_cast<char*>(be->arena_base());
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const size_t n = 300001;
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 70000.0f, x[3] = 1e-8f;
  const TensorInfo t = tensor_of(n);
  for (Codec c : {Codec::kBf16, Codec::kFp16, Codec::kInt8}) {
    SCOPED_TRACE(to_string(c));
    const size_t bytes = codec_bytes(c, n, 0);
    std::vector<uint8_t> want(bytes);
    cpu::compress(c, x.data(), n, want.data(), bytes, nullptr, 0);
    // Aligned as the arena aligns every block: the kernels read and write whole floats.
    const auto aligned = [](size_t o) { return (o + 255) / 256 * 256; };
    char* packed = dev + aligned(4 * n + 4096);
    char* back = dev + aligned(4 * n + 4096 + bytes + 4096);
    be->copy_to_device(dev, x.data(), 4 * n);
    CodecResult r, d;
    be->compress_async(Stream::kCompress, c, t, dev, packed, bytes, nullptr, 0, &r);
    be->decompress_async(Stream::kCompress, c, t, packed, bytes, back, &d);
    be->record(Stream::kCompress)->wait();
    EXPECT_EQ(r.bytes, bytes);
    std::vector<uint8_t> got(bytes);
    be->copy_to_host(got.data(), packed, bytes);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), bytes));
    std::vector<float> y(n), ref(n);
    be->copy_to_host(y.data(), back, 4 * n);
    cpu::decompress(c, want.data(), n, ref.data());
    EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), 4 * n));
  }
}

TEST(CudaCodecs, OverflowReportsTheSizeLikeCpu) {
  VT_REQUIRE_GPU();
  auto be = make_backend("cuda", {.arena_bytes = size_t{16} << 20});
  char* dev = static_cast<char*>(be->arena_base());
  const size_t n = 100000;
  const auto x = inputs(n, 2, 9);  // no zeros
  const TensorInfo t = tensor_of(n);
  be->copy_to_device(dev, x.data(), 4 * n);
  CodecResult r;
  be->compress_async(Stream::kCompress, Codec::kBitmask, t, dev, dev + 4 * n, 4 * n / 2, nullptr, 0, &r);
  be->record(Stream::kCompress)->wait();
  EXPECT_EQ(r.bytes, codec_bytes(Codec::kBitmask, n, n));
}

TEST(CudaCodecs, CompressPoliciesBitIdenticalToNone) {
  VT_REQUIRE_GPU();
  auto train = [](const std::string& policy, size_t budget) {
    TrainConfig cfg;
    cfg.model.name = "resnet-tiny";
    cfg.backend = "cuda";
    cfg.deterministic = true;
    cfg.policy = policy;
    cfg.budget = budget;
    cfg.iters = 4;
    Trainer t(cfg);
    auto res = t.run();
    return std::make_pair(res.iterations, t.read_params());
  };
  const auto base = train("none", size_t{64} << 20);
  size_t peak = 0;
  for (const auto& s : base.first) peak = std::max(peak, s.peak_allocated);
  for (const std::string policy : {"compress", "compress+swap", "compress+capuchin"}) {
    SCOPED_TRACE(policy);
    const auto r = train(policy, peak * 60 / 100 / 512 * 512);
    uint64_t compressed = 0;
    for (size_t i = 0; i < r.first.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(&r.first[i].loss, &base.first[i].loss, sizeof(float))) << "iteration " << i;
      compressed += r.first[i].counters.compressed_bytes;
    }
    EXPECT_GT(compressed, 0u);
    for (size_t i = 0; i < r.second.size(); ++i)
      EXPECT_EQ(0, std::memcmp(r.second[i].data(), base.second[i].data(), r.second[i].size() * 4)) << "parameter " << i;
  }
}

}  // namespace
