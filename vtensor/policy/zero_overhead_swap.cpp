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

}  // namespace

ZeroOverheadSwapPlan plan_zero_overhead_swap_pass(const Graph& g, const AccessTrace& trace, const ZeroOverheadSwapConfig& cfg,
                                                  int max_hold) {
  ZeroOverheadSwapPlan out;
  out.max_hold = max_hold;
  const int n = static_cast<int>(g.num_ops());
  if (n == 0) return out;
  // Op start times (ms) from the first access of each op; ops without one take the next op's.
  std::vector<double> start(static_cast<size_t>(n) + 1, -1);
  std::vector<std::vector<int>> uses(g.num_tensors());
  double t_end = 0;
  for (const auto& a : trace.accesses) {
    if (a.kind != AccessKind::kRead && a.kind != AccessKind::kWrite) continue;  // recomputations replay old ops
    if (a.op_index < 0 || a.op_index >= n) continue;
    const double t = static_cast<double>(a.time_ns) * 1e-6;
    double& s = start[static_cast<size_t>(a.op_index)];
    if (s < 0 || t < s) s = t;
    t_end = std::max(t_end, t);
    auto& u = uses[static_cast<size_t>(a.id)];
    if (u.empty() || u.back() != a.op_index) u.push_back(a.op_index);
  }
  start[static_cast<size_t>(n)] = t_end;
  for (int k = n - 1; k >= 0; --k)
    if (start[static_cast<size_t>(k)] < 0) start[static_cast<size_t>(k)] = start[static_cast<size_t>(k) + 1];
  // With the kernels' own times, ops start back to back: a measured iteration that stalled (the
  // passive first iteration of stick-to-limit) must not make windows look longer than they are.
  if (trace.op_ms.size() >= static_cast<size_t>(n)) {
    double t = 0;
    for (int k = 0; k < n; ++k) {
      start[static_cast<size_t>(k)] = t;
      t += trace.op_ms[static_cast<size_t>(k)];
    }
    start[static_cast<size_t>(n)] = t;
  }
  auto op_start = [&](int k) { return start[static_cast<size_t>(k)]; };
  auto op_end = [&](int k) { return start[static_cast<size_t>(k) + 1]; };

  // Predicted device bytes per op: persistent + tensors live at the op + its workspace.
  std::vector<int64_t> mem(static_cast<size_t>(n), 0);
  int64_t persistent = 0;
  for (const auto& t : g.tensors()) {
    const auto bytes = static_cast<int64_t>(align_up(std::max<size_t>(t.bytes(), 1)));
    if (t.persistent()) {
      persistent += bytes;
      continue;
    }
    const auto& u = uses[static_cast<size_t>(t.id)];
    if (u.empty()) continue;
    for (int k = u.front(); k <= u.back(); ++k) mem[static_cast<size_t>(k)] += bytes;
  }
  for (const auto& op : g.ops())
    if (op.workspace_bytes) mem[static_cast<size_t>(op.index)] += static_cast<int64_t>(align_up(op.workspace_bytes));
  for (auto& m : mem) m += persistent;
  auto peak_op = [&] { return static_cast<int>(std::max_element(mem.begin(), mem.end()) - mem.begin()); };
  out.peak_before = static_cast<size_t>(mem[static_cast<size_t>(peak_op())]);

  const double mean = static_cast<double>(std::accumulate(mem.begin(), mem.end(), int64_t{0})) / n;
  const double limit = cfg.stick_to_limit ? static_cast<double>(cfg.budget) : mean;

  // Candidates: one per absence interval between consecutive accesses.
  constexpr double kMarginMs = 1e-6;  // trace times are whole nanoseconds
  auto copy_ms_of = [&](size_t bytes) { return cfg.latency_ms + static_cast<double>(bytes) * cfg.ms_per_byte; };
  // The release op of a swap-out whose copy ends at `end`: the first op after `s` that ends at or
  // after it (the memory manager frees the block at that op's end); -1 if none before `limit`.
  auto release_op = [&](int s, double end, int limit) {
    if (max_hold > 0) limit = std::min(limit, s + max_hold + 1);
    for (int k = s + 1; k < limit; ++k)
      if (op_end(k) >= end + kMarginMs) return k;
    return -1;
  };
  std::vector<Candidate> cands;
  for (const auto& t : g.tensors()) {
    if (t.persistent()) continue;
    const auto& u = uses[static_cast<size_t>(t.id)];
    const size_t bytes = align_up(std::max<size_t>(t.bytes(), 1));
    const double copy_ms = copy_ms_of(bytes);
    for (size_t i = 0; i + 1 < u.size(); ++i) {
      const int first = u[i], next = u[i + 1];
      if (next - first < 3) continue;  // no op where the block could be absent
      // Swap-out right after the access; the block is freed at the end of the op during which the
      // copy ends (release r); prefetch after the latest op p that leaves a copy's time before the
      // next access. Absent during ops r+1..p.
      int s = first, r = -1, p = -1;
      for (; s + 2 <= next - 1 && r < 0; ++s) {  // unbounded hold: the first op always works if any does
        r = release_op(s, op_end(s) + copy_ms, next - 1);
        if (r >= 0 || max_hold == 0) break;
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
        if (!cfg.stick_to_limit) continue;
        if (r < 0) r = s + 2;
        if (p < r + 1) p = next - 1;
        if (p < r + 1) continue;
      }
      Candidate c;
      c.c = {t.id, bytes, s, r, p, next, op_start(next) - op_end(first), hidden};
      double load = 0;
      for (int k = r + 1; k <= p; ++k) load += std::max(0.0, static_cast<double>(mem[static_cast<size_t>(k)]) - limit);
      c.score[0] = c.c.absence_ms;
      c.score[1] = c.c.absence_ms * static_cast<double>(bytes);
      c.score[2] = load;
      cands.push_back(c);
      ++out.candidates;
      out.hidden_candidates += hidden;
    }
  }
  // Rank each score (largest first, ties by tensor then op), sum the ranks.
  for (int s = 0; s < 3; ++s) {
    std::vector<size_t> idx(cands.size());
    std::iota(idx.begin(), idx.end(), size_t{0});
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return cands[a].score[s] > cands[b].score[s]; });
    for (size_t r = 0; r < idx.size(); ++r) cands[idx[r]].rank_sum += r;
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.c.hidden != b.c.hidden) return a.c.hidden;  // stalls only when hidden copies are not enough
    if (a.rank_sum != b.rank_sum) return a.rank_sum < b.rank_sum;
    if (a.c.tensor != b.c.tensor) return a.c.tensor < b.c.tensor;
    return a.c.swap_out_after < b.c.swap_out_after;
  });

  // Take candidates covering the peak until it fits the target. Copies run one at a time per
  // direction, in issue order: queued behind (and in front of) the copies already chosen, a
  // candidate's swap-out may end later than alone, and its release op moves with it; it is hidden
  // only if every hidden copy still ends by its deadline (a chosen swap-out by the end of its
  // release op, a prefetch by the next access). Adding a copy never makes another earlier, so a
  // candidate that fails once is rejected for good.
  const int64_t target =
      cfg.stick_to_limit ? static_cast<int64_t>(static_cast<double>(cfg.budget) * kZeroOverheadHeadroom) : 0;
  std::vector<char> taken(cands.size(), 0), queued_fail(cands.size(), 0);
  std::vector<size_t> outs, ins;  // chosen candidates, in each direction's issue order
  auto out_before = [&](size_t a, size_t b) {
    const auto &x = cands[a].c, &y = cands[b].c;
    return std::tie(x.swap_out_after, x.tensor) < std::tie(y.swap_out_after, y.tensor);
  };
  auto in_before = [&](size_t a, size_t b) {
    const auto &x = cands[a].c, &y = cands[b].c;
    return std::tie(x.prefetch_after, x.swap_out_after, x.tensor) < std::tie(y.prefetch_after, y.swap_out_after, y.tensor);
  };
  // Runs `queue` plus `extra` in issue order; every chosen hidden copy must meet its deadline.
  // Returns the end of extra's copy, or a negative value when a chosen copy is late.
  auto fifo_end = [&](const std::vector<size_t>& queue, size_t extra, bool out_dir, auto before) {
    std::vector<size_t> q = queue;
    q.insert(std::upper_bound(q.begin(), q.end(), extra, before), extra);
    double free_at = 0, extra_end = -1;
    for (size_t i : q) {
      const auto& c = cands[i].c;
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
  };
  auto take = [&](size_t i) {
    taken[i] = 1;
    auto& c = cands[i].c;
    outs.insert(std::upper_bound(outs.begin(), outs.end(), i, out_before), i);
    ins.insert(std::upper_bound(ins.begin(), ins.end(), i, in_before), i);
    for (int k = c.release_after + 1; k <= c.prefetch_after; ++k) mem[static_cast<size_t>(k)] -= static_cast<int64_t>(c.bytes);
  };
  for (;;) {
    const int pk = peak_op();
    if (mem[static_cast<size_t>(pk)] <= target) break;
    auto covers = [&](size_t i, int release, int prefetch) { return !taken[i] && release + 1 <= pk && pk <= prefetch; };
    size_t pick = cands.size();
    int pick_release = -1, pick_prefetch = -1;
    for (size_t i = 0; i < cands.size() && pick == cands.size(); ++i) {
      auto& c = cands[i].c;
      if (!c.hidden || queued_fail[i] || !covers(i, c.release_after, c.prefetch_after)) continue;
      const double out_end = fifo_end(outs, i, true, out_before);
      const int release = out_end < 0 ? -1 : release_op(c.swap_out_after, out_end, c.prefetch_after);
      // The prefetch: the latest op, from the one that hides it alone back to release+1, whose
      // queued copy ends in time and leaves every chosen one on time.
      int prefetch = -1;
      const int alone = c.prefetch_after;
      for (int q = alone; release >= 0 && q >= release + 1 && prefetch < 0; --q) {
        c.prefetch_after = q;
        const double in_end = fifo_end(ins, i, false, in_before);
        if (in_end >= 0 && in_end <= op_start(c.next_access) - kMarginMs) prefetch = q;
      }
      c.prefetch_after = alone;
      if (prefetch < 0) {
        queued_fail[i] = 1;  // the queues only grow: it never fits later
      } else if (covers(i, release, prefetch)) {
        pick = i;
        pick_release = release;
        pick_prefetch = prefetch;
      }
    }
    // Stick-to-limit: when no copy hides, take the best-ranked one that stalls.
    if (pick == cands.size() && cfg.stick_to_limit)
      for (size_t i = 0; i < cands.size() && pick == cands.size(); ++i)
        if (covers(i, cands[i].c.release_after, cands[i].c.prefetch_after)) pick = i;
    if (pick == cands.size()) break;
    if (pick_release >= 0) {
      cands[pick].c.release_after = pick_release;
      cands[pick].c.prefetch_after = pick_prefetch;
    }
    if (queued_fail[pick] || !cands[pick].c.hidden || pick_release < 0) cands[pick].c.hidden = false;
    take(pick);
    out.chosen.push_back(cands[pick].c);
  }
  out.peak_after = static_cast<size_t>(mem[static_cast<size_t>(peak_op())]);
  std::sort(out.chosen.begin(), out.chosen.end(), [](const SwapChoice& a, const SwapChoice& b) {
    return a.swap_out_after != b.swap_out_after ? a.swap_out_after < b.swap_out_after : a.tensor < b.tensor;
  });
  for (const auto& c : out.chosen) {
    out.plan.actions.push_back({ActionKind::kSwapOut, c.tensor, c.swap_out_after, c.release_after});
    out.plan.actions.push_back({ActionKind::kPrefetch, c.tensor, c.prefetch_after});
  }
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
