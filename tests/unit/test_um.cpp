// Unified memory: DeepUM's correlation table on recorded kernel sequences (what it predicts,
// what it pre-evicts), the um policies' victims, and the paged memory on the cpu backend: page
// contents survive migrations, device residency stays within the frames, pages off the device
// are inaccessible to kernels, and invalidated pages are never copied either way.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "vtensor/backend/backend.h"
#include "vtensor/core/errors.h"
#include "vtensor/memory/paged_memory.h"
#include "vtensor/policy/um.h"

using namespace vtensor;

namespace {

// A page table the test writes by hand.
class FakePages final : public PageView {
 public:
  std::vector<PageState> states;
  std::vector<bool> pins;
  std::vector<PageId> lru;  // device pages, least recent first
  size_t frames = 4, free = 0;
  size_t num_pages() const override { return states.size(); }
  size_t num_frames() const override { return frames; }
  size_t free_frames() const override { return free; }
  PageState state(PageId p) const override { return states.at(p); }
  bool pinned(PageId p) const override { return pins.at(p); }
  bool in_flight(PageId) const override { return false; }
  void for_each_lru(const std::function<bool(PageId)>& f) const override {
    for (PageId p : lru)
      if (!f(p)) return;
  }
};

TEST(CorrelationTable, PredictsTheRecordedSuccessors) {
  CorrelationTable t;
  t.record(10, {1, 2});
  t.record(11, {3});
  t.record(12, {2, 4});
  t.record(13, {5});
  EXPECT_EQ(t.predict(10, 2), (std::vector<int>{11, 12}));
  EXPECT_EQ(t.predict(11, 5), (std::vector<int>{12, 13}));  // 13 has no successor yet: stops there
  EXPECT_TRUE(t.predict(13, 3).empty());
  EXPECT_TRUE(t.predict(99, 3).empty());  // never seen
  EXPECT_EQ(t.pages_ahead(10, 2), (std::vector<PageId>{3, 2, 4}));  // kernel order, each page once
  EXPECT_EQ(t.pages_ahead(10, 3), (std::vector<PageId>{3, 2, 4, 5}));
  t.record(10, {1, 2});  // the next iteration: 13 -> 10 closes the loop
  EXPECT_EQ(t.predict(13, 3), (std::vector<int>{10, 11, 12}));
}

TEST(CorrelationTable, MostFrequentSuccessorThenTheLatest) {
  CorrelationTable t;
  // A B C A B D A B D: after B, D twice and C once.
  for (int k : {0, 1, 2, 0, 1, 3, 0, 1, 3}) t.record(k, {static_cast<PageId>(k)});
  EXPECT_EQ(t.predict(1, 1), (std::vector<int>{3}));
  // A tie (E after C once, F after C once): the one recorded last.
  CorrelationTable u;
  for (int k : {2, 4, 2, 5}) u.record(k, {});
  EXPECT_EQ(u.predict(2, 1), (std::vector<int>{5}));
  // The latest recording of a kernel's pages wins.
  u.record(4, {7, 8});
  u.record(4, {9});
  EXPECT_EQ(*u.pages_of(4), (std::vector<PageId>{9}));
}

TEST(CorrelationTable, PreEvictionTakesLeastRecentOutsideTheWindow) {
  FakePages v;
  v.states.assign(8, PageState::kDevice);
  v.pins.assign(8, false);
  v.lru = {5, 0, 1, 2, 3};
  v.pins[0] = true;
  EXPECT_EQ(pre_eviction_candidates(v, {5}, 2), (std::vector<PageId>{1, 2}));  // 5 kept, 0 pinned
  EXPECT_EQ(pre_eviction_candidates(v, {}, 10), (std::vector<PageId>{5, 1, 2, 3}));
  EXPECT_TRUE(pre_eviction_candidates(v, {}, 0).empty());
}

TEST(UmPrefetch, PrefetchesTheNextKernelsPagesAndPreEvictsForThem) {
  UmPolicy p(true);
  p.set_lookahead(2);
  // One recorded iteration: kernel 0 touches pages 0 1, kernel 1 page 2, kernel 2 pages 3 4, kernel 3 page 5.
  const std::vector<std::vector<PageId>> seq = {{0, 1}, {2}, {3, 4}, {5}};
  for (int k = 0; k < 4; ++k) p.on_kernel(k, seq[static_cast<size_t>(k)]);
  // The next iteration, kernel 0 runs: pages 0 1 (pinned) and 6 7 on the device, no frame free.
  FakePages v;
  v.states.assign(8, PageState::kHost);
  v.pins.assign(8, false);
  for (PageId d : {0, 1, 6, 7}) v.states[d] = PageState::kDevice;
  v.pins[0] = v.pins[1] = true;
  v.lru = {6, 0, 7, 1};
  v.frames = 4;
  v.free = 0;
  p.on_kernel(0, {0, 1});
  const PageActions a = p.ahead(0, v);
  EXPECT_EQ(a.prefetch, (std::vector<PageId>{2, 3, 4}));  // kernels 1 and 2
  EXPECT_EQ(a.pre_evict, (std::vector<PageId>{6, 7}));    // room for them, never the pinned ones
  // A victim outside the window when there is one; for a prefetch none inside it.
  v.lru = {2, 6};
  v.states[2] = PageState::kDevice;
  EXPECT_EQ(p.choose_page_victim(v, false), std::optional<PageId>(6));
  v.lru = {2};
  EXPECT_EQ(p.choose_page_victim(v, false), std::nullopt);
  EXPECT_EQ(p.choose_page_victim(v, true), std::optional<PageId>(2));  // a fault takes it anyway
}

TEST(Um, PlainUmEvictsLeastRecentAndNeverPrefetches) {
  UmPolicy p(false);
  EXPECT_FALSE(p.invalidate_freed());
  FakePages v;
  v.states.assign(4, PageState::kDevice);
  v.pins = {true, false, false, false};
  v.lru = {0, 3, 1};
  p.on_kernel(0, {0});
  EXPECT_TRUE(p.ahead(0, v).prefetch.empty());
  EXPECT_EQ(p.choose_page_victim(v, true), std::optional<PageId>(3));
}

TEST(Um, BadPageSizeAndLookaheadNameWhatIsAccepted) {
  UmPolicy p(true);
  for (size_t bad : {size_t{0}, size_t{1000}, size_t{2048}, size_t{3} << 20, size_t{2} << 30}) {
    try {
      p.set_page_bytes(bad);
      FAIL() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("power of two from 4.00 KiB to 1.00 GiB"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(p.set_page_bytes(4096));
  EXPECT_THROW(p.set_lookahead(0), std::invalid_argument);
  EXPECT_THROW(p.set_lookahead(kMaxUmLookahead + 1), std::invalid_argument);
  EXPECT_NO_THROW(p.set_lookahead(kMaxUmLookahead));
}

// ---- the paged memory on the cpu backend

constexpr size_t kPage = 4096;

struct Paged {
  std::unique_ptr<Backend> backend;
  UmPolicy policy;
  std::unique_ptr<PagedMemory> mem;
  Paged(bool prefetch, size_t frames, size_t pages) : policy(prefetch) {
    backend = make_cpu_backend({.arena_bytes = frames * kPage});
    policy.set_page_bytes(kPage);
    mem = std::make_unique<PagedMemory>(*backend, policy, pages * kPage, frames * kPage);
  }
  // Writes `value` over page p as a kernel would.
  void write(int op, PageId p, unsigned char value) {
    mem->fault(op, {{p * kPage, kPage, true}});
    std::memset(mem->base() + p * kPage, value, kPage);
    mem->unpin();
  }
  void touch(int op, PageId p) {
    mem->fault(op, {{p * kPage, kPage, false}});
    mem->unpin();
  }
};

TEST(PagedMemory, ContentsSurviveMigrationsAndResidencyStaysInTheFrames) {
  Paged m(false, 2, 8);
  for (PageId p = 0; p < 6; ++p) m.mem->on_alloc(p * kPage, kPage);
  for (PageId p = 0; p < 6; ++p) m.write(static_cast<int>(p), p, static_cast<unsigned char>(0x10 + p));
  EXPECT_EQ(m.mem->counters().peak_device_bytes, 2 * kPage);
  EXPECT_EQ(m.mem->counters().pages_out, 4u);  // 0..3 evicted dirty
  EXPECT_EQ(m.mem->page_state(0), PageState::kHost);
  EXPECT_EQ(m.mem->page_state(5), PageState::kDevice);
  m.touch(6, 0);  // back in, read only: both copies valid
  EXPECT_EQ(m.mem->page_state(0), PageState::kBoth);
  EXPECT_EQ(static_cast<unsigned char>(m.mem->base()[17]), 0x10);
  std::vector<unsigned char> buf(6 * kPage);
  m.backend->synchronize();
  m.mem->read(0, buf.size(), buf.data());  // wherever the pages are
  for (PageId p = 0; p < 6; ++p) EXPECT_EQ(buf[p * kPage + 5], 0x10 + p) << p;
  // Evicting a page in state both needs no copy.
  const uint64_t out = m.mem->counters().pages_out;
  m.touch(7, 1);
  m.touch(8, 2);
  EXPECT_EQ(m.mem->page_state(0), PageState::kHost);
  EXPECT_EQ(m.mem->counters().pages_out, out + 1);  // page 5 (dirty) went out, page 0 (both) did not copy
}

TEST(PagedMemory, AKernelsPagesBeyondTheFramesAreOutOfMemory) {
  Paged m(false, 2, 8);
  m.mem->on_alloc(0, 3 * kPage);
  try {
    m.mem->fault(0, {{0, 3 * kPage, true}});
    FAIL();
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.requested(), 3 * kPage);
    EXPECT_EQ(e.budget(), 2 * kPage);
  }
}

TEST(PagedMemory, InvalidatedPagesNeverMigrate) {
  for (bool invalidate : {false, true}) {
    SCOPED_TRACE(invalidate ? "um-prefetch" : "um");
    Paged m(invalidate, 2, 8);
    m.mem->on_alloc(0, 2 * kPage);  // a tensor on pages 0 1
    m.write(0, 0, 1);
    m.write(1, 1, 2);
    m.mem->on_free(0, 2 * kPage);  // freed while on the device
    if (invalidate) EXPECT_EQ(m.mem->counters().invalidated, 2u);  // dead, still in their frames
    m.mem->on_alloc(2 * kPage, 2 * kPage);
    m.write(2, 2, 3);
    m.write(3, 3, 4);
    const auto& c = m.mem->counters();
    EXPECT_EQ(c.pages_out, invalidate ? 0u : 2u);  // um copies the dead pages out
    EXPECT_EQ(c.dead_pages_out, invalidate ? 0u : 2u);
    if (invalidate) EXPECT_EQ(m.mem->page_state(0), PageState::kInvalid);  // evicted without a copy
    // A new tensor on the freed pages: with invalidation nothing comes back in.
    m.mem->on_free(2 * kPage, 2 * kPage);
    m.mem->on_alloc(0, kPage);
    const uint64_t in = c.pages_in;
    m.write(4, 0, 5);
    EXPECT_EQ(c.pages_in, invalidate ? in : in + 1);
    EXPECT_EQ(c.invalid_migrations, 0u);
  }
}

TEST(PagedMemoryDeathTest, PagesOffTheDeviceAreInaccessible) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Paged m(false, 1, 4);
  m.mem->on_alloc(0, 2 * kPage);
  m.write(0, 0, 1);
  m.write(1, 1, 2);  // page 0 is on the host now
  volatile char* p = m.mem->base();
  EXPECT_DEATH({ p[0] = 7; }, "");
}

}  // namespace
