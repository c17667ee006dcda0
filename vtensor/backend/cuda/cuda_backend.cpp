#include "vtensor/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "vtensor/backend/cpu/cpu_backend.h"
#include "vtensor/backend/cpu/kernels.h"
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

int dim(const Shape& s, size_t i) { return static_cast<int>(s[i]); }
int spatial(const Shape& s) { return s.rank() == 4 ? dim(s, 2) * dim(s, 3) : 1; }
int batch_dims(const Shape& s) { return static_cast<int>(s.numel() / (s[s.rank() - 2] * s[s.rank() - 1])); }
int last(const Shape& s) { return static_cast<int>(s[s.rank() - 1]); }
int rows(const Shape& s) { return static_cast<int>(s.numel() / s[s.rank() - 1]); }

cuda::ConvShape conv_shape(const Shape& x, const Shape& w, const Op& op) {
  return {dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), dim(w, 0), dim(w, 2), dim(w, 3), op.attrs.stride, op.attrs.pad};
}

// The conv op's input shape x and filter shape w, whichever direction it runs.
std::pair<const Shape*, const Shape*> conv_operands(const Graph& g, const Op& op) {
  switch (op.kind) {
    case OpKind::kConv2d: return {&g.tensor(op.inputs[0]).shape, &g.tensor(op.inputs[1]).shape};
    case OpKind::kConv2dBwdData: return {&g.tensor(op.outputs[0]).shape, &g.tensor(op.inputs[1]).shape};
    case OpKind::kConv2dBwdFilter: return {&g.tensor(op.inputs[1]).shape, &g.tensor(op.outputs[0]).shape};
    default: return {nullptr, nullptr};
  }
}

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

size_t CudaBackend::workspace_bytes(const Graph& g, const Op& op, ConvAlgo algo) {
  if (op.kind == OpKind::kSoftmaxCE) return static_cast<size_t>(dim(g.tensor(op.inputs[0]).shape, 0)) * sizeof(double);
  // A recomputation hands cuDNN throw-away running statistics here (see launch).
  if (op.kind == OpKind::kBatchNorm) return 2 * static_cast<size_t>(dim(g.tensor(op.inputs[0]).shape, 1)) * sizeof(float);
  auto [x, w] = conv_operands(g, op);
  if (!x) return 0;
  return conv_->workspace_bytes(op.kind, conv_shape(*x, *w, op), algo);
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

void CudaBackend::launch(const Graph& g, const Op& op, const KernelArgs& a) {
  // What this launch enqueues counts as the op's time in a measured iteration (not a recomputation).
  struct Attribution {
    cuda::OpTimer& t;
    bool on;
    Attribution(cuda::OpTimer& timer, int op_index, bool recompute) : t(timer), on(timer.active() && !recompute) {
      if (on) t.push(op_index);
    }
    ~Attribution() {
      if (on) t.pop();
    }
  } attribution(op_timer_, op.index, a.recompute);
  auto in_shape = [&](size_t i) -> const Shape& { return g.tensor(op.inputs[i]).shape; };
  auto out_shape = [&](size_t i) -> const Shape& { return g.tensor(op.outputs[i]).shape; };
  auto numel = [&](const Shape& s) { return static_cast<size_t>(s.numel()); };
  const cudaStream_t s = stream(Stream::kCompute);
  const uint64_t dropout_seed = cpu::mix64(op.attrs.seed + a.iteration);
  auto copy = [&](size_t n, const float* x, float* y) {
    if (n && x != y) VT_CHECK(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  };
  size_t ws_bytes = a.workspace ? workspace_bytes(g, op, a.conv_algo) : 0;
  switch (op.kind) {
    case OpKind::kData: {
      const Shape& xs = out_shape(0);
      const int n = dim(xs, 0);
      cuda::synthetic_batch(s, n, n ? numel(xs) / static_cast<size_t>(n) : 0, op.attrs.num_classes, op.attrs.seed,
                            a.iteration, a.outputs[0], a.outputs[1]);
      break;
    }
    case OpKind::kConv2d: {
      const Shape& x = in_shape(0);
      const cuda::ConvShape cs = conv_shape(x, in_shape(1), op);
      conv_->forward(cs, a.conv_algo, a.inputs[0], a.inputs[1], a.outputs[0], a.workspace, ws_bytes);
      if (op.attrs.has_bias)
        cuda::add_bias_channels(s, cs.N, cs.K, static_cast<int>(numel(out_shape(0)) / (size_t(cs.N) * cs.K)),
                                a.inputs[2], a.outputs[0]);
      break;
    }
    case OpKind::kConv2dBwdData:
      conv_->backward_data(conv_shape(out_shape(0), in_shape(1), op), a.conv_algo, a.inputs[0], a.inputs[1],
                           a.outputs[0], a.workspace, ws_bytes);
      break;
    case OpKind::kConv2dBwdFilter: {
      const cuda::ConvShape cs = conv_shape(in_shape(1), out_shape(0), op);
      conv_->backward_filter(cs, a.conv_algo, a.inputs[0], a.inputs[1], a.outputs[0], a.workspace, ws_bytes);
      if (op.attrs.has_bias)
        cuda::channel_sum(s, cs.N, cs.K, static_cast<int>(numel(in_shape(0)) / (size_t(cs.N) * cs.K)), a.inputs[0],
                          a.outputs[1]);
      break;
    }
    case OpKind::kBatchNorm: {
      const Shape& x = in_shape(0);
      // A recomputation must not update the running statistics again: cuDNN updates a
      // throw-away pair in the workspace instead.
      float* scratch = static_cast<float*>(a.workspace);
      if (a.recompute && (!scratch || ws_bytes < 2 * size_t(dim(x, 1)) * sizeof(float)))
        throw std::logic_error("cuda batch norm: no workspace for a recomputation's running statistics");
      cuda::batchnorm_forward(cudnn_, dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.inputs[1], a.inputs[2],
                              a.outputs[0], a.outputs[1], a.outputs[2], a.recompute ? scratch : a.inputs[3],
                              a.recompute ? scratch + dim(x, 1) : a.inputs[4], op.attrs.momentum, op.attrs.eps);
      break;
    }
    case OpKind::kBatchNormBwd: {
      const Shape& x = in_shape(1);
      cuda::batchnorm_backward(cudnn_, dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.inputs[1], a.inputs[2],
                               a.inputs[3], a.inputs[4], op.attrs.eps, a.outputs[0], a.outputs[1], a.outputs[2]);
      break;
    }
    case OpKind::kRelu: cuda::relu_forward(s, numel(in_shape(0)), a.inputs[0], a.outputs[0]); break;
    case OpKind::kReluBwd: cuda::relu_backward(s, numel(in_shape(0)), a.inputs[0], a.inputs[1], a.outputs[0]); break;
    case OpKind::kMaxPool:
    case OpKind::kMaxPoolBwd: {
      const bool fwd = op.kind == OpKind::kMaxPool;
      const Shape& x = fwd ? in_shape(0) : in_shape(1);
      const Shape& y = fwd ? out_shape(0) : in_shape(0);
      const int k = op.attrs.kernel, st = op.attrs.stride, pad = op.attrs.pad;
      if (fwd)
        cuda::maxpool_forward(s, dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), k, st, pad, dim(y, 2), dim(y, 3),
                              a.inputs[0], a.outputs[0]);
      else
        cuda::maxpool_backward(s, dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), k, st, pad, dim(y, 2), dim(y, 3),
                               a.inputs[0], a.inputs[1], a.outputs[0]);
      break;
    }
    case OpKind::kGlobalAvgPool: {
      const Shape& x = in_shape(0);
      cuda::global_avgpool_forward(s, dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.outputs[0]);
      break;
    }
    case OpKind::kGlobalAvgPoolBwd: {
      const Shape& x = out_shape(0);
      cuda::global_avgpool_backward(s, dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.outputs[0]);
      break;
    }
    case OpKind::kLinear: {
      const int M = dim(in_shape(0), 0), In = dim(in_shape(0), 1), Out = dim(in_shape(1), 0);
      cuda::gemm(cublas_, false, true, M, Out, In, 1.f, a.inputs[0], In, 0, a.inputs[1], In, 0, 0.f, a.outputs[0], Out,
                 0);
      if (op.attrs.has_bias) cuda::add_bias_rows(s, M, Out, a.inputs[2], a.outputs[0]);
      break;
    }
    case OpKind::kLinearBwd: {
      const int M = dim(in_shape(1), 0), In = dim(in_shape(1), 1), Out = dim(in_shape(2), 0);
      size_t o = 0;
      float* dx = op.attrs.has_dx ? a.outputs[o++] : nullptr;
      float* dw = a.outputs[o++];
      float* db = op.attrs.has_bias ? a.outputs[o++] : nullptr;
      const float* dy = a.inputs[0];
      if (dx) cuda::gemm(cublas_, false, false, M, In, Out, 1.f, dy, Out, 0, a.inputs[2], In, 0, 0.f, dx, In, 0);
      cuda::gemm(cublas_, true, false, Out, In, M, 1.f, dy, Out, 0, a.inputs[1], In, 0, 0.f, dw, In, 0);
      if (db) cuda::column_sum(s, M, Out, dy, db);
      break;
    }
    case OpKind::kAdd: cuda::add_forward(s, numel(in_shape(0)), a.inputs[0], a.inputs[1], a.outputs[0]); break;
    case OpKind::kFlatten:
    case OpKind::kReshapeBwd: copy(numel(in_shape(0)), a.inputs[0], a.outputs[0]); break;
    case OpKind::kDropout:
    case OpKind::kDropoutBwd: {
      const float p = op.attrs.p;
      if (!(p >= 0.0f && p <= 1.0f)) throw std::invalid_argument("dropout: p must be in [0, 1]");
      if (p == 0.0f)
        copy(numel(in_shape(0)), a.inputs[0], a.outputs[0]);
      else
        cuda::dropout_forward(s, numel(in_shape(0)), p, dropout_seed, a.inputs[0], a.outputs[0]);
      break;
    }
    case OpKind::kSoftmaxCE: {
      const Shape& l = in_shape(0);
      if (dim(l, 0) > 0 && (!a.workspace || ws_bytes < size_t(dim(l, 0)) * sizeof(double)))
        throw std::logic_error("cuda softmax_ce: no workspace for the row losses");
      cuda::softmax_ce_forward(s, dim(l, 0), dim(l, 1), a.inputs[0], a.inputs[1], static_cast<double*>(a.workspace),
                               a.outputs[0]);
      break;
    }
    case OpKind::kSoftmaxCEBwd: {
      const Shape& l = in_shape(0);
      cuda::softmax_ce_backward(s, dim(l, 0), dim(l, 1), a.inputs[0], a.inputs[1], a.outputs[0]);
      break;
    }
    case OpKind::kSgdMomentum:
      cuda::sgd_momentum(s, numel(in_shape(0)), op.attrs.lr, op.attrs.sgd_momentum, op.attrs.weight_decay, a.inputs[0],
                         a.inputs[1], a.inputs[2]);
      break;
    case OpKind::kTokenData: {
      const int r = dim(out_shape(0), 0);
      cuda::synthetic_tokens(s, r, op.attrs.period, op.attrs.num_classes, op.attrs.mlm, op.attrs.seed, a.iteration,
                             a.outputs[0], a.outputs[1]);
      break;
    }
    case OpKind::kEmbedding: {
      const Shape& t = in_shape(0);
      const float* ids = op.inputs.size() > 1 ? a.inputs[1] : nullptr;
      cuda::embedding_forward(s, dim(out_shape(0), 0), dim(t, 0), dim(t, 1), ids, op.attrs.period, a.inputs[0],
                              a.outputs[0]);
      break;
    }
    case OpKind::kEmbeddingBwd: {
      const Shape& t = out_shape(0);
      const size_t plain = op.inputs.size() - (op.attrs.accumulate ? 1 : 0);  // dy [, ids]
      const float* ids = plain > 1 ? a.inputs[1] : nullptr;
      const float* acc = op.attrs.accumulate ? a.inputs.back() : nullptr;
      if (acc)
        copy(numel(t), acc, a.outputs[0]);
      else
        VT_CHECK(cudaMemsetAsync(a.outputs[0], 0, numel(t) * sizeof(float), s));
      cuda::embedding_backward_add(s, dim(in_shape(0), 0), dim(t, 0), dim(t, 1), a.inputs[0], ids, op.attrs.period,
                                   a.outputs[0]);
      break;
    }
    case OpKind::kLayerNorm:
      cuda::layernorm_forward(s, rows(in_shape(0)), last(in_shape(0)), a.inputs[0], a.inputs[1], a.inputs[2],
                              op.attrs.eps, a.outputs[0], a.outputs[1], a.outputs[2]);
      break;
    case OpKind::kLayerNormBwd:
      cuda::layernorm_backward(s, rows(in_shape(1)), last(in_shape(1)), a.inputs[0], a.inputs[1], a.inputs[2],
                               a.inputs[3], a.inputs[4], a.outputs[0], a.outputs[1], a.outputs[2]);
      break;
    case OpKind::kGelu: cuda::gelu_forward(s, numel(in_shape(0)), a.inputs[0], a.outputs[0]); break;
    case OpKind::kGeluBwd: cuda::gelu_backward(s, numel(in_shape(0)), a.inputs[0], a.inputs[1], a.outputs[0]); break;
    case OpKind::kBatchedMatmul:
    case OpKind::kBatchedMatmulBwd: {
      const bool fwd = op.kind == OpKind::kBatchedMatmul;
      const Shape& sa = in_shape(fwd ? 0 : 1);
      const Shape& sc = fwd ? out_shape(0) : in_shape(0);
      const int B = batch_dims(sa), M = dim(sa, sa.rank() - 2), K = last(sa), N = last(sc);
      const bool tb = op.attrs.trans_b;
      const float alpha = op.attrs.alpha;
      const long long sA = (long long)M * K, sB = (long long)K * N, sC = (long long)M * N;
      const int ldb = tb ? K : N;
      if (fwd) {
        cuda::gemm(cublas_, false, tb, M, N, K, alpha, a.inputs[0], K, sA, a.inputs[1], ldb, sB, 0.f, a.outputs[0], N,
                   sC, B);
      } else {
        const float *dc = a.inputs[0], *am = a.inputs[1], *bm = a.inputs[2];
        float* da = a.outputs[0];
        float* db = a.outputs.size() > 1 ? a.outputs[1] : nullptr;
        if (da) cuda::gemm(cublas_, false, !tb, M, K, N, alpha, dc, N, sC, bm, ldb, sB, 0.f, da, K, sA, B);
        if (db) {
          if (tb)
            cuda::gemm(cublas_, true, false, N, K, M, alpha, dc, N, sC, am, K, sA, 0.f, db, K, sB, B);
          else
            cuda::gemm(cublas_, true, false, K, N, M, alpha, am, K, sA, dc, N, sC, 0.f, db, N, sB, B);
        }
      }
      break;
    }
    case OpKind::kSoftmax:
      cuda::softmax_forward(s, rows(in_shape(0)), last(in_shape(0)), op.attrs.causal, a.inputs[0], a.outputs[0]);
      break;
    case OpKind::kSoftmaxBwd:
      cuda::softmax_backward(s, rows(in_shape(0)), last(in_shape(0)), a.inputs[0], a.inputs[1], a.outputs[0]);
      break;
    case OpKind::kReshape:
      if (a.outputs[0] != a.inputs[0]) throw std::logic_error("reshape: a view must share its input's storage");
      break;
    case OpKind::kTranspose: {
      const Shape& x = in_shape(0);
      cuda::transpose12(s, dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), a.inputs[0], a.outputs[0]);
      break;
    }
    case OpKind::kAdam: {
      const int64_t step = static_cast<int64_t>(a.iteration) + 1;
      const float c1 = float(1.0 - std::pow(double(op.attrs.beta1), double(step)));
      const float c2 = float(1.0 - std::pow(double(op.attrs.beta2), double(step)));
      cuda::adam(s, numel(in_shape(0)), op.attrs.lr, op.attrs.beta1, op.attrs.beta2, op.attrs.adam_eps,
                 op.attrs.weight_decay, op.attrs.decoupled_wd, c1, c2, a.inputs[0], a.inputs[1], a.inputs[2],
                 a.inputs[3]);
      break;
    }
    case OpKind::kReplay:
      throw std::invalid_argument("the cuda backend cannot run replayed op '" + op.name +
                                  "' (a trace has no kernels); replay with --backend sim");
  }
}

}  // namespace vtensor

// The entry points the core looks up when it loads this library (vtensor/backend/cuda_module.cpp).
extern "C" bool vtensor_cuda_available() { return vtensor::device_visible(); }
extern "C" vtensor::Backend* vtensor_cuda_make_backend(const vtensor::BackendOptions& opts) {
  return new vtensor::CudaBackend(opts);
}
