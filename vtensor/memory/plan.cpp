#include "vtensor/memory/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace vtensor {

void sort_actions(Plan& plan) {
  std::stable_sort(plan.actions.begin(), plan.actions.end(), [](const Action& a, const Action& b) {
    if (a.op != b.op) return a.op < b.op;
    auto brings_back = [](const Action& x) { return x.kind == ActionKind::kPrefetch || x.kind == ActionKind::kRecompute; };
    return brings_back(a) < brings_back(b);  // free memory first
  });
}

int walk_back_trigger(int from, int lo, const std::function<double(int)>& copy_end, double deadline,
                      const std::vector<size_t>& mem, size_t budget) {
  constexpr double kEpsNs = 1e-3;
  // The walk stops at lo, or at the first op over the budget; between there and `from`, copy_end
  // does not decrease with the op, so the op it stops at is found by bisection.
  int floor = from;
  while (floor > lo && mem[static_cast<size_t>(floor)] <= budget) --floor;
  auto hidden = [&](int p) { return copy_end(p) <= deadline + kEpsNs; };
  if (floor >= from || hidden(from)) return from;
  if (!hidden(floor)) return floor;
  int ok = floor, late = from;  // hidden(ok), !hidden(late)
  while (late - ok > 1) {
    const int mid = ok + (late - ok) / 2;
    (hidden(mid) ? ok : late) = mid;
  }
  return ok;
}

void CopyLane::index() const {
  const size_t n = busy_.size();
  chain_last_.resize(n);
  for (size_t i = n; i-- > 0;) chain_last_[i] = i + 1 < n && busy_[i + 1].first == busy_[i].second ? chain_last_[i + 1] : i;
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  gap_.assign(n, kNone);
  block_gap_.assign((n + kBlock - 1) / kBlock, kNone);
  plain_ = false;
  for (size_t i = 0; i < n; ++i) {
    plain_ = plain_ || !(busy_[i].second > busy_[i].first) || (i + 1 < n && busy_[i + 1].first < busy_[i].second);
    if (chain_last_[i] != i) continue;
    gap_[i] = i + 1 < n ? busy_[i + 1].first - busy_[i].second : std::numeric_limits<double>::infinity();
    block_gap_[i / kBlock] = std::max(block_gap_[i / kBlock], gap_[i]);
  }
  indexed_ = true;
}

double CopyLane::scan(size_t i, double s, double dur) const {
  for (; i < busy_.size(); ++i) {
    if (busy_[i].second <= s) continue;
    if (busy_[i].first >= s + dur) break;
    // A copy of positive length cannot start between two intervals that touch: go to the chain's end.
    if (dur > 0) i = chain_last_[i];
    s = busy_[i].second;
  }
  return s;
}

double CopyLane::earliest_fit(double t0, double dur) const {
  if (!indexed_) index();
  // Intervals do not overlap, so their ends are sorted too: skip those that end before t0.
  const auto i0 = static_cast<size_t>(std::upper_bound(busy_.begin(), busy_.end(), t0, [](double t, const std::pair<double, double>& iv) {
                                        return t < iv.second;
                                      }) - busy_.begin());
  if (i0 == busy_.size() || busy_[i0].first >= t0 + dur) return t0;
  if (plain_ || !(dur > 0)) return scan(i0, t0, dur);
  // The copy starts at the end of the first chain from i0 on whose next interval starts late
  // enough (the scan's test, exactly); the gaps (a subtraction, rounded) only skip blocks, with a
  // margin far above the rounding.
  const double skip_below = dur - 1e-9 * (std::abs(busy_.back().second) + dur);
  for (size_t j = chain_last_[i0]; j < busy_.size();) {
    if (j % kBlock == 0 && block_gap_[j / kBlock] < skip_below) {
      j += kBlock;
      continue;
    }
    if (gap_[j] >= skip_below && (j + 1 == busy_.size() || busy_[j + 1].first >= busy_[j].second + dur)) return busy_[j].second;
    ++j;
  }
  return busy_.back().second;  // not reached: the last interval's gap is infinite
}

void CopyLane::add(double start, double dur) {
  const std::pair<double, double> iv(start, start + dur);
  busy_.insert(std::upper_bound(busy_.begin(), busy_.end(), iv), iv);
  indexed_ = false;
}

bool CopyLane::remove(double start, double dur) {
  for (auto it = busy_.begin(); it != busy_.end(); ++it)
    if (it->first == start && it->second == start + dur) {
      busy_.erase(it);
      indexed_ = false;
      return true;
    }
  return false;
}

size_t FifoLane::place(double issue) const {
  return static_cast<size_t>(std::upper_bound(q_.begin(), q_.end(), issue, [](double t, const Copy& c) { return t < c.issue; }) - q_.begin());
}

double FifoLane::start_if(double issue) const {
  return std::max(issue, end_before(place(issue)));
}

double FifoLane::delay(double issue, double dur) const {
  const size_t i = place(issue);
  double end = std::max(issue, end_before(i)) + dur, added = 0;
  for (size_t j = i; j < q_.size(); ++j) {
    const Copy& c = q_[j];
    const double s = std::max(c.issue, end);
    if (s <= c.start) break;  // the queue has caught up: no later copy moves
    added += std::max(0.0, s + c.dur - c.need) - std::max(0.0, c.start + c.dur - c.need);
    end = s + c.dur;
  }
  return added;
}

void FifoLane::settle(size_t from) {
  for (size_t j = from; j < q_.size(); ++j) {
    const double s = std::max(q_[j].issue, end_before(j));
    if (j > from && s == q_[j].start) break;
    q_[j].start = s;
  }
}

double FifoLane::add(double issue, double dur, double need, int key) {
  const size_t i = place(issue);
  q_.insert(q_.begin() + static_cast<std::ptrdiff_t>(i), Copy{issue, dur, need, key, 0});
  settle(i);
  return q_[i].start;
}

bool FifoLane::remove(int key) {
  for (size_t i = 0; i < q_.size(); ++i)
    if (q_[i].key == key) {
      q_.erase(q_.begin() + static_cast<std::ptrdiff_t>(i));
      settle(i);
      return true;
    }
  return false;
}

double FifoLane::start_of(int key) const {
  for (const Copy& c : q_)
    if (c.key == key) return c.start;
  return -1;
}

std::vector<std::vector<Action>> actions_by_op(const Plan& plan, size_t num_ops) {
  std::vector<std::vector<Action>> at(num_ops);
  for (const Action& a : plan.actions)
    if (a.op >= 0 && static_cast<size_t>(a.op) < num_ops) at[static_cast<size_t>(a.op)].push_back(a);
  return at;
}

const char* to_string(ActionKind k) {
  switch (k) {
    case ActionKind::kSwapOut: return "swap_out";
    case ActionKind::kPrefetch: return "prefetch";
    case ActionKind::kDrop: return "drop";
    case ActionKind::kCompress: return "compress";
    case ActionKind::kRecompute: return "recompute";
  }
  return "?";
}

std::vector<Action> Plan::at(int op) const {
  std::vector<Action> out;
  for (const auto& a : actions)
    if (a.op == op) out.push_back(a);
  return out;
}

std::string Plan::str() const {
  std::string s;
  for (const auto& a : actions) {
    s += std::string(to_string(a.kind)) + " t" + std::to_string(a.tensor) + " after op " + std::to_string(a.op);
    if (a.kind == ActionKind::kCompress) s += std::string(" (") + to_string(a.codec) + ", " + std::to_string(a.capacity) + " bytes)";
    if ((a.kind == ActionKind::kSwapOut || a.kind == ActionKind::kCompress) && a.free_after != Action::kDefaultRelease)
      s += ", freed after op " + std::to_string(a.free_after);
    s += "\n";
  }
  return s;
}

size_t curve_peak(const std::vector<size_t>& mem) {
  return mem.empty() ? 0 : *std::max_element(mem.begin(), mem.end());
}

double curve_excess(const std::vector<size_t>& mem, size_t budget) {
  double sum = 0;
  for (size_t m : mem) sum += m > budget ? static_cast<double>(m - budget) : 0;
  return sum;
}

bool curve_over(const std::vector<size_t>& mem, size_t budget, int first, int last) {
  for (int i = std::max(first, 0); i <= last && static_cast<size_t>(i) < mem.size(); ++i)
    if (mem[static_cast<size_t>(i)] > budget) return true;
  return false;
}

void curve_add(std::vector<size_t>& mem, int first, int last, long long delta) {
  for (int i = std::max(first, 0); i <= last && static_cast<size_t>(i) < mem.size(); ++i)
    mem[static_cast<size_t>(i)] = static_cast<size_t>(static_cast<long long>(mem[static_cast<size_t>(i)]) + delta);
}

MemoryCurve::MemoryCurve(std::vector<size_t> mem, size_t budget) : mem_(std::move(mem)), budget_(budget) {
  for (size_t m : mem_)
    if (m > budget_) excess_ += m - budget_, ++over_ops_;
}

void MemoryCurve::apply(int first, int last, long long delta) {
  const int end = std::min(last, static_cast<int>(mem_.size()) - 1);
  for (int i = std::max(first, 0); i <= end; ++i) {
    size_t& m = mem_[static_cast<size_t>(i)];
    if (m > budget_) excess_ -= m - budget_, --over_ops_;
    m = static_cast<size_t>(static_cast<long long>(m) + delta);
    if (m > budget_) excess_ += m - budget_, ++over_ops_;
  }
}

void MemoryCurve::add(int first, int last, long long delta) {
  apply(first, last, delta);
  if (marks_ > 0) journal_.push_back({first, last, delta});
}

void MemoryCurve::rollback(size_t mark) {
  for (size_t k = journal_.size(); k-- > mark;) apply(journal_[k].first, journal_[k].last, -journal_[k].delta);
  journal_.resize(mark);
  commit(mark);
}

void MemoryCurve::commit(size_t) {
  if (marks_ > 0 && --marks_ == 0) journal_.clear();
}

}  // namespace vtensor
