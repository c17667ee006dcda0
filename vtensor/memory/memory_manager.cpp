// MemoryManager: construction and calibration, an iteration's begin and end, allocation and the OOM
// ladder, lifetimes and lineage, the per-op hooks and paging. Its moves, codecs and layout are in
// memory_manager_moves.cpp, memory_manager_codecs.cpp and memory_manager_layout.cpp.

#include "vtensor/memory/memory_manager.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"
#include "vtensor/memory/caching_allocator.h"
#include "vtensor/memory/planning_hooks.h"

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

const char* to_string(Move::Kind k) {
  switch (k) {
    case Move::Kind::kSwapOut: return "swap_out";
    case Move::Kind::kPrefetch: return "prefetch";
    case Move::Kind::kDrop: return "drop";
    case Move::Kind::kCompress: return "compress";
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
  if (const PlanningHooks* plan = policy_->planning(); plan && plan->wants_codec_rate()) codec_rate_ = measure_codec_rate();
}

void MemoryManager::begin_iteration(int iteration) {
  iteration_ = iteration;
  allocator_->begin_iteration(iteration);
  allocator_->reset_peak();
  host_.reset_peak();
  counters_ = {};
  if (paged_) paged_->begin_iteration();
  timeline_.clear();
  moves_.clear();
  move_point_ = 0;
  timeline_prev_ = {};
  timeline_prev_faults_ = timeline_prev_prefetches_ = 0;
  op_scratch_ = 0;
  tracker_.begin_iteration(iteration, backend_.now_ms());
  for (auto& s : states_) {
    if (!s.persistent) s.released = false;
    s.stat = {};
  }
  policy_->begin_iteration(iteration);
  PlanningHooks* plan = policy_->planning();
  if (plan && plan->take_plan_change()) release_idle_buffers();
  allocator_->set_high_placement(plan ? plan->high_placement_bytes() : 0);
  // A measured iteration's op times from the device where the backend has them (cuda): the
  // clock around an asynchronous launch is not the kernel's time.
  if (device_op_timing_) backend_.end_op_timing(0);  // an iteration that failed left it on
  device_op_timing_ = policy_->measuring() && backend_.begin_op_timing();
  conv_algos_ = policy_->conv_algorithms();
}

void MemoryManager::end_iteration() {
  move_point_ = static_cast<int>(graph_.num_ops());
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
    if (s.persistent && s.residency == Residency::kResident && s.locks == 0 && host_.fits(s.bytes) && !graph_.tensor(id).pinned)
      start_swap_out(id, op_seq_ + 1);
  }
  while (finish_oldest_swap_out()) {
  }
  if (PlanningHooks* plan = policy_->planning(); plan && plan->compact_at_iteration_end() && !paged_) {
    const uint64_t before = counters_.compactions;
    std::optional<bool> placed;  // the layout the policy asks for, once (auto's warm start)
    if (const std::vector<LayoutBlock> target = plan->take_start_layout(); !target.empty()) {
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
    const bool restore = plan->start_state() == StartState::kRestored;
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
  backend_.host_work(Backend::HostWork::kAllocation);
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

// ---------------------------------------------------------------- per op

void MemoryManager::after_op(int op_index) {
  // Swap-outs whose release point is this op are completed now, waiting if their copy is still
  // running: blocks are freed at points fixed by the op sequence, never by how fast a copy
  // thread ran, so memory figures are identical from run to run and across backends.
  const uint64_t seq = op_seq_;
  finish_swap_outs_due(seq);
  finish_compressions_due(seq);
  ++op_seq_;
  move_point_ = op_index + 1;
  in_after_op_ = true;
  struct Unset {
    bool& b;
    ~Unset() { b = false; }
  } unset{in_after_op_};
  for (Action a : policy_->after_op(op_index)) {
    a.tensor = storage_of(a.tensor);  // actions on a view act on its base
    if (graph_.tensor(a.tensor).pinned) continue;  // the recording runtime cannot move it
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
    if (states_[i].residency == Residency::kResident && states_[i].locks == 0 && !graph_.tensor(static_cast<TensorId>(i)).pinned)
      out.push_back(static_cast<TensorId>(i));
  return out;
}

std::vector<TensorView> MemoryManager::evictable_views() const {
  std::vector<TensorView> out;
  out.reserve(states_.size());
  for (size_t i = 0; i < states_.size(); ++i)
    if (states_[i].residency == Residency::kResident && states_[i].locks == 0 && !graph_.tensor(static_cast<TensorId>(i)).pinned)
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
