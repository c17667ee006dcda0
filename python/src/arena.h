// One arena of `capacity` bytes sub-allocated by a vtensor DeviceAllocator (caching or planned),
// as PyTorch sees it: offsets into the arena, PyTorch's stat names, and an OOM message that says
// what was asked for, what is in use, the largest free block and the fragmentation
// (pytorch#29554). Thread-safe: the pluggable allocator may be called from several threads.
// Deviation from PyTorch's caching allocator: one fixed arena (the budget), nothing is ever
// returned to the driver, so reserved bytes are the arena's high-water address, not segments.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"

namespace vtensor::pyb {

class Arena {
 public:
  // Throws std::invalid_argument for an unknown allocator or a bad capacity.
  Arena(size_t capacity, const std::string& allocator, const std::string& planner = "");
  // Offset of a block of at least `bytes`; throws OutOfMemoryError with the message above.
  size_t allocate(size_t bytes, int64_t tag = -1);
  std::optional<size_t> try_allocate(size_t bytes, int64_t tag = -1);
  void free(size_t offset);
  size_t block_size(size_t offset) const;
  AllocatorStats stats() const;
  void reset_peak();
  void begin_iteration(int iteration);
  void end_iteration();
  std::string report() const;  // the allocator's JSON report ("null" when none)
  std::string name() const { return alloc_->name(); }
  size_t capacity() const { return capacity_; }
  std::string oom_message(size_t requested) const;  // for the current state
  std::string last_oom() const;

 private:
  std::string oom_context() const;
  size_t capacity_;
  std::unique_ptr<DeviceAllocator> alloc_;
  mutable std::mutex mu_;
  std::string last_oom_;
  int iteration_ = -1;
};

}  // namespace vtensor::pyb
