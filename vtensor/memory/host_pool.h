// Pinned host memory for swapped-out tensors. Pinned allocations are slow (milliseconds per
// cudaHostAlloc), so buffers are cached by size and reused across swaps and iterations.
#pragma once
#include <cstddef>
#include <map>

#include "vtensor/backend/backend.h"

namespace vtensor {

class HostPool {
 public:
  explicit HostPool(Backend& backend) : backend_(backend) {}
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  void* acquire(size_t bytes);
  void release(void* p, size_t bytes);

  size_t in_use() const { return in_use_; }
  size_t peak_in_use() const { return peak_; }
  size_t cached() const { return cached_; }
  uint64_t backend_allocations() const { return backend_allocs_; }

 private:
  Backend& backend_;
  std::multimap<size_t, void*> free_;  // size -> buffer
  size_t in_use_ = 0, peak_ = 0, cached_ = 0;
  uint64_t backend_allocs_ = 0;
};

}  // namespace vtensor
