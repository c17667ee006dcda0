#include "vtensor/policy/zero_overhead_swap.h"

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <numeric>

#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/policy/lru.h"

namespace vtensor {

namespace {

struct Candidate {
  SwapChoice c;
  double score[3] = {0, 0, 0};
  size_t rank_sum = 0;
};

constexpr double kMarginMs = 1e-6;  // trace times are whole nanoseconds

// One pass of the planner over a measured iteration, holding each block at most max_hold ops
// after its swap-out (0: no bound).
class SwapPass {
 public:
  SwapPass(const Graph& g, const AccessTrace& trace, const ZeroOverheadSwapConfig& cfg, int max_hold,
           ZeroOverheadSwapPlan& out)
      : g_(g), trace_(trace), cfg_(cfg), max_hold_(max_hold), out_(out), n_(static_cast<int>(g.num_ops())) {}

  void run() {
    read_trace();
    predict_memory();
    collect_candidates();
    rank_candidates();
    choose();
    emit_plan();
  }

 private:
  double op_start(int k) const { return start_[static_cast<size_t>(k)]; }
  double op_end(int k) const { return start_[static_cast<size_t>(k) + 1]; }
  int peak_op() const { return static_cast<int>(std::max_element(mem_.begin(), mem_.end()) - mem_.begin()); }
  double copy_ms_of(size_t bytes) const { return cfg_.latency_ms + static_cast<double>(bytes) * cfg_.ms_per_byte; }

  // Op start times (ms) and each tensor's accessing ops.
  void read_trace() {
    // Op start times from the first access of each op; ops without one take the next op's.
    start_.assign(static_cast<size_t>(n_) + 1, -1);
    uses_.assign(g_.num_tensors(), {});
    double t_end = 0;
    for (const auto& a : trace_.accesses) {
      if (a.kind != AccessKind::kRead && a.kind != AccessKind::kWrite) continue;  // recomputations replay old ops
      if (a.op_index < 0 || a.op_index >= n_) continue;
      const double t = static_cast<double>(a.time_ns) * 1e-6;
      double& s = start_[static_cast<size_t>(a.op_index)];
      if (s < 0 || t < s) s = t;
      t_end = std::max(t_end, t);
      auto& u = uses_[static_cast<size_t>(a.id)];
      if (u.empty() || u.back() != a.op_index) u.push_back(a.op_index);
    }
    start_[static_cast<size_t>(n_)] = t_end;
    for (int k = n_ - 1; k >= 0; --k)
      if (start_[static_cast<size_t>(k)] < 0) start_[static_cast<size_t>(k)] = start_[static_cast<size_t>(k) + 1];
    // With the kernels' own times, ops start back to back: a measured iteration that stalled (the
    // passive first iteration of stick-to-limit) must not make windows look longer than they are.
    if (trace_.op_ms.size() >= static_cast<size_t>(n_)) {
      double t = 0;
      for (int k = 0; k < n_; ++k) {
        start_[static_cast<size_t>(k)] = t;
        t += trace_.op_ms[static_cast<size_t>(k)];
      }
      start_[static_cast<size_t>(n_)] = t;
    }
  }

  // Predicted device bytes per op: persistent + tensors live at the op + its workspace.
  void predict_memory() {
    mem_.assign(static_cast<size_t>(n_), 0);
    int64_t persistent = 0;
    for (const auto& t : g_.tensors()) {
      const auto bytes = static_cast<int64_t>(align_up(std::max<size_t>(t.bytes(), 1)));
      if (t.persistent()) {
        persistent += bytes;
        continue;
      }
      const auto& u = uses_[static_cast<size_t>(t.id)];
      if (u.empty()) continue;
      for (int k = u.front(); k <= u.back(); ++k) mem_[static_cast<size_t>(k)] += bytes;
    }
    for (const auto& op : g_.ops())
      if (op.workspace_bytes) mem_[static_cast<size_t>(op.index)] += static_cast<int64_t>(align_up(op.workspace_bytes));
    for (auto& m : mem_) m += persistent;
    out_.peak_before = static_cast<size_t>(mem_[static_cast<size_t>(peak_op())]);

    const double mean = static_cast<double>(std::accumulate(mem_.begin(), mem_.end(), int64_t{0})) / n_;
    limit_ = cfg_.stick_to_limit ? static_cast<double>(cfg_.budget) : mean;
  }

  // The release op of a swap-out whose copy ends at `end`: the first op after `s` that ends at or
  // after it (the memory manager frees the block at that op's end); -1 if none before `limit`.
  int release_op(int s, double end, int limit) const {
    if (max_hold_ > 0) limit = std::min(limit, s + max_hold_ + 1);
    for (int k = s + 1; k < limit; ++k)
      if (op_end(k) >= end + kMarginMs) return k;
    return -1;
  }

  // Candidates: one per absence interval between consecutive accesses.
  void collect_candidates() {
    for (const auto& t : g_.tensors()) {
      if (t.persistent()) continue;
      const auto& u = uses_[static_cast<size_t>(t.id)];
      const size_t bytes = align_up(std::max<size_t>(t.bytes(), 1));
      for (size_t i = 0; i + 1 < u.size(); ++i) add_candidate(t.id, bytes, u[i], u[i + 1]);
    }
  }

  // The candidate of t's absence between its accesses at ops first and next, if it has one.
  void add_candidate(TensorId id, size_t bytes, int first, int next) {
    const double copy_ms = copy_ms_of(bytes);
    if (next - first < 3) return;  // no op where the block could be absent
    // Swap-out right after the access; the block is freed at the end of the op during which the
    // copy ends (release r); prefetch after the latest op p that leaves a copy's time before the
    // next access. Absent during ops r+1..p.
    int s = first, r = -1, p = -1;
    for (; s + 2 <= next - 1 && r < 0; ++s) {  // unbounded hold: the first op always works if any does
      r = release_op(s, op_end(s) + copy_ms, next - 1);
      if (r >= 0 || max_hold_ == 0) break;
    }
    if (r < 0) s = first;
    for (int k = next - 1; k >= first + 2; --k)
      if (op_start(next) - op_end(k) >= copy_ms) {
        p = k;
        break;
      }
    const bool hidden = r >= 0 && p >= r + 1;
    if (!hidden) {
      // Stick-to-limit only: a copy that cannot hide stalls. The swap-out is freed where it would
      // end (or at the manager's default point, two ops on), and the block brought back as late
      // as possible so that it is absent as long as it can be.
      if (!cfg_.stick_to_limit) return;
      if (r < 0) r = s + 2;
      if (p < r + 1) p = next - 1;
      if (p < r + 1) return;
    }
    Candidate c;
    c.c = {id, bytes, s, r, p, next, op_start(next) - op_end(first), hidden};
    double load = 0;
    for (int k = r + 1; k <= p; ++k) load += std::max(0.0, static_cast<double>(mem_[static_cast<size_t>(k)]) - limit_);
    c.score[0] = c.c.absence_ms;
    c.score[1] = c.c.absence_ms * static_cast<double>(bytes);
    c.score[2] = load;
    cands_.push_back(c);
    ++out_.candidates;
    out_.hidden_candidates += hidden;
  }

  // Rank each score (largest first, ties by tensor then op), sum the ranks.
  void rank_candidates() {
    for (int s = 0; s < 3; ++s) {
      std::vector<size_t> idx(cands_.size());
      std::iota(idx.begin(), idx.end(), size_t{0});
      std::stable_sort(idx.begin(), idx.end(),
                       [&](size_t a, size_t b) { return cands_[a].score[s] > cands_[b].score[s]; });
      for (size_t r = 0; r < idx.size(); ++r) cands_[idx[r]].rank_sum += r;
    }
    std::stable_sort(cands_.begin(), cands_.end(), [](const Candidate& a, const Candidate& b) {
      if (a.c.hidden != b.c.hidden) return a.c.hidden;  // stalls only when hidden copies are not enough
      if (a.rank_sum != b.rank_sum) return a.rank_sum < b.rank_sum;
      if (a.c.tensor != b.c.tensor) return a.c.tensor < b.c.tensor;
      return a.c.swap_out_after < b.c.swap_out_after;
    });
  }

  bool out_before(size_t a, size_t b) const {
    const auto &x = cands_[a].c, &y = cands_[b].c;
    return std::tie(x.swap_out_after, x.tensor) < std::tie(y.swap_out_after, y.tensor);
  }
  bool in_before(size_t a, size_t b) const {
    const auto &x = cands_[a].c, &y = cands_[b].c;
    return std::tie(x.prefetch_after, x.swap_out_after, x.tensor) < std::tie(y.prefetch_after, y.swap_out_after, y.tensor);
  }

  // Runs `queue` plus `extra` in issue order (swap-outs when out_dir, else prefetches); every chosen
  // hidden copy must meet its deadline. Returns the end of extra's copy, or a negative value when a
  // chosen copy is late.
  double fifo_end(const std::vector<size_t>& queue, size_t extra, bool out_dir) const {
    std::vector<size_t> q = queue;
    auto before = [&](size_t a, size_t b) { return out_dir ? out_before(a, b) : in_before(a, b); };
    q.insert(std::upper_bound(q.begin(), q.end(), extra, before), extra);
    double free_at = 0, extra_end = -1;
    for (size_t i : q) {
      const auto& c = cands_[i].c;
      const int issue = out_dir ? c.swap_out_after : c.prefetch_after;
      const double end = std::max(op_end(issue), free_at) + copy_ms_of(c.bytes);
      free_at = end;
      if (i == extra) {
        extra_end = end;
        continue;
      }
      const double deadline = out_dir ? op_end(c.release_after) : op_start(c.next_access);
      if (c.hidden && end > deadline - kMarginMs) return -1.0;
    }
    return extra_end;
  }

  void take(size_t i) {
    taken_[i] = 1;
    auto& c = cands_[i].c;
    outs_.insert(std::upper_bound(outs_.begin(), outs_.end(), i, [&](size_t a, size_t b) { return out_before(a, b); }),
                 i);
    ins_.insert(std::upper_bound(ins_.begin(), ins_.end(), i, [&](size_t a, size_t b) { return in_before(a, b); }), i);
    for (int k = c.release_after + 1; k <= c.prefetch_after; ++k) mem_[static_cast<size_t>(k)] -= static_cast<int64_t>(c.bytes);
  }

  bool covers(size_t i, int release, int prefetch, int pk) const {
    return !taken_[i] && release + 1 <= pk && pk <= prefetch;
  }

  struct Pick {
    size_t i;
    int release = -1, prefetch = -1;
  };

  // The first hidden candidate covering op pk whose copies, queued behind the chosen ones, still
  // hide (and leave every chosen one on time); i is cands_.size() when there is none.
  Pick pick_hidden(int pk) {
    Pick pick{cands_.size()};
    for (size_t i = 0; i < cands_.size() && pick.i == cands_.size(); ++i) {
      auto& c = cands_[i].c;
      if (!c.hidden || queued_fail_[i] || !covers(i, c.release_after, c.prefetch_after, pk)) continue;
      const double out_end = fifo_end(outs_, i, true);
      const int release = out_end < 0 ? -1 : release_op(c.swap_out_after, out_end, c.prefetch_after);
      // The prefetch: the latest op, from the one that hides it alone back to release+1, whose
      // queued copy ends in time and leaves every chosen one on time.
      int prefetch = -1;
      const int alone = c.prefetch_after;
      for (int q = alone; release >= 0 && q >= release + 1 && prefetch < 0; --q) {
        c.prefetch_after = q;
        const double in_end = fifo_end(ins_, i, false);
        if (in_end >= 0 && in_end <= op_start(c.next_access) - kMarginMs) prefetch = q;
      }
      c.prefetch_after = alone;
      if (prefetch < 0) {
        queued_fail_[i] = 1;  // the queues only grow: it never fits later
      } else if (covers(i, release, prefetch, pk)) {
        pick = {i, release, prefetch};
      }
    }
    return pick;
  }

  // Take candidates covering the peak until it fits the target. Copies run one at a time per
  // direction, in issue order: queued behind (and in front of) the copies already chosen, a
  // candidate's swap-out may end later than alone, and its release op moves with it; it is hidden
  // only if every hidden copy still ends by its deadline (a chosen swap-out by the end of its
  // release op, a prefetch by the next access). Adding a copy never makes another earlier, so a
  // candidate that fails once is rejected for good.
  void choose() {
    const int64_t target =
        cfg_.stick_to_limit ? static_cast<int64_t>(static_cast<double>(cfg_.budget) * kZeroOverheadHeadroom) : 0;
    taken_.assign(cands_.size(), 0);
    queued_fail_.assign(cands_.size(), 0);
    for (;;) {
      const int pk = peak_op();
      if (mem_[static_cast<size_t>(pk)] <= target) break;
      Pick pick = pick_hidden(pk);
      // Stick-to-limit: when no copy hides, take the best-ranked one that stalls.
      if (pick.i == cands_.size() && cfg_.stick_to_limit)
        for (size_t i = 0; i < cands_.size() && pick.i == cands_.size(); ++i)
          if (covers(i, cands_[i].c.release_after, cands_[i].c.prefetch_after, pk)) pick.i = i;
      if (pick.i == cands_.size()) break;
      SwapChoice& c = cands_[pick.i].c;
      if (pick.release >= 0) {
        c.release_after = pick.release;
        c.prefetch_after = pick.prefetch;
      }
      if (queued_fail_[pick.i] || !c.hidden || pick.release < 0) c.hidden = false;
      take(pick.i);
      out_.chosen.push_back(c);
    }
  }

  void emit_plan() {
    out_.peak_after = static_cast<size_t>(mem_[static_cast<size_t>(peak_op())]);
    std::sort(out_.chosen.begin(), out_.chosen.end(), [](const SwapChoice& a, const SwapChoice& b) {
      return a.swap_out_after != b.swap_out_after ? a.swap_out_after < b.swap_out_after : a.tensor < b.tensor;
    });
    for (const auto& c : out_.chosen) {
      out_.plan.actions.push_back({ActionKind::kSwapOut, c.tensor, c.swap_out_after, c.release_after});
      out_.plan.actions.push_back({ActionKind::kPrefetch, c.tensor, c.prefetch_after});
    }
  }

  const Graph& g_;
  const AccessTrace& trace_;
  const ZeroOverheadSwapConfig& cfg_;
  const int max_hold_;
  ZeroOverheadSwapPlan& out_;
  const int n_;
  std::vector<double> start_;            // op k runs from start_[k] to start_[k + 1]
  std::vector<std::vector<int>> uses_;   // per tensor, the ops that access it
  std::vector<int64_t> mem_;             // predicted device bytes per op
  double limit_ = 0;                     // what counts as load in a candidate's score
  std::vector<Candidate> cands_;
  std::vector<char> taken_, queued_fail_;
  std::vector<size_t> outs_, ins_;  // chosen candidates, in each direction's issue order
};

}  // namespace

ZeroOverheadSwapPlan plan_zero_overhead_swap_pass(const Graph& g, const AccessTrace& trace, const ZeroOverheadSwapConfig& cfg,
                                                  int max_hold) {
  ZeroOverheadSwapPlan out;
  out.max_hold = max_hold;
  if (g.num_ops() == 0) return out;
  SwapPass(g, trace, cfg, max_hold, out).run();
  return out;
}

ZeroOverheadSwapPlan plan_zero_overhead_swap(const Graph& g, const AccessTrace& trace, const ZeroOverheadSwapConfig& cfg) {
  // The greedy selection is myopic: a long copy ranked first can bring a large block back into a
  // later window that becomes the new peak. A second pass that holds every block at most two
  // ops (the memory manager's default release) takes only short copies; keep the better plan.
  ZeroOverheadSwapPlan free = plan_zero_overhead_swap_pass(g, trace, cfg, 0), two = plan_zero_overhead_swap_pass(g, trace, cfg, 2);
  const auto target = static_cast<size_t>(static_cast<double>(cfg.budget) * kZeroOverheadHeadroom);
  auto stalls = [](const ZeroOverheadSwapPlan& p) {
    return std::count_if(p.chosen.begin(), p.chosen.end(), [](const SwapChoice& c) { return !c.hidden; });
  };
  auto key = [&](const ZeroOverheadSwapPlan& p) {
    const bool fits = cfg.stick_to_limit && p.peak_after <= target;
    return std::make_tuple(!fits, fits ? stalls(p) : 0, p.peak_after);
  };
  return key(two) < key(free) ? two : free;
}

std::vector<Action> ZeroOverheadSwapPolicy::after_op(int op_index) {
  auto it = by_op_.find(op_index);
  return it == by_op_.end() ? std::vector<Action>{} : it->second;
}

std::vector<Victim> ZeroOverheadSwapPolicy::choose_victims(size_t bytes, const MemoryView& view) {
  std::vector<Victim> out = lru_swap_victims(view, bytes);  // among those that fit on the host
  if (planned_) {
    passive_evictions_ += out.size();
    iteration_evictions_ += out.size();
    // Space the budget has but the allocator could not use (fragmentation).
    const size_t need = view.allocated() + bytes;
    if (need < view.budget()) unusable_ = std::max(unusable_, view.budget() - need);
  }
  return out;
}

void ZeroOverheadSwapPolicy::plan(size_t target_budget) {
  plan_ = plan_zero_overhead_swap(view_->graph(), measured_, {stick_to_limit_, target_budget, ms_per_byte_, latency_ms_});
  by_op_.clear();
  for (const Action& a : plan_.plan.actions) by_op_[a.op].push_back(a);
  target_budget_ = target_budget;
}

void ZeroOverheadSwapPolicy::end_iteration(const AccessTrace& trace) {
  if (view_ == nullptr) return;
  repeats_ = planned_;
  if (!planned_) {
    ms_per_byte_ = view_->copy_ms_per_byte();
    latency_ms_ = view_->copy_latency_ms();
    measured_ = trace;
    plan(view_->budget());
    planned_ = true;
  } else if (stick_to_limit_ && iteration_evictions_ > 0 && replans_ < kZeroOverheadReplans) {
    // The allocator's fragmentation exceeded the headroom: plan again for less, by what it could
    // not use, 5% to 10% of the budget at a time.
    const size_t cut = std::clamp(unusable_, target_budget_ / 20, target_budget_ / 10);
    plan(target_budget_ - cut);
    ++replans_;
    repeats_ = false;
  }
  iteration_evictions_ = 0;
  unusable_ = 0;
}

nlohmann::json ZeroOverheadSwapPolicy::report() const {
  nlohmann::json chosen = nlohmann::json::array();
  if (view_ != nullptr)
    for (const auto& c : plan_.chosen)
      chosen.push_back({{"tensor", view_->graph().tensor(c.tensor).name},
                        {"bytes", c.bytes},
                        {"swap_out_after_op", c.swap_out_after},
                        {"freed_after_op", c.release_after},
                        {"prefetch_after_op", c.prefetch_after},
                        {"next_access_op", c.next_access},
                        {"absence_ms", c.absence_ms},
                        {"hidden", c.hidden}});
  return {{"mode", stick_to_limit_ ? "stick-to-limit" : "no-overhead"},
          {"planned", planned_},
          {"copy_ms_per_byte", ms_per_byte_},
          {"bandwidth_gb_per_s", ms_per_byte_ > 0 ? 1e-6 / ms_per_byte_ : 0.0},
          {"copy_latency_ms", latency_ms_},
          {"bandwidth_source", "calibration copies (device to host) by the memory manager"},
          {"candidates", plan_.candidates},
          {"hidden_candidates", plan_.hidden_candidates},
          {"predicted_peak_before_bytes", plan_.peak_before},
          {"predicted_peak_after_bytes", plan_.peak_after},
          {"max_hold_ops", plan_.max_hold},  // the pass kept: 0 free release points, 2 at most two ops
          // no-overhead: the smallest budget it reaches (the guided iterations' peak, predicted).
          {"smallest_budget_bytes", stick_to_limit_ ? nlohmann::json(nullptr) : nlohmann::json(plan_.peak_after)},
          {"passive_evictions_after_planning", passive_evictions_},
          {"replans", replans_},
          {"planned_for_budget_bytes", target_budget_},
          {"chosen", chosen}};
}

std::string ZeroOverheadSwapPolicy::summary() const {
  if (!planned_) return "not planned (one measured iteration is needed)";
  size_t hidden = 0;
  for (const auto& c : plan_.chosen) hidden += c.hidden;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%zu blocks swapped (%zu hidden) of %zu candidates, %s; predicted peak %s -> %s; %llu passive evictions",
                plan_.chosen.size(), hidden, plan_.candidates, plan_.max_hold ? "released within two ops" : "free release points",
                format_bytes(plan_.peak_before).c_str(), format_bytes(plan_.peak_after).c_str(),
                static_cast<unsigned long long>(passive_evictions_));
  return buf;
}

}  // namespace vtensor
