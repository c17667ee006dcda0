#include "vtensor/memory/host_pool.h"

#include <algorithm>

namespace vtensor {

HostPool::~HostPool() {
  for (auto& [size, p] : free_) backend_.host_free(p, size);
}

void* HostPool::acquire(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  void* p = nullptr;
  auto it = free_.find(bytes);  // exact size: training repeats the same sizes every iteration
  if (it != free_.end()) {
    p = it->second;
    free_.erase(it);
    cached_ -= bytes;
  } else {
    p = backend_.host_alloc(bytes);
    ++backend_allocs_;
  }
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return p;
}

void HostPool::release(void* p, size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  in_use_ -= bytes;
  cached_ += bytes;
  free_.emplace(bytes, p);
}

}  // namespace vtensor
