#include "vtensor/memory/paged_memory.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "vtensor/core/errors.h"

namespace vtensor {

const char* to_string(PageState s) {
  switch (s) {
    case PageState::kInvalid: return "invalid";
    case PageState::kDevice: return "device";
    case PageState::kHost: return "host";
    case PageState::kBoth: return "both";
  }
  return "?";
}

void check_page_bytes(size_t bytes, const std::string& flag) {
  if (bytes < kMinPageBytes || bytes > kMaxPageBytes || (bytes & (bytes - 1)) != 0)
    throw std::invalid_argument(flag + " must be a power of two from " + format_bytes(kMinPageBytes) + " to " +
                                format_bytes(kMaxPageBytes) + ", got " + std::to_string(bytes) + " bytes");
}

PagedMemory::PagedMemory(Backend& backend, PagePolicy& policy, size_t range_bytes, size_t device_bytes)
    : backend_(backend), policy_(policy), page_(policy.page_bytes()) {
  check_page_bytes(page_);
  num_frames_ = device_bytes / page_;
  if (num_frames_ == 0)
    throw std::invalid_argument("--budget " + format_bytes(device_bytes) + " is smaller than one unified-memory page of " +
                                format_bytes(page_) + "; accepted: a budget of at least one page (see --um-page-size)");
  const size_t npages = (range_bytes + page_ - 1) / page_;
  base_ = static_cast<char*>(backend_.um_reserve(npages * page_, page_, num_frames_));
  pages_.resize(npages);
  frame_event_.resize(num_frames_);
  for (size_t f = num_frames_; f-- > 0;) free_frames_.push_back(static_cast<int32_t>(f));  // frame 0 first
}

PagedMemory::~PagedMemory() = default;

bool PagedMemory::in_flight(PageId p) const {
  const Page& pg = pages_.at(p);
  return pg.event && !pg.event->query();
}

void PagedMemory::for_each_lru(const std::function<bool(PageId)>& f) const {
  for (const auto& [t, p] : lru_)
    if (!f(p)) return;
}

void PagedMemory::touch(PageId p) {
  Page& pg = pages_[p];
  lru_.erase({pg.last_use, p});
  pg.last_use = ++tick_;
  lru_.insert({pg.last_use, p});
}

void PagedMemory::on_alloc(size_t offset, size_t bytes) {
  if (bytes == 0) return;
  for (size_t p = offset / page_; p <= (offset + bytes - 1) / page_; ++p) ++pages_.at(p).live;
}

void PagedMemory::on_free(size_t offset, size_t bytes) {
  if (bytes == 0) return;
  for (size_t p = offset / page_; p <= (offset + bytes - 1) / page_; ++p) {
    Page& pg = pages_.at(p);
    if (--pg.live < 0) throw std::logic_error("paged memory: page " + std::to_string(p) + " freed more often than allocated");
    if (pg.live == 0 && policy_.invalidate_freed() && !pg.pinned) invalidate(static_cast<PageId>(p));
  }
}

void PagedMemory::wait_page(Page& pg, Stream s) {
  if (!pg.event) return;
  if (s == Stream::kCompute) {
    if (!pg.event->query()) backend_.stream_wait(Stream::kCompute, pg.event);
    pg.event.reset();
  } else {
    backend_.stream_wait(s, pg.event);
  }
}

std::optional<int32_t> PagedMemory::take_frame(Stream s, size_t requested) {
  if (free_frames_.empty()) {
    const std::optional<PageId> v = policy_.choose_page_victim(*this, s == Stream::kCompute);
    if (!v) return std::nullopt;
    const Page& pg = pages_.at(*v);
    if (!on_device(pg) || pg.pinned)
      throw std::logic_error("page policy chose page " + std::to_string(*v) + ", which is " + to_string(pg.state) +
                             (pg.pinned ? " and pinned" : ""));
    evict(*v, Stream::kD2H);
    ++counters_.evictions;
  }
  const int32_t f = free_frames_.back();
  free_frames_.pop_back();
  if (Event& e = frame_event_[static_cast<size_t>(f)]) {  // its copy out must finish before it is refilled
    if (s != Stream::kCompute || !e->query()) backend_.stream_wait(s, e);
    e.reset();
  }
  return f;
}

void PagedMemory::migrate_in(PageId p, Stream s, size_t requested) {
  const auto f = take_frame(s, requested);
  if (!f) {
    throw OutOfMemoryError(requested, device_pages_ * page_, num_frames_ * page_,
                           "unified memory: every device page is in use by the running kernel (" +
                               std::to_string(device_pages_) + " pages of " + format_bytes(page_) + ")");
  }
  Page& pg = pages_[p];
  wait_page(pg, s);
  const bool copy = pg.state == PageState::kHost;
  if (copy && pg.live == 0 && policy_.invalidate_freed()) ++counters_.invalid_migrations;
  backend_.um_migrate_in(s, p, static_cast<size_t>(*f), copy);
  pg.frame = *f;
  pg.state = copy && backend_.um_keeps_host_copy() ? PageState::kBoth : PageState::kDevice;
  pg.event = s == Stream::kCompute ? nullptr : backend_.record(s);
  ++device_pages_;
  touch(p);
  if (copy) ++counters_.pages_in;
  else ++counters_.first_touch;
}

void PagedMemory::evict(PageId p, Stream s) {
  Page& pg = pages_.at(p);
  wait_page(pg, s);  // a migration in still under way finishes first
  const bool dead = pg.live == 0 && policy_.invalidate_freed();
  const bool copy = pg.state == PageState::kDevice && !dead;
  if (copy && pg.live == 0) ++counters_.dead_pages_out;
  backend_.um_migrate_out(s, p, static_cast<size_t>(pg.frame), copy);
  Event ev = s == Stream::kCompute ? nullptr : backend_.record(s);
  frame_event_[static_cast<size_t>(pg.frame)] = ev;
  free_frames_.push_back(pg.frame);
  pg.frame = -1;
  pg.event = ev;
  pg.state = dead || (pg.state == PageState::kDevice && !copy) ? PageState::kInvalid : PageState::kHost;
  if (copy) ++counters_.pages_out;
  lru_.erase({pg.last_use, p});
  --device_pages_;
  if (pg.prefetched) {
    pg.prefetched = false;
    ++counters_.prefetch_useless;
    policy_.on_prefetch_useless(p);
  }
}

void PagedMemory::invalidate(PageId p) {
  Page& pg = pages_[p];
  if (pg.state == PageState::kInvalid) return;
  if (on_device(pg)) {
    // Its bytes are dead but its frame stays: the caching allocator often puts the next tensor
    // right there. It becomes the least recently used page, so it is the first victim unless
    // the policy wants it soon, and its eviction copies nothing (live == 0).
    pg.state = PageState::kDevice;
    lru_.erase({pg.last_use, p});
    pg.last_use = 0;
    lru_.insert({0, p});
  } else {
    pg.state = PageState::kInvalid;  // the host frame's bytes are dropped
  }
  ++counters_.invalidated;
}

void PagedMemory::check_budget() {
  const size_t used = num_frames_ - free_frames_.size();
  if (used != device_pages_ || used > num_frames_)
    throw std::logic_error("paged memory: " + std::to_string(device_pages_) + " device pages in " +
                           std::to_string(used) + " frames of " + std::to_string(num_frames_));
  counters_.peak_device_bytes = std::max(counters_.peak_device_bytes, used * page_);
}

void PagedMemory::fault(int op_index, const std::vector<Range>& ranges) {
  const double t0 = backend_.now_ms();
  std::vector<std::pair<PageId, bool>> touched;  // page, written
  for (const Range& r : ranges) {
    if (r.bytes == 0) continue;
    for (size_t p = r.offset / page_; p <= (r.offset + r.bytes - 1) / page_; ++p)
      touched.push_back({static_cast<PageId>(p), r.write});
  }
  std::sort(touched.begin(), touched.end());
  std::vector<PageId> pages;
  std::vector<bool> written;
  for (const auto& [p, w] : touched) {
    if (!pages.empty() && pages.back() == p) {
      written.back() = written.back() || w;
      continue;
    }
    pages.push_back(p);
    written.push_back(w);
  }
  policy_.on_kernel(op_index, pages);
  if (pages.size() > num_frames_)
    throw OutOfMemoryError(pages.size() * page_, device_pages_ * page_, num_frames_ * page_,
                           "unified memory: op " + std::to_string(op_index) + " touches " + std::to_string(pages.size()) +
                               " pages of " + format_bytes(page_) + ", more than the device's " +
                               std::to_string(num_frames_) + " frames");
  size_t missing = 0;
  for (PageId p : pages) {
    pages_[p].pinned = true;
    pinned_.push_back(p);
    if (!on_device(pages_[p])) ++missing;
  }
  if (missing) {
    ++counters_.fault_batches;
    counters_.faults += missing;
    backend_.um_fault_batch(missing);
  }
  for (size_t i = 0; i < pages.size(); ++i) {
    const PageId p = pages[i];
    Page& pg = pages_[p];
    if (on_device(pg)) {
      if (pg.prefetched) {
        const bool late = in_flight(p);
        ++(late ? counters_.prefetch_late : counters_.prefetch_hits);
        policy_.on_prefetch_used(p, late);
        pg.prefetched = false;
      }
      wait_page(pg, Stream::kCompute);
    } else {
      migrate_in(p, Stream::kCompute, pages.size() * page_);
    }
    touch(p);
    if (written[i]) pg.state = PageState::kDevice;  // the host copy is stale from now on
  }
  check_budget();
  counters_.stall_ms += backend_.now_ms() - t0;

  const PageActions a = policy_.ahead(op_index, *this);
  for (PageId p : a.pre_evict) {
    const Page& pg = pages_.at(p);
    if (!on_device(pg) || pg.pinned) continue;
    evict(p, Stream::kD2H);
    ++counters_.pre_evictions;
  }
  for (PageId p : a.prefetch) {
    Page& pg = pages_.at(p);
    if (on_device(pg)) continue;  // an invalid page is given its frame ahead, without a copy
    if (free_frames_.empty()) {
      const std::optional<PageId> v = policy_.choose_page_victim(*this, false);
      if (!v) break;  // no room and nothing the policy lets go: prefetch no further
      evict(*v, Stream::kD2H);
      ++counters_.evictions;
    }
    migrate_in(p, Stream::kH2D, page_);
    pg.prefetched = true;
    ++counters_.prefetches;
  }
  check_budget();
}

void PagedMemory::unpin() {
  for (PageId p : pinned_) pages_[p].pinned = false;
  pinned_.clear();
}

void PagedMemory::read(size_t offset, size_t bytes, void* dst) {
  char* out = static_cast<char*>(dst);
  while (bytes > 0) {
    const size_t p = offset / page_, in = offset % page_, n = std::min(bytes, page_ - in);
    Page& pg = pages_.at(p);
    if (pg.event) pg.event->wait();
    if (on_device(pg)) backend_.copy_to_host(out, base_ + offset, n);
    else if (pg.state == PageState::kHost) backend_.um_read_host(out, p, in, n);
    else std::memset(out, 0, n);  // never written
    out += n;
    offset += n;
    bytes -= n;
  }
}

void PagedMemory::begin_iteration() { counters_ = {}; }

}  // namespace vtensor
