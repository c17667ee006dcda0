#include "vtensor/memory/host_pool.h"

#include <algorithm>
#include <stdexcept>

#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"

namespace vtensor {

HostPool::~HostPool() {
  for (auto& [size, p] : free_) backend_.host_free(p, size);
}

void* HostPool::acquire(size_t bytes) {
  bytes = request_size(bytes);
  if (!fits(bytes)) throw std::logic_error("host pool: acquire beyond the host budget (callers check fits())");
  void* p = nullptr;
  auto it = free_.find(bytes);  // exact size: training repeats the same sizes every iteration
  if (it != free_.end()) {
    p = it->second;
    free_.erase(it);
    cached_ -= bytes;
  } else {
    while (held() + bytes > budget_) {  // give cached buffers back, largest first
      auto big = std::prev(free_.end());
      backend_.host_free(big->second, big->first);
      cached_ -= big->first;
      free_.erase(big);
    }
    if (fault::hit(fault::Kind::kHostAlloc))
      throw OutOfMemoryError::host(bytes, in_use_, budget_, fault::message(fault::Kind::kHostAlloc, "pinned host allocation"));
    p = backend_.host_alloc(bytes);
    ++backend_allocs_;
  }
  in_use_ += bytes;
  peak_ = std::max(peak_, held());
  return p;
}

void HostPool::release(void* p, size_t bytes) {
  bytes = request_size(bytes);
  in_use_ -= bytes;
  cached_ += bytes;
  free_.emplace(bytes, p);
}

}  // namespace vtensor
