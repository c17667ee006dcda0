#include "vtensor/policy/bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace vtensor {

namespace {

// Ops evaluated at most: the ones most over the budget, then evenly spread over the rest (the
// bound is a maximum over ops, so any subset still bounds).
constexpr size_t kMaxOps = 384;
constexpr size_t kTopOps = 64;

// One op's bound: the least overhead O (ns) at which the link and the cheapest recomputation
// together cover `need` bytes. c_link: the bytes the link moves in the gaps' windows at O = 0
// (min over window lengths of bw * w + the bytes with a longer window; each window grows by O).
struct OpBound {
  double o_ns = 0;
  double swap = 0, recompute = 0;
};

OpBound solve(double need, double bw, double c_link, double swappable, const std::vector<std::pair<double, double>>& rec,
              const std::vector<double>& rec_bytes_prefix, const std::vector<double>& rec_cost_prefix) {
  const double rec_total = rec_bytes_prefix.empty() ? 0 : rec_bytes_prefix.back();
  auto cost_of = [&](double bytes) {  // the cheapest `bytes` of recomputation, fractional
    if (bytes <= 0) return 0.0;
    if (bytes > rec_total) return std::numeric_limits<double>::infinity();
    const size_t i = static_cast<size_t>(std::lower_bound(rec_bytes_prefix.begin(), rec_bytes_prefix.end(), bytes) -
                                         rec_bytes_prefix.begin());
    const double before = i ? rec_bytes_prefix[i - 1] : 0, cost_before = i ? rec_cost_prefix[i - 1] : 0;
    return cost_before + (bytes - before) * rec[i].first;
  };
  auto link = [&](double o) { return std::isinf(bw) ? swappable : std::min(swappable, c_link + bw * o); };
  auto ok = [&](double o) { return cost_of(std::max(0.0, need - link(o))) <= o; };
  double hi = 1;
  while (!ok(hi)) {
    hi *= 2;
    if (hi > 1e18) return {std::numeric_limits<double>::infinity(), 0, 0};
  }
  double lo = 0;
  if (ok(0)) hi = 0;
  for (int it = 0; it < 100 && hi - lo > 1e-12 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (ok(mid) ? hi : lo) = mid;
  }
  // The least O is in [lo, hi]: lo, so that the bound errs low.
  const double s = std::min(need, link(lo));
  return {lo, s, need - s};
}

// The ops to evaluate: those over the budget, all of them up to kMaxOps, else the kTopOps most
// over it and a spread of the rest. Empty when nothing is over the budget.
std::vector<size_t> ops_to_evaluate(const PlannerTimeline& tl, size_t n, size_t budget) {
  std::vector<size_t> over;
  for (size_t k = 0; k < n; ++k)
    if (tl.mem[k] > budget) over.push_back(k);
  std::vector<size_t> ops = over;
  if (ops.size() > kMaxOps) {
    std::stable_sort(ops.begin(), ops.end(), [&](size_t a, size_t b) { return tl.mem[a] > tl.mem[b]; });
    std::vector<size_t> pick(ops.begin(), ops.begin() + kTopOps);
    const size_t stride = (over.size() + (kMaxOps - kTopOps) - 1) / (kMaxOps - kTopOps);
    for (size_t i = 0; i < over.size(); i += stride) pick.push_back(over[i]);
    std::sort(pick.begin(), pick.end());
    pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
    ops = std::move(pick);
  }
  return ops;
}

// What can leave the device around one op: the bytes off it for good, and the gaps of the rest.
struct OpGaps {
  double free = 0, swappable = 0;
  std::vector<std::pair<double, double>> out_w, in_w;  // (window ns, bytes) per direction
  std::vector<std::pair<double, double>> rec;          // (ns per byte, bytes)
};

// period: the iteration's ns; out_bytes: per op, the bytes of its outputs.
OpGaps gaps_at(const PlannerInput& in, const PlannerTimeline& tl, size_t k, double period,
               const std::vector<double>& out_bytes) {
  auto op_ns = [&](int op) { return tl.start[static_cast<size_t>(op) + 1] - tl.start[static_cast<size_t>(op)]; };
  const int op = static_cast<int>(k);
  const double t_start = tl.start[k], t_end = tl.start[k + 1];
  OpGaps g;
  for (size_t id = 0; id < in.tensors.size(); ++id) {
    const auto& t = in.tensors[id];
    const auto& uses = tl.ops_of[id];
    if (t.bytes == 0 || t.pinned) continue;  // a pinned tensor stays where the unmanaged curve has it
    const auto bytes = static_cast<double>(t.bytes);
    if (uses.empty()) {  // persistent and not used this iteration: off the device for good
      if (t.persistent) g.free += bytes;
      continue;
    }
    // The gap around op k: the last use before it (e) and the next after it (b); cyclic for
    // persistent tensors (needed again next iteration), none for a tensor alive past its last use.
    const auto it = std::lower_bound(uses.begin(), uses.end(), op);
    if (it != uses.end() && *it == op) continue;  // used at k: on the device
    double w_out, w_in;
    if (t.persistent) {
      const int e = it == uses.begin() ? uses.back() : *(it - 1);
      const int b = it == uses.end() ? uses.front() : *it;
      w_out = t_start - tl.start[static_cast<size_t>(e) + 1] + (e > op ? period : 0);
      w_in = tl.start[static_cast<size_t>(b)] - t_end + (b < op ? period : 0);
    } else {
      if (op < tl.first[id] || op > tl.last[id]) continue;  // not alive at k
      if (it == uses.end()) {  // alive past its last use (a replayed log's late free)
        g.free += bytes;
        continue;
      }
      w_out = t_start - tl.start[static_cast<size_t>(*(it - 1)) + 1];
      w_in = tl.start[static_cast<size_t>(*it)] - t_end;
      if (t.recomputable && t.producer >= 0 && out_bytes[static_cast<size_t>(t.producer)] > 0)
        g.rec.push_back({op_ns(t.producer) / out_bytes[static_cast<size_t>(t.producer)], bytes});
    }
    g.swappable += bytes;
    g.out_w.push_back({std::max(0.0, w_out), bytes});
    g.in_w.push_back({std::max(0.0, w_in), bytes});
  }
  return g;
}

// What the link carries into (or out of) the windows w at O = 0: min over w of bw * w + bytes
// whose window is longer than w (all windows of a direction end, or start, at the op).
double carried(std::vector<std::pair<double, double>>& w, double bw) {
  std::sort(w.begin(), w.end());
  double longer = 0;
  for (const auto& x : w) longer += x.second;
  double c = longer;  // w = 0
  for (size_t i = 0; i < w.size(); ++i) {
    longer -= w[i].second;
    c = std::min(c, bw * w[i].first + longer);
  }
  return c;
}

// The bound at an op that needs `need` bytes off the device, from its gaps.
OpBound bound_at(double need, double bw, OpGaps& g) {
  const double c_link = std::isinf(bw) ? g.swappable : std::min(carried(g.out_w, bw), carried(g.in_w, bw));
  std::sort(g.rec.begin(), g.rec.end());
  std::vector<double> rb, rc;
  double sb = 0, sc = 0;
  for (const auto& r : g.rec) rb.push_back(sb += r.second), rc.push_back(sc += r.second * r.first);
  return need > g.swappable ? OpBound{std::numeric_limits<double>::infinity(), 0, 0}
                            : solve(need, bw, c_link, g.swappable, g.rec, rb, rc);
}

}  // namespace

OverheadBound overhead_bound(const PlannerInput& input) {
  OverheadBound out;
  PlannerInput in = input;
  in.workspace_bytes.clear();  // a plan may pick leaner conv algorithms: not counted as needed
  in.memory_delta.clear();
  const PlannerTimeline tl = planner_timeline(in);
  const size_t n = static_cast<size_t>(std::max(in.num_ops, 0));
  if (n == 0) return out;
  const double period = tl.start[n];
  out.compute_ms = period * 1e-6;
  // Bytes per ns; an unknown link (0) is taken as infinitely fast, so the bound still holds.
  const double bw = in.swap_ns_per_byte > 0 ? 1.0 / in.swap_ns_per_byte : std::numeric_limits<double>::infinity();

  // Recompute cost per byte: the producer's kernel time shared among its outputs by bytes.
  std::vector<double> out_bytes(n, 0);
  for (const auto& t : in.tensors)
    if (t.producer >= 0 && static_cast<size_t>(t.producer) < n) out_bytes[static_cast<size_t>(t.producer)] += static_cast<double>(t.bytes);

  // The ops over the budget, most over first; then a spread of the rest.
  const std::vector<size_t> ops = ops_to_evaluate(tl, n, in.budget);
  if (ops.empty()) {
    out.binds = "nothing";
    return out;
  }

  double best = -1;
  for (size_t k : ops) {
    OpGaps gaps = gaps_at(in, tl, k, period, out_bytes);
    const double need = static_cast<double>(tl.mem[k] - in.budget) - gaps.free;
    ++out.ops_evaluated;
    if (need <= 0) continue;
    const OpBound b = bound_at(need, bw, gaps);
    if (b.o_ns > best) {
      best = b.o_ns;
      out.op = static_cast<int>(k);
      out.over_bytes = tl.mem[k] - in.budget;
      out.free_bytes = static_cast<size_t>(gaps.free);
      out.swap_bytes = static_cast<size_t>(std::llround(b.swap));
      out.recompute_bytes = static_cast<size_t>(std::llround(b.recompute));
      out.feasible = need <= gaps.swappable && b.o_ns < std::numeric_limits<double>::infinity();
    }
  }
  if (best < 0) {  // the bytes never used again cover every op over the budget
    out.binds = "nothing";
    return out;
  }
  out.overhead_ms = out.feasible ? best * 1e-6 : std::numeric_limits<double>::infinity();
  if (!out.feasible)
    out.binds = "working set";
  else if (out.overhead_ms <= 0)
    out.binds = "nothing";
  else
    out.binds = out.recompute_bytes == 0 ? "link" : out.swap_bytes == 0 ? "recompute" : "link and recompute";
  return out;
}

}  // namespace vtensor
