#include "vtensor/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "vtensor/backend/cpu/cpu_backend.h"
#include "vtensor/backend/cuda/cuda_check.h"
#include "vtensor/backend/cuda/kernels.h"
#include "vtensor/core/errors.h"

namespace vtensor {

namespace {

class CudaEvent final : public EventImpl {
 public:
  CudaEvent(std::shared_ptr<cuda::EventPool> pool, cudaStream_t s) : pool_(std::move(pool)), e_(pool_->take()) {
    try {
      VT_CHECK(cudaEventRecord(e_, s));
    } catch (...) {
      pool_->give(e_);
      throw;
    }
  }
  ~CudaEvent() override { pool_->give(e_); }
  bool query() override {
    const cudaError_t r = cudaEventQuery(e_);
    if (r == cudaErrorNotReady) return false;
    VT_CHECK(r);
    return true;
  }
  void wait() override { VT_CHECK(cudaEventSynchronize(e_)); }
  cudaEvent_t get() const { return e_; }

 private:
  std::shared_ptr<cuda::EventPool> pool_;
  cudaEvent_t e_ = nullptr;
};

}  // namespace

namespace cuda {

EventPool::EventPool(unsigned flags) : flags_(flags) {
  const char* v = std::getenv("VTENSOR_CUDA_EVENT_POOL");
  reuse_ = !v || std::strcmp(v, "0") != 0;
}

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) VT_CHECK_NOTHROW(cudaEventDestroy(e));
}

cudaEvent_t EventPool::take() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  VT_CHECK(cudaEventCreateWithFlags(&e, flags_));
  std::lock_guard<std::mutex> lock(mu_);
  ++created_;
  return e;
}

void EventPool::give(cudaEvent_t e) {
  if (!reuse_) {
    VT_CHECK_NOTHROW(cudaEventDestroy(e));
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(e);
}

}  // namespace cuda

namespace {

bool device_visible() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a machine without a driver or device
    return false;
  }
  return n > 0;
}

}  // namespace

CudaBackend::CudaBackend(const BackendOptions& opts) : deterministic_(opts.deterministic) {
  if (!device_visible())
    throw std::invalid_argument("backend 'cuda': no CUDA device is visible (cudaGetDeviceCount found none); "
                                "use --backend cpu or sim");
  const char* sync = std::getenv("VTENSOR_CUDA_SYNC_TIMING");
  sync_timing_ = sync && std::strcmp(sync, "0") != 0;
  // Swap waits on the device unless VTENSOR_CUDA_DEVICE_WAITS=0 (host waits; docs/benchmarks.md).
  const char* dw = std::getenv("VTENSOR_CUDA_DEVICE_WAITS");
  device_waits_ = !dw || std::strcmp(dw, "0") != 0;
  try {
    VT_CHECK(cudaSetDevice(device_));
    size_t free_b = 0, total_b = 0;
    VT_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t reserve = kCublasWorkspace + (size_t{64} << 20);  // cuBLAS workspace, cuDNN and stream internals
    if (opts.arena_bytes == 0) {
      const size_t margin = std::max(kArenaMargin, total_b / 20);
      if (free_b <= margin + reserve) throw std::invalid_argument("backend 'cuda': only " + format_bytes(free_b) + " free on the device");
      arena_bytes_ = (free_b - margin - reserve) / (size_t{2} << 20) * (size_t{2} << 20);
    } else {
      arena_bytes_ = opts.arena_bytes;
      if (arena_bytes_ + reserve > free_b)
        throw std::invalid_argument("--budget " + format_bytes(arena_bytes_) + " does not fit the device: " +
                                    format_bytes(free_b) + " free, " + format_bytes(reserve) +
                                    " kept for cuBLAS / cuDNN; accepted: a budget up to " +
                                    format_bytes(free_b > reserve ? free_b - reserve : 0));
    }
    VT_CHECK(cudaMalloc(&arena_, arena_bytes_));
    for (auto& s : streams_) VT_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    VT_CHECK(cublasCreate(&cublas_));
    VT_CHECK(cublasSetStream(cublas_, stream(Stream::kCompute)));
    VT_CHECK(cudaMalloc(&cublas_ws_, kCublasWorkspace));
    VT_CHECK(cublasSetWorkspace(cublas_, cublas_ws_, kCublasWorkspace));
    VT_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));  // fp32 compute: no TF32
    VT_CHECK(cudnnCreate(&cudnn_));
    VT_CHECK(cudnnSetStream(cudnn_, stream(Stream::kCompute)));
    conv_ = std::make_unique<cuda::ConvPlans>(cudnn_, deterministic_);
  } catch (...) {
    release();
    throw;
  }
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::release() noexcept {
  // Destructors do not throw: failures are reported on stderr.
  for (auto s : streams_)
    if (s) VT_CHECK_NOTHROW(cudaStreamSynchronize(s));
  conv_.reset();
  for (auto [before, after] : waits_) {
    timed_events_->give(before);
    timed_events_->give(after);
  }
  waits_.clear();
  if (cudnn_) VT_CHECK_NOTHROW(cudnnDestroy(cudnn_));
  if (cublas_) VT_CHECK_NOTHROW(cublasDestroy(cublas_));
  for (auto& s : streams_) {
    if (s) VT_CHECK_NOTHROW(cudaStreamDestroy(s));
    s = nullptr;
  }
  if (cublas_ws_) VT_CHECK_NOTHROW(cudaFree(cublas_ws_));
  if (staging_) VT_CHECK_NOTHROW(cudaFree(staging_));
  if (codec_dev_) VT_CHECK_NOTHROW(cudaFree(codec_dev_));
  if (codec_host_) VT_CHECK_NOTHROW(cudaFreeHost(codec_host_));
  codec_dev_ = codec_host_ = nullptr;
  for (int i = 0; i < kNumStreams; ++i) {
    if (codec_scratch_[i]) VT_CHECK_NOTHROW(cudaFree(codec_scratch_[i]));
    codec_scratch_[i] = nullptr;
    codec_scratch_bytes_[i] = 0;
  }
  if (arena_) VT_CHECK_NOTHROW(cudaFree(arena_));
  if (managed_) VT_CHECK_NOTHROW(cudaFree(managed_));
  managed_ = nullptr;
  cudnn_ = nullptr;
  cublas_ = nullptr;
  cublas_ws_ = staging_ = arena_ = nullptr;
}

std::string CudaBackend::device_description() const {
  cudaDeviceProp p{};
  VT_CHECK(cudaGetDeviceProperties(&p, device_));
  return std::string("cuda ") + p.name + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         format_bytes(p.totalGlobalMem) + "; arena of " + format_bytes(arena_bytes_) +
         (deterministic_ ? ", deterministic cuDNN algorithms" : "") +
         (device_waits_ ? ", swap waits on the device)" : ", swap waits on the host)");
}

void* CudaBackend::host_alloc(size_t bytes) {
  void* p = nullptr;
  VT_CHECK(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault));
  return p;
}
void CudaBackend::host_free(void* p, size_t) {
  if (p) VT_CHECK(cudaFreeHost(p));
}

void CudaBackend::copy_async(Stream s, void* dst, const void* src, size_t bytes) {
  if (bytes) VT_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream(s)));
}

void CudaBackend::copy_to_host(void* host_dst, const void* dev_src, size_t bytes) {
  if (!bytes) return;
  VT_CHECK(cudaMemcpyAsync(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, stream(Stream::kCompute)));
  VT_CHECK(cudaStreamSynchronize(stream(Stream::kCompute)));
}
void CudaBackend::copy_to_device(void* dev_dst, const void* host_src, size_t bytes) {
  if (!bytes) return;
  VT_CHECK(cudaMemcpyAsync(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, stream(Stream::kCompute)));
  VT_CHECK(cudaStreamSynchronize(stream(Stream::kCompute)));  // the host buffer may go away after return
}

// cudaMemcpy ranges must not overlap: an overlapping move copies chunks no longer than the
// distance, in the order that never overwrites bytes not yet copied; a short distance goes
// through the staging buffer.
void CudaBackend::move_device(void* dst, const void* src, size_t bytes) {
  if (!bytes || dst == src) return;
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const cudaStream_t cs = stream(Stream::kCompute);
  const size_t dist = d < s ? size_t(s - d) : size_t(d - s);
  if (dist >= bytes) {
    VT_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, cs));
    return;
  }
  const bool direct = dist >= kMoveMinDirectChunk;  // as move_copies says
  if (!direct && !staging_) VT_CHECK(cudaMalloc(&staging_, kMoveStagingBytes));
  const size_t chunk = direct ? dist : kMoveStagingBytes;
  auto copy_chunk = [&](size_t off, size_t n) {
    if (direct) {
      VT_CHECK(cudaMemcpyAsync(d + off, s + off, n, cudaMemcpyDeviceToDevice, cs));
    } else {
      VT_CHECK(cudaMemcpyAsync(staging_, s + off, n, cudaMemcpyDeviceToDevice, cs));
      VT_CHECK(cudaMemcpyAsync(d + off, staging_, n, cudaMemcpyDeviceToDevice, cs));
    }
  };
  if (d < s) {
    for (size_t off = 0; off < bytes; off += chunk) copy_chunk(off, std::min(chunk, bytes - off));
  } else {
    for (size_t end = bytes; end > 0;) {
      const size_t n = std::min(chunk, end);
      end -= n;
      copy_chunk(end, n);
    }
  }
}

void CudaBackend::move_device_batch(const std::vector<DeviceMove>& moves) {
  static_assert(kMoveBatchSegments == cuda::kMaxCopySegments, "one launch per chunk of the batch");
  const cudaStream_t cs = stream(Stream::kCompute);
  for (const MoveStep& step : move_steps(moves)) {
    if (!step.staged) {
      const DeviceMove& m = moves[step.first];
      move_device(m.dst, m.src, m.bytes);
      continue;
    }
    if (!staging_) VT_CHECK(cudaMalloc(&staging_, kMoveStagingBytes));
    // Gather the chunk's blocks into the staging buffer, then scatter them to their places: every
    // source is read before any destination of the chunk is written.
    cuda::CopySegments in, out;
    size_t off = 0;
    for (size_t i = step.first; i < step.first + step.count; ++i) {
      const DeviceMove& m = moves[i];
      char* slot = static_cast<char*>(staging_) + off;
      in.src[in.n] = static_cast<const char*>(m.src), in.dst[in.n] = slot, in.bytes[in.n] = m.bytes, ++in.n;
      out.src[out.n] = slot, out.dst[out.n] = static_cast<char*>(m.dst), out.bytes[out.n] = m.bytes, ++out.n;
      off += staged_slot_bytes(m.bytes);
    }
    cuda::copy_segments(cs, in);
    cuda::copy_segments(cs, out);
  }
}

std::optional<size_t> CudaBackend::count_nonzeros(const TensorInfo& t, const void* dev) {
  if (!codec_dev_) {
    VT_CHECK(cudaMalloc(&codec_dev_, kCodecSlots * sizeof(unsigned long long)));
    VT_CHECK(cudaHostAlloc(&codec_host_, kCodecSlots * sizeof(unsigned long long), cudaHostAllocDefault));
  }
  const cudaStream_t cs = stream(Stream::kCompute);
  cuda::count_nonzero_bits(cs, static_cast<size_t>(t.shape.numel()), static_cast<const float*>(dev), codec_dev_);
  unsigned long long n = 0;
  VT_CHECK(cudaMemcpyAsync(&n, codec_dev_, sizeof n, cudaMemcpyDeviceToHost, cs));
  VT_CHECK(cudaStreamSynchronize(cs));  // a measurement: the measured iteration only
  return static_cast<size_t>(n);
}

namespace {
struct SizeDelivery {
  const unsigned long long* pinned;
  CodecResult* out;
};
void CUDART_CB deliver_size(void* p) {
  auto* d = static_cast<SizeDelivery*>(p);
  d->out->bytes = *d->pinned;
  delete d;
}
}  // namespace

void CudaBackend::compress_async(Stream s, Codec c, const TensorInfo& t, const void* src, void* dst, size_t capacity,
                                 void*, size_t, CodecResult* result) {  // the arena workspace: not needed here
  const auto n = static_cast<size_t>(t.shape.numel());
  const cudaStream_t cs = stream(s);
  if (c == Codec::kSign) {
    result->bytes = codec_bytes(c, n, 0);  // fixed: known now
    if (result->bytes <= capacity) cuda::compress_sign(cs, n, static_cast<const float*>(src), dst);
    return;
  }
  if (c == Codec::kBf16 || c == Codec::kFp16 || c == Codec::kInt8) {
    result->bytes = codec_bytes(c, n, 0);  // fixed: known now
    if (result->bytes > capacity) return;
    if (c == Codec::kInt8) cuda::compress_int8(cs, n, static_cast<const float*>(src), dst);
    else cuda::compress_half(cs, c == Codec::kBf16, n, static_cast<const float*>(src), dst);
    return;
  }
  if (c != Codec::kBitmask) throw std::logic_error("cuda compress: codec " + std::string(to_string(c)));
  if (!codec_dev_) count_nonzeros(t, src);  // allocates the rings (and syncs once)
  const size_t slot = codec_next_++ % kCodecSlots;
  const size_t scratch = cuda::bitmask_scratch_bytes(n);
  cuda::compress_bitmask(cs, n, static_cast<const float*>(src), dst, capacity, codec_scratch(s, scratch), scratch,
                         codec_dev_ + slot);
  VT_CHECK(cudaMemcpyAsync(codec_host_ + slot, codec_dev_ + slot, sizeof(unsigned long long), cudaMemcpyDeviceToHost, cs));
  VT_CHECK(cudaLaunchHostFunc(cs, deliver_size, new SizeDelivery{codec_host_ + slot, result}));
}

void* CudaBackend::codec_scratch(Stream s, size_t bytes) {
  const int i = static_cast<int>(s);
  if (codec_scratch_bytes_[i] < bytes) {  // a larger tensor than any before on this stream: grow (first iterations)
    const size_t want = std::max<size_t>(bytes, size_t(64) << 10);
    if (codec_scratch_[i]) {
      VT_CHECK(cudaStreamSynchronize(stream(s)));  // its earlier codecs are done with it
      VT_CHECK(cudaFree(codec_scratch_[i]));
      codec_scratch_[i] = nullptr;
      codec_scratch_bytes_[i] = 0;
    }
    VT_CHECK(cudaMalloc(&codec_scratch_[i], want));
    codec_scratch_bytes_[i] = want;
  }
  return codec_scratch_[i];
}

void CudaBackend::decompress_async(Stream s, Codec c, const TensorInfo& t, const void* src, size_t, void* dst, CodecResult* result) {
  const auto n = static_cast<size_t>(t.shape.numel());
  if (c == Codec::kSign) cuda::decompress_sign(stream(s), n, src, static_cast<float*>(dst));
  else if (c == Codec::kBitmask) {
    const size_t scratch = cuda::bitmask_scratch_bytes(n);
    cuda::decompress_bitmask(stream(s), n, src, static_cast<float*>(dst), codec_scratch(s, scratch), scratch);
  }
  else if (c == Codec::kInt8) cuda::decompress_int8(stream(s), n, src, static_cast<float*>(dst));
  else if (c == Codec::kBf16 || c == Codec::kFp16) cuda::decompress_half(stream(s), c == Codec::kBf16, n, src, static_cast<float*>(dst));
  else throw std::logic_error("cuda decompress: codec " + std::string(to_string(c)));
}

Event CudaBackend::record(Stream s) { return std::make_shared<CudaEvent>(events_, stream(s)); }

void CudaBackend::stream_wait(Stream s, const Event& e) {
  if (!e) return;
  if (s == Stream::kCompute) {
    e->wait();
    return;
  }
  auto* ce = dynamic_cast<CudaEvent*>(e.get());
  if (!ce) throw std::logic_error("cuda backend: an event from another backend");
  VT_CHECK(cudaStreamWaitEvent(stream(s), ce->get(), 0));
}

void CudaBackend::compute_wait(const Event& e) {
  if (!e || !device_waits_) return stream_wait(Stream::kCompute, e);
  auto* ce = dynamic_cast<CudaEvent*>(e.get());
  if (!ce) throw std::logic_error("cuda backend: an event from another backend");
  cudaEvent_t before = timed_events_->take(), after = nullptr;
  try {
    after = timed_events_->take();
  } catch (...) {
    timed_events_->give(before);
    throw;
  }
  waits_.emplace_back(before, after);
  VT_CHECK(cudaEventRecord(before, stream(Stream::kCompute)));
  VT_CHECK(cudaStreamWaitEvent(stream(Stream::kCompute), ce->get(), 0));
  VT_CHECK(cudaEventRecord(after, stream(Stream::kCompute)));
}

double CudaBackend::take_device_wait_ms() {
  // Between `before` (the compute stream's earlier work done) and `after` (the copy done too)
  // the compute stream waited for the copy alone.
  double ms = 0;
  for (auto [before, after] : waits_) {
    VT_CHECK(cudaEventSynchronize(after));
    float w = 0;
    VT_CHECK(cudaEventElapsedTime(&w, before, after));
    ms += w;
  }
  for (auto [before, after] : waits_) {
    timed_events_->give(before);
    timed_events_->give(after);
  }
  waits_.clear();
  return ms;
}

void CudaBackend::synchronize() {
  for (auto s : streams_) VT_CHECK(cudaStreamSynchronize(s));
}

double CudaBackend::now_ms() {
  if (sync_timing_) VT_CHECK(cudaStreamSynchronize(stream(Stream::kCompute)));
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// Initial values are made on the host by the cpu code, so both backends start from the same bits.
void CudaBackend::init_tensor(const TensorInfo& t, void* dev, uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(t.shape.numel()));
  cpu::init_tensor_values(t, host.data(), seed);
  copy_to_device(dev, host.data(), host.size() * sizeof(float));
}

bool CudaBackend::begin_op_timing() {
  if (op_timer_.start()) return true;
  static std::once_flag warned;
  std::call_once(warned, [&] {
    std::fprintf(stderr, "vtensor: cuda: no per-op device times (%s); a measured iteration's op times are host launch times\n",
                 op_timer_.why().c_str());
  });
  return false;
}

std::vector<double> CudaBackend::end_op_timing(size_t num_ops) {
  if (!op_timer_.active()) return {};
  synchronize();
  std::vector<double> ms = op_timer_.stop(num_ops);
  if (num_ops && ms.empty()) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      std::fprintf(stderr, "vtensor: cuda: no per-op device times (%s); the measured iteration keeps host launch times\n",
                   op_timer_.why().c_str());
    });
  }
  return ms;
}

}  // namespace vtensor

// The entry points the core looks up when it loads this library (vtensor/backend/cuda_module.cpp).
extern "C" bool vtensor_cuda_available() { return vtensor::device_visible(); }
extern "C" vtensor::Backend* vtensor_cuda_make_backend(const vtensor::BackendOptions& opts) {
  return new vtensor::CudaBackend(opts);
}
