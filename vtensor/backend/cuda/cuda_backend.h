// The cuda backend. Device memory is one arena from a single cudaMalloc of exactly the budget
// (or, with no budget, the free memory less kArenaMargin), sub-allocated by the same allocators
// as on the cpu. Non-blocking streams (compute, h2d, d2h, compress) ordered with CUDA events, so
// swaps overlap compute. Pinned host buffers (cudaHostAlloc) are cached and reused by the
// HostPool. A fourth stream runs the compression codecs (FreeLunch). GEMMs on cuBLAS, convolution and batch norm on cuDNN (cudnn_ops.h), the rest on
// our own kernels (kernels.h). Outside the arena, allocated once at start: cuBLAS's workspace
// (kCublasWorkspace, set explicitly so cuBLAS never allocates behind our back) and, on first
// need, a staging buffer for overlapping moves in compaction.
// Waits: stream_wait(kCompute, e) blocks the host until e completes (as on the cpu). The compute
// stream's wait for a swap copy (compute_wait) is the device's by default: the host goes on
// launching, and the stall is the compute stream's measured wait; VTENSOR_CUDA_DEVICE_WAITS=0
// makes it a host wait. A host buffer is reused only behind an event recorded after such a wait.
// Timing: now_ms is the host's steady clock (VTENSOR_CUDA_SYNC_TIMING=1 synchronizes the compute
// stream at each reading); a measured iteration's per-op times are device times from CUPTI
// (begin_op_timing, op_timer.h), where CUPTI can trace, else host launch times.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "vtensor/backend/backend.h"
#include "vtensor/backend/cuda/cudnn_ops.h"
#include "vtensor/backend/cuda/op_timer.h"

namespace vtensor {

namespace cuda {
// CUDA events for reuse: an event created and destroyed per record costs the host two calls per
// event, and a swap records two or three (ResNet-50 swaps ~360 tensors an iteration). Taken
// events are recorded again by their next holder; a stream wait already enqueued on an event is
// on the record it saw, so reuse is safe. Held by the backend and by every event it handed out,
// so an event that outlives the backend still has its pool.
// VTENSOR_CUDA_EVENT_POOL=0 creates and destroys one per use instead (to measure what the pool saves).
class EventPool {
 public:
  explicit EventPool(unsigned flags);
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  cudaEvent_t take();
  void give(cudaEvent_t e);
  size_t created() const { return created_; }

 private:
  unsigned flags_;
  bool reuse_ = true;
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
  size_t created_ = 0;
};
}  // namespace cuda

class CudaBackend final : public Backend {
 public:
  static constexpr size_t kArenaMargin = size_t{1} << 30;      // left free when no budget is given
  static constexpr size_t kCublasWorkspace = size_t{32} << 20;  // cuBLAS's recommendation for Hopper

  explicit CudaBackend(const BackendOptions& opts);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  std::string device_description() const override;
  void* arena_base() override { return arena_; }
  size_t arena_bytes() const override { return arena_bytes_; }
  void* host_alloc(size_t bytes) override;
  void host_free(void* p, size_t bytes) override;
  void copy_async(Stream s, void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* dev_src, size_t bytes) override;
  void copy_to_device(void* dev_dst, const void* host_src, size_t bytes) override;
  void move_device(void* dst, const void* src, size_t bytes) override;
  void move_device_batch(const std::vector<DeviceMove>& moves) override;
  Event record(Stream s) override;
  void stream_wait(Stream s, const Event& e) override;
  void compute_wait(const Event& e) override;
  bool waits_on_device() const override { return device_waits_; }
  double take_device_wait_ms() override;
  void synchronize() override;
  void launch(const Graph& g, const Op& op, const KernelArgs& args) override;
  void init_tensor(const TensorInfo& t, void* dev, uint64_t seed) override;
  double now_ms() override;
  bool begin_op_timing() override;
  std::vector<double> end_op_timing(size_t num_ops) override;
  size_t workspace_bytes(const Graph& g, const Op& op, ConvAlgo algo) override;
  // Unified memory (cuda_managed.cpp): cudaMallocManaged range, moves by cudaMemPrefetchAsync,
  // invalidated pages discarded; the arena is given back first so the frames fit.
  void* um_reserve(size_t range_bytes, size_t page_bytes, size_t frames) override;
  void um_migrate_in(Stream s, size_t page, size_t frame, bool copy) override;
  void um_migrate_out(Stream s, size_t page, size_t frame, bool copy) override;
  void um_read_host(void* dst, size_t page, size_t offset, size_t bytes) override;
  bool um_keeps_host_copy() const override { return false; }
  std::optional<size_t> count_nonzeros(const TensorInfo& t, const void* dev) override;
  void compress_async(Stream s, Codec c, const TensorInfo& t, const void* src, void* dst, size_t capacity,
                      void* workspace, size_t workspace_bytes, CodecResult* result) override;
  void decompress_async(Stream s, Codec c, const TensorInfo& t, const void* src, size_t src_bytes, void* dst, CodecResult* result) override;
  static constexpr size_t kCodecSlots = 1024;  // compressed sizes in flight (device and pinned rings)

  cudaStream_t stream(Stream s) const { return streams_[static_cast<int>(s)]; }
  bool deterministic() const { return deterministic_; }
  size_t events_created() const { return events_->created() + timed_events_->created(); }  // by the pools

 private:
  void release() noexcept;
  // launch's op families (cuda_launch.cpp); ws_bytes is the workspace's size (0 without one).
  void launch_data(const Graph& g, const Op& op, const KernelArgs& a);
  void launch_conv(const Graph& g, const Op& op, const KernelArgs& a, size_t ws_bytes);
  void launch_norm(const Graph& g, const Op& op, const KernelArgs& a, size_t ws_bytes);
  void launch_pool(const Graph& g, const Op& op, const KernelArgs& a);
  void launch_linear(const Graph& g, const Op& op, const KernelArgs& a);
  void launch_matmul(const Graph& g, const Op& op, const KernelArgs& a);
  void launch_elementwise(const Graph& g, const Op& op, const KernelArgs& a);
  void launch_layout(const Graph& g, const Op& op, const KernelArgs& a);
  void launch_softmax(const Graph& g, const Op& op, const KernelArgs& a, size_t ws_bytes);
  void launch_embedding(const Graph& g, const Op& op, const KernelArgs& a);
  void launch_optimizer(const Graph& g, const Op& op, const KernelArgs& a);
  int device_ = 0;
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  cudaStream_t streams_[kNumStreams] = {};
  cublasHandle_t cublas_ = nullptr;
  void* cublas_ws_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::unique_ptr<cuda::ConvPlans> conv_;
  cuda::OpTimer op_timer_;
  void* staging_ = nullptr;
  unsigned long long* codec_dev_ = nullptr;   // kCodecSlots device counters, allocated on first use
  unsigned long long* codec_host_ = nullptr;  // kCodecSlots pinned slots
  size_t codec_next_ = 0;
  // The bitmask codec's tile counts (cuda::bitmask_scratch_bytes), one buffer per stream so that
  // codecs on two streams never share one; outside the arena (8 bytes per 32 Ki elements).
  void* codec_scratch(Stream s, size_t bytes);
  void* codec_scratch_[kNumStreams] = {};
  size_t codec_scratch_bytes_[kNumStreams] = {};
  bool deterministic_ = false, sync_timing_ = false, device_waits_ = false;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> waits_;  // timing events around each device wait
  std::shared_ptr<cuda::EventPool> events_ = std::make_shared<cuda::EventPool>(cudaEventDisableTiming);
  std::shared_ptr<cuda::EventPool> timed_events_ = std::make_shared<cuda::EventPool>(cudaEventDefault);
  void* managed_ = nullptr;
  size_t um_range_ = 0, um_page_ = 0;
};

}  // namespace vtensor
