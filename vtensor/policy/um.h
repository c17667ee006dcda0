// Unified-memory policies: every tensor lives in a managed range paged to and from the device
// (vtensor/memory/paged_memory.h); these decide the pages.
//   um:          fault on demand, evict the least-recently-used page. CUDA Unified Memory's own
//                behaviour under oversubscription, the baseline DeepUM improves on. No
//                invalidation: pages of freed tensors still go back to the host when evicted.
//   um-prefetch: DeepUM (Jung et al., ASPLOS'23). A correlation table learned from the measured
//                iteration maps each kernel to the pages it touched and to the kernels that
//                followed it; after kernel k's faults, the pages of the d predicted next kernels
//                are prefetched (d: --um-lookahead). Pre-eviction moves out least-recently-used
//                pages outside that window before the prefetches need their frames, so faults
//                do not wait for evictions; pages of freed tensors are invalidated, never copied.
// Deviations from the paper: the table is keyed by op index (our kernel sequence is the graph's,
// the same every iteration) rather than by a hash of kernel name and arguments; DeepUM keeps
// one table per kernel plus a block-level table of fault sequences, we keep one table of
// kernels with their page sets and successors (most frequent successor, ties to the latest),
// which is what the static training loop needs. DeepUM runs in the driver and prefetches by
// fault-buffer order; we prefetch through the memory manager by the predicted kernels' order.
#pragma once
#include <cstdint>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "vtensor/memory/policy.h"
#include <memory>

#include "vtensor/policy/options.h"

namespace vtensor {

constexpr int kDefaultUmLookahead = 4;
constexpr int kMaxUmLookahead = 64;
// Throws std::invalid_argument naming --um-lookahead and the accepted range.
void check_um_lookahead(int d);

// DeepUM's correlation table: kernel -> pages touched, and successor kernels with counts.
class CorrelationTable {
 public:
  void clear();
  // The next kernel of the recorded sequence and the pages it touched (its latest recording wins).
  void record(int kernel, const std::vector<PageId>& pages);
  size_t size() const { return table_.size(); }
  // The `d` kernels predicted to follow `kernel`: each step the most frequent successor (ties:
  // the one recorded last); stops early at a kernel with no recorded successor.
  std::vector<int> predict(int kernel, int d) const;
  // The pages of predict(kernel, d), in kernel order, each once.
  std::vector<PageId> pages_ahead(int kernel, int d) const;
  const std::vector<PageId>* pages_of(int kernel) const;

 private:
  struct Successor {
    uint64_t count = 0, last = 0;
  };
  struct Entry {
    std::vector<PageId> pages;
    std::map<int, Successor> next;
  };
  std::unordered_map<int, Entry> table_;
  int prev_ = -1;
  bool has_prev_ = false;
  uint64_t seq_ = 0;
};

// Pre-eviction's choice: up to `n` device pages, least recently used first, neither pinned nor in `keep`.
std::vector<PageId> pre_eviction_candidates(const PageView& view, const std::unordered_set<PageId>& keep, size_t n);

class UmPolicy final : public Policy, public PagePolicy {
 public:
  explicit UmPolicy(bool prefetch) : prefetch_(prefetch) {}
  std::string name() const override { return prefetch_ ? "um-prefetch" : "um"; }
  void set_page_bytes(size_t bytes);  // validated (check_page_bytes)
  void set_lookahead(int d);          // validated (check_um_lookahead)
  int lookahead() const { return lookahead_; }
  const CorrelationTable& table() const { return table_; }

  // Tensors are never evicted whole: the memory manager pages them.
  std::vector<Victim> choose_victims(size_t, const MemoryView&) override { return {}; }
  PagePolicy* paging() override { return this; }
  nlohmann::json report() const override;
  std::string summary() const override;

  // --- PagePolicy ---
  size_t page_bytes() const override { return page_bytes_; }
  bool invalidate_freed() const override { return prefetch_; }
  void on_kernel(int op_index, const std::vector<PageId>& pages) override;
  PageActions ahead(int op_index, const PageView& view) override;
  std::optional<PageId> choose_page_victim(const PageView& view, bool demand) override;

 private:
  bool prefetch_;
  size_t page_bytes_ = kDefaultPageBytes;
  int lookahead_ = kDefaultUmLookahead;
  CorrelationTable table_;
  std::unordered_set<PageId> window_;  // pages of the current kernel and the predicted next ones
};

// Their options (--um-page-size; --um-lookahead for um-prefetch) and the registry's maker.
const std::vector<PolicyOption>& um_options(bool prefetch);
std::unique_ptr<Policy> make_um_policy(bool prefetch, const PolicyOptions& options);

}  // namespace vtensor
