#include "vtensor/memory/allocator.h"

#include <limits>
#include <stdexcept>

#include "vtensor/memory/caching_allocator.h"
#include "vtensor/memory/planned_allocator.h"

namespace vtensor {

size_t align_up(size_t bytes, size_t alignment) {
  if (alignment == 0) throw std::invalid_argument("align_up: alignment must be positive");
  const size_t rem = bytes % alignment;
  if (rem == 0) return bytes;
  if (bytes > std::numeric_limits<size_t>::max() - (alignment - rem)) {
    throw std::overflow_error("align_up: " + std::to_string(bytes) + " overflows when aligned to " +
                              std::to_string(alignment));
  }
  return bytes + (alignment - rem);
}

const char* to_string(AllocEvent::Kind k) {
  switch (k) {
    case AllocEvent::Kind::kAlloc: return "alloc";
    case AllocEvent::Kind::kFree: return "free";
    case AllocEvent::Kind::kOom: return "oom";
  }
  return "unknown";
}

std::unique_ptr<DeviceAllocator> make_allocator(const std::string& name, size_t capacity, const std::string& planner) {
  if (name == "caching") return std::make_unique<CachingAllocator>(capacity);
  if (name == "planned") return std::make_unique<PlannedAllocator>(capacity, planner.empty() ? "greedy-size" : planner);
  std::string accepted;
  for (const auto& n : allocator_names()) accepted += (accepted.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown allocator '" + name + "'; accepted: " + accepted);
}

std::vector<std::string> allocator_names() { return {"caching", "planned"}; }

}  // namespace vtensor
