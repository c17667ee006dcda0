// Pinned host memory for swapped-out tensors. Pinned allocations are slow (milliseconds per
// cudaHostAlloc), so buffers are cached by size and reused across swaps and iterations.
// Host budget (--host-budget): the pool counts the bytes it holds, in use plus cached, as
// PyTorch's pinned-memory caching host allocator keeps freed buffers reserved. A request that
// would take the held bytes over the budget first gives cached buffers back to the backend
// (largest first); fits() says whether that can make room, and the memory manager asks it
// before every swap-out, so acquire() never exceeds the budget.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>

#include "vtensor/backend/backend.h"

namespace vtensor {

class HostPool {
 public:
  static constexpr size_t kUnlimited = std::numeric_limits<size_t>::max();

  explicit HostPool(Backend& backend) : backend_(backend) {}
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  void set_budget(size_t bytes) { budget_ = bytes == 0 ? kUnlimited : bytes; }  // 0: unlimited
  size_t budget() const { return budget_; }
  bool limited() const { return budget_ != kUnlimited; }
  // Bytes a new acquire can still take (cached buffers can be given back).
  size_t room() const { return budget_ - in_use_; }
  bool fits(size_t bytes) const { return request_size(bytes) <= room(); }

  void* acquire(size_t bytes);  // throws std::logic_error when !fits(bytes)
  void release(void* p, size_t bytes);

  size_t in_use() const { return in_use_; }
  size_t cached() const { return cached_; }
  size_t held() const { return in_use_ + cached_; }
  size_t peak_held() const { return peak_; }    // since construction or reset_peak()
  void reset_peak() { peak_ = held(); }
  uint64_t backend_allocations() const { return backend_allocs_; }

 private:
  static size_t request_size(size_t bytes) { return bytes > 0 ? bytes : 1; }
  Backend& backend_;
  std::multimap<size_t, void*> free_;  // size -> buffer
  size_t budget_ = kUnlimited;
  size_t in_use_ = 0, peak_ = 0, cached_ = 0;
  uint64_t backend_allocs_ = 0;
};

}  // namespace vtensor
