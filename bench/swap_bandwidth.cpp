// Swap bandwidth of the cuda backend against a plain cudaMemcpyAsync of pinned memory.
// For each size (64 KiB to 256 MiB: a copy's fixed cost shows at the small ones), device-to-host,
// host-to-device, and both at once, timed on the host clock
// around `reps` copies and a wait, best of three rounds:
//   plain:   cudaMalloc + cudaHostAlloc buffers, cudaMemcpyAsync on two fresh streams;
//   vtensor: the path a swap takes: HostPool pinned buffer (Backend::host_alloc), the arena,
//            Backend::copy_async on the d2h / h2d streams after a compute-stream event, one
//            event per copy (as MemoryManager::swap_out / prefetch record them), Event::wait.
// Writes CSV to stdout: size_mib,direction,plain_gbps,vtensor_gbps,ratio.
// With MOVES_CSV, also the cost of a compaction's moves (Backend::move_device, on the compute
// stream) per block size and kind of move: disjoint (one memcpy), overlapping by at least
// kMinDirectChunk (chunks of the distance), overlapping by less (through the staging buffer), timed
// around `reps` moves and a wait, best of three, beside the sim's charge (predict_move_ms on
// h100-80g, per call and per byte copied), and batches of small blocks (move_device_batch; per block):
// block_bytes,kind,distance,calls_per_move,us_per_move,gbps,sim_us,ratio.
// With CODECS_CSV, also the lossless codecs on the compress stream (compress_async, then
// decompress_async, each to its event's wait, best of three, per call) beside a plain device copy
// of the same bytes (move_device, disjoint): what a codec costs in copies' worth, the planner
// charging it as about one elementwise pass:
// bytes,codec,density,compress_us,decompress_us,compress_gbps,copy_us,compress_per_copy,decompress_per_copy.
// Usage: vtensor_swap_bandwidth [reps=10] [MOVES_CSV] [CODECS_CSV]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "vtensor/backend/backend.h"
#include "vtensor/backend/cuda/cuda_check.h"
#include "vtensor/backend/sim/cost_model.h"
#include "vtensor/backend/sim/gpu_specs.h"

using namespace vtensor;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best GB/s over three rounds of `run` moving `bytes`.
double best_gbps(size_t bytes, const std::function<void()>& run) {
  run();  // warm
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const double t0 = now_ms();
    run();
    const double ms = now_ms() - t0;
    best = std::max(best, static_cast<double>(bytes) / (ms * 1e6));
  }
  return best;
}

// The device-move table (see the header): moves within the backend's arena.
bool write_moves(Backend& backend, char* arena, size_t arena_bytes, int reps, const char* path) {
  std::FILE* f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "vtensor_swap_bandwidth: cannot write %s\n", path);
    return false;
  }
  const GpuSpec& h100 = find_gpu("h100-80g");
  std::fprintf(f, "block_bytes,kind,distance,calls_per_move,us_per_move,gbps,sim_us,ratio\n");
  struct Case { size_t bytes, distance; const char* kind; };
  std::vector<Case> cases;
  for (size_t kib : {4, 64, 1024, 16384, 131072}) {
    const size_t b = kib << 10;
    cases.push_back({b, b, "disjoint"});
    if (b > Backend::kMoveMinDirectChunk) cases.push_back({b, std::max(b / 4, Backend::kMoveMinDirectChunk), "overlap_direct"});
    if (b > (size_t{256} << 10)) cases.push_back({b, size_t{256} << 10, "overlap_staged"});
  }
  for (const Case& c : cases) {
    if (c.bytes + c.distance > arena_bytes) continue;
    const size_t calls = Backend::move_copies(c.bytes, c.distance).calls;
    const double gbps = best_gbps(c.bytes * static_cast<size_t>(reps), [&] {
      for (int i = 0; i < reps; ++i) {  // down, then back up: the same two places every time
        if (i % 2 == 0) backend.move_device(arena, arena + c.distance, c.bytes);
        else backend.move_device(arena + c.distance, arena, c.bytes);
      }
      backend.record(Stream::kCompute)->wait();
    });
    const double us = static_cast<double>(c.bytes) / (gbps * 1e3);
    const double sim_us = predict_move_ms(h100, c.bytes, c.distance) * 1e3;
    std::fprintf(f, "%zu,%s,%zu,%zu,%.2f,%.2f,%.2f,%.3f\n", c.bytes, c.kind, c.distance, calls, us, gbps, sim_us,
                 us / sim_us);
  }
  // A batch of kMoveBatchSegments small blocks (Backend::move_device_batch: one gather and one
  // scatter through the staging buffer), each down by its size; per block.
  for (size_t kib : {4, 64, 256}) {
    const size_t b = kib << 10, n = Backend::kMoveBatchSegments;
    std::vector<Backend::DeviceMove> down, up;
    for (size_t i = 0; i < n; ++i) {
      down.push_back({arena + 2 * i * b, arena + 2 * i * b + b, b});
      up.push_back({arena + 2 * i * b + b, arena + 2 * i * b, b});
    }
    const size_t calls = 2 * Backend::move_steps(down).size();
    const double gbps = best_gbps(n * b * static_cast<size_t>(reps), [&] {
      for (int i = 0; i < reps; ++i) backend.move_device_batch(i % 2 == 0 ? down : up);
      backend.record(Stream::kCompute)->wait();
    });
    const double us = static_cast<double>(b) / (gbps * 1e3);
    const double sim_us = predict_staged_moves_ms(h100, n * b) * 1e3 / static_cast<double>(n);
    std::fprintf(f, "%zu,batch_of_%zu,%zu,%zu,%.2f,%.2f,%.2f,%.3f\n", b, n, b, calls, us, gbps, sim_us, us / sim_us);
  }
  std::fclose(f);
  return true;
}

// The codec table (see the header): tensors of 16 and 64 MiB in the arena, at two densities.
bool write_codecs(Backend& backend, char* arena, int reps, const char* path) {
  std::FILE* f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "vtensor_swap_bandwidth: cannot write %s\n", path);
    return false;
  }
  std::fprintf(f, "bytes,codec,density,compress_us,decompress_us,compress_gbps,copy_us,compress_per_copy,decompress_per_copy\n");
  for (size_t mib : {16, 64}) {
    const size_t bytes = mib << 20, n = bytes / 4;
    char *src = arena, *packed = arena + (size_t{256} << 20), *back = arena + (size_t{512} << 20);
    TensorInfo t;
    t.id = 0;
    t.name = "codec bench input";
    t.shape = Shape({static_cast<int64_t>(n)});
    const double copy_ms_per = [&] {
      const double gbps = best_gbps(bytes * static_cast<size_t>(reps), [&] {
        for (int i = 0; i < reps; ++i) backend.move_device(back, src, bytes);
        backend.record(Stream::kCompute)->wait();
      });
      return static_cast<double>(bytes) / (gbps * 1e6);
    }();
    for (const double density : {0.5, 0.1}) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = (i * 2654435761u % 1000) < density * 1000 ? 1.0f + static_cast<float>(i % 7) : 0.0f;
      backend.copy_to_device(src, x.data(), bytes);
      for (Codec c : {Codec::kBitmask, Codec::kSign}) {
        const size_t bound = codec_bound(c, n);
        CodecResult r, d;
        auto time_ms = [&](const std::function<void()>& call) {  // best of three rounds of reps calls, per call
          double best = 1e30;
          call(), backend.record(Stream::kCompress)->wait();  // warm
          for (int round = 0; round < 3; ++round) {
            const double t0 = now_ms();
            for (int i = 0; i < reps; ++i) call();
            backend.record(Stream::kCompress)->wait();
            best = std::min(best, (now_ms() - t0) / reps);
          }
          return best;
        };
        backend.stream_wait(Stream::kCompress, backend.record(Stream::kCompute));
        const double comp = time_ms([&] { backend.compress_async(Stream::kCompress, c, t, src, packed, bound, nullptr, 0, &r); });
        const double decomp = time_ms([&] { backend.decompress_async(Stream::kCompress, c, t, packed, r.bytes, back, &d); });
        std::fprintf(f, "%zu,%s,%.2f,%.1f,%.1f,%.1f,%.1f,%.2f,%.2f\n", bytes, to_string(c), density, comp * 1e3, decomp * 1e3,
                     static_cast<double>(bytes) / (comp * 1e6), copy_ms_per * 1e3, comp / copy_ms_per, decomp / copy_ms_per);
        std::fflush(f);
      }
    }
  }
  std::fclose(f);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  if (reps <= 0) {
    std::fprintf(stderr, "usage: vtensor_swap_bandwidth [reps > 0] [MOVES_CSV] [CODECS_CSV]\n");
    return 2;
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "vtensor_swap_bandwidth: no CUDA device visible\n");
    return 1;
  }
  // From 64 KiB (a copy's fixed cost shows: the swaps of a tiny preset's tensors, and many of a
  // paper model's) to 256 MiB (the link's rate).
  const std::vector<size_t> sizes_kib = {64, 256, 1024, 4096, 16384, 65536, 262144};
  const size_t max_bytes = sizes_kib.back() << 10;
  auto backend = make_backend("cuda", {.arena_bytes = 4 * max_bytes});
  char* arena = static_cast<char*>(backend->arena_base());
  void* vt_host_out = backend->host_alloc(max_bytes);
  void* vt_host_in = backend->host_alloc(max_bytes);

  void *dev_a = nullptr, *dev_b = nullptr, *host_a = nullptr, *host_b = nullptr;
  VT_CHECK(cudaMalloc(&dev_a, max_bytes));
  VT_CHECK(cudaMalloc(&dev_b, max_bytes));
  VT_CHECK(cudaHostAlloc(&host_a, max_bytes, cudaHostAllocDefault));
  VT_CHECK(cudaHostAlloc(&host_b, max_bytes, cudaHostAllocDefault));
  cudaStream_t d2h, h2d;
  VT_CHECK(cudaStreamCreateWithFlags(&d2h, cudaStreamNonBlocking));
  VT_CHECK(cudaStreamCreateWithFlags(&h2d, cudaStreamNonBlocking));

  std::printf("size_mib,direction,plain_gbps,vtensor_gbps,ratio\n");
  for (size_t kib : sizes_kib) {
    const size_t bytes = kib << 10;
    for (const char* dir : {"d2h", "h2d", "both"}) {
      const bool out = dir[0] == 'd' || dir[0] == 'b', in = dir[0] == 'h' || dir[0] == 'b';
      const size_t moved = bytes * static_cast<size_t>(reps) * ((out && in) ? 2 : 1);
      const double plain = best_gbps(moved, [&] {
        for (int i = 0; i < reps; ++i) {
          if (out) VT_CHECK(cudaMemcpyAsync(host_a, dev_a, bytes, cudaMemcpyDeviceToHost, d2h));
          if (in) VT_CHECK(cudaMemcpyAsync(dev_b, host_b, bytes, cudaMemcpyHostToDevice, h2d));
        }
        VT_CHECK(cudaStreamSynchronize(d2h));
        VT_CHECK(cudaStreamSynchronize(h2d));
      });
      const double vt = best_gbps(moved, [&] {
        std::vector<Event> events;
        for (int i = 0; i < reps; ++i) {
          if (out) {
            backend->stream_wait(Stream::kD2H, backend->record(Stream::kCompute));
            backend->copy_async(Stream::kD2H, vt_host_out, arena, bytes);
            events.push_back(backend->record(Stream::kD2H));
          }
          if (in) {
            backend->stream_wait(Stream::kH2D, backend->record(Stream::kCompute));
            backend->copy_async(Stream::kH2D, arena + 2 * max_bytes, vt_host_in, bytes);
            events.push_back(backend->record(Stream::kH2D));
          }
        }
        for (auto& e : events) e->wait();
      });
      std::printf("%g,%s,%.2f,%.2f,%.3f\n", static_cast<double>(kib) / 1024, dir, plain, vt, vt / plain);
      std::fflush(stdout);
    }
  }
  if (argc > 2 && !write_moves(*backend, arena, 4 * max_bytes, reps, argv[2])) return 1;
  if (argc > 3 && !write_codecs(*backend, arena, reps, argv[3])) return 1;
  backend->host_free(vt_host_out, max_bytes);
  backend->host_free(vt_host_in, max_bytes);
  VT_CHECK(cudaStreamDestroy(d2h));
  VT_CHECK(cudaStreamDestroy(h2d));
  VT_CHECK(cudaFree(dev_a));
  VT_CHECK(cudaFree(dev_b));
  VT_CHECK(cudaFreeHost(host_a));
  VT_CHECK(cudaFreeHost(host_b));
  return 0;
}
