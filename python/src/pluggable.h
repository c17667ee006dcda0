// The C entry points of torch.cuda.memory.CUDAPluggableAllocator (torch >= 2.0), backed by one
// vtensor Arena. The arena's base comes from configure(): a device pointer, or 0 to take one
// cudaMalloc of the whole budget on the first request (cudaMalloc is looked up in the process,
// where torch has loaded the CUDA runtime, so this library links no CUDA). On CPU-only torch the
// same entry points are driven through ctypes over a host arena (the tests' fake device hook).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "arena.h"

namespace vtensor::pyb {

// Replaces the pluggable allocator's arena (no block may be live). base 0: cudaMalloc on first use.
void pluggable_configure(size_t capacity, const std::string& allocator, uintptr_t base);
Arena* pluggable_arena();  // null before configure
uintptr_t pluggable_base();
uint64_t pluggable_failed();  // requests refused (out of memory, or no arena)

}  // namespace vtensor::pyb

extern "C" {
__attribute__((visibility("default"))) void* vtensor_torch_malloc(ssize_t size, int device, void* stream);
__attribute__((visibility("default"))) void vtensor_torch_free(void* ptr, ssize_t size, int device, void* stream);
}
