#include "vtensor/policy/um.h"

#include <algorithm>
#include <stdexcept>

#include "vtensor/core/errors.h"

namespace vtensor {

void check_um_lookahead(int d) {
  if (d < 1 || d > kMaxUmLookahead)
    throw std::invalid_argument("--um-lookahead must be a kernel count from 1 to " + std::to_string(kMaxUmLookahead) +
                                ", got " + std::to_string(d));
}

// ---------------------------------------------------------------- correlation table

void CorrelationTable::clear() {
  table_.clear();
  has_prev_ = false;
  seq_ = 0;
}

void CorrelationTable::record(int kernel, const std::vector<PageId>& pages) {
  table_[kernel].pages = pages;
  if (has_prev_) {
    Successor& s = table_[prev_].next[kernel];
    ++s.count;
    s.last = ++seq_;
  }
  prev_ = kernel;
  has_prev_ = true;
}

std::vector<int> CorrelationTable::predict(int kernel, int d) const {
  std::vector<int> out;
  int k = kernel;
  for (int i = 0; i < d; ++i) {
    auto it = table_.find(k);
    if (it == table_.end() || it->second.next.empty()) break;
    const auto best = std::max_element(it->second.next.begin(), it->second.next.end(), [](const auto& a, const auto& b) {
      return a.second.count != b.second.count ? a.second.count < b.second.count : a.second.last < b.second.last;
    });
    k = best->first;
    out.push_back(k);
  }
  return out;
}

std::vector<PageId> CorrelationTable::pages_ahead(int kernel, int d) const {
  std::vector<PageId> out;
  std::unordered_set<PageId> seen;
  for (int k : predict(kernel, d))
    if (const auto* pages = pages_of(k))
      for (PageId p : *pages)
        if (seen.insert(p).second) out.push_back(p);
  return out;
}

const std::vector<PageId>* CorrelationTable::pages_of(int kernel) const {
  auto it = table_.find(kernel);
  return it == table_.end() ? nullptr : &it->second.pages;
}

std::vector<PageId> pre_eviction_candidates(const PageView& view, const std::unordered_set<PageId>& keep, size_t n) {
  std::vector<PageId> out;
  if (n == 0) return out;
  view.for_each_lru([&](PageId p) {
    if (!view.pinned(p) && !keep.count(p)) out.push_back(p);
    return out.size() < n;
  });
  return out;
}

// ---------------------------------------------------------------- policy

void UmPolicy::set_page_bytes(size_t bytes) {
  check_page_bytes(bytes);
  page_bytes_ = bytes;
}

void UmPolicy::set_lookahead(int d) {
  check_um_lookahead(d);
  lookahead_ = d;
}

void UmPolicy::on_kernel(int op_index, const std::vector<PageId>& pages) {
  if (!prefetch_ || op_index < 0) return;  // op -1: persistent tensors' first touch
  table_.record(op_index, pages);  // learnt online: the first iteration fills it, later ones refresh it
  window_.clear();
  window_.insert(pages.begin(), pages.end());
}

PageActions UmPolicy::ahead(int op_index, const PageView& view) {
  PageActions a;
  if (!prefetch_ || op_index < 0) return a;
  const std::vector<PageId> next = table_.pages_ahead(op_index, lookahead_);
  window_.insert(next.begin(), next.end());
  for (PageId p : next)
    if (view.state(p) != PageState::kDevice && view.state(p) != PageState::kBoth) a.prefetch.push_back(p);
  // Pre-eviction: make room for the prefetches now, from pages outside the window, so that
  // neither they nor the next kernel's faults wait for an eviction.
  const size_t need = a.prefetch.size(), free = view.free_frames();
  if (need > free) a.pre_evict = pre_eviction_candidates(view, window_, need - free);
  return a;
}

std::optional<PageId> UmPolicy::choose_page_victim(const PageView& view, bool demand) {
  std::optional<PageId> out;
  view.for_each_lru([&](PageId p) {
    if (view.pinned(p) || (prefetch_ && window_.count(p))) return true;
    out = p;
    return false;
  });
  if (out || !demand) return out;
  // A fault and every unpinned page is wanted soon: the least recently used of them goes.
  view.for_each_lru([&](PageId p) {
    if (view.pinned(p)) return true;
    out = p;
    return false;
  });
  return out;
}

nlohmann::json UmPolicy::report() const {
  nlohmann::json j = {{"page_bytes", page_bytes_}, {"invalidation", invalidate_freed()}};
  if (prefetch_) {
    j["lookahead"] = lookahead_;
    j["correlation_table_kernels"] = table_.size();
  }
  return j;
}

std::string UmPolicy::summary() const {
  std::string s = "pages of " + format_bytes(page_bytes_);
  if (prefetch_)
    s += ", lookahead " + std::to_string(lookahead_) + " kernels, correlation table of " + std::to_string(table_.size()) +
         " kernels, invalidation on";
  return s;
}

const std::vector<PolicyOption>& um_options(bool prefetch) {
  static const PolicyOption page{"um-page-size",
                                 "policies um, um-prefetch: unified-memory page, a power of two from 4KiB to 1GiB (default 2MiB)"};
  static const PolicyOption lookahead{"um-lookahead",
                                      "policy um-prefetch: kernels whose pages are prefetched ahead, 1 to 64 (default 4)"};
  static const std::vector<PolicyOption> um = {page}, deepum = {page, lookahead};
  return prefetch ? deepum : um;
}

std::unique_ptr<Policy> make_um_policy(bool prefetch, const PolicyOptions& options) {
  auto p = std::make_unique<UmPolicy>(prefetch);
  if (const auto b = options.bytes("um-page-size")) p->set_page_bytes(*b);  // validated
  if (const auto d = options.whole("um-lookahead")) p->set_lookahead(*d);
  return p;
}

}  // namespace vtensor
