// What a unified-memory policy decides about pages (vtensor/memory/paged_memory.h carries it
// out): which device page to evict when a frame is needed, which pages to migrate ahead of the
// coming kernels (prefetch) and which to move out before the device fills (pre-eviction), and
// whether pages whose tensors are all freed are invalidated (dropped, never copied back).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace vtensor {

using PageId = uint32_t;

constexpr size_t kDefaultPageBytes = size_t{2} << 20;  // the CUDA driver's migration granule, DeepUM's block
constexpr size_t kMinPageBytes = 4096;                 // the host's page: the cpu emulation remaps pages with mmap
constexpr size_t kMaxPageBytes = size_t{1} << 30;
// Throws std::invalid_argument naming the flag and what is accepted (a power of two in range).
void check_page_bytes(size_t bytes, const std::string& flag = "--um-page-size");

// Per page: kInvalid (no valid bytes anywhere: never written, or invalidated after its tensors
// were freed), kDevice (only the device frame is valid), kHost (only the host frame),
// kBoth (migrated in and not written since: evicting it needs no copy back).
enum class PageState : uint8_t { kInvalid, kDevice, kHost, kBoth };
const char* to_string(PageState s);

// What a page policy may read about the page table.
class PageView {
 public:
  virtual ~PageView() = default;
  virtual size_t num_pages() const = 0;  // pages of the managed range
  virtual size_t num_frames() const = 0;
  virtual size_t free_frames() const = 0;
  virtual PageState state(PageId p) const = 0;
  virtual bool pinned(PageId p) const = 0;    // used by the running kernel: not evictable
  virtual bool in_flight(PageId p) const = 0;  // a migration in is under way
  // Device pages, least recently used first; stops when `f` returns false.
  virtual void for_each_lru(const std::function<bool(PageId)>& f) const = 0;
};

struct PageActions {
  std::vector<PageId> prefetch;   // migrate in, asynchronously (h2d stream)
  std::vector<PageId> pre_evict;  // migrate out, asynchronously (d2h stream), before they are needed as victims
};

class PagePolicy {
 public:
  virtual ~PagePolicy() = default;
  virtual size_t page_bytes() const = 0;
  // Pages with no live tensor left are dropped at once (DeepUM's invalidation).
  virtual bool invalidate_freed() const = 0;
  // Kernel `op_index` is about to run and touches `pages` (sorted, unique).
  virtual void on_kernel(int op_index, const std::vector<PageId>& pages) {}
  // After kernel `op_index`'s faults are served: what to do ahead of the next kernels.
  virtual PageActions ahead(int op_index, const PageView& view) { return {}; }
  // A frame is needed and none is free: the device page to evict (nullopt: none may go).
  // `demand`: a kernel is waiting for it (a fault), not a prefetch.
  virtual std::optional<PageId> choose_page_victim(const PageView& view, bool demand) = 0;
  // Feedback from the mechanism, for the report: a prefetched page was first used by a kernel
  // (`late`: it was still in flight), or evicted / invalidated unused.
  virtual void on_prefetch_used(PageId p, bool late) {}
  virtual void on_prefetch_useless(PageId p) {}
};

}  // namespace vtensor
