// The cpu backend's streams (cpu_backend.h): copies on one stream run in order, events order
// work across streams and the host, compression runs on its own stream, and the backend drains
// its streams before it goes. Written to be run under ThreadSanitizer as well
// (scripts/sanitize.sh builds them alone, as vtensor_stream_tests): every handoff between the
// caller and a stream thread goes through an event or synchronize(), so TSan must see no race.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "vtensor/backend/codec.h"
#include "vtensor/backend/cpu/cpu_backend.h"

using namespace vtensor;

namespace {

constexpr size_t kBytes = 1 << 16;  // 64 KiB per buffer
constexpr size_t kFloats = kBytes / 4;

std::vector<float> pattern(float base) {
  std::vector<float> v(kFloats);
  for (size_t i = 0; i < kFloats; ++i) v[i] = base + static_cast<float>(i % 97);
  return v;
}

char* dev(CpuBackend& b, size_t slot) { return static_cast<char*>(b.arena_base()) + slot * kBytes; }

}  // namespace

TEST(CpuStreams, CopiesOnOneStreamRunInTheOrderSubmitted) {
  CpuBackend b({.arena_bytes = 4 * kBytes});
  std::vector<std::vector<float>> src;
  for (int i = 0; i < 20; ++i) src.push_back(pattern(static_cast<float>(i)));
  for (const auto& s : src) b.copy_async(Stream::kH2D, dev(b, 0), s.data(), kBytes);  // each overwrites the last
  b.record(Stream::kH2D)->wait();
  EXPECT_EQ(std::memcmp(dev(b, 0), src.back().data(), kBytes), 0);
}

TEST(CpuStreams, AnEventOrdersAnotherStreamAfterIt) {
  CpuBackend b({.arena_bytes = 4 * kBytes});
  const auto a = pattern(1.f);
  std::vector<float> host(kFloats, 0.f);
  for (int round = 0; round < 50; ++round) {
    std::memset(dev(b, 1), 0, kBytes);
    b.copy_to_device(dev(b, 0), a.data(), kBytes);
    // Device -> host on d2h, then host -> another device block on h2d, which must wait for it.
    b.copy_async(Stream::kD2H, host.data(), dev(b, 0), kBytes);
    Event out = b.record(Stream::kD2H);
    b.stream_wait(Stream::kH2D, out);
    b.copy_async(Stream::kH2D, dev(b, 1), host.data(), kBytes);
    Event in = b.record(Stream::kH2D);
    b.stream_wait(Stream::kCompute, in);  // the host blocks until the copy back is done
    ASSERT_EQ(std::memcmp(dev(b, 1), a.data(), kBytes), 0) << "round " << round;
  }
}

TEST(CpuStreams, QueryTurnsTrueOnceTheWorkBeforeTheEventIsDone) {
  CpuBackend b({.arena_bytes = 4 * kBytes});
  const auto a = pattern(3.f);
  std::vector<float> host(kFloats, 0.f);
  b.copy_async(Stream::kD2H, dev(b, 2), a.data(), kBytes);  // (a host source: any bytes will do)
  b.copy_async(Stream::kD2H, host.data(), dev(b, 2), kBytes);
  Event e = b.record(Stream::kD2H);
  while (!e->query()) {
  }
  EXPECT_EQ(std::memcmp(host.data(), a.data(), kBytes), 0);
  // An event on the compute stream is done at once: compute runs on the caller's thread.
  EXPECT_TRUE(b.record(Stream::kCompute)->query());
}

TEST(CpuStreams, CompressionOnItsStreamRoundTrips) {
  CpuBackend b({.arena_bytes = 8 * kBytes});
  TensorInfo t{.id = 0, .name = "x", .shape = Shape{static_cast<int64_t>(kFloats)}};
  std::vector<float> x(kFloats, 0.f);
  for (size_t i = 0; i < kFloats; i += 3) x[i] = static_cast<float>(i) + 1.f;  // two thirds zeros
  b.copy_to_device(dev(b, 0), x.data(), kBytes);
  const size_t ws_bytes = codec_chunk_workspace(1024);
  CodecResult packed, unpacked;
  for (int round = 0; round < 20; ++round) {
    std::memset(dev(b, 4), 0, kBytes);
    b.compress_async(Stream::kCompress, Codec::kBitmask, t, dev(b, 0), dev(b, 1), 2 * kBytes, dev(b, 3), ws_bytes, &packed);
    b.decompress_async(Stream::kCompress, Codec::kBitmask, t, dev(b, 1), 0, dev(b, 4), &unpacked);
    b.stream_wait(Stream::kCompute, b.record(Stream::kCompress));
    ASSERT_EQ(packed.bytes, codec_bytes(Codec::kBitmask, kFloats, (kFloats + 2) / 3));
    ASSERT_EQ(std::memcmp(dev(b, 4), x.data(), kBytes), 0) << "round " << round;
  }
}

TEST(CpuStreams, SynchronizeDrainsEveryStream) {
  CpuBackend b({.arena_bytes = 4 * kBytes});
  const auto a = pattern(5.f), c = pattern(7.f);
  std::vector<float> host(kFloats, 0.f);
  for (int round = 0; round < 20; ++round) {
    b.copy_async(Stream::kH2D, dev(b, 0), a.data(), kBytes);
    b.copy_async(Stream::kH2D, dev(b, 1), c.data(), kBytes);
    b.copy_async(Stream::kD2H, host.data(), dev(b, 2), kBytes);
    b.synchronize();
    ASSERT_EQ(std::memcmp(dev(b, 0), a.data(), kBytes), 0);
    ASSERT_EQ(std::memcmp(dev(b, 1), c.data(), kBytes), 0);
    ASSERT_EQ(std::memcmp(host.data(), dev(b, 2), kBytes), 0);
  }
}

TEST(CpuStreams, TheBackendDrainsItsStreamsBeforeItGoes) {
  const auto a = pattern(9.f);
  std::vector<float> host(kFloats, 0.f);
  {
    CpuBackend b({.arena_bytes = 2 * kBytes});
    b.copy_to_device(dev(b, 0), a.data(), kBytes);
    for (int i = 0; i < 10; ++i) b.copy_async(Stream::kD2H, host.data(), dev(b, 0), kBytes);
  }  // no wait: the destructor must finish the copies before it unmaps the arena
  EXPECT_EQ(std::memcmp(host.data(), a.data(), kBytes), 0);
}

// A batch of moves on the cpu is the moves in order: a slide of small blocks, each down into the
// space the one before it left, keeps every block's bytes (what the cuda backend's gather and
// scatter must give too).
TEST(CpuMoves, ABatchIsTheMovesInOrder) {
  CpuBackend b({.arena_bytes = 16 * kBytes});
  std::vector<float> want;
  std::vector<Backend::DeviceMove> moves;
  for (size_t k = 0; k < 6; ++k) {  // block k at slot 2k + 1 slides to slot k
    const auto p = pattern(static_cast<float>(100 * k));
    b.copy_to_device(dev(b, 2 * k + 1), p.data(), kBytes);
    moves.push_back({dev(b, k), dev(b, 2 * k + 1), kBytes});
    want.insert(want.end(), p.begin(), p.end());
  }
  b.move_device_batch(moves);
  std::vector<float> got(6 * kFloats);
  b.copy_to_host(got.data(), dev(b, 0), 6 * kBytes);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 6 * kBytes));
}

