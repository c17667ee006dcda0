// The sim backend: no bytes move and no kernel runs. A virtual clock per stream advances by
// the cost model (cost_model.h) of a named GPU: ops on the compute stream, copies on the h2d
// and d2h streams (one at a time per direction, concurrent with compute), compression and
// decompression on the compression stream at the cost of reading and writing their bytes at
// HBM bandwidth (predict_codec_ms), sized by the densities a run with data recorded. Events are
// (stream, time) pairs; a host wait on an event that is not yet reached advances the compute
// clock to it, which is exactly a stall on a GPU. Memory figures are those of any backend: the
// allocation sequence depends only on the op sequence and the policy.
// Where the GPU has a host model (HostModel, gpu_specs.h) a host clock runs too: every launch,
// copy, event, allocation, moved block and policy action advances it by the model's cost, a
// kernel or a move starts no earlier than the host issued it (the compute stream idles for a
// late host), a copy queued behind another adds the model's per-copy cost, events complete no
// earlier than they were recorded, queries and host waits read the host's clock, and the host
// waits for the device at the loss (read back) and at synchronize. Without one, as before.
// Nothing holds values: arena_base() is a fake address that nobody may dereference,
// host_alloc() hands out fake addresses, has_data() is false.
#pragma once
#include <array>
#include <cstdint>

#include "vtensor/backend/backend.h"
#include "vtensor/backend/sim/cost_model.h"
#include "vtensor/backend/sim/gpu_specs.h"

namespace vtensor {

class SimBackend;

class SimEvent final : public EventImpl {
 public:
  SimEvent(SimBackend& b, Stream s, double t) : backend_(b), stream_(s), time_ms_(t) {}
  bool query() override;
  void wait() override;
  double time_ms() const { return time_ms_; }
  Stream stream() const { return stream_; }

 private:
  SimBackend& backend_;
  Stream stream_;
  double time_ms_;
};

struct SimCounters {
  uint64_t kernels = 0, copies = 0;
  double compute_busy_ms = 0, h2d_busy_ms = 0, d2h_busy_ms = 0, compress_busy_ms = 0;
};

class SimBackend final : public Backend {
 public:
  explicit SimBackend(const BackendOptions& opts);

  std::string name() const override { return "sim"; }
  std::string device_description() const override;
  bool has_data() const override { return false; }
  std::string modelled_gpu() const override { return gpu_.name; }
  const std::vector<double>* modelled_op_ms() const override { return op_ms_.empty() ? nullptr : &op_ms_; }
  void* arena_base() override;
  size_t arena_bytes() const override { return arena_bytes_; }
  void* host_alloc(size_t bytes) override;
  void host_free(void* p, size_t bytes) override {}
  void copy_async(Stream s, void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* dev_src, size_t bytes) override;
  void copy_to_device(void* dev_dst, const void* host_src, size_t bytes) override;
  void move_device(void* dst, const void* src, size_t bytes) override;
  void move_device_batch(const std::vector<DeviceMove>& moves) override;
  Event record(Stream s) override;
  void stream_wait(Stream s, const Event& e) override;
  void synchronize() override;
  void launch(const Graph& g, const Op& op, const KernelArgs& args) override;
  size_t workspace_bytes(const Graph& g, const Op& op, ConvAlgo algo) override;
  void init_tensor(const TensorInfo& t, void* dev, uint64_t seed) override {}
  double now_ms() override { return clock(Stream::kCompute); }
  void host_work(HostWork w) override;
  HostClock host_clock() const override { return host_clock_; }
  // The host's now where it is modelled, else the compute stream's (what a query compares with).
  double host_now() const { return host_.on ? host_clock_.now_ms : clock(Stream::kCompute); }
  void host_wait_until(double t_ms);
  // Unified memory: the fault model of um_model.h; no bytes, so nothing is mapped.
  void* um_reserve(size_t range_bytes, size_t page_bytes, size_t frames) override;
  void um_migrate_in(Stream s, size_t page, size_t frame, bool copy) override;
  void um_migrate_out(Stream s, size_t page, size_t frame, bool copy) override;
  void um_fault_batch(size_t pages) override;
  std::optional<size_t> count_nonzeros(const TensorInfo& t, const void* dev) override;
  void set_densities(std::shared_ptr<const DensityTable> d) override { densities_ = std::move(d); }
  std::shared_ptr<const DensityTable> densities() const override { return densities_; }
  void compress_async(Stream s, Codec c, const TensorInfo& t, const void* src, void* dst, size_t capacity,
                      void* workspace, size_t workspace_bytes, CodecResult* result) override;
  void decompress_async(Stream s, Codec c, const TensorInfo& t, const void* src, size_t src_bytes, void* dst, CodecResult* result) override;

  const GpuSpec& gpu() const { return gpu_; }
  double clock(Stream s) const { return clock_[static_cast<size_t>(s)]; }
  const SimCounters& counters() const { return counters_; }

 private:
  double& clk(Stream s) { return clock_[static_cast<size_t>(s)]; }
  void run_codec(Stream s, double ms);
  void move_device_at(void* dst, const void* src, size_t bytes);  // the device's part of move_device
  void host_spend(double us, double& bucket);  // the modelled host works `us`
  void compute_after_host();  // a kernel or move issued now starts no earlier than the host's now
  HostModel host_;
  HostClock host_clock_;
  std::shared_ptr<const DensityTable> densities_;
  GpuSpec gpu_;
  size_t arena_bytes_;
  std::vector<double> op_ms_;     // BackendOptions::op_ms
  std::vector<size_t> op_workspace_, op_workspace_lean_;  // BackendOptions::op_workspace(_lean)
  double link_ms_per_byte_ = 0;   // BackendOptions::link_ms_per_byte
  double codec_latency_ms_ = 0, codec_ms_per_byte_ = 0;  // BackendOptions::codec_*
  double copy_queued_ms_ = 0;  // BackendOptions::copy_queued_ms
  double codec_ms(size_t read, size_t written) const;
  std::array<double, kNumStreams> clock_{};
  uintptr_t next_host_;
  size_t um_page_ = 0;
  void um_copy(Stream s, bool to_device);
  SimCounters counters_;
};

std::unique_ptr<Backend> make_sim_backend(const BackendOptions& opts);

}  // namespace vtensor
