#include "vtensor/backend/sim/sim_backend.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "vtensor/backend/sim/um_model.h"
#include "vtensor/core/errors.h"

namespace vtensor {
namespace {

// Fake, never dereferenced: far from anything the process maps, aligned like a device arena.
constexpr uintptr_t kFakeArenaBase = uintptr_t{0x7e} << 40;
constexpr uintptr_t kFakeHostBase = uintptr_t{0x3e} << 40;
constexpr uintptr_t kHostAlign = 256;

}  // namespace

bool SimEvent::query() { return time_ms_ <= backend_.host_now(); }
void SimEvent::wait() {
  backend_.host_wait_until(time_ms_);
  backend_.stream_wait(Stream::kCompute, std::make_shared<SimEvent>(*this));
}

SimBackend::SimBackend(const BackendOptions& opts) : next_host_(kFakeHostBase) {
  if (opts.gpu.empty()) {
    std::string names;
    for (const auto& n : gpu_names()) names += (names.empty() ? "" : ", ") + n;
    throw std::invalid_argument("--gpu: the sim backend needs a GPU to model; accepted: " + names);
  }
  gpu_ = find_gpu(opts.gpu);
  host_ = gpu_.host;
  host_clock_.modelled = host_.on;
  arena_bytes_ = opts.arena_bytes ? opts.arena_bytes : gpu_.memory_bytes;
  op_ms_ = opts.op_ms;
  link_ms_per_byte_ = opts.link_ms_per_byte;
  codec_latency_ms_ = opts.codec_latency_ms, codec_ms_per_byte_ = opts.codec_ms_per_byte;
  copy_queued_ms_ = opts.copy_queued_ms;
  op_workspace_ = opts.op_workspace;
  op_workspace_lean_ = opts.op_workspace_lean;
}

size_t SimBackend::workspace_bytes(const Graph& g, const Op& op, ConvAlgo algo) {
  const auto i = static_cast<size_t>(op.index);
  const auto& given = algo == ConvAlgo::kLean ? op_workspace_lean_ : op_workspace_;
  return op.index >= 0 && i < given.size() ? given[i] : Backend::workspace_bytes(g, op, algo);
}

std::string SimBackend::device_description() const {
  return "sim of " + gpu_.description + " (" + format_bytes(gpu_.memory_bytes) + ", arena " +
         format_bytes(arena_bytes_) + ")";
}

void* SimBackend::arena_base() { return reinterpret_cast<void*>(kFakeArenaBase); }

void* SimBackend::host_alloc(size_t bytes) {
  // Distinct fake addresses, so the host pool can tell buffers apart; no memory behind them.
  const uintptr_t p = next_host_;
  next_host_ += (std::max<size_t>(bytes, 1) + kHostAlign - 1) / kHostAlign * kHostAlign;
  return reinterpret_cast<void*>(p);
}

void SimBackend::copy_async(Stream s, void* dst, const void* src, size_t bytes) {
  if (s == Stream::kCompute) {
    move_device(dst, src, bytes);
    return;
  }
  double d = (link_ms_per_byte_ > 0 ? static_cast<double>(bytes) * link_ms_per_byte_
                                    : predict_copy_ms(gpu_, bytes, s == Stream::kH2D)) +
             copy_queued_ms_;
  // One copy at a time per direction, and never before the compute point it was issued at (nor,
  // with a host model, before the host issued it; queued behind another, it costs the model's more).
  double start = std::max(clk(s), clk(Stream::kCompute));
  if (host_.on) {
    host_spend(host_.copy_us, host_clock_.copy_ms);
    ++host_clock_.copies;
    if (clk(s) > std::max(clk(Stream::kCompute), host_clock_.now_ms)) d += host_.queued_copy_us * 1e-3;
    start = std::max(start, host_clock_.now_ms);
  }
  clk(s) = start + d;
  (s == Stream::kH2D ? counters_.h2d_busy_ms : counters_.d2h_busy_ms) += d;
  ++counters_.copies;
}

void SimBackend::copy_to_host(void*, const void*, size_t) {
  throw std::logic_error("the sim backend holds no tensor values: nothing to copy to the host");
}
void SimBackend::copy_to_device(void*, const void*, size_t) {
  throw std::logic_error("the sim backend holds no tensor values: nothing to copy to the device");
}

void SimBackend::move_device(void* dst, const void* src, size_t bytes) {
  if (!bytes || dst == src) return;  // as the cuda backend: nothing to copy
  if (host_.on) host_spend(host_.move_us, host_clock_.alloc_ms), ++host_clock_.moved_blocks, compute_after_host();
  move_device_at(dst, src, bytes);
}

void SimBackend::move_device_at(void* dst, const void* src, size_t bytes) {
  const auto d_addr = reinterpret_cast<uintptr_t>(dst), s_addr = reinterpret_cast<uintptr_t>(src);
  if (!bytes || d_addr == s_addr) return;
  const double d = predict_move_ms(gpu_, bytes, d_addr > s_addr ? d_addr - s_addr : s_addr - d_addr);
  clk(Stream::kCompute) += d;
  counters_.compute_busy_ms += d;
}

void SimBackend::move_device_batch(const std::vector<DeviceMove>& moves) {
  if (host_.on && !moves.empty()) {
    host_spend(host_.move_us * static_cast<double>(moves.size()), host_clock_.alloc_ms);
    host_clock_.moved_blocks += moves.size();
    compute_after_host();
  }
  for (const MoveStep& step : move_steps(moves)) {
    if (!step.staged) {
      const DeviceMove& m = moves[step.first];
      move_device_at(m.dst, m.src, m.bytes);
      continue;
    }
    size_t bytes = 0;
    for (size_t i = step.first; i < step.first + step.count; ++i) bytes += moves[i].bytes;
    const double d = predict_staged_moves_ms(gpu_, bytes);
    clk(Stream::kCompute) += d;
    counters_.compute_busy_ms += d;
  }
}

Event SimBackend::record(Stream s) {
  if (!host_.on) return std::make_shared<SimEvent>(*this, s, clock(s));
  host_spend(host_.event_us, host_clock_.copy_ms);
  ++host_clock_.events;
  return std::make_shared<SimEvent>(*this, s, std::max(clock(s), host_clock_.now_ms));  // not before it was recorded
}

void SimBackend::stream_wait(Stream s, const Event& e) {
  if (!e) return;
  auto* se = dynamic_cast<SimEvent*>(e.get());
  if (!se) throw std::logic_error("sim backend: an event from another backend");
  // Everything later on `s` starts after the event; on compute that is a stall from now on.
  clk(s) = std::max(clk(s), se->time_ms());
}

void SimBackend::synchronize() {
  const double t = std::max(*std::max_element(clock_.begin(), clock_.end()), host_clock_.now_ms);
  for (auto& c : clock_) c = t;
  host_clock_.now_ms = host_.on ? t : 0;  // the host waited for it all (the drain, not a mid-iteration wait)
}

void SimBackend::host_spend(double us, double& bucket) {
  host_clock_.now_ms += us * 1e-3;
  bucket += us * 1e-3;
}

void SimBackend::compute_after_host() {
  double& c = clk(Stream::kCompute);
  if (host_clock_.now_ms > c) host_clock_.device_idle_ms += host_clock_.now_ms - c, c = host_clock_.now_ms;
}

void SimBackend::host_wait_until(double t_ms) {
  if (!host_.on || t_ms <= host_clock_.now_ms) return;
  host_clock_.wait_ms += t_ms - host_clock_.now_ms;
  host_clock_.now_ms = t_ms;
}

void SimBackend::host_work(HostWork w) {
  if (!host_.on) return;
  if (w == HostWork::kAllocation) {
    host_spend(host_.alloc_us, host_clock_.alloc_ms);
    ++host_clock_.allocations;
  } else {
    host_spend(host_.action_us, host_clock_.action_ms);
    ++host_clock_.actions;
  }
}

void SimBackend::launch(const Graph& g, const Op& op, const KernelArgs& args) {
  const auto i = static_cast<size_t>(op.index);
  const double d = op.index >= 0 && i < op_ms_.size() ? op_ms_[i] : predict_op(gpu_, g, op, args.conv_algo).total_ms;
  if (host_.on) {
    host_spend(host_.op_us.at(static_cast<size_t>(op.kind)), host_clock_.launch_ms);
    ++host_clock_.launches;
    compute_after_host();
  }
  clk(Stream::kCompute) += d;
  counters_.compute_busy_ms += d;
  ++counters_.kernels;
  // The loss is read back as it is made (the executor's read on a backend with data).
  if (host_.loss_sync && !op.outputs.empty() && op.outputs[0] == g.loss) host_wait_until(clk(Stream::kCompute));
}

// Fake like the arena: a managed range nobody dereferences, far from the arena and the host pool.
constexpr uintptr_t kFakeManagedBase = uintptr_t{0x5e} << 40;

void* SimBackend::um_reserve(size_t, size_t page_bytes, size_t) {
  um_page_ = page_bytes;
  return reinterpret_cast<void*>(kFakeManagedBase);
}

void SimBackend::um_copy(Stream s, bool to_device) {
  const double gbps = to_device ? gpu_.h2d_gbps : gpu_.d2h_gbps;
  if (s == Stream::kCompute) {  // a demand fault: the kernel waits, at the driver's migration rate
    const double d = static_cast<double>(um_page_) / (gbps * 1e9 * kUmDemandLinkEfficiency) * 1e3;
    clk(Stream::kCompute) += d;
    (to_device ? counters_.h2d_busy_ms : counters_.d2h_busy_ms) += d;
    ++counters_.copies;
    return;
  }
  copy_async(s, nullptr, nullptr, um_page_);  // prefetch / pre-eviction: an explicit async copy
}

void SimBackend::um_migrate_in(Stream s, size_t, size_t, bool copy) {
  if (copy) um_copy(s, true);
}

void SimBackend::um_migrate_out(Stream s, size_t, size_t, bool copy) {
  if (copy) um_copy(s, false);
}

void SimBackend::um_fault_batch(size_t pages) {
  const double d = (kUmFaultBatchUs + kUmFaultPerPageUs * static_cast<double>(pages)) * 1e-3;
  clk(Stream::kCompute) += d;
}

std::optional<size_t> SimBackend::count_nonzeros(const TensorInfo& t, const void*) {
  if (!densities_) return std::nullopt;
  const auto it = densities_->tensors.find(density_key(t));
  if (it == densities_->tensors.end() || it->second.first == 0) return std::nullopt;
  // The recorded density, applied to this run's shape (the recording may be at another batch).
  const double density = static_cast<double>(it->second.second) / static_cast<double>(it->second.first);
  const auto n = static_cast<double>(t.shape.numel());
  return static_cast<size_t>(std::min(n, std::ceil(density * n)));
}

void SimBackend::run_codec(Stream s, double ms) {
  // One kernel at a time on its stream, never before the compute point it was issued at.
  const double start = s == Stream::kCompute ? clk(s) : std::max(clk(s), clk(Stream::kCompute));
  clk(s) = start + ms;
  (s == Stream::kCompute ? counters_.compute_busy_ms : counters_.compress_busy_ms) += ms;
  ++counters_.kernels;
}

double SimBackend::codec_ms(size_t read, size_t written) const {
  if (codec_ms_per_byte_ > 0) return codec_latency_ms_ + static_cast<double>(read + written) * codec_ms_per_byte_;
  return predict_codec_ms(gpu_, read, written);
}

void SimBackend::compress_async(Stream s, Codec c, const TensorInfo& t, const void*, void*, size_t capacity, void*,
                                size_t, CodecResult* result) {
  const auto n = static_cast<size_t>(t.shape.numel());
  const auto nnz = count_nonzeros(t, nullptr);
  if (c == Codec::kBitmask && !nnz)
    throw std::logic_error("sim: no recorded density for '" + t.name + "', which a policy compresses");
  result->bytes = codec_bytes(c, n, nnz.value_or(0));
  result->ms = codec_ms(t.bytes(), std::min<size_t>(result->bytes, capacity));
  run_codec(s, result->ms);
}

void SimBackend::decompress_async(Stream s, Codec, const TensorInfo& t, const void*, size_t src_bytes, void*, CodecResult* result) {
  result->ms = codec_ms(src_bytes, t.bytes());
  run_codec(s, result->ms);
}

std::unique_ptr<Backend> make_sim_backend(const BackendOptions& opts) { return std::make_unique<SimBackend>(opts); }

}  // namespace vtensor
