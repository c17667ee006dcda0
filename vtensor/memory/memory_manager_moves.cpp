// MemoryManager: a tensor's access and restore, and the mechanisms that move it: swap out and in
// (prefetch), drop, evict, and the waits on their copies.

#include "vtensor/memory/memory_manager.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"

namespace vtensor {

// ---------------------------------------------------------------- access and restore

float* MemoryManager::access(TensorId id, AccessKind kind, int op_index) {
  id = storage_of(id);  // the trace and the policy see the base
  State& s = st(id);
  const Residency from = s.residency;
  // A recomputation's accesses name the producer's op; its moves happen before the op running now.
  if (kind != AccessKind::kRecomputeRead && kind != AccessKind::kRecomputeWrite) move_point_ = op_index;
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
  log_move(Move::Kind::kSwapOut, id);
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
  log_move(Move::Kind::kPrefetch, id);
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
  log_move(Move::Kind::kDrop, id);
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
  log_move(Move::Kind::kPrefetch, id);  // kept on the device: the swap-out is undone
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

}  // namespace vtensor
