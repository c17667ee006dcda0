// Device allocators sub-allocate one arena of exactly `capacity` bytes (the --budget).
// They hand out offsets into the arena; the MemoryManager adds the backend's base pointer.
// An allocator never evicts anything: returning nullopt starts the MemoryManager's OOM ladder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vtensor {

constexpr size_t kAllocAlignment = 256;  // like cudaMalloc: every block starts 256-byte aligned

struct AllocatorStats {
  size_t capacity = 0;           // arena bytes (the budget)
  size_t allocated = 0;          // bytes in live blocks (rounded to the alignment)
  size_t peak_allocated = 0;
  size_t reserved = 0;           // end offset of the highest live block: address space in use
  size_t peak_reserved = 0;
  size_t free_bytes = 0;         // capacity - allocated
  size_t largest_free_block = 0;
  uint64_t num_allocs = 0, num_frees = 0, num_ooms = 0;
  // External fragmentation: 1 - largest free block / free bytes (0 when nothing is free).
  double fragmentation() const {
    return free_bytes == 0 ? 0.0 : 1.0 - static_cast<double>(largest_free_block) / static_cast<double>(free_bytes);
  }
};

struct AllocEvent {
  enum class Kind { kAlloc, kFree, kOom };
  Kind kind;
  size_t offset;  // block offset (0 for kOom)
  size_t size;    // rounded size (requested size for kOom)
  int64_t tag;    // caller's label, e.g. the tensor id; -1 when none
  uint64_t seq;   // position in the allocator's event sequence
};
const char* to_string(AllocEvent::Kind k);

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual std::string name() const = 0;
  // Offset of a block of at least `bytes` (aligned), or nullopt when no free range fits.
  // A zero-byte request gets a block of one alignment unit.
  virtual std::optional<size_t> allocate(size_t bytes, int64_t tag = -1) = 0;
  // Frees the block that starts at `offset`; freeing an unknown offset is a logic error (throws).
  virtual void free(size_t offset) = 0;
  // Size of the live block at offset (throws when there is none).
  virtual size_t block_size(size_t offset) const = 0;
  virtual const AllocatorStats& stats() const = 0;
  // Peak figures restart from the current ones (PyTorch's reset_peak_memory_stats).
  virtual void reset_peak() = 0;
  // Defragmentation: slides every live block for which movable(offset) holds down to the
  // lowest free address (blocks that are not movable stay put). With `need` > 0, only as much as
  // makes one free block of `need` bytes, moving the fewest bytes (none where a free block of
  // that size exists or cannot be made). Returns the moves (old offset, new offset) in ascending
  // order; the caller moves the bytes in that order. Allocators that cannot compact return none.
  virtual std::vector<std::pair<size_t, size_t>> compact(const std::function<bool(size_t)>& movable, size_t need = 0) {
    return {};
  }
  // Requests of at least min_bytes placed at the top end of their free block, the others low
  // (0: all low, the default). Allocators that place otherwise ignore it.
  virtual void set_high_placement(size_t min_bytes) {}
  // Iteration boundaries (the planned pool records one iteration and plans the next ones).
  // repeats: the next iteration runs the ended one's schedule (Policy::iteration_repeats).
  virtual void begin_iteration(int iteration) {}
  virtual void end_iteration(bool repeats) {}
  // Allocator-specific figures for the run's report; null when nothing.
  virtual nlohmann::json report() const { return nullptr; }

  void set_trace_enabled(bool on) { trace_enabled_ = on; }
  const std::vector<AllocEvent>& trace() const { return trace_; }
  void clear_trace() { trace_.clear(); }

 protected:
  void record(AllocEvent::Kind k, size_t offset, size_t size, int64_t tag) {
    if (trace_enabled_) trace_.push_back({k, offset, size, tag, seq_});
    ++seq_;
  }

 private:
  bool trace_enabled_ = false;
  std::vector<AllocEvent> trace_;
  uint64_t seq_ = 0;
};

size_t align_up(size_t bytes, size_t alignment = kAllocAlignment);

// Allocators by name: "caching", "planned" (with `planner`, see planners.h; empty: the default).
// Unknown names throw std::invalid_argument naming the accepted values.
std::unique_ptr<DeviceAllocator> make_allocator(const std::string& name, size_t capacity,
                                                const std::string& planner = "");
std::vector<std::string> allocator_names();

}  // namespace vtensor
