#include "vtensor/memory/memory_manager.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"
#include "vtensor/memory/caching_allocator.h"

namespace vtensor {

const char* to_string(HeldBy h) {
  switch (h) {
    case HeldBy::kParameters: return "parameters";
    case HeldBy::kGradients: return "gradients";
    case HeldBy::kOptimizerState: return "optimizer state";
    case HeldBy::kActivations: return "activations";
    case HeldBy::kCompressed: return "compressed";
    case HeldBy::kInFlight: return "in flight to / from host";
    case HeldBy::kWorkspace: return "workspace";
    case HeldBy::kCount: break;
  }
  return "?";
}

const char* to_string(StartState s) {
  switch (s) {
    case StartState::kPacked: return "packed";
    case StartState::kReordered: return "reordered";
    case StartState::kRestored: return "restored";
  }
  return "?";
}

const char* to_string(Residency r) {
  switch (r) {
    case Residency::kUnallocated: return "unallocated";
    case Residency::kResident: return "resident";
    case Residency::kSwappingOut: return "swapping_out";
    case Residency::kOnHost: return "on_host";
    case Residency::kSwappingIn: return "swapping_in";
    case Residency::kDropped: return "dropped";
    case Residency::kCompressing: return "compressing";
    case Residency::kCompressed: return "compressed";
    case Residency::kDecompressing: return "decompressing";
  }
  return "?";
}

MemoryManager::MemoryManager(Backend& backend, const Graph& graph, std::unique_ptr<DeviceAllocator> allocator,
                             std::unique_ptr<Policy> policy)
    : backend_(backend), graph_(graph), allocator_(std::move(allocator)), policy_(std::move(policy)), host_(backend) {
  if (const CompressionOptions* c = policy_->compression()) compression_ = *c;  // what the policy's options chose
  states_.resize(graph_.num_tensors());
  base_.resize(graph_.num_tensors());
  for (const auto& t : graph_.tensors()) {
    TensorId b = t.id;
    while (graph_.tensor(b).view_of != kNoTensor) b = graph_.tensor(b).view_of;
    base_[static_cast<size_t>(t.id)] = b;
    if (b != t.id && graph_.tensor(b).bytes() != t.bytes())
      throw std::logic_error("view " + t.name + " differs in size from its base " + graph_.tensor(b).name);
    State& s = st(t.id);
    s.bytes = b == t.id ? t.bytes() : 0;  // a view owns no bytes
    s.persistent = t.persistent();
  }
  tracker_.set_swap_ns_per_byte(copy_ms_per_byte() * 1e6);
  if (PagePolicy* pp = policy_->paging()) init_paging(*pp);
  policy_->attach(*this);
}

double MemoryManager::copy_ms_per_byte() const {
  calibrate_copies();
  return copy_ms_per_byte_;
}

double MemoryManager::copy_latency_ms() const {
  calibrate_copies();
  return copy_latency_ms_;
}

double MemoryManager::copy_queued_ms() const {
  calibrate_copies();
  if (copy_queued_ms_ < 0) calibrate_queued_copies();
  return copy_queued_ms_;
}

void MemoryManager::calibrate_copies() const {
  if (copy_ms_per_byte_ >= 0) return;
  // Reads the arena's first bytes into a pinned buffer: no device block is allocated, so the
  // allocators' request sequences stay as they are. The best of a few copies of each size.
  const size_t big = std::min(kCalibrationBytes, backend_.arena_bytes()), small = std::min(kAllocAlignment, big);
  void* host = backend_.host_alloc(big);
  auto time_copy = [&](size_t n) {
    double best = -1;
    for (int i = 0; i < 5; ++i) {
      const double t0 = backend_.now_ms();
      backend_.copy_async(Stream::kD2H, host, backend_.arena_base(), n);
      backend_.record(Stream::kD2H)->wait();
      const double ms = backend_.now_ms() - t0;
      if (best < 0 || ms < best) best = ms;
    }
    return std::max(best, 0.0);
  };
  copy_latency_ms_ = time_copy(small);
  const double big_ms = time_copy(big);
  backend_.host_free(host, big);
  // Under load the small copy's best can exceed the large one's (preempted all five times): the
  // rate is then the large copy's whole time per byte, its latency counted in, not 0 (a free link).
  const double span = big_ms > copy_latency_ms_ ? big_ms - copy_latency_ms_ : big_ms;
  copy_ms_per_byte_ = big > small ? span / static_cast<double>(big_ms > copy_latency_ms_ ? big - small : big) : 0.0;
}

// Only when asked (policy auto, off sim): its copies would move a sim's clock, and with it the
// last bits of every later time.
void MemoryManager::calibrate_queued_copies() const {
  const size_t small = std::min(kAllocAlignment, backend_.arena_bytes());
  void* host = backend_.host_alloc(small);
  // A copy queued behind others does not wait for its own round trip: kQueuedRun and 4x as
  // many small copies back to back, one wait each, the best of three; the difference over the
  // extra copies is what each adds (the host's call, the copy engine's start, its bytes).
  auto time_run = [&](int n) {
    double best = -1;
    for (int i = 0; i < 3; ++i) {
      const double t0 = backend_.now_ms();
      for (int k = 0; k < n; ++k) backend_.copy_async(Stream::kD2H, host, backend_.arena_base(), small);
      backend_.record(Stream::kD2H)->wait();
      const double ms = backend_.now_ms() - t0;
      if (best < 0 || ms < best) best = ms;
    }
    return std::max(best, 0.0);
  };
  const double few = time_run(kQueuedRun), many = time_run(4 * kQueuedRun);
  backend_.host_free(host, small);
  const double per = (many - few) / (3 * kQueuedRun) - static_cast<double>(small) * copy_ms_per_byte_;
  copy_queued_ms_ = per > 1e-9 ? std::min(per, copy_latency_ms_) : 0.0;  // at most a lone copy's
}

MemoryManager::~MemoryManager() {
  backend_.synchronize();
  for (auto& s : states_) free_host(s);
}

void MemoryManager::init_persistent(uint64_t seed, const std::map<TensorId, const float*>* values) {
  for (const auto& t : graph_.tensors()) {
    if (!t.persistent()) continue;
    float* p = allocate(t.id);
    if (paged_) {  // its pages onto the device before the values are written
      paged_->fault(-1, {{st(t.id).offset, st(t.id).bytes, true}});
      paged_->unpin();
    }
    const auto given = values ? values->find(t.id) : decltype(values->end()){};
    if (values && given != values->end()) backend_.copy_to_device(p, given->second, t.bytes());
    else backend_.init_tensor(t, p, seed);
  }
  if (policy_->wants_codec_rate()) codec_rate_ = measure_codec_rate();
}

// A bitmask compression and decompression of a normally distributed tensor (every element
// non-zero: the most a codec call writes per element) at two sizes, the best of three of each,
// on the compression stream: the line through the two gives a call's latency and its time per
// byte read and written. Before the first iteration, in blocks the caching allocator merges back
// on free, so the arena every iteration starts from is as it would be without the probe.
std::optional<CodecRate> MemoryManager::measure_codec_rate() {
  if (!backend_.modelled_gpu().empty() || paged_ || !backend_.has_data()) return std::nullopt;
  const auto& a = allocator_->stats();
  size_t n = std::min(kCodecProbeElements, a.largest_free_block / 3 / sizeof(float)) / 1024 * 1024;
  if (n < 8 * 1024) return std::nullopt;  // too little room to time a line
  const size_t ws_bytes = codec_chunk_workspace(std::min(codec_chunk_elements(compression_.workspace_bytes), n));
  TensorInfo t;
  t.name = "codec probe";
  t.init = Init::kHeNormal;
  t.shape = Shape{static_cast<int64_t>(n)};
  std::vector<size_t> blocks;
  const auto block = [&](size_t bytes) {
    const auto off = allocator_->allocate(bytes, -1);
    if (off) blocks.push_back(*off);
    return off;
  };
  const auto src = block(n * sizeof(float)), dst = block(codec_bound(Codec::kBitmask, n)), ws = block(ws_bytes);
  std::optional<CodecRate> out;
  if (src && dst && ws) {
    backend_.init_tensor(t, arena_at(*src), 7);
    backend_.synchronize();
    // One size's best time per call and the bytes a call read and wrote: kCalls calls queued
    // back to back on the stream, then one wait (as a plan queues them; a lone call's time would
    // count the host's round trip, which the stream hides), compressions then decompressions.
    constexpr int kCalls = 4;
    const auto time = [&](size_t m) {
      TensorInfo u = t;
      u.shape = Shape{static_cast<int64_t>(m)};
      double best = -1;
      size_t moved = 0;
      for (int round = 0; round < 3; ++round) {
        std::array<CodecResult, kCalls> r{};
        const double t0 = backend_.now_ms();
        for (auto& x : r)
          backend_.compress_async(Stream::kCompress, Codec::kBitmask, u, arena_at(*src), arena_at(*dst),
                                  codec_bound(Codec::kBitmask, m), arena_at(*ws), ws_bytes, &x);
        backend_.synchronize();
        const auto packed = static_cast<size_t>(r[0].bytes);
        for (auto& x : r)
          backend_.decompress_async(Stream::kCompress, Codec::kBitmask, u, arena_at(*dst), packed, arena_at(*src), &x);
        backend_.synchronize();
        const double ms = (backend_.now_ms() - t0) / (2 * kCalls);
        if (best < 0 || ms < best) best = ms;
        moved = m * sizeof(float) + packed;
      }
      return std::make_pair(std::max(best, 0.0), moved);
    };
    const auto [small_ms, small_bytes] = time(n / 8);
    const auto [big_ms, big_bytes] = time(n);
    CodecRate c;
    c.probe_bytes = n * sizeof(float);
    // As the copies' calibration: under load the small call's best can exceed the large one's; the
    // rate is then the large call's whole time per byte.
    if (big_ms > small_ms && big_bytes > small_bytes) {
      c.ms_per_byte = (big_ms - small_ms) / static_cast<double>(big_bytes - small_bytes);
      c.latency_ms = std::max(0.0, small_ms - c.ms_per_byte * static_cast<double>(small_bytes));
    } else {
      c.ms_per_byte = big_ms / static_cast<double>(big_bytes);
    }
    if (c.ms_per_byte > 0) out = c;
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) allocator_->free(*it);
  return out;
}

void MemoryManager::begin_iteration(int iteration) {
  iteration_ = iteration;
  allocator_->begin_iteration(iteration);
  allocator_->reset_peak();
  host_.reset_peak();
  counters_ = {};
  if (paged_) paged_->begin_iteration();
  timeline_.clear();
  timeline_prev_ = {};
  timeline_prev_faults_ = timeline_prev_prefetches_ = 0;
  op_scratch_ = 0;
  tracker_.begin_iteration(iteration, backend_.now_ms());
  for (auto& s : states_) {
    if (!s.persistent) s.released = false;
    s.stat = {};
  }
  policy_->begin_iteration(iteration);
  if (policy_->take_plan_change()) release_idle_buffers();
  allocator_->set_high_placement(policy_->high_placement_bytes());
  // A measured iteration's op times from the device where the backend has them (cuda): the
  // clock around an asynchronous launch is not the kernel's time.
  if (device_op_timing_) backend_.end_op_timing(0);  // an iteration that failed left it on
  device_op_timing_ = policy_->measuring() && backend_.begin_op_timing();
  conv_algos_ = policy_->conv_algorithms();
}

void MemoryManager::end_iteration() {
  while (finish_oldest_swap_out()) {
  }
  while (finish_oldest_compress()) {
  }
  for (const auto& t : graph_.tensors()) {
    const State& s = st(t.id);
    if (!s.persistent && s.residency != Residency::kUnallocated)
      throw std::logic_error("tensor " + t.name + " still " + to_string(s.residency) + " at the end of an iteration");
  }
  if (device_op_timing_) {
    device_op_timing_ = false;
    std::vector<double> ms = backend_.end_op_timing(graph_.num_ops());
    if (ms.size() == graph_.num_ops()) tracker_.set_device_op_times(std::move(ms));
  }
  const auto p0 = std::chrono::steady_clock::now();
  policy_->end_iteration(tracker_.current());
  policy_end_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
  // The plan's start state; the copies are waited for here, in this iteration's time (every
  // other swap-out has ended above).
  for (TensorId id : policy_->on_host_at_start()) {
    id = storage_of(id);
    const State& s = st(id);
    if (s.persistent && s.residency == Residency::kResident && s.locks == 0 && host_.fits(s.bytes)) start_swap_out(id, op_seq_ + 1);
  }
  while (finish_oldest_swap_out()) {
  }
  if (policy_->compact_at_iteration_end() && !paged_) {
    const uint64_t before = counters_.compactions;
    std::optional<bool> placed;  // the layout the policy asks for, once (auto's warm start)
    if (const std::vector<LayoutBlock> target = policy_->take_start_layout(); !target.empty()) {
      // The persistent tensors it has on the device that are on the host now come back first
      // (waited for, in this iteration's time), where the arena has room for them as it is.
      for (const LayoutBlock& b : target) {
        if (b.buffer || b.id == kNoTensor) continue;
        const State& s = st(b.id);
        if (s.persistent && s.residency == Residency::kOnHost && allocator_->stats().largest_free_block >= align_up(s.bytes))
          restore(b.id);
      }
      placed = move_to_layout(target);
    }
    const bool restore = policy_->start_state() == StartState::kRestored;
    if (!placed && restore) placed = restore_start_state();
    const bool moved = placed ? *placed : pack_start_state();
    counters_.compactions = before + (moved ? 1 : 0);  // already in place: none counted
    if (restore) start_layout_ = live_device_blocks();
    else start_layout_.clear();
  }
  for (auto& s : states_) s.placed_seq = 0;
  allocator_->end_iteration(policy_->iteration_repeats());
}

// ---------------------------------------------------------------- allocation and the OOM ladder

size_t MemoryManager::alloc_block(size_t bytes, int64_t tag, const char* what) {
  if (fault::hit(fault::Kind::kDeviceAlloc))
    throw OutOfMemoryError(bytes, allocator_->stats().allocated, budget(),
                           fault::message(fault::Kind::kDeviceAlloc, std::string("device allocation (") + what + ")"));
  for (;;) {
    if (auto off = allocator_->allocate(bytes, tag)) {
      if (paged_) paged_->on_alloc(*off, allocator_->block_size(*off));
      return *off;
    }
    if (finish_oldest_swap_out()) continue;  // wait for the oldest in-flight swap-out to free its block
    if (finish_oldest_compress()) continue;  // likewise a compression
    std::vector<Victim> victims = policy_->choose_victims(bytes, *this);
    bool progressed = false;
    size_t host_refused = 0;  // a swap victim the host budget could not take
    for (const Victim& v : victims) {
      const State& s = st(v.id);
      if (s.residency != Residency::kResident || s.locks > 0) continue;  // policy asked for something it may not have
      if (v.action == EvictAction::kDrop && !can_recompute(v.id)) continue;
      if (v.action == EvictAction::kSwap && !host_.fits(s.bytes)) {
        if (!host_refused) host_refused = s.bytes;
        ++counters_.host_skipped_swaps;
        continue;
      }
      evict(v);
      progressed = true;
    }
    if (!progressed && finish_prefetches()) continue;  // landed prefetches can be evicted again
    // Compaction; an allocator may also free room by giving up a layout (the planned pool's plan).
    if (!progressed && !paged_ && allocator_->stats().free_bytes >= align_up(bytes) &&
        (compact(align_up(bytes)) || allocator_->stats().largest_free_block >= align_up(bytes)))
      continue;
    if (!progressed && release_idle_buffers()) continue;  // persistent buffers not holding a tensor now give way
    if (!progressed && drop_compressed(bytes)) continue;  // compressed tensors that can be recomputed, least recent first
    if (!progressed && host_refused) {
      throw OutOfMemoryError::host(
          host_refused, host_.in_use(), host_.budget(),
          "swap-out to make room for a device allocation of " + format_bytes(bytes) + " for " + what +
              (tag >= 0 ? " '" + graph_.tensor(static_cast<TensorId>(tag)).name + "'" : "") + ", policy '" +
              policy_->name() + "'; device budget " + format_bytes(budget()));
    }
    if (!progressed && paged_) {  // the managed range stands for the host memory behind the pages
      throw OutOfMemoryError::host(
          bytes, allocator_->stats().allocated, allocator_->stats().capacity,
          std::string(what) + (tag >= 0 ? " '" + graph_.tensor(static_cast<TensorId>(tag)).name + "'" : "") +
              ": the unified-memory range (" + std::to_string(kManagedRangeFactor) + " x the device budget of " +
              format_bytes(budget()) + ") is full, policy '" + policy_->name() + "'");
    }
    if (!progressed) {
      std::string ctx = std::string(what) + (tag >= 0 ? " '" + graph_.tensor(static_cast<TensorId>(tag)).name + "'" : "") +
                        ", policy '" + policy_->name() + "' found nothing more to evict; " + usage_summary();
      throw OutOfMemoryError(bytes, allocator_->stats().allocated, budget(), ctx, policy_->smallest_working_budget());
    }
  }
}

std::string MemoryManager::usage_summary() const {
  size_t persistent = 0, locked = 0, other = 0, tensors = 0, compressed = 0;
  for (const auto& s : states_) {
    if (s.has_buffer) compressed += s.comp_capacity;
    if (s.residency == Residency::kCompressed) continue;
    if (s.residency != Residency::kResident && s.residency != Residency::kSwappingOut && s.residency != Residency::kSwappingIn &&
        s.residency != Residency::kCompressing && s.residency != Residency::kDecompressing)
      continue;
    tensors += s.bytes;
    if (s.locks > 0) locked += s.bytes;
    else if (s.persistent) persistent += s.bytes;
    else other += s.bytes;
  }
  const auto& a = allocator_->stats();
  tensors += compressed + (has_sliding_ ? sliding_bytes_ : 0);
  return "in use: " + format_bytes(locked) + " by the running op, " + format_bytes(persistent) +
         " parameters and optimizer state, " + format_bytes(other) + " other tensors, " +
         (compressed ? format_bytes(compressed) + " compressed buffers, " : std::string()) +
         format_bytes(a.allocated > tensors ? a.allocated - tensors : 0) + " scratch and rounding; free " +
         format_bytes(a.free_bytes) + ", largest free block " + format_bytes(a.largest_free_block) + " (fragmentation " +
         std::to_string(static_cast<int>(std::lround(100 * a.fragmentation()))) + "%)";
}

float* MemoryManager::allocate(TensorId id) {
  if (is_view(id)) {  // no block: the producer (a reshape) has its base resident and locked
    if (residency(id) != Residency::kResident)
      throw std::logic_error("allocate: view " + graph_.tensor(id).name + " of a base that is " + to_string(residency(id)));
    return device_ptr(id);
  }
  State& s = st(id);
  if (s.residency != Residency::kUnallocated && s.residency != Residency::kDropped)
    throw std::logic_error("allocate: tensor " + graph_.tensor(id).name + " is " + to_string(s.residency));
  s.offset = alloc_block(s.bytes, id, "tensor");
  s.placed_seq = s.persistent ? ++placements_ : 0;
  s.residency = Residency::kResident;  // `released` stays: a recomputed tensor may be past its last use
  return device_ptr(id);
}

void* MemoryManager::allocate_scratch(size_t bytes, const char* what) {
  const size_t off = alloc_block(bytes, -1, what);
  op_scratch_ += bytes;
  return arena() + off;
}

void MemoryManager::free_scratch(void* p) {
  const size_t off = static_cast<size_t>(static_cast<char*>(p) - arena());
  if (paged_) paged_->on_free(off, allocator_->block_size(off));
  allocator_->free(off);
}

float* MemoryManager::device_ptr(TensorId id) const {
  id = storage_of(id);
  const State& s = st(id);
  if (s.residency != Residency::kResident && s.residency != Residency::kSwappingOut && s.residency != Residency::kCompressing)
    throw std::logic_error("device_ptr: tensor " + graph_.tensor(id).name + " is " + to_string(s.residency));
  return reinterpret_cast<float*>(arena() + s.offset);
}

void MemoryManager::lock(TensorId id) { ++st(storage_of(id)).locks; }
void MemoryManager::unlock(TensorId id) {
  id = storage_of(id);
  State& s = st(id);
  if (s.locks <= 0) throw std::logic_error("unlock of an unlocked tensor " + graph_.tensor(id).name);
  --s.locks;
}

// ---------------------------------------------------------------- access and restore

float* MemoryManager::access(TensorId id, AccessKind kind, int op_index) {
  id = storage_of(id);  // the trace and the policy see the base
  State& s = st(id);
  const Residency from = s.residency;
  // A swap-out the restore waited for (its allocation needed the block) is that swap's cost,
  // told to the policy by on_swap_out_wait, not this access's.
  const double waited0 = counters_.stall_ms + counters_.recompute_ms, out0 = swap_out_waits_ms_;
  restore(id);
  const double waited = (counters_.stall_ms + counters_.recompute_ms - waited0) - (swap_out_waits_ms_ - out0);
  if (from == Residency::kCompressed || from == Residency::kDecompressing) {
    s.stat.stall_ms += waited;
    if (from == Residency::kCompressed) ++s.stat.on_demand, ++counters_.on_demand_decompressions;
  }
  if (from != Residency::kResident && from != Residency::kSwappingOut && from != Residency::kCompressing &&
      (kind == AccessKind::kRead || kind == AccessKind::kWrite))
    policy_->on_restore(id, op_index, from, waited);
  s.last_access = ++clock_;
  s.last_access_op = op_index;
  tracker_.record(id, op_index, kind, backend_.now_ms());
  return device_ptr(id);
}

void MemoryManager::wait_copy(State& s, bool swap_copy) {
  if (!s.event) return;
  if (!s.event->query()) {
    if (swap_copy && backend_.waits_on_device()) {
      // The host goes on: its time here is the call's, not a stall (collect_device_waits adds
      // the device's wait). Policies see no wait, so none reads the call as a late prefetch.
      backend_.compute_wait(s.event);
    } else {
      const double t0 = backend_.now_ms();
      backend_.stream_wait(Stream::kCompute, s.event);
      counters_.stall_ms += backend_.now_ms() - t0;
    }
  }
  s.event.reset();
}

void MemoryManager::collect_device_waits() { counters_.stall_ms += backend_.take_device_wait_ms(); }

void MemoryManager::restore(TensorId id) {
  State& s = st(id);
  switch (s.residency) {
    case Residency::kResident: return;
    case Residency::kSwappingOut:
      cancel_swap_out(id);
      return;
    case Residency::kOnHost:
      ++s.locks;  // not a victim while it is being brought back
      prefetch(id);
      --s.locks;
      [[fallthrough]];
    case Residency::kSwappingIn: {
      wait_copy(s, true);
      free_host(s);
      s.residency = Residency::kResident;
      return;
    }
    case Residency::kDropped: {
      if (!recompute_) throw std::logic_error("tensor dropped but no recompute function is set");
      recompute_(id);  // the executor re-runs the producer; it calls allocate() for this tensor
      if (s.residency != Residency::kResident)
        throw std::logic_error("recompute did not restore " + graph_.tensor(id).name);
      return;
    }
    case Residency::kCompressing:
      cancel_compress(id);
      return;
    case Residency::kCompressed:
      decompress(id);
      [[fallthrough]];
    case Residency::kDecompressing:
      finish_decompress(id);
      return;
    case Residency::kUnallocated:
      throw std::logic_error("tensor " + graph_.tensor(id).name + " accessed before it was produced or after release");
  }
}

void MemoryManager::read(TensorId id, void* host_dst) {
  if (!backend_.has_data())
    throw std::invalid_argument("values of '" + graph_.tensor(id).name + "' are not available: backend " +
                                backend_.name() + " holds no tensor values");
  id = storage_of(id);
  State& s = st(id);
  if (paged_ && s.residency == Residency::kResident) {  // its pages, wherever they are
    paged_->read(s.offset, s.bytes, host_dst);
    return;
  }
  if (s.residency == Residency::kOnHost || s.residency == Residency::kSwappingOut) {
    if (s.event) s.event->wait();
    else if (backend_.waits_on_device()) backend_.record(Stream::kD2H)->wait();  // its copy out may still run
    std::memcpy(host_dst, s.host, s.bytes);
    return;
  }
  if (s.residency == Residency::kSwappingIn) {
    wait_copy(s);
    free_host(s);
    s.residency = Residency::kResident;
  }
  if (s.residency == Residency::kCompressed || s.residency == Residency::kDecompressing) restore(id);
  if (s.residency == Residency::kCompressing && s.event) s.event->wait();  // its bytes are still there
  backend_.copy_to_host(host_dst, device_ptr(id), s.bytes);
}

// ---------------------------------------------------------------- mechanisms

void MemoryManager::swap_out(TensorId id) {
  // after_op(k) runs with op_seq_ = seq(k) + 1: freed in after_op(k + 2). During op k's
  // allocations op_seq_ = seq(k): freed in after_op(k + 1).
  start_swap_out(id, op_seq_ + 1);
}

void MemoryManager::start_swap_out(TensorId id, uint64_t release_seq) {
  id = storage_of(id);
  State& s = st(id);
  if (s.residency != Residency::kResident) throw std::logic_error("swap_out of a tensor that is " + std::string(to_string(s.residency)));
  if (fault::hit(fault::Kind::kCopy))  // before anything changes: the tensor stays resident
    throw DeviceError(fault::message(fault::Kind::kCopy, "copy to host of '" + graph_.tensor(id).name + "'"));
  if (!host_.fits(s.bytes))  // the ladder and after_op check first; a direct call may not have
    throw OutOfMemoryError::host(s.bytes, host_.in_use(), host_.budget(), "swap-out of '" + graph_.tensor(id).name + "'");
  s.host = host_.acquire(s.bytes);
  backend_.stream_wait(Stream::kD2H, backend_.record(Stream::kCompute));  // the producer has finished
  backend_.copy_async(Stream::kD2H, s.host, device_ptr(id), s.bytes);
  s.event = backend_.record(Stream::kD2H);
  s.residency = Residency::kSwappingOut;
  s.release_seq = release_seq;
  swapping_out_.push_back(id);
  counters_.swapped_out_bytes += s.bytes;
  ++counters_.swap_outs;
}

void MemoryManager::prefetch(TensorId id) {
  id = storage_of(id);
  State& s = st(id);
  if (s.residency != Residency::kOnHost) throw std::logic_error("prefetch of a tensor that is " + std::string(to_string(s.residency)));
  if (fault::hit(fault::Kind::kCopy))  // before anything changes: the tensor stays on host
    throw DeviceError(fault::message(fault::Kind::kCopy, "copy to the device of '" + graph_.tensor(id).name + "'"));
  s.offset = alloc_block(s.bytes, id, "swap-in");
  s.placed_seq = s.persistent ? ++placements_ : 0;
  backend_.stream_wait(Stream::kH2D, backend_.record(Stream::kCompute));  // the block's last user has finished
  s.residency = Residency::kSwappingIn;
  backend_.copy_async(Stream::kH2D, static_cast<char*>(backend_.arena_base()) + s.offset, s.host, s.bytes);
  s.event = backend_.record(Stream::kH2D);
  counters_.swapped_in_bytes += s.bytes;
  ++counters_.swap_ins;
}

void MemoryManager::drop(TensorId id) {
  id = storage_of(id);
  State& s = st(id);
  if (s.residency != Residency::kResident && s.residency != Residency::kCompressed)
    throw std::logic_error("drop of a tensor that is " + std::string(to_string(s.residency)));
  if (!can_recompute(id)) throw std::logic_error("drop of " + graph_.tensor(id).name + ", which cannot be recomputed now");
  if (s.residency == Residency::kCompressed) {  // its buffer goes, persistent or not
    free_buffer(s, true);
    s.codec = Codec::kNone;
  } else {
    free_device(s);
  }
  s.residency = Residency::kDropped;
  add_lineage_refs(id, +1);
  ++counters_.dropped;
}

void MemoryManager::evict(const Victim& v) {
  ++counters_.evictions;
  if (v.action == EvictAction::kSwap) {
    swap_out(v.id);
  } else {
    drop(v.id);
  }
}

void MemoryManager::cancel_swap_out(TensorId id) {
  // Still on the device: let the copy finish, keep the device bytes, forget the host copy.
  State& s = st(id);
  wait_copy(s, true);
  swapping_out_.erase(std::find(swapping_out_.begin(), swapping_out_.end(), id));
  free_host(s);
  s.residency = Residency::kResident;
}

void MemoryManager::finish_swap_outs_due(uint64_t op_seq) {
  // Release points need not follow issue order: an older copy with a later release point keeps
  // its block (it has finished if a younger one has, as one stream runs them in order).
  for (auto it = swapping_out_.begin(); it != swapping_out_.end();) {
    const TensorId id = *it;
    if (st(id).release_seq > op_seq) {
      ++it;
      continue;
    }
    const double stall0 = counters_.stall_ms;
    wait_copy(st(id), true);
    if (counters_.stall_ms > stall0) swap_out_waited(id, counters_.stall_ms - stall0);
    it = swapping_out_.erase(it);
    complete_swap_out(id);
  }
}

bool MemoryManager::finish_prefetches() {
  bool any = false;
  for (size_t i = 0; i < states_.size(); ++i) {
    State& s = states_[i];
    if (s.residency == Residency::kDecompressing && s.locks == 0) {
      finish_decompress(static_cast<TensorId>(i));
      any = true;
      continue;
    }
    if (s.residency != Residency::kSwappingIn || s.locks > 0) continue;
    wait_copy(s, true);
    free_host(s);
    s.residency = Residency::kResident;
    any = true;
  }
  return any;
}

void MemoryManager::swap_out_waited(TensorId id, double ms) {
  swap_out_waits_ms_ += ms;
  policy_->on_swap_out_wait(id, ms);
}

bool MemoryManager::finish_oldest_swap_out() {
  if (swapping_out_.empty()) return false;
  TensorId id = swapping_out_.front();
  const double stall0 = counters_.stall_ms;
  wait_copy(st(id), true);
  if (counters_.stall_ms > stall0) swap_out_waited(id, counters_.stall_ms - stall0);
  swapping_out_.pop_front();
  complete_swap_out(id);
  return true;
}

void MemoryManager::complete_swap_out(TensorId id) {
  State& s = st(id);
  s.event.reset();
  free_device(s);
  s.residency = Residency::kOnHost;
  if (s.released && s.lineage_refs == 0) destroy(id);
}

void MemoryManager::free_device(State& s) {
  if (paged_) paged_->on_free(s.offset, allocator_->block_size(s.offset));
  allocator_->free(s.offset);
}

void MemoryManager::free_host(State& s) {
  if (s.host) host_.release(s.host, s.bytes);
  s.host = nullptr;
}

// ---------------------------------------------------------------- compression

bool MemoryManager::compress(TensorId id, Codec codec, size_t capacity, uint64_t release_seq, bool per_use_buffer) {
  id = storage_of(id);
  State& s = st(id);
  if (s.residency != Residency::kResident) throw std::logic_error("compress of a tensor that is " + std::string(to_string(s.residency)));
  if (codec == Codec::kNone) throw std::logic_error("compress of " + graph_.tensor(id).name + " without a codec");
  const TensorInfo& t = graph_.tensor(id);
  const auto n = static_cast<size_t>(t.shape.numel());
  capacity = std::max(capacity, codec_mask_bytes(n));
  const CompressionOptions& o = compression_;
  s.per_use_buffer = per_use_buffer;
  ++s.locks;  // not a victim while its blocks are found
  try {
    if (s.has_buffer && s.comp_capacity < capacity) free_buffer(s, true);  // the plan asks for more now
    if (!s.has_buffer) {
      s.comp_offset = alloc_block(capacity, -1, "compressed buffer");
      s.comp_capacity = capacity;
      s.has_buffer = true;
    }
    if (codec == Codec::kBitmask && o.sliding_workspace) {
      // One fixed workspace for the run: as large as this tensor's worst-case chunk needs, at most
      // workspace_bytes; it grows (once, in the first iterations) for a larger tensor.
      const size_t want = codec_chunk_workspace(std::min(codec_chunk_elements(o.workspace_bytes), (n + 31) / 32 * 32));
      if (has_sliding_ && sliding_bytes_ < want) {
        while (finish_oldest_compress()) {  // nothing may be using it
        }
        allocator_->free(sliding_offset_);
        has_sliding_ = false;
      }
      if (!has_sliding_) {
        sliding_offset_ = alloc_block(want, -1, "sliding compression workspace");
        sliding_bytes_ = want;
        has_sliding_ = true;
      }
    } else if (codec == Codec::kBitmask) {
      s.ws_offset = alloc_block(codec_chunk_workspace((n + 31) / 32 * 32), -1, "compression workspace");
      s.own_workspace = true;
    }
  } catch (const OutOfMemoryError&) {
    --s.locks;
    free_buffer(s, false);
    ++counters_.compress_skipped;
    return false;
  }
  --s.locks;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  if (s.own_workspace) ws = arena_at(s.ws_offset), ws_bytes = codec_chunk_workspace((n + 31) / 32 * 32);
  else if (codec == Codec::kBitmask) ws = arena_at(sliding_offset_), ws_bytes = sliding_bytes_;
  const Stream cs = o.on_compute_stream ? Stream::kCompute : Stream::kCompress;
  if (cs != Stream::kCompute) backend_.stream_wait(cs, backend_.record(Stream::kCompute));  // the producer has finished
  s.result = {};
  backend_.compress_async(cs, codec, t, device_ptr(id), arena_at(s.comp_offset), s.comp_capacity, ws, ws_bytes, &s.result);
  s.event = backend_.record(cs);
  s.codec = codec;
  s.residency = Residency::kCompressing;
  s.release_seq = release_seq;
  compressing_.push_back(id);
  return true;
}

void MemoryManager::complete_compress(TensorId id) {
  State& s = st(id);
  wait_copy(s);
  compressing_.erase(std::find(compressing_.begin(), compressing_.end(), id));
  free_own_workspace(s);
  s.stat.id = id;
  s.stat.codec = s.codec;
  s.stat.bytes_before = s.bytes;
  s.stat.bytes_after = s.result.bytes;
  s.stat.capacity = s.comp_capacity;
  s.stat.compress_ms += s.result.ms;
  counters_.compress_ms += s.result.ms;
  if (s.result.bytes > s.comp_capacity) {  // denser than planned: keep it as it is
    ++s.stat.overflows;
    ++counters_.compress_overflows;
    free_buffer(s, false);
    s.residency = Residency::kResident;
    s.codec = Codec::kNone;
    if (s.released && s.lineage_refs == 0) destroy(id);
    return;
  }
  ++s.stat.compressions;
  ++counters_.compressions;
  counters_.compressed_bytes += s.bytes;
  counters_.compressed_to_bytes += s.result.bytes;
  s.comp_bytes = s.result.bytes;
  free_device(s);
  s.residency = Residency::kCompressed;
  if (s.released && s.lineage_refs == 0) destroy(id);
}

void MemoryManager::cancel_compress(TensorId id) {
  State& s = st(id);
  wait_copy(s);
  compressing_.erase(std::find(compressing_.begin(), compressing_.end(), id));
  free_own_workspace(s);
  free_buffer(s, false);
  s.residency = Residency::kResident;
  s.codec = Codec::kNone;
}

void MemoryManager::decompress(TensorId id) {
  id = storage_of(id);
  State& s = st(id);
  if (s.residency != Residency::kCompressed) throw std::logic_error("decompress of a tensor that is " + std::string(to_string(s.residency)));
  ++s.locks;
  s.offset = alloc_block(s.bytes, id, "decompression");
  s.placed_seq = s.persistent ? ++placements_ : 0;
  --s.locks;
  const Stream cs = compression_.on_compute_stream ? Stream::kCompute : Stream::kCompress;
  if (cs != Stream::kCompute) backend_.stream_wait(cs, backend_.record(Stream::kCompute));  // the block's last user has finished
  s.result = {};
  backend_.decompress_async(cs, s.codec, graph_.tensor(id), arena_at(s.comp_offset), s.comp_bytes, arena_at(s.offset), &s.result);
  s.event = backend_.record(cs);
  s.residency = Residency::kDecompressing;
  ++counters_.decompressions;
}

void MemoryManager::finish_decompress(TensorId id) {
  State& s = st(id);
  wait_copy(s);
  s.stat.decompress_ms += s.result.ms;
  counters_.decompress_ms += s.result.ms;
  free_buffer(s, false);
  s.residency = Residency::kResident;
  s.codec = Codec::kNone;
}

void MemoryManager::finish_compressions_due(uint64_t op_seq) {
  for (auto it = compressing_.begin(); it != compressing_.end();) {
    const TensorId id = *it;
    if (st(id).release_seq > op_seq) {
      ++it;
      continue;
    }
    complete_compress(id);  // erases it
    it = compressing_.begin();
  }
}

bool MemoryManager::finish_oldest_compress() {
  if (compressing_.empty()) return false;
  complete_compress(compressing_.front());
  return true;
}

void MemoryManager::free_buffer(State& s, bool even_persistent) {
  if (!s.has_buffer || (compression_.persistent_buffers && !s.per_use_buffer && !even_persistent)) return;
  allocator_->free(s.comp_offset);
  s.has_buffer = false;
  s.comp_capacity = 0;
}

bool MemoryManager::drop_compressed(size_t bytes) {
  std::vector<TensorId> cands;
  for (size_t i = 0; i < states_.size(); ++i)
    if (states_[i].residency == Residency::kCompressed && states_[i].locks == 0) cands.push_back(static_cast<TensorId>(i));
  std::sort(cands.begin(), cands.end(), [&](TensorId a, TensorId b) {
    return st(a).last_access != st(b).last_access ? st(a).last_access < st(b).last_access : a < b;
  });
  size_t freed = 0;
  for (TensorId id : cands) {
    if (freed >= bytes) break;
    if (!can_recompute(id)) continue;
    freed += st(id).comp_capacity;
    drop(id);
    ++counters_.evictions;
  }
  return freed > 0;
}

bool MemoryManager::release_idle_buffers() {
  bool any = false;
  for (auto& s : states_) {
    if (!s.has_buffer || s.residency == Residency::kCompressing || s.residency == Residency::kCompressed ||
        s.residency == Residency::kDecompressing)
      continue;
    free_buffer(s, true);
    ++counters_.buffers_released;
    any = true;
  }
  if (has_sliding_ && compressing_.empty()) {  // the sliding workspace too, when no codec uses it
    allocator_->free(sliding_offset_);
    has_sliding_ = false;
    ++counters_.buffers_released;
    any = true;
  }
  return any;
}

void MemoryManager::free_own_workspace(State& s) {
  if (!s.own_workspace) return;
  allocator_->free(s.ws_offset);
  s.own_workspace = false;
}

std::optional<size_t> MemoryManager::count_nonzeros(TensorId id) const {
  id = storage_of(id);
  const State& s = st(id);
  if (s.residency != Residency::kResident && s.residency != Residency::kSwappingOut) return std::nullopt;
  const TensorInfo& t = graph_.tensor(id);
  auto n = backend_.count_nonzeros(t, device_ptr(id));
  if (n && backend_.has_data()) measured_.tensors[density_key(t)] = {static_cast<uint64_t>(t.shape.numel()), *n};
  return n;
}

std::vector<CompressionStat> MemoryManager::compression_stats() const {
  std::vector<CompressionStat> out;
  for (const auto& s : states_)
    if (s.stat.id != kNoTensor) out.push_back(s.stat);
  return out;
}

// ---------------------------------------------------------------- lifetimes and lineage

void MemoryManager::release(TensorId id) {
  State& s = st(id);
  if (s.persistent || is_view(id)) return;  // a base outlives its views (the executor's last uses)
  s.released = true;
  if (s.lineage_refs == 0) destroy(id);
}

void MemoryManager::destroy(TensorId id) {
  State& s = st(id);
  if (s.locks > 0) throw std::logic_error("destroy of locked tensor " + graph_.tensor(id).name);
  switch (s.residency) {
    case Residency::kUnallocated: return;
    case Residency::kSwappingOut: return;  // freed when its copy completes (complete_swap_out)
    case Residency::kCompressing: return;  // likewise, when its compression completes (complete_compress)
    case Residency::kDecompressing:
      wait_copy(s);
      free_device(s);
      free_buffer(s, false);
      break;
    case Residency::kCompressed:
      free_buffer(s, false);
      break;
    case Residency::kSwappingIn:
      wait_copy(s, true);
      [[fallthrough]];
    case Residency::kResident:
      free_device(s);
      break;
    case Residency::kOnHost:
      break;
    case Residency::kDropped:
      add_lineage_refs(id, -1);
      break;
  }
  free_host(s);
  s.residency = Residency::kUnallocated;
}

void MemoryManager::add_lineage_refs(TensorId id, int delta) {
  const TensorInfo& t = graph_.tensor(id);
  for (TensorId in : graph_.op(t.producer).inputs) {
    in = storage_of(in);
    State& s = st(in);
    if (delta > 0 && s.residency == Residency::kUnallocated && s.released) {
      // Released earlier this iteration: it comes back as dropped, recomputable from its own inputs.
      s.residency = Residency::kDropped;
      add_lineage_refs(in, +1);
    }
    s.lineage_refs += delta;
    if (s.lineage_refs < 0) throw std::logic_error("negative lineage refs on " + graph_.tensor(in).name);
    if (delta < 0 && s.lineage_refs == 0 && s.released) destroy(in);
  }
}

bool MemoryManager::can_recompute(TensorId id) const {
  std::vector<int8_t> memo(states_.size(), -1);
  return can_recompute(id, memo);
}

// Memoised per query: lineages share ancestors (residual and attention fan-in), and walking
// them without a memo is exponential in depth (minutes per query on a transformer log).
bool MemoryManager::can_recompute(TensorId id, std::vector<int8_t>& memo) const {
  int8_t& m = memo[static_cast<size_t>(id)];
  if (m < 0) m = can_recompute_uncached(id, memo) ? 1 : 0;
  return m == 1;
}

bool MemoryManager::can_recompute_uncached(TensorId id, std::vector<int8_t>& memo) const {
  const TensorInfo& t = graph_.tensor(id);
  if (t.persistent() || t.producer < 0 || is_view(id)) return false;  // a view is never a victim on its own
  const Op& op = graph_.op(t.producer);
  if (!is_recomputable(op) || !t.recomputable) return false;
  for (TensorId in : op.inputs) {
    in = storage_of(in);
    const State& s = st(in);
    // A dropped input, or one already released this iteration, can itself be recomputed
    // (DTR's view: every forward value is reachable from the data and the parameters).
    const bool gone = s.residency == Residency::kDropped || (s.residency == Residency::kUnallocated && s.released);
    if (s.residency == Residency::kUnallocated && !s.released) return false;  // not produced yet
    if (gone && !can_recompute(in, memo)) return false;
  }
  return true;
}

bool MemoryManager::compact(size_t need) {
  // No copy or codec may touch a device block while it moves.
  while (finish_oldest_swap_out()) {
  }
  while (finish_oldest_compress()) {
  }
  // What owns each movable block: a tensor's own block, a tensor's compressed buffer, or the
  // sliding workspace (kNoTensor).
  struct Owner {
    size_t offset;
    TensorId id;
    bool buffer;
  };
  std::vector<Owner> owner;  // by offset; at a shared offset, the first listed
  for (size_t i = 0; i < states_.size(); ++i) {
    State& s = states_[i];
    if (s.residency == Residency::kSwappingIn || s.residency == Residency::kDecompressing) wait_copy(s);
    if (s.residency == Residency::kResident || s.residency == Residency::kSwappingIn || s.residency == Residency::kDecompressing)
      owner.push_back({s.offset, static_cast<TensorId>(i), false});
    if (s.has_buffer) owner.push_back({s.comp_offset, static_cast<TensorId>(i), true});
  }
  if (has_sliding_) owner.push_back({sliding_offset_, kNoTensor, true});
  const auto by_offset = [](const Owner& a, const Owner& b) { return a.offset < b.offset; };
  std::stable_sort(owner.begin(), owner.end(), by_offset);
  owner.erase(std::unique(owner.begin(), owner.end(), [](const Owner& a, const Owner& b) { return a.offset == b.offset; }),
              owner.end());
  const auto find = [&](size_t off) {
    const auto it = std::lower_bound(owner.begin(), owner.end(), Owner{off, kNoTensor, false}, by_offset);
    return it != owner.end() && it->offset == off ? &*it : nullptr;
  };
  // The allocator asks block by block in address order (a pass per step of its search), so the
  // answer walks on from the last one; a lower address starts a binary search again.
  size_t at = 0;
  const auto movable = [&](size_t off) {
    if (at >= owner.size() || (at > 0 && owner[at - 1].offset >= off))
      at = static_cast<size_t>(std::lower_bound(owner.begin(), owner.end(), Owner{off, kNoTensor, false}, by_offset) - owner.begin());
    while (at < owner.size() && owner[at].offset < off) ++at;
    return at < owner.size() && owner[at].offset == off;
  };
  auto moves = allocator_->compact(movable, need);
  char* base = static_cast<char*>(backend_.arena_base());
  const double t0 = backend_.now_ms();
  // In the allocator's order: a slide's moves ascend, each down into space already vacated; a
  // relocation's go into holes outside the window they leave, so no move overwrites a later one's
  // source, and the backend may group them (Backend::move_device_batch).
  std::vector<Backend::DeviceMove> batch;
  batch.reserve(moves.size());
  for (const auto& [from, to] : moves) {
    const Owner* found = find(from);
    if (!found) throw std::logic_error("compact: the allocator moved a block nothing owns");
    const Owner o = *found;
    if (o.id == kNoTensor) {  // the sliding workspace holds nothing between compressions
      sliding_offset_ = to;
      continue;
    }
    State& s = st(o.id);
    const size_t bytes = o.buffer ? s.comp_capacity : s.bytes;
    batch.push_back({base + to, base + from, bytes});
    (o.buffer ? s.comp_offset : s.offset) = to;
    counters_.compacted_bytes += bytes;
    ++counters_.compacted_blocks;
  }
  backend_.move_device_batch(batch);
  counters_.compact_ms += backend_.now_ms() - t0;
  ++counters_.compactions;
  return !moves.empty();
}

// The start state of the next iteration, for a policy that asks for it: packed, and where it
// asks (StartState::kReordered), with the persistent tensors that got a new block this
// iteration (swapped in, decompressed) above the others, in the order they got it (the
// schedule's, so the same every iteration). Packing alone keeps the blocks' relative order, so a
// tensor brought back into another hole each iteration changes the order, and the layout can
// drift from one iteration to the next (the Transformer log at 25% on h100-80g: no eviction in
// iterations 1-4, 92 per iteration later). Where the free space cannot take them, the packed
// order stays; so it does after a measuring iteration, and on the planned pool, which keeps its
// own placement (its footprint holds the space this would move through).
bool MemoryManager::pack_start_state() {
  bool moved_any = compact();
  if (policy_->start_state() != StartState::kReordered || allocator_->name() != "caching" || !policy_->iteration_repeats())
    return moved_any;
  std::vector<TensorId> placed;
  size_t bytes = 0;
  std::vector<std::pair<size_t, TensorId>> by_offset;
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    if (s.residency != Residency::kResident) continue;
    by_offset.emplace_back(s.offset, static_cast<TensorId>(i));
    if (s.placed_seq > 0 && s.locks == 0) {
      placed.push_back(static_cast<TensorId>(i));
      bytes += align_up(s.bytes);
    }
  }
  if (placed.empty() || allocator_->stats().largest_free_block < bytes) return moved_any;
  std::sort(placed.begin(), placed.end(), [&](TensorId a, TensorId b) { return st(a).placed_seq < st(b).placed_seq; });
  std::sort(by_offset.begin(), by_offset.end());
  const size_t n = placed.size();
  bool in_place = by_offset.size() >= n;
  for (size_t k = 0; in_place && k < n; ++k) in_place = by_offset[by_offset.size() - n + k].second == placed[k];
  if (in_place) return moved_any;
  // The free space is one block above the packed ones: the new blocks follow each other there
  // in order, as long as no old block is freed before the last is placed.
  char* base = static_cast<char*>(backend_.arena_base());
  std::vector<size_t> old;
  std::vector<Backend::DeviceMove> batch;  // each into the free space above, none onto a source
  const double t0 = backend_.now_ms();
  for (TensorId id : placed) {
    State& s = st(id);
    const auto to = allocator_->allocate(s.bytes, id);
    if (!to) throw std::logic_error("pack_start_state: no room for " + graph_.tensor(id).name);
    batch.push_back({base + *to, base + s.offset, s.bytes});
    old.push_back(s.offset);
    s.offset = *to;
    counters_.compacted_bytes += s.bytes;
    ++counters_.compacted_blocks;
    counters_.reordered_bytes += s.bytes;
  }
  backend_.move_device_batch(batch);
  counters_.compact_ms += backend_.now_ms() - t0;
  for (size_t off : old) allocator_->free(off);
  compact();
  return true;
}

std::vector<LayoutBlock> MemoryManager::live_device_blocks() const {
  std::vector<LayoutBlock> out;
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    const auto id = static_cast<TensorId>(i);
    if (s.residency == Residency::kResident || s.residency == Residency::kSwappingIn ||
        s.residency == Residency::kDecompressing)
      out.push_back({id, false, s.offset, allocator_->block_size(s.offset)});
    if (s.has_buffer) out.push_back({id, true, s.comp_offset, allocator_->block_size(s.comp_offset)});
  }
  if (has_sliding_) out.push_back({kNoTensor, true, sliding_offset_, allocator_->block_size(sliding_offset_)});
  return out;
}

// Packing keeps the blocks' order, so where a persistent tensor left its block during the
// iteration (swapped out, back elsewhere) everything above its old block slides down, every
// iteration: GPT-2 small at 50% on h100-80g moved 391 blocks (841 MB) per iteration that way.
// Where the iteration ends with the blocks it started with, each displaced one goes back instead
// (move_to_layout), unless the moves form a cycle: then the packing runs. Breaking the cycle through
// a gap instead, ResNet-50 at 25% on p100-16g ran 1.438x against 1.365x (the restored starts'
// climbs end elsewhere). Only after an iteration that ran the schedule the next one runs.
std::optional<bool> MemoryManager::restore_start_state() {
  if (start_layout_.empty() || !policy_->iteration_repeats()) return std::nullopt;
  const uint64_t before = counters_.compacted_bytes;
  const std::optional<bool> moved = move_to_layout(start_layout_, false);
  counters_.restored_bytes += counters_.compacted_bytes - before;
  return moved;
}

std::optional<bool> MemoryManager::move_to_layout(const std::vector<LayoutBlock>& layout, bool through_gaps) {
  auto* caching = dynamic_cast<CachingAllocator*>(allocator_.get());
  if (!caching || layout.empty()) return std::nullopt;
  for (auto& s : states_)  // no copy may touch a block while it moves
    if (s.residency == Residency::kSwappingIn || s.residency == Residency::kDecompressing) wait_copy(s);
  const std::vector<LayoutBlock> now = live_device_blocks();
  if (now.size() != layout.size()) return std::nullopt;
  struct Move {
    size_t from, to, size, k;  // k: the block's index in `now`
    bool cut = false;          // moved out of a cycle into a gap
  };
  std::vector<Move> moves;
  for (size_t k = 0; k < now.size(); ++k) {
    const LayoutBlock &a = now[k], &b = layout[k];
    if (a.id != b.id || a.buffer != b.buffer || a.size != b.size) return std::nullopt;
    if (a.offset != b.offset) moves.push_back({a.offset, b.offset, a.size, k});
  }
  if (moves.empty()) return false;
  char* base = static_cast<char*>(backend_.arena_base());
  std::vector<Backend::DeviceMove> batch;  // no move goes onto a later one's block
  const double t0 = backend_.now_ms();
  auto flush = [&] {
    backend_.move_device_batch(batch);
    batch.clear();
  };
  auto move = [&](Move& m, size_t to) {
    const LayoutBlock& b = now[m.k];
    caching->free(m.from);
    if (!caching->reserve(to, m.size, b.id))
      throw std::logic_error("move_to_layout: the block at " + std::to_string(to) + " is not free");
    if (b.id == kNoTensor) {  // the sliding workspace holds nothing between compressions
      sliding_offset_ = to;
    } else {
      State& s = st(b.id);
      const size_t bytes = b.buffer ? s.comp_capacity : s.bytes;
      batch.push_back({base + to, base + m.from, bytes});
      (b.buffer ? s.comp_offset : s.offset) = to;
      counters_.compacted_bytes += bytes;
      ++counters_.compacted_blocks;
    }
    m.from = to;
  };
  std::vector<size_t> left(moves.size());
  for (size_t i = 0; i < moves.size(); ++i) left[i] = i;
  while (!left.empty()) {
    // Move j before move i where j's block lies where i goes (Kahn's order; the layout's blocks
    // do not overlap, and the blocks that stay are where it has them).
    std::vector<size_t> by_from = left;
    std::sort(by_from.begin(), by_from.end(), [&](size_t a, size_t b) { return moves[a].from < moves[b].from; });
    std::map<size_t, std::vector<size_t>> after;
    std::map<size_t, size_t> waits;
    for (size_t i : left) {
      const Move& m = moves[i];
      waits[i];
      auto it = std::lower_bound(by_from.begin(), by_from.end(), m.to,
                                 [&](size_t j, size_t off) { return moves[j].from + moves[j].size <= off; });
      for (; it != by_from.end() && moves[*it].from < m.to + m.size; ++it)
        if (*it != i) after[*it].push_back(i), ++waits[i];
    }
    std::vector<size_t> order;
    for (size_t i : left)
      if (waits[i] == 0) order.push_back(i);
    for (size_t q = 0; q < order.size(); ++q)
      for (size_t i : after[order[q]])
        if (--waits[i] == 0) order.push_back(i);
    if (!through_gaps && order.size() != left.size()) {  // nothing has moved yet
      counters_.compact_ms += backend_.now_ms() - t0;
      return std::nullopt;
    }
    for (size_t i : order) move(moves[i], moves[i].to);
    if (order.size() == left.size()) break;
    std::vector<char> done(moves.size(), 0);
    for (size_t i : order) done[i] = 1;
    std::erase_if(left, [&](size_t i) { return done[i] != 0; });
    // A cycle: the smallest of its blocks goes to a gap that is free now and in the layout, and
    // on from there once the others have moved (a batch of its own: the batch may read every
    // source before it writes).
    std::vector<std::pair<size_t, size_t>> taken;  // [begin, end) now or in the layout
    for (const LayoutBlock& b : now) taken.emplace_back(b.offset, b.offset + b.size);
    for (const Move& m : moves) taken.emplace_back(m.from, m.from + m.size), taken.emplace_back(m.to, m.to + m.size);
    std::sort(taken.begin(), taken.end());
    std::optional<size_t> gap, cut;  // each block at most once: then every cycle is broken
    for (size_t i : left)
      if (!moves[i].cut && (!cut || moves[i].size < moves[*cut].size)) cut = i;
    for (size_t end = 0, k = 0; cut && k <= taken.size() && !gap; ++k) {
      const size_t next = k < taken.size() ? taken[k].first : caching->stats().capacity;
      if (next >= end + moves[*cut].size) gap = end;
      if (k < taken.size()) end = std::max(end, taken[k].second);
    }
    if (!gap) {  // no room to break it: the caller packs
      flush();
      counters_.compact_ms += backend_.now_ms() - t0;
      return std::nullopt;
    }
    move(moves[*cut], *gap);
    moves[*cut].cut = true;
    flush();
  }
  flush();
  counters_.compact_ms += backend_.now_ms() - t0;
  return true;
}

// ---------------------------------------------------------------- per op

void MemoryManager::after_op(int op_index) {
  // Swap-outs whose release point is this op are completed now, waiting if their copy is still
  // running: blocks are freed at points fixed by the op sequence, never by how fast a copy
  // thread ran, so memory figures are identical from run to run and across backends.
  const uint64_t seq = op_seq_;
  finish_swap_outs_due(seq);
  finish_compressions_due(seq);
  ++op_seq_;
  for (Action a : policy_->after_op(op_index)) {
    a.tensor = storage_of(a.tensor);  // actions on a view act on its base
    const State& s = st(a.tensor);
    switch (a.kind) {
      case ActionKind::kSwapOut:
        if (a.free_after != Action::kDefaultRelease && a.free_after <= op_index)
          throw std::logic_error("policy " + policy_->name() + ": swap-out of " + graph_.tensor(a.tensor).name +
                                 " after op " + std::to_string(op_index) + " freed after op " +
                                 std::to_string(a.free_after) + ", which is not later");
        if (s.residency == Residency::kResident && s.locks == 0 && !host_.fits(s.bytes)) {
          ++counters_.host_skipped_swaps;  // stays resident; a later allocation may evict it
        } else if (s.residency == Residency::kResident && s.locks == 0)
          start_swap_out(a.tensor, a.free_after == Action::kDefaultRelease
                                       ? seq + 2
                                       : seq + static_cast<uint64_t>(a.free_after - op_index));
        break;
      case ActionKind::kPrefetch:
        if (s.residency == Residency::kCompressing) {
          cancel_compress(a.tensor);  // not compressed yet: keep it
          ++counters_.prefetches;
        } else if (s.residency == Residency::kCompressed) {
          decompress(a.tensor);
          ++counters_.prefetches;
        } else if (s.residency == Residency::kSwappingOut) {
          cancel_swap_out(a.tensor);  // still on the device: keep it there
          ++counters_.prefetches;
        } else if (s.residency == Residency::kOnHost) {
          prefetch(a.tensor);
          ++counters_.prefetches;
        }
        break;
      case ActionKind::kDrop:
        if (s.residency == Residency::kResident && s.locks == 0 && can_recompute(a.tensor)) drop(a.tensor);
        break;
      case ActionKind::kRecompute:
        if (s.residency == Residency::kDropped && can_recompute(a.tensor)) {
          restore(a.tensor);
          ++counters_.prefetches;
        }
        break;
      case ActionKind::kCompress:
        if (a.free_after != Action::kDefaultRelease && a.free_after <= op_index)
          throw std::logic_error("policy " + policy_->name() + ": compression of " + graph_.tensor(a.tensor).name +
                                 " after op " + std::to_string(op_index) + " freed after op " +
                                 std::to_string(a.free_after) + ", which is not later");
        if (s.residency == Residency::kResident && s.locks == 0 && !s.persistent)
          compress(a.tensor, a.codec, a.capacity,
                   a.free_after == Action::kDefaultRelease ? seq + 2 : seq + static_cast<uint64_t>(a.free_after - op_index),
                   a.per_use_buffer);
        break;
    }
  }
  if (timeline_enabled_) sample_timeline(op_index);
}

MemoryCounters& MemoryCounters::operator-=(const MemoryCounters& b) {
  swapped_out_bytes -= b.swapped_out_bytes;
  swapped_in_bytes -= b.swapped_in_bytes;
  swap_outs -= b.swap_outs;
  swap_ins -= b.swap_ins;
  prefetches -= b.prefetches;
  dropped -= b.dropped;
  recomputed_ops -= b.recomputed_ops;
  recompute_ms -= b.recompute_ms;
  stall_ms -= b.stall_ms;
  evictions -= b.evictions;
  compactions -= b.compactions;
  compacted_bytes -= b.compacted_bytes;
  compacted_blocks -= b.compacted_blocks;
  compact_ms -= b.compact_ms;
  reordered_bytes -= b.reordered_bytes;
  restored_bytes -= b.restored_bytes;
  lean_conv_fallbacks -= b.lean_conv_fallbacks;
  host_skipped_swaps -= b.host_skipped_swaps;
  compressed_bytes -= b.compressed_bytes;
  compressed_to_bytes -= b.compressed_to_bytes;
  compressions -= b.compressions;
  decompressions -= b.decompressions;
  on_demand_decompressions -= b.on_demand_decompressions;
  compress_overflows -= b.compress_overflows;
  compress_skipped -= b.compress_skipped;
  buffers_released -= b.buffers_released;
  compress_ms -= b.compress_ms;
  decompress_ms -= b.decompress_ms;
  return *this;
}

namespace {
HeldBy held_by(TensorKind k) {
  switch (k) {
    case TensorKind::kParam:
    case TensorKind::kBuffer: return HeldBy::kParameters;
    case TensorKind::kOptimizerState: return HeldBy::kOptimizerState;
    case TensorKind::kGradient: return HeldBy::kGradients;
    case TensorKind::kData:
    case TensorKind::kActivation: break;
  }
  return HeldBy::kActivations;
}
}  // namespace

void MemoryManager::sample_timeline(int op_index) {
  TimelinePoint p{op_index, allocator_->stats().allocated, allocator_->stats().reserved, {}, {}};
  auto add = [&](HeldBy h, size_t bytes) { p.held[static_cast<size_t>(h)] += bytes; };
  for (const auto& t : graph_.tensors()) {
    if (t.view_of != kNoTensor) continue;  // a view's bytes are its base's
    const State& s = st(t.id);
    if (s.has_buffer) add(HeldBy::kCompressed, s.comp_capacity);  // persistent per-tensor buffer
    switch (s.residency) {
      case Residency::kSwappingOut:
      case Residency::kSwappingIn: add(HeldBy::kInFlight, s.bytes); break;
      case Residency::kResident:
      case Residency::kCompressing:    // the original until its compression ends
      case Residency::kDecompressing:  // the restored block being written
        add(held_by(t.kind), s.bytes);
        break;
      default: break;  // no device bytes besides the buffer
    }
  }
  if (paged_) {
    const PagingCounters& c = paged_->counters();
    p.device_page_bytes = (paged_->num_frames() - paged_->free_frames()) * paged_->page_bytes();
    p.page_faults = c.faults - std::min(c.faults, timeline_prev_faults_);  // counters restart each iteration
    p.page_prefetches = c.prefetches - std::min(c.prefetches, timeline_prev_prefetches_);
    timeline_prev_faults_ = c.faults;
    timeline_prev_prefetches_ = c.prefetches;
  }
  p.held[static_cast<size_t>(HeldBy::kWorkspace)] = op_scratch_;
  op_scratch_ = 0;
  p.events = counters_;
  p.events -= timeline_prev_;
  timeline_prev_ = counters_;
  timeline_.push_back(p);
}

void MemoryManager::check_invariants() const {
  if (const auto* c = dynamic_cast<const CachingAllocator*>(allocator_.get())) c->check_invariants();
  size_t device = 0;
  for (const auto& t : graph_.tensors()) {
    if (t.view_of != kNoTensor) continue;
    const State& s = st(t.id);
    if (s.has_buffer) device += s.comp_capacity;
    switch (s.residency) {
      case Residency::kResident:
      case Residency::kSwappingOut:
      case Residency::kSwappingIn:
      case Residency::kCompressing:
      case Residency::kDecompressing: device += s.bytes; break;
      default: break;
    }
  }
  if (device > allocator_->stats().allocated)
    throw std::logic_error("tensors hold " + format_bytes(device) + " on the device but the allocator counts " +
                           format_bytes(allocator_->stats().allocated) + " allocated");
}

// ---------------------------------------------------------------- MemoryView

TensorView MemoryManager::view(TensorId id) const {
  const State& s = st(storage_of(id));
  return {id, s.bytes, s.residency, s.locks > 0, s.persistent, s.last_access, s.last_access_op};
}

std::vector<TensorId> MemoryManager::evictable() const {
  std::vector<TensorId> out;
  for (size_t i = 0; i < states_.size(); ++i)
    if (states_[i].residency == Residency::kResident && states_[i].locks == 0) out.push_back(static_cast<TensorId>(i));
  return out;
}

std::vector<TensorView> MemoryManager::evictable_views() const {
  std::vector<TensorView> out;
  out.reserve(states_.size());
  for (size_t i = 0; i < states_.size(); ++i)
    if (states_[i].residency == Residency::kResident && states_[i].locks == 0)
      out.push_back(MemoryManager::view(static_cast<TensorId>(i)));
  return out;
}

}  // namespace vtensor

namespace vtensor {

// ---------------------------------------------------------------- unified memory (paged residency)

void MemoryManager::init_paging(PagePolicy& pp) {
  if (allocator_->name() != "caching")
    throw std::invalid_argument("policy " + policy_->name() + " places tensors in a managed range with the caching allocator; "
                                "--allocator " + allocator_->name() + " is not accepted with it (accepted: caching)");
  // Every tensor has an address in the managed range; the budget bounds the device frames only.
  const size_t range = kManagedRangeFactor * budget() / pp.page_bytes() * pp.page_bytes();
  paged_ = std::make_unique<PagedMemory>(backend_, pp, range, budget());
  allocator_ = make_allocator("caching", paged_->range_bytes());
}

void MemoryManager::fault_pages(int op_index, const void* workspace, size_t workspace_bytes) {
  if (!paged_) return;
  const Op& op = graph_.op(op_index);
  std::vector<PagedMemory::Range> ranges;
  for (TensorId in : op.inputs) {
    const bool write = std::find(op.inplace.begin(), op.inplace.end(), in) != op.inplace.end();
    const State& s = st(storage_of(in));
    ranges.push_back({s.offset, s.bytes, write});
  }
  for (TensorId out : op.outputs) {
    const State& s = st(storage_of(out));
    ranges.push_back({s.offset, s.bytes, true});
  }
  if (workspace)
    ranges.push_back({static_cast<size_t>(static_cast<const char*>(workspace) - arena()), workspace_bytes, true});
  paged_->fault(op_index, ranges);
}

void MemoryManager::kernel_launched() {
  if (paged_) paged_->unpin();
}

}  // namespace vtensor
