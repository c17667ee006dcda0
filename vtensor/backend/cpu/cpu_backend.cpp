#include "vtensor/backend/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "vtensor/backend/cpu/codecs.h"
#include "vtensor/backend/cpu/kernels.h"
#include "vtensor/backend/cpu/kernels_transformer.h"
#include "vtensor/core/errors.h"

namespace vtensor {

bool CpuEvent::query() {
  std::lock_guard<std::mutex> l(mu_);
  return done_;
}
void CpuEvent::wait() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return done_; });
}
void CpuEvent::signal() {
  {
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

CpuStreamWorker::CpuStreamWorker() : thread_([this] { loop(); }) {}
CpuStreamWorker::~CpuStreamWorker() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}
void CpuStreamWorker::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}
void CpuStreamWorker::drain() {
  std::unique_lock<std::mutex> l(mu_);
  idle_cv_.wait(l, [&] { return tasks_.empty() && !busy_; });
}
void CpuStreamWorker::loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stop requested and nothing left
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    l.unlock();
    task();
    l.lock();
    busy_ = false;
    if (tasks_.empty()) idle_cv_.notify_all();
  }
}

CpuBackend::CpuBackend(const BackendOptions& opts) : arena_bytes_(opts.arena_bytes) {
  if (arena_bytes_ == 0) throw std::invalid_argument("cpu backend: the device budget must be > 0");
  // Reserved, not committed: untouched pages of a large budget cost no RAM.
  void* p = mmap(nullptr, arena_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw std::invalid_argument("cpu backend: cannot map a device arena of " + format_bytes(arena_bytes_));
  arena_ = p;
}

CpuBackend::~CpuBackend() {
  synchronize();
  um_release();
  munmap(arena_, arena_bytes_);
}

std::string CpuBackend::device_description() const {
  return "cpu (device arena of " + format_bytes(arena_bytes_) + " in RAM)";
}

void* CpuBackend::host_alloc(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}
void CpuBackend::host_free(void* p, size_t) { std::free(p); }

CpuStreamWorker& CpuBackend::worker(Stream s) {
  if (s == Stream::kH2D) return h2d_;
  if (s == Stream::kD2H) return d2h_;
  if (s == Stream::kCompress) return compress_;
  throw std::logic_error("cpu backend: the compute stream has no worker");
}

void CpuBackend::copy_async(Stream s, void* dst, const void* src, size_t bytes) {
  if (s == Stream::kCompute) {
    std::memcpy(dst, src, bytes);
    return;
  }
  worker(s).submit([=] { std::memcpy(dst, src, bytes); });
}

void CpuBackend::copy_to_host(void* host_dst, const void* dev_src, size_t bytes) { std::memcpy(host_dst, dev_src, bytes); }
void CpuBackend::copy_to_device(void* dev_dst, const void* host_src, size_t bytes) { std::memcpy(dev_dst, host_src, bytes); }

void CpuBackend::move_device(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

void CpuBackend::move_device_batch(const std::vector<DeviceMove>& moves) {
  for (const MoveStep& step : move_steps(moves)) {
    if (!step.staged) {
      move_device(moves[step.first].dst, moves[step.first].src, moves[step.first].bytes);
      continue;
    }
    if (staging_.empty()) staging_.resize(kMoveStagingBytes);
    size_t off = 0;
    for (size_t i = step.first; i < step.first + step.count; ++i)
      std::memcpy(staging_.data() + off, moves[i].src, moves[i].bytes), off += staged_slot_bytes(moves[i].bytes);
    off = 0;
    for (size_t i = step.first; i < step.first + step.count; ++i)
      std::memcpy(moves[i].dst, staging_.data() + off, moves[i].bytes), off += staged_slot_bytes(moves[i].bytes);
  }
}

Event CpuBackend::record(Stream s) {
  auto e = std::make_shared<CpuEvent>();
  if (s == Stream::kCompute) {
    e->signal();  // compute runs synchronously on the caller's thread
  } else {
    worker(s).submit([e] { e->signal(); });
  }
  return e;
}

void CpuBackend::stream_wait(Stream s, const Event& e) {
  if (!e) return;
  if (s == Stream::kCompute) {
    e->wait();
  } else {
    worker(s).submit([e] { e->wait(); });
  }
}

void CpuBackend::synchronize() {
  h2d_.drain();
  d2h_.drain();
  compress_.drain();
}

std::optional<size_t> CpuBackend::count_nonzeros(const TensorInfo& t, const void* dev) {
  return cpu::count_nonzero_bits(static_cast<const float*>(dev), static_cast<size_t>(t.shape.numel()));
}

void CpuBackend::compress_async(Stream s, Codec c, const TensorInfo& t, const void* src, void* dst, size_t capacity,
                                void* workspace, size_t workspace_bytes, CodecResult* result) {
  const auto n = static_cast<size_t>(t.shape.numel());
  auto task = [=, this] {
    const double t0 = now_ms();
    result->bytes = cpu::compress(c, static_cast<const float*>(src), n, dst, capacity, workspace, workspace_bytes);
    result->ms = now_ms() - t0;
  };
  if (s == Stream::kCompute) task();
  else worker(s).submit(task);
}

void CpuBackend::decompress_async(Stream s, Codec c, const TensorInfo& t, const void* src, size_t, void* dst, CodecResult* result) {
  const auto n = static_cast<size_t>(t.shape.numel());
  auto task = [=, this] {
    const double t0 = now_ms();
    cpu::decompress(c, src, n, static_cast<float*>(dst));
    result->ms = now_ms() - t0;
  };
  if (s == Stream::kCompute) task();
  else worker(s).submit(task);
}

double CpuBackend::now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

void cpu::init_tensor_values(const TensorInfo& t, float* p, uint64_t seed) {
  const size_t n = static_cast<size_t>(t.shape.numel());
  const uint64_t s = cpu::mix64(seed ^ (static_cast<uint64_t>(t.id) * 0x9e3779b97f4a7c15ull));
  int64_t fan_in = 1;
  for (size_t i = 1; i < t.shape.rank(); ++i) fan_in *= t.shape[i];
  switch (t.init) {
    case Init::kZeros: std::fill(p, p + n, 0.f); break;
    case Init::kOnes: std::fill(p, p + n, 1.f); break;
    case Init::kHeNormal: {
      const double stdv = std::sqrt(2.0 / static_cast<double>(fan_in));
      for (size_t i = 0; i < n; ++i) {
        const double u1 = 1.0 - cpu::uniform01(s, 2 * i), u2 = cpu::uniform01(s, 2 * i + 1);
        p[i] = static_cast<float>(stdv * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2));
      }
      break;
    }
    case Init::kUniformFanIn: {
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>((2.0 * cpu::uniform01(s, i) - 1.0) * bound);
      break;
    }
  }
}

void CpuBackend::init_tensor(const TensorInfo& t, void* dev, uint64_t seed) {
  cpu::init_tensor_values(t, static_cast<float*>(dev), seed);
}

namespace {

int dim(const Shape& s, size_t i) { return static_cast<int>(s[i]); }
int spatial(const Shape& s) { return s.rank() == 4 ? dim(s, 2) * dim(s, 3) : 1; }

// Synthetic classification data, learnable: each class has a fixed pattern, each sample is
// its class pattern plus noise. Eight distinct batches repeat, so the loss falls in a few steps.
void synthetic_batch(const Op& op, const Shape& xs, uint64_t iteration, float* x, float* labels) {
  const int n = dim(xs, 0);
  const size_t per = static_cast<size_t>(xs.numel() / n);
  const uint64_t batch_seed = cpu::mix64(op.attrs.seed + iteration % 8);
  for (int i = 0; i < n; ++i) {
    const int label = static_cast<int>(cpu::uniform01(batch_seed, static_cast<uint64_t>(i)) * op.attrs.num_classes);
    labels[i] = static_cast<float>(label);
    const uint64_t pattern_seed = cpu::mix64(op.attrs.seed ^ (0xc1a55ull + static_cast<uint64_t>(label)));
    const uint64_t noise_seed = cpu::mix64(batch_seed + 1 + static_cast<uint64_t>(i));
    float* xi = x + static_cast<size_t>(i) * per;
    for (size_t j = 0; j < per; ++j)
      xi[j] = (2.f * cpu::uniform01(pattern_seed, j) - 1.f) + 0.5f * (cpu::uniform01(noise_seed, j) - 0.5f);
  }
}

// Synthetic token sequences, learnable from context: each sequence starts at a random token and
// steps by its own stride (1, 2 or 3) modulo the vocabulary, so the next token follows from the
// last two. Token 0 is reserved as the mask token. GPT: targets are the next tokens. BERT (mlm):
// about 15% of the inputs become the mask token; targets are the original tokens at every
// position. Eight distinct batches repeat, as for the image data.
void synthetic_tokens(const Op& op, int rows, uint64_t iteration, float* tokens, float* targets) {
  const int T = op.attrs.period, V = op.attrs.num_classes, B = rows / T;
  const uint64_t batch_seed = cpu::mix64(op.attrs.seed + iteration % 8);
  auto at = [&](int start, int stride, int t) { return 1 + (start + stride * t) % (V - 1); };
  for (int b = 0; b < B; ++b) {
    const int start = static_cast<int>(cpu::uniform01(batch_seed, 2 * static_cast<uint64_t>(b)) * (V - 1));
    const int stride = 1 + static_cast<int>(cpu::uniform01(batch_seed, 2 * static_cast<uint64_t>(b) + 1) * 3);
    for (int t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b) * T + t;
      tokens[i] = static_cast<float>(at(start, stride, t));
      targets[i] = static_cast<float>(op.attrs.mlm ? at(start, stride, t) : at(start, stride, t + 1));
      if (op.attrs.mlm && cpu::uniform01(batch_seed ^ 0x3a5cull, i) < 0.15f) tokens[i] = 0.f;
    }
  }
}

// Leading dims of a [.., M, N] tensor.
int batch_dims(const Shape& s) { return static_cast<int>(s.numel() / (s[s.rank() - 2] * s[s.rank() - 1])); }
int last(const Shape& s) { return static_cast<int>(s[s.rank() - 1]); }
int rows(const Shape& s) { return static_cast<int>(s.numel() / s[s.rank() - 1]); }

const Shape& in_shape(const Graph& g, const Op& op, size_t i) { return g.tensor(op.inputs[i]).shape; }
const Shape& out_shape(const Graph& g, const Op& op, size_t i) { return g.tensor(op.outputs[i]).shape; }
size_t numel(const Shape& s) { return static_cast<size_t>(s.numel()); }

void launch_data(const Graph& g, const Op& op, const KernelArgs& a) {
  if (op.kind == OpKind::kData)
    synthetic_batch(op, out_shape(g, op, 0), a.iteration, a.outputs[0], a.outputs[1]);
  else
    synthetic_tokens(op, dim(out_shape(g, op, 0), 0), a.iteration, a.outputs[0], a.outputs[1]);
}

void launch_conv(const Graph& g, const Op& op, const KernelArgs& a) {
  float* ws = static_cast<float*>(a.workspace);
  switch (op.kind) {
    case OpKind::kConv2d: {
      const Shape& x = in_shape(g, op, 0);
      const Shape& w = in_shape(g, op, 1);
      auto p = cpu::make_conv2d_params(dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), dim(w, 0), dim(w, 2), dim(w, 3),
                                       op.attrs.stride, op.attrs.pad);
      cpu::conv2d_forward(p, a.inputs[0], a.inputs[1], op.attrs.has_bias ? a.inputs[2] : nullptr, a.outputs[0], ws,
                          a.conv_algo);
      break;
    }
    case OpKind::kConv2dBwdData: {
      const Shape& x = out_shape(g, op, 0);
      const Shape& w = in_shape(g, op, 1);
      auto p = cpu::make_conv2d_params(dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), dim(w, 0), dim(w, 2), dim(w, 3),
                                       op.attrs.stride, op.attrs.pad);
      cpu::conv2d_backward_data(p, a.inputs[0], a.inputs[1], a.outputs[0], ws, a.conv_algo);
      break;
    }
    case OpKind::kConv2dBwdFilter: {
      const Shape& x = in_shape(g, op, 1);
      const Shape& w = out_shape(g, op, 0);
      auto p = cpu::make_conv2d_params(dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), dim(w, 0), dim(w, 2), dim(w, 3),
                                       op.attrs.stride, op.attrs.pad);
      cpu::conv2d_backward_filter(p, a.inputs[0], a.inputs[1], a.outputs[0], op.attrs.has_bias ? a.outputs[1] : nullptr,
                                  ws, a.conv_algo);
      break;
    }
    default: break;
  }
}

void launch_norm(const Graph& g, const Op& op, const KernelArgs& a) {
  switch (op.kind) {
    case OpKind::kBatchNorm: {
      const Shape& x = in_shape(g, op, 0);
      cpu::batchnorm_forward(dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.inputs[1], a.inputs[2], a.outputs[0],
                             a.outputs[1], a.outputs[2], a.inputs[3], a.inputs[4], op.attrs.momentum, op.attrs.eps,
                             !a.recompute);
      break;
    }
    case OpKind::kBatchNormBwd: {
      const Shape& x = in_shape(g, op, 1);
      cpu::batchnorm_backward(dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3],
                              a.inputs[4], a.outputs[0], a.outputs[1], a.outputs[2]);
      break;
    }
    case OpKind::kLayerNorm: {
      const Shape& x = in_shape(g, op, 0);
      cpu::layernorm_forward(rows(x), last(x), a.inputs[0], a.inputs[1], a.inputs[2], op.attrs.eps, a.outputs[0],
                             a.outputs[1], a.outputs[2]);
      break;
    }
    case OpKind::kLayerNormBwd: {
      const Shape& x = in_shape(g, op, 1);
      cpu::layernorm_backward(rows(x), last(x), a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3], a.inputs[4],
                              a.outputs[0], a.outputs[1], a.outputs[2]);
      break;
    }
    default: break;
  }
}

void launch_pool(const Graph& g, const Op& op, const KernelArgs& a) {
  switch (op.kind) {
    case OpKind::kMaxPool:
    case OpKind::kMaxPoolBwd: {
      const Shape& x = op.kind == OpKind::kMaxPool ? in_shape(g, op, 0) : in_shape(g, op, 1);
      const Shape& y = op.kind == OpKind::kMaxPool ? out_shape(g, op, 0) : in_shape(g, op, 0);
      const int k = op.attrs.kernel, s = op.attrs.stride, pad = op.attrs.pad;
      if (op.kind == OpKind::kMaxPool)
        cpu::maxpool2d_forward(dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), k, s, pad, dim(y, 2), dim(y, 3), a.inputs[0],
                               a.outputs[0]);
      else
        cpu::maxpool2d_backward(dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), k, s, pad, dim(y, 2), dim(y, 3), a.inputs[0],
                                a.inputs[1], a.outputs[0]);
      break;
    }
    case OpKind::kGlobalAvgPool: {
      const Shape& x = in_shape(g, op, 0);
      cpu::global_avgpool_forward(dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.outputs[0]);
      break;
    }
    case OpKind::kGlobalAvgPoolBwd: {
      const Shape& x = out_shape(g, op, 0);
      cpu::global_avgpool_backward(dim(x, 0), dim(x, 1), spatial(x), a.inputs[0], a.outputs[0]);
      break;
    }
    default: break;
  }
}

void launch_linear(const Graph& g, const Op& op, const KernelArgs& a) {
  if (op.kind == OpKind::kLinear) {
    const Shape& x = in_shape(g, op, 0);
    const Shape& w = in_shape(g, op, 1);
    cpu::linear_forward(dim(x, 0), dim(x, 1), dim(w, 0), a.inputs[0], a.inputs[1],
                        op.attrs.has_bias ? a.inputs[2] : nullptr, a.outputs[0]);
    return;
  }
  const Shape& x = in_shape(g, op, 1);
  const Shape& w = in_shape(g, op, 2);
  size_t o = 0;
  float* dx = op.attrs.has_dx ? a.outputs[o++] : nullptr;
  float* dw = a.outputs[o++];
  float* db = op.attrs.has_bias ? a.outputs[o++] : nullptr;
  cpu::linear_backward(dim(x, 0), dim(x, 1), dim(w, 0), a.inputs[0], a.inputs[1], a.inputs[2], dx, dw, db);
}

void launch_matmul(const Graph& g, const Op& op, const KernelArgs& a) {
  const bool fwd = op.kind == OpKind::kBatchedMatmul;
  const Shape& sa = in_shape(g, op, fwd ? 0 : 1);
  const Shape& sc = fwd ? out_shape(g, op, 0) : in_shape(g, op, 0);
  const int M = dim(sa, sa.rank() - 2), K = last(sa), N = last(sc);
  if (fwd)
    cpu::bmm_forward(batch_dims(sa), M, N, K, op.attrs.trans_b, op.attrs.alpha, a.inputs[0], a.inputs[1], a.outputs[0]);
  else
    cpu::bmm_backward(batch_dims(sa), M, N, K, op.attrs.trans_b, op.attrs.alpha, a.inputs[0], a.inputs[1], a.inputs[2],
                      a.outputs[0], a.outputs[1]);
}

void launch_elementwise(const Graph& g, const Op& op, const KernelArgs& a) {
  auto n = [&] { return numel(in_shape(g, op, 0)); };
  const uint64_t dropout_seed = cpu::mix64(op.attrs.seed + a.iteration);
  switch (op.kind) {
    case OpKind::kRelu: cpu::relu_forward(n(), a.inputs[0], a.outputs[0]); break;
    case OpKind::kReluBwd: cpu::relu_backward(n(), a.inputs[0], a.inputs[1], a.outputs[0]); break;
    case OpKind::kAdd: cpu::add_forward(n(), a.inputs[0], a.inputs[1], a.outputs[0]); break;
    case OpKind::kDropout: cpu::dropout_forward(n(), op.attrs.p, dropout_seed, a.inputs[0], a.outputs[0]); break;
    case OpKind::kDropoutBwd: cpu::dropout_backward(n(), op.attrs.p, dropout_seed, a.inputs[0], a.outputs[0]); break;
    case OpKind::kGelu: cpu::gelu_forward(n(), a.inputs[0], a.outputs[0]); break;
    case OpKind::kGeluBwd: cpu::gelu_backward(n(), a.inputs[0], a.inputs[1], a.outputs[0]); break;
    default: break;
  }
}

void launch_layout(const Graph& g, const Op& op, const KernelArgs& a) {
  switch (op.kind) {
    case OpKind::kFlatten:
    case OpKind::kReshapeBwd: cpu::copy(numel(in_shape(g, op, 0)), a.inputs[0], a.outputs[0]); break;
    case OpKind::kReshape:
      if (a.outputs[0] != a.inputs[0]) throw std::logic_error("reshape: a view must share its input's storage");
      break;
    case OpKind::kTranspose: {
      const Shape& x = in_shape(g, op, 0);
      cpu::transpose12(dim(x, 0), dim(x, 1), dim(x, 2), dim(x, 3), a.inputs[0], a.outputs[0]);
      break;
    }
    default: break;
  }
}

void launch_softmax(const Graph& g, const Op& op, const KernelArgs& a) {
  const Shape& l = in_shape(g, op, 0);
  switch (op.kind) {
    case OpKind::kSoftmaxCE:
      cpu::softmax_ce_forward(dim(l, 0), dim(l, 1), a.inputs[0], a.inputs[1], a.outputs[0]);
      break;
    case OpKind::kSoftmaxCEBwd:
      cpu::softmax_ce_backward(dim(l, 0), dim(l, 1), a.inputs[0], a.inputs[1], a.outputs[0]);
      break;
    case OpKind::kSoftmax: cpu::softmax_forward(rows(l), last(l), op.attrs.causal, a.inputs[0], a.outputs[0]); break;
    case OpKind::kSoftmaxBwd: cpu::softmax_backward(rows(l), last(l), a.inputs[0], a.inputs[1], a.outputs[0]); break;
    default: break;
  }
}

void launch_embedding(const Graph& g, const Op& op, const KernelArgs& a) {
  if (op.kind == OpKind::kEmbedding) {
    const Shape& t = in_shape(g, op, 0);
    const float* ids = op.inputs.size() > 1 ? a.inputs[1] : nullptr;
    cpu::embedding_forward(dim(out_shape(g, op, 0), 0), dim(t, 0), dim(t, 1), ids, op.attrs.period, a.inputs[0],
                           a.outputs[0]);
    return;
  }
  const Shape& t = out_shape(g, op, 0);
  const size_t plain = op.inputs.size() - (op.attrs.accumulate ? 1 : 0);  // dy [, ids]
  const float* ids = plain > 1 ? a.inputs[1] : nullptr;
  const float* acc = op.attrs.accumulate ? a.inputs.back() : nullptr;
  cpu::embedding_backward(dim(in_shape(g, op, 0), 0), dim(t, 0), dim(t, 1), a.inputs[0], ids, op.attrs.period,
                          a.outputs[0], acc);
}

void launch_optimizer(const Graph& g, const Op& op, const KernelArgs& a) {
  if (op.kind == OpKind::kSgdMomentum)
    cpu::sgd_momentum(numel(in_shape(g, op, 0)), op.attrs.lr, op.attrs.sgd_momentum, op.attrs.weight_decay,
                      a.inputs[0], a.inputs[1], a.inputs[2]);
  else
    cpu::adam(numel(in_shape(g, op, 0)), op.attrs.lr, op.attrs.beta1, op.attrs.beta2, op.attrs.adam_eps,
              op.attrs.weight_decay, op.attrs.decoupled_wd, static_cast<int64_t>(a.iteration) + 1, a.inputs[0],
              a.inputs[1], a.inputs[2], a.inputs[3]);
}

}  // namespace

void CpuBackend::launch(const Graph& g, const Op& op, const KernelArgs& a) {
  switch (op_family(op.kind)) {
    case OpFamily::kData: return launch_data(g, op, a);
    case OpFamily::kConv: return launch_conv(g, op, a);
    case OpFamily::kNorm: return launch_norm(g, op, a);
    case OpFamily::kPool: return launch_pool(g, op, a);
    case OpFamily::kLinear: return launch_linear(g, op, a);
    case OpFamily::kMatmul: return launch_matmul(g, op, a);
    case OpFamily::kElementwise: return launch_elementwise(g, op, a);
    case OpFamily::kLayout: return launch_layout(g, op, a);
    case OpFamily::kSoftmax: return launch_softmax(g, op, a);
    case OpFamily::kEmbedding: return launch_embedding(g, op, a);
    case OpFamily::kOptimizer: return launch_optimizer(g, op, a);
    case OpFamily::kReplay:
      throw std::invalid_argument("the cpu backend cannot run replayed op '" + op.name +
                                  "' (a trace has no kernels); replay with --backend sim");
  }
}

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opts) { return std::make_unique<CpuBackend>(opts); }

}  // namespace vtensor
