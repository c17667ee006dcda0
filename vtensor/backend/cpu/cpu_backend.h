// The cpu backend: device memory is an arena of exactly the budget, mapped apart from the
// host heap; compute runs on the calling thread; the h2d, d2h and compression streams are
// worker threads that really copy (or compress) asynchronously, ordered per stream, with events
// between them.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "vtensor/backend/backend.h"

namespace vtensor {

namespace cpu {
// A persistent tensor's initial values (by its Init and id, deterministic in seed), into host
// memory; every backend with data starts from these bits.
void init_tensor_values(const TensorInfo& t, float* p, uint64_t seed);
}  // namespace cpu

class CpuEvent final : public EventImpl {
 public:
  bool query() override;
  void wait() override;
  void signal();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

// One copy stream: a thread that runs its tasks in order.
class CpuStreamWorker {
 public:
  CpuStreamWorker();
  ~CpuStreamWorker();
  void submit(std::function<void()> task);
  void drain();  // blocks until every submitted task has run

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false, busy_ = false;
  std::thread thread_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& opts);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  std::string device_description() const override;
  void* arena_base() override { return arena_; }
  size_t arena_bytes() const override { return arena_bytes_; }
  void* host_alloc(size_t bytes) override;
  void host_free(void* p, size_t bytes) override;
  void copy_async(Stream s, void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* dev_src, size_t bytes) override;
  void copy_to_device(void* dev_dst, const void* host_src, size_t bytes) override;
  void move_device(void* dst, const void* src, size_t bytes) override;
  // As the cuda backend issues it (Backend::move_steps): each staged chunk's blocks gathered into
  // a staging buffer, then scattered, so a batch that breaks its contract fails here too.
  void move_device_batch(const std::vector<DeviceMove>& moves) override;
  Event record(Stream s) override;
  void stream_wait(Stream s, const Event& e) override;
  void synchronize() override;
  void launch(const Graph& g, const Op& op, const KernelArgs& args) override;
  void init_tensor(const TensorInfo& t, void* dev, uint64_t seed) override;
  double now_ms() override;
  // Unified memory (cpu_managed.cpp): the managed range's pages are remapped with mmap(MAP_FIXED)
  // onto a device memfd of frames x page bytes or onto the page's place in a host memfd.
  void* um_reserve(size_t range_bytes, size_t page_bytes, size_t frames) override;
  void um_migrate_in(Stream s, size_t page, size_t frame, bool copy) override;
  void um_migrate_out(Stream s, size_t page, size_t frame, bool copy) override;
  void um_read_host(void* dst, size_t page, size_t offset, size_t bytes) override;
  std::optional<size_t> count_nonzeros(const TensorInfo& t, const void* dev) override;
  void compress_async(Stream s, Codec c, const TensorInfo& t, const void* src, void* dst, size_t capacity,
                      void* workspace, size_t workspace_bytes, CodecResult* result) override;
  void decompress_async(Stream s, Codec c, const TensorInfo& t, const void* src, size_t src_bytes, void* dst, CodecResult* result) override;

 private:
  struct Managed {
    char* base = nullptr;       // the range kernels address; a page is PROT_NONE unless on a device frame
    char* device = nullptr;     // the device memfd, all frames (copies go through here)
    char* host = nullptr;       // the host memfd, one frame per page
    size_t range = 0, page = 0, frames = 0;
    int device_fd = -1, host_fd = -1;
  };
  void um_release();
  void run_on(Stream s, std::function<void()> task);
  Managed um_;
  CpuStreamWorker& worker(Stream s);
  void* arena_ = nullptr;
  std::vector<char> staging_;  // move_device_batch's (kMoveStagingBytes, once used)
  size_t arena_bytes_ = 0;
  CpuStreamWorker h2d_, d2h_, compress_;
};

}  // namespace vtensor
