#include "pluggable.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace vtensor::pyb {
namespace {

std::mutex g_mu;
std::unique_ptr<Arena> g_arena;
uintptr_t g_base = 0;
std::atomic<uint64_t> g_failed{0};

// One cudaMalloc of the whole arena, through the CUDA runtime torch has already loaded.
uintptr_t cuda_arena(size_t bytes) {
  using Fn = int (*)(void**, size_t);
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "cudaMalloc"));
  if (!fn) {
    std::fprintf(stderr, "vtensor: cudaMalloc not found in the process (is torch built with CUDA?)\n");
    return 0;
  }
  void* p = nullptr;
  if (fn(&p, bytes) != 0 || !p) {
    std::fprintf(stderr, "vtensor: cudaMalloc of the %s arena failed\n", format_bytes(bytes).c_str());
    return 0;
  }
  return reinterpret_cast<uintptr_t>(p);
}

}  // namespace

void pluggable_configure(size_t capacity, const std::string& allocator, uintptr_t base) {
  auto a = std::make_unique<Arena>(capacity, allocator);
  std::lock_guard<std::mutex> g(g_mu);
  if (g_arena && g_arena->stats().allocated > 0)
    throw std::logic_error("vtensor: the pluggable allocator still has live blocks; it cannot be replaced");
  g_arena = std::move(a);
  g_base = base;
  g_failed = 0;
}

Arena* pluggable_arena() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_arena.get();
}

uintptr_t pluggable_base() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_base;
}

uint64_t pluggable_failed() { return g_failed; }

}  // namespace vtensor::pyb

using namespace vtensor::pyb;

// Null where the request cannot be served (HostDevice calls this one through ctypes, where an
// exception cannot pass).
extern "C" __attribute__((visibility("default"))) void* vtensor_torch_try_malloc(ssize_t size, int, void*) {
  Arena* a = nullptr;
  uintptr_t base = 0;
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (g_arena && g_base == 0) g_base = cuda_arena(g_arena->capacity());
    a = g_arena.get();
    base = g_base;
  }
  if (!a || base == 0 || size < 0) {
    ++g_failed;
    return nullptr;
  }
  auto off = a->try_allocate(static_cast<size_t>(size));
  if (!off) {
    ++g_failed;
    return nullptr;
  }
  return reinterpret_cast<void*>(base + *off);
}

// What CUDAPluggableAllocator calls. PyTorch does not check the pointer (2.11 hands a null one to
// the tensor), so a refusal throws, and torch raises it as a RuntimeError; the message (with the
// fragmentation) is also vtensor.torch.last_oom().
extern "C" __attribute__((visibility("default"))) void* vtensor_torch_malloc(ssize_t size, int device, void* stream) {
  if (void* p = vtensor_torch_try_malloc(size, device, stream)) return p;
  if (size == 0) return nullptr;  // torch asks for empty tensors too; never a failure
  Arena* a = pluggable_arena();
  if (!a) throw std::runtime_error("vtensor: the pluggable allocator is not configured (vtensor.torch.use_allocator)");
  if (pluggable_base() == 0) throw std::runtime_error("vtensor: the pluggable allocator could not cudaMalloc its arena");
  if (size < 0) throw std::runtime_error("vtensor: the pluggable allocator got a negative size");
  throw std::runtime_error("CUDA out of memory (vtensor pluggable allocator): " + a->last_oom());
}

extern "C" __attribute__((visibility("default"))) void vtensor_torch_free(void* ptr, ssize_t, int, void*) {
  if (!ptr) return;
  Arena* a = pluggable_arena();
  if (a) a->free(reinterpret_cast<uintptr_t>(ptr) - pluggable_base());
}
