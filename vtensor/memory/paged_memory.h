// The paged residency (unified memory, DeepUM's mechanism). Tensors live in a managed address
// range cut into pages of PagePolicy::page_bytes() (2 MiB by default, kDefaultPageBytes); each
// page is backed either by one of budget / page_bytes device frames or by its own host frame.
// Before every kernel the executor calls fault() with the byte ranges the kernel touches: the
// pages not on the device are migrated in (one fault batch, a stall on the compute stream),
// evicting the policy's victims when no frame is free. So device residency never exceeds the
// budget (frames are all there is), kernels see contiguous memory, and nothing else changes
// the bits they compute. Per page: device / host / both / invalid (page_policy.h).
// After the faults, the policy may prefetch pages (h2d stream) and pre-evict pages (d2h
// stream) ahead of the next kernels; a page whose live blocks are all freed is invalidated
// when the policy asks for it: its bytes are dead, it is never copied in either direction; on
// the host it becomes invalid, on the device it keeps its frame as the first victim (free to
// evict), since the allocator often places the next tensor there.
// Where it deviates from CUDA's driver: faults are raised per kernel for whole tensors, not per
// access by the GPU's MMU (so a kernel never faults mid-way), and a page migrated in keeps its
// host copy until written (kBoth) so a read-only page is evicted without a copy; the cuda
// backend asks the driver for the same moves, which may copy such a page anyway.
// The backend does the moving (Backend::um_*): cpu remaps memfd-backed pages, sim advances its
// clocks by the fault model, cuda prefetches managed memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "vtensor/backend/backend.h"
#include "vtensor/memory/page_policy.h"

namespace vtensor {

// The managed range holds every tensor; with no --host-budget it spans this many budgets.
constexpr size_t kManagedRangeFactor = 8;

struct PagingCounters {
  uint64_t faults = 0, fault_batches = 0;  // demand faults (pages) and the kernels that raised them
  uint64_t pages_in = 0, pages_out = 0;    // migrations with a copy: host -> device, device -> host
  uint64_t first_touch = 0;                // invalid pages given a frame, nothing to copy
  uint64_t dead_pages_out = 0;             // pages copied out though no live tensor was on them (no invalidation)
  uint64_t evictions = 0;                  // victims taken to serve a fault or a prefetch
  uint64_t prefetches = 0, prefetch_hits = 0, prefetch_late = 0, prefetch_useless = 0;
  uint64_t pre_evictions = 0;
  uint64_t invalidated = 0;      // pages invalidated after their tensors were freed
  uint64_t invalid_migrations = 0;  // copies of an invalidated page: must stay 0 (asserted in tests)
  double stall_ms = 0;           // the compute stream waiting on faults and late prefetches
  size_t peak_device_bytes = 0;  // frames in use x page bytes, checked against the budget at every fault
};

class PagedMemory final : public PageView {
 public:
  // range_bytes: the managed range; device_bytes: the budget (frames = device_bytes / page).
  PagedMemory(Backend& backend, PagePolicy& policy, size_t range_bytes, size_t device_bytes);
  ~PagedMemory() override;

  char* base() const { return base_; }
  size_t page_bytes() const { return page_; }
  size_t range_bytes() const { return pages_.size() * page_; }

  // Live blocks of the managed range (tensors, scratch) appear and disappear.
  void on_alloc(size_t offset, size_t bytes);
  void on_free(size_t offset, size_t bytes);

  struct Range {
    size_t offset, bytes;
    bool write;
  };
  // Kernel `op_index` touches `ranges`: their pages on the device and pinned, written ones dirty;
  // then the policy's prefetches and pre-evictions. Throws OutOfMemoryError when the kernel's
  // pages alone exceed the frames.
  void fault(int op_index, const std::vector<Range>& ranges);
  void unpin();  // the kernel was launched: its pages may go again
  // Bytes of the range to host memory wherever their pages are (waits for copies in flight).
  void read(size_t offset, size_t bytes, void* dst);
  void begin_iteration();
  const PagingCounters& counters() const { return counters_; }
  PageState page_state(PageId p) const { return pages_.at(p).state; }
  int live_blocks(PageId p) const { return pages_.at(p).live; }

  // --- PageView ---
  size_t num_pages() const override { return pages_.size(); }
  size_t num_frames() const override { return num_frames_; }
  size_t free_frames() const override { return free_frames_.size(); }
  PageState state(PageId p) const override { return pages_.at(p).state; }
  bool pinned(PageId p) const override { return pages_.at(p).pinned; }
  bool in_flight(PageId p) const override;
  void for_each_lru(const std::function<bool(PageId)>& f) const override;

 private:
  struct Page {
    PageState state = PageState::kInvalid;
    int32_t frame = -1;
    int live = 0;           // live blocks overlapping the page
    bool pinned = false;
    bool prefetched = false;  // brought by a prefetch, not used by a kernel yet
    uint64_t last_use = 0;
    Event event;            // last migration of this page (in or out), if asynchronous
  };
  bool on_device(const Page& p) const { return p.state == PageState::kDevice || p.state == PageState::kBoth; }
  void touch(PageId p);
  // A free frame for a migration on `s`, evicting a victim if none is free (nullopt: no victim).
  std::optional<int32_t> take_frame(Stream s, size_t requested);
  void migrate_in(PageId p, Stream s, size_t requested);
  void evict(PageId p, Stream s);
  void invalidate(PageId p);
  void wait_page(Page& pg, Stream s);
  void check_budget();

  Backend& backend_;
  PagePolicy& policy_;
  size_t page_;
  size_t num_frames_;
  char* base_ = nullptr;
  std::vector<Page> pages_;
  std::vector<int32_t> free_frames_;
  std::vector<Event> frame_event_;  // a copy out still reading the frame
  std::set<std::pair<uint64_t, PageId>> lru_;  // device pages by last use
  std::vector<PageId> pinned_;
  uint64_t tick_ = 0;
  size_t device_pages_ = 0;
  PagingCounters counters_;
};

}  // namespace vtensor
