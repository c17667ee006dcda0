#include "vtensor/policy/lp.h"

#include <coin/Cbc_C_Interface.h>
#include <coin/ClpSimplex.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>

namespace vtensor {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Gap {
  TensorId id;
  int a, b;          // last use before, next use (b > a; b >= n: the first use next iteration)
  double mib;
  double rec_ms;     // < 0: not recomputable
  int x, y;          // columns
  std::vector<int> seg;      // the segments its interior crosses, in order
  std::vector<int> seg_off;  // interior offset (0: op a + 1) where each starts
  int out0 = -1, in0 = -1;   // first cumulative out / in column (one per seg entry)
  int w = -1;                // the compressed fraction's column (LpOptions::codec), -1: none
  double saved_mib = 0;      // what compression takes off the device (its bytes less the buffer)
  double codec_ms = 0;       // one compression (or decompression)
  LpCodec codec;
};

// Column-major assembly of (row, column, value) entries, duplicates summed.
struct Matrix {
  std::vector<double> col_lo, col_hi, obj, row_lo, row_hi;
  struct Entry {
    int col, row;
    double v;
  };
  std::vector<Entry> entries;
  int col(double lo, double hi, double c) {
    col_lo.push_back(lo), col_hi.push_back(hi), obj.push_back(c);
    return static_cast<int>(obj.size()) - 1;
  }
  int row(double lo, double hi) {
    row_lo.push_back(lo), row_hi.push_back(hi);
    return static_cast<int>(row_lo.size()) - 1;
  }
  void add(int r, int c, double v) { entries.push_back({c, r, v}); }
  // Sorted by column then row, duplicates summed.
  void compress() {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.col != b.col ? a.col < b.col : a.row < b.row; });
    size_t w = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (w > 0 && entries[w - 1].col == entries[i].col && entries[w - 1].row == entries[i].row)
        entries[w - 1].v += entries[i].v;
      else
        entries[w++] = entries[i];
    }
    entries.resize(w);
  }
};

// What solve_lp's stages share: the input and its timeline, the ops over the budget, the gaps,
// the segments and the matrix as they are built.
struct Lp {
  Lp(const PlannerInput& input, const LpOptions& o) : opt(o), in(input) {
    in.workspace_bytes.clear();  // a plan may pick leaner conv algorithms (as bound.h)
    in.memory_delta.clear();
    tl = planner_timeline(in);
    n = std::max(in.num_ops, 0);
  }
  const LpOptions& opt;
  PlannerInput in;
  PlannerTimeline tl;
  int n = 0;
  double period_ms = 0, bw = 0;
  std::vector<double> need, out_bytes;
  std::vector<int> over;
  std::vector<char> constrained;
  std::vector<int> cprefix;
  std::vector<Gap> gaps;
  std::vector<std::vector<int>> chain_ops;  // per gap: its producer first, then the ancestors
  std::vector<int> seg_of;
  int m = 0;
  std::vector<double> seg_ms;
  Matrix mx;
  std::vector<int> extra;
  std::vector<std::vector<std::pair<int, int>>> in_seg;
  std::vector<std::vector<std::pair<int, double>>> rec_in;
  std::vector<std::pair<int, double>> rec_total;
  std::vector<std::vector<std::pair<int, double>>> codec_in;
  // The matrix's compressed columns for Clp (and Cbc).
  std::vector<CoinBigIndex> start;
  std::vector<int> index;
  std::vector<double> value;

  double op_ms(int k) const { return (tl.start[static_cast<size_t>(k) + 1] - tl.start[static_cast<size_t>(k)]) * 1e-6; }
  // Constrain at most max_rows ops (a subset still bounds): the most over, then a spread.
  std::vector<int> pick_rows(const std::vector<int>& from, int rows) const {
    if (static_cast<int>(from.size()) <= rows) return from;
    std::vector<int> by_need = from;
    std::stable_sort(by_need.begin(), by_need.end(), [&](int a, int b) { return need[static_cast<size_t>(a)] > need[static_cast<size_t>(b)]; });
    const size_t top = static_cast<size_t>(rows) / 4, rest = static_cast<size_t>(rows) - top;
    std::vector<int> pick(by_need.begin(), by_need.begin() + static_cast<long>(top));
    const size_t stride = (from.size() + rest - 1) / rest;
    for (size_t i = 0; i < from.size(); i += stride) pick.push_back(from[i]);
    std::sort(pick.begin(), pick.end());
    pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
    return pick;
  }
  bool any_constrained(int lo, int hi) const {  // in [lo, hi], cyclic over n
    if (lo > hi) return false;
    if (hi < n) return cprefix[static_cast<size_t>(hi) + 1] > cprefix[static_cast<size_t>(lo)];
    return cprefix[static_cast<size_t>(n)] > cprefix[static_cast<size_t>(std::min(lo, n))] ||
           cprefix[static_cast<size_t>(hi - n) + 1] > 0;
  }
};

// The need (MiB over the budget) at each op and the ops constrained; false: none over the budget.
bool find_over(Lp& lp) {
  const PlannerInput& in = lp.in;
  const PlannerTimeline& tl = lp.tl;
  const LpOptions& opt = lp.opt;
  const int n = lp.n;
  auto& need = lp.need;
  auto& out_bytes = lp.out_bytes;
  auto& over = lp.over;
  auto& constrained = lp.constrained;
  auto& cprefix = lp.cprefix;
  // Bytes alive past their last use (a replayed log's late frees) and persistent tensors never
  // used leave at no cost; what is over the budget beyond them must be moved.
  need.assign(static_cast<size_t>(n), 0);
  for (int k = 0; k < n; ++k) need[static_cast<size_t>(k)] = (static_cast<double>(tl.mem[static_cast<size_t>(k)]) - static_cast<double>(in.budget)) / kMiB;
  out_bytes.assign(static_cast<size_t>(n), 0);
  for (size_t id = 0; id < in.tensors.size(); ++id) {
    const auto& t = in.tensors[id];
    if (t.producer >= 0 && t.producer < n) out_bytes[static_cast<size_t>(t.producer)] += static_cast<double>(t.bytes);
    if (t.bytes == 0) continue;
    const auto& uses = tl.ops_of[id];
    const double mib = static_cast<double>(t.bytes) / kMiB;
    if (uses.empty()) {
      if (t.persistent)
        for (auto& x : need) x -= mib;
    } else if (!t.persistent) {
      for (int k = uses.back() + 1; k <= tl.last[id] && k < n; ++k) need[static_cast<size_t>(k)] -= mib;
    }
  }
  for (int k = 0; k < n; ++k)
    if (need[static_cast<size_t>(k)] > 1e-9) over.push_back(k);
  if (over.empty()) return false;
  over = lp.pick_rows(over, opt.max_rows);
  constrained.assign(static_cast<size_t>(n), 0);
  for (int k : over) constrained[static_cast<size_t>(k)] = 1;
  cprefix.assign(static_cast<size_t>(n) + 1, 0);
  for (int k = 0; k < n; ++k) cprefix[static_cast<size_t>(k) + 1] = cprefix[static_cast<size_t>(k)] + constrained[static_cast<size_t>(k)];
  return true;
}

// The gaps that span a constrained op, each with its recomputation's chain of ops.
void collect_gaps(Lp& lp) {
  const PlannerInput& in = lp.in;
  const PlannerTimeline& tl = lp.tl;
  const LpOptions& opt = lp.opt;
  const int n = lp.n;
  auto& need = lp.need;
  const auto& out_bytes = lp.out_bytes;
  auto& gaps = lp.gaps;
  auto& chain_ops = lp.chain_ops;
  auto any_constrained = [&](int lo, int hi) { return lp.any_constrained(lo, hi); };
  // A recomputation at op b re-runs the producer and every ancestor released before the drop
  // (after op a) that is not alive at b: the ancestors' ops, as the memory manager's lineage walk
  // does (an input released after the drop is held for it). False: some op of it may not re-run.
  std::vector<int> seen(in.tensors.size(), 0);
  int stamp = 0;
  auto chain = [&](TensorId x, int a, int b, std::vector<int>& ops) {
    std::vector<TensorId> stack{x};
    ++stamp;
    seen[static_cast<size_t>(x)] = stamp;
    while (!stack.empty()) {
      const auto& t = in.tensors[static_cast<size_t>(stack.back())];
      stack.pop_back();
      if (!t.recomputable || t.producer < 0 || t.producer >= n) return false;
      if (ops.size() > 256) return true;  // a longer chain costs at least this much: still a bound
      ops.push_back(t.producer);
      for (TensorId u : t.inputs) {
        const auto i = static_cast<size_t>(u);
        const auto& it = in.tensors[i];
        if (seen[i] == stamp || it.persistent || (tl.first[i] <= b && b <= tl.last[i]) || tl.last[i] > a) continue;
        seen[i] = stamp;
        stack.push_back(u);
      }
    }
    return true;
  };

  // The gaps that span a constrained op (the small ones folded into the need).
  const size_t small = static_cast<size_t>(opt.small_fraction * static_cast<double>(in.budget));
  for (size_t id = 0; id < in.tensors.size(); ++id) {
    const auto& t = in.tensors[id];
    const auto& uses = tl.ops_of[id];
    if (t.bytes == 0 || uses.empty() || t.pinned) continue;  // a pinned tensor's gaps stay on the device
    const double mib = static_cast<double>(t.bytes) / kMiB;
    auto add = [&](int a, int b, bool wrap) {
      if (b - a < 2 || !any_constrained(a + 1, b - 1)) return;
      if (t.bytes < small) {  // off the device at no cost: fewer columns, and still a bound
        for (int k = a + 1; k < b; ++k) need[static_cast<size_t>(k % n)] -= mib;
        return;
      }
      std::vector<int> ops;
      const bool rec = !wrap && !t.persistent && out_bytes[static_cast<size_t>(std::max(t.producer, 0))] > 0 &&
                       chain(static_cast<TensorId>(id), a, b, ops);
      gaps.push_back({static_cast<TensorId>(id), a, b, mib, rec ? 0.0 : -1.0, -1, -1, {}, {}});
      chain_ops.push_back(rec ? std::move(ops) : std::vector<int>{});
      if (opt.codec && !wrap && !t.persistent)
        if (const auto c = opt.codec(static_cast<TensorId>(id), a); c && c->capacity < t.bytes) {
          Gap& g = gaps.back();
          g.codec = *c;
          g.saved_mib = static_cast<double>(t.bytes - c->capacity) / kMiB;
          g.codec_ms = c->codec_ns * 1e-6;
        }
    };
    for (size_t i = 0; i + 1 < uses.size(); ++i) add(uses[i], uses[i + 1], false);
    if (t.persistent) add(uses.back(), uses.front() + n, true);  // across the iteration boundary
  }
}

  // Recompute cost: the producer's kernel shared among its outputs by bytes; an ancestor op that
  // several chains re-run is shared among all of them (chains whose windows overlap can run it
  // once for all; a producer and an ancestor of the same op never share a window).
void recompute_costs(Lp& lp) {
  auto& gaps = lp.gaps;
  const auto& chain_ops = lp.chain_ops;
  const auto& out_bytes = lp.out_bytes;
  auto op_ms = [&](int k) { return lp.op_ms(k); };
  std::map<int, int> users;  // ancestor op -> chains
  for (size_t gi = 0; gi < gaps.size(); ++gi)
    for (size_t j = 1; j < chain_ops[gi].size(); ++j) ++users[chain_ops[gi][j]];
  for (size_t gi = 0; gi < gaps.size(); ++gi) {
    Gap& g = gaps[gi];
    if (g.rec_ms < 0) continue;
    const int p = chain_ops[gi][0];
    g.rec_ms = op_ms(p) * g.mib * kMiB / out_bytes[static_cast<size_t>(p)];
    for (size_t j = 1; j < chain_ops[gi].size(); ++j) g.rec_ms += op_ms(chain_ops[gi][j]) / users[chain_ops[gi][j]];
  }
}

  // Size: the memory rows' non-zeros and the cumulative copy columns grow with the gaps spanning
  // each constrained op and the segments each gap crosses. Past the limits, fewer constrained ops
  // (a subset still bounds), then fewer segments (coarser still bounds), so Clp stays well inside
  // its time limit (the LSTM log: 120k columns and 1.6M non-zeros at 96 segments).
void limit_size(Lp& lp) {
  const LpOptions& opt = lp.opt;
  const int n = lp.n;
  auto& over = lp.over;
  auto& constrained = lp.constrained;
  auto& cprefix = lp.cprefix;
  auto& gaps = lp.gaps;
  auto& chain_ops = lp.chain_ops;
  auto pick_rows = [&](const std::vector<int>& from, int rows) { return lp.pick_rows(from, rows); };
  auto any_constrained = [&](int lo, int hi) { return lp.any_constrained(lo, hi); };
  std::vector<long long> span(static_cast<size_t>(n) + 1, 0);
  auto cover = [&](int lo, int hi) {  // [lo, hi] within one iteration
    if (lo > hi) return;
    ++span[static_cast<size_t>(lo)], --span[static_cast<size_t>(hi) + 1];
  };
  for (const Gap& g : gaps) {
    if (g.b < n) {
      cover(g.a + 1, g.b - 1);
    } else {
      cover(g.a + 1, n - 1);
      cover(0, g.b - 1 - n);
    }
  }
  long long run = 0, nnz = 0;
  for (int k = 0; k < n; ++k) {
    run += span[static_cast<size_t>(k)];
    span[static_cast<size_t>(k)] = run;
  }
  for (int k : over) nnz += 3 * span[static_cast<size_t>(k)];
  if (nnz > opt.max_memory_nonzeros) {
    const int rows = std::max(8, static_cast<int>(static_cast<double>(over.size()) * static_cast<double>(opt.max_memory_nonzeros) / static_cast<double>(nnz)));
    over = pick_rows(over, rows);
    std::fill(constrained.begin(), constrained.end(), 0);
    for (int k : over) constrained[static_cast<size_t>(k)] = 1;
    for (int k = 0; k < n; ++k) cprefix[static_cast<size_t>(k) + 1] = cprefix[static_cast<size_t>(k)] + constrained[static_cast<size_t>(k)];
    std::vector<Gap> kept;
    std::vector<std::vector<int>> kept_ops;
    for (size_t gi = 0; gi < gaps.size(); ++gi)
      if (any_constrained(gaps[gi].a + 1, gaps[gi].b - 1)) kept.push_back(gaps[gi]), kept_ops.push_back(std::move(chain_ops[gi]));
    gaps = std::move(kept), chain_ops = std::move(kept_ops);
  }
}

  // Segments of equal measured time (each at least one op), as many as the column limit allows.
// Returns how many.
int cut_segments(Lp& lp) {
  const PlannerTimeline& tl = lp.tl;
  const LpOptions& opt = lp.opt;
  const int n = lp.n;
  const double period_ms = lp.period_ms;
  const auto& gaps = lp.gaps;
  auto& seg_of = lp.seg_of;
  int& m = lp.m;
  auto op_ms = [&](int k) { return lp.op_ms(k); };
  seg_of.assign(static_cast<size_t>(n), 0);
  auto cut = [&](int m) {
    int s = 0;
    for (int k = 0; k < n; ++k) {
      const double mid = (tl.start[static_cast<size_t>(k)] * 1e-6 + 0.5 * op_ms(k));
      const int want = period_ms > 0 ? std::min(m - 1, static_cast<int>(mid / period_ms * m)) : m - 1;
      const int left = n - k;  // ops left, this one included
      s = std::min(m - 1, std::max({s, want, m - left}));  // m - left: an op left for each later segment
      if (k > 0 && s > seg_of[static_cast<size_t>(k) - 1] + 1) s = seg_of[static_cast<size_t>(k) - 1] + 1;  // none empty
      seg_of[static_cast<size_t>(k)] = s;
    }
  };
  m = std::max(1, std::min(opt.segments, n));
  for (;; m = std::max(1, m * 2 / 3)) {
    cut(m);
    long long cols = 0;
    for (const Gap& g : gaps) {
      // a wrap gap after the iteration's last op lies in the next iteration only
      const int lo = g.a + 1 < n ? seg_of[static_cast<size_t>(g.a + 1)] : seg_of.back() + 1;
      const int hi = seg_of[static_cast<size_t>((g.b - 1) % n)];
      cols += 2 + 3 * (g.b < n ? hi - lo + 1 : (seg_of.back() - lo + 1) + hi + 1);  // copies out, in, recompute
    }
    if (cols <= opt.max_columns || m <= 4) break;
  }
  auto& seg_ms = lp.seg_ms;
  seg_ms.assign(static_cast<size_t>(m), 0);
  for (int k = 0; k < n; ++k) seg_ms[static_cast<size_t>(seg_of[static_cast<size_t>(k)])] += op_ms(k);
  return seg_of.back() + 1;
}

// Each gap's columns (swapped, recomputed, compressed; its copies out and in, cumulative per
// segment it crosses; where its recomputation runs) and the rows that tie them together.
void gap_columns(Lp& lp) {
  const LpOptions& opt = lp.opt;
  const int n = lp.n, m = lp.m;
  const auto& seg_of = lp.seg_of;
  auto& gaps = lp.gaps;
  Matrix& mx = lp.mx;
  auto& extra = lp.extra;
  extra.assign(static_cast<size_t>(m), 0);
  for (int s = 0; s < m; ++s) extra[static_cast<size_t>(s)] = mx.col(0, kInf, 1);
  // Per segment: the (gap, entry) pairs that may copy in it.
  auto& in_seg = lp.in_seg;
  in_seg.assign(static_cast<size_t>(m), {});
  // Per segment: the recomputations that may run in it (column, ms). A gap's recomputation runs
  // anywhere from its drop to its access (ahead of the access, or on it): a placement column per
  // segment of that window, summing to y.
  auto& rec_in = lp.rec_in;
  rec_in.assign(static_cast<size_t>(m), {});
  auto& rec_total = lp.rec_total;  // (column, ms): every recomputation, summed
  auto& codec_in = lp.codec_in;  // (column, ms) per segment
  codec_in.assign(static_cast<size_t>(m), {});
  for (size_t gi = 0; gi < gaps.size(); ++gi) {
    Gap& g = gaps[gi];
    g.x = mx.col(0, 1, 0);
    g.y = mx.col(0, g.rec_ms >= 0 ? 1 : 0, 0);
    const int r = mx.row(-kInf, 1);
    mx.add(r, g.x, 1), mx.add(r, g.y, 1);
    if (g.saved_mib > 0) {  // compressed: on the codec lane after the drop and before the access
      g.w = mx.col(0, 1, 0);
      mx.add(r, g.w, 1);
      codec_in[static_cast<size_t>(seg_of[static_cast<size_t>((g.a + 1) % n)])].push_back({g.w, g.codec_ms});
      codec_in[static_cast<size_t>(seg_of[static_cast<size_t>((g.b - 1) % n)])].push_back({g.w, g.codec_ms});
    }
    for (int o = 0; o < g.b - g.a - 1; ++o) {
      const int s = seg_of[static_cast<size_t>((g.a + 1 + o) % n)];
      if (g.seg.empty() || g.seg.back() != s) g.seg.push_back(s), g.seg_off.push_back(o);
    }
    const int e = static_cast<int>(g.seg.size());
    g.out0 = static_cast<int>(mx.obj.size());
    for (int i = 0; i < e; ++i) mx.col(0, 1, 0);
    g.in0 = static_cast<int>(mx.obj.size());
    for (int i = 0; i < e; ++i) mx.col(0, 1, 0);
    for (int i = 1; i < e; ++i) {  // cumulative: never decreasing
      const int ro = mx.row(0, kInf), ri = mx.row(0, kInf);
      mx.add(ro, g.out0 + i, 1), mx.add(ro, g.out0 + i - 1, -1);
      mx.add(ri, g.in0 + i, 1), mx.add(ri, g.in0 + i - 1, -1);
    }
    const int ro = mx.row(0, 0), ri = mx.row(0, 0);  // all of the swapped fraction goes out and back
    mx.add(ro, g.out0 + e - 1, 1), mx.add(ro, g.x, -1);
    mx.add(ri, g.in0 + e - 1, 1), mx.add(ri, g.x, -1);
    if (opt.in_flight_on_device)  // a copy back starts in a segment after its copy out ended
      for (int i = 0; i < e; ++i) {
        const int r = mx.row(-kInf, 0);
        mx.add(r, g.in0 + i, 1);
        if (i > 0) mx.add(r, g.out0 + i - 1, -1);
      }
    for (int i = 0; i < e; ++i) in_seg[static_cast<size_t>(g.seg[static_cast<size_t>(i)])].push_back({static_cast<int>(gi), i});
    if (g.rec_ms >= 0) {
      std::vector<int> window = g.seg;
      const int sb = seg_of[static_cast<size_t>(g.b % n)];
      if (window.empty() || window.back() != sb) window.push_back(sb);
      const int sum = mx.row(0, 0);
      mx.add(sum, g.y, -1);
      for (int w : window) {
        const int c = mx.col(0, 1, 0);
        mx.add(sum, c, 1);
        rec_in[static_cast<size_t>(w)].push_back({c, g.rec_ms});
      }
      rec_total.push_back({g.y, g.rec_ms});
    }
  }
}

  // A recomputation reads its producer's inputs: one dropped over the whole of its window (its
  // own gap h, recomputed, opened no later) is recomputed too, once for all the chains that read
  // it (they may run together): z_h >= y_g + y_h - 1, at the input's producer share. Where h opens later
  // the recomputation can run before it, the input still there: no z. Its time counts in the
  // iteration's total only (it runs where the chain does).
void input_rows(Lp& lp) {
  const PlannerInput& in = lp.in;
  const auto& gaps = lp.gaps;
  const auto& out_bytes = lp.out_bytes;
  Matrix& mx = lp.mx;
  auto& rec_total = lp.rec_total;
  auto op_ms = [&](int k) { return lp.op_ms(k); };
  std::vector<std::vector<int>> gaps_of(in.tensors.size());
  for (size_t gi = 0; gi < gaps.size(); ++gi) gaps_of[static_cast<size_t>(gaps[gi].id)].push_back(static_cast<int>(gi));
  std::map<int, int> z_of;  // gap h -> column
  for (size_t gi = 0; gi < gaps.size(); ++gi) {
    const Gap& g = gaps[gi];
    if (g.rec_ms < 0) continue;
    const int b = g.b;
    for (TensorId u : in.tensors[static_cast<size_t>(g.id)].inputs) {
      for (int hi : gaps_of[static_cast<size_t>(u)]) {
        const Gap& h = gaps[static_cast<size_t>(hi)];
        if (h.rec_ms < 0 || !(h.a <= g.a && b < h.b) || hi == static_cast<int>(gi)) continue;
        auto [it, fresh] = z_of.try_emplace(hi, -1);
        if (fresh) {
          const auto& ut = in.tensors[static_cast<size_t>(u)];
          const double share = op_ms(ut.producer) * h.mib * kMiB / out_bytes[static_cast<size_t>(ut.producer)];
          it->second = mx.col(0, 1, 0);
          rec_total.push_back({it->second, share});
        }
        const int r = mx.row(-1, kInf);  // z - y_g - y_h >= -1
        mx.add(r, it->second, 1), mx.add(r, g.y, -1), mx.add(r, h.y, -1);
      }
    }
  }
}

// Per segment: the link's two directions, the codec lane and the recomputations; and the
// iteration by all the recomputations.
void segment_rows(Lp& lp) {
  const int m = lp.m;
  const double bw = lp.bw;
  const auto& gaps = lp.gaps;
  const auto& seg_ms = lp.seg_ms;
  const auto& extra = lp.extra;
  const auto& in_seg = lp.in_seg;
  const auto& rec_in = lp.rec_in;
  const auto& rec_total = lp.rec_total;
  const auto& codec_in = lp.codec_in;
  Matrix& mx = lp.mx;
  for (int s = 0; s < m; ++s) {
    const int E = extra[static_cast<size_t>(s)];
    if (std::isfinite(bw) && !in_seg[static_cast<size_t>(s)].empty()) {
      // Each direction: bytes copied in this segment <= bw * (its kernels + E).
      for (int dir = 0; dir < 2; ++dir) {
        const int r = mx.row(-kInf, bw * seg_ms[static_cast<size_t>(s)]);
        mx.add(r, E, -bw);
        for (auto [gi, i] : in_seg[static_cast<size_t>(s)]) {
          const Gap& g = gaps[static_cast<size_t>(gi)];
          const int c0 = dir == 0 ? g.out0 : g.in0;
          mx.add(r, c0 + i, g.mib);
          if (i > 0) mx.add(r, c0 + i - 1, -g.mib);
        }
      }
    }
    if (!codec_in[static_cast<size_t>(s)].empty()) {  // the codec lane: one at a time, beside the kernels
      const int r = mx.row(-kInf, seg_ms[static_cast<size_t>(s)]);
      mx.add(r, E, -1);
      for (const auto& [col, ms] : codec_in[static_cast<size_t>(s)]) mx.add(r, col, ms);
    }
    if (!rec_in[static_cast<size_t>(s)].empty()) {  // recomputations lengthen the segment they run in
      const int r = mx.row(-kInf, 0);
      mx.add(r, E, -1);
      for (const auto& [col, ms] : rec_in[static_cast<size_t>(s)]) mx.add(r, col, ms);
    }
  }
  if (!rec_total.empty()) {  // and the iteration by all of them
    const int r = mx.row(-kInf, 0);
    for (int e : extra) mx.add(r, e, -1);
    for (const auto& [col, ms] : rec_total) mx.add(r, col, ms);
  }
}

  // Memory at each constrained op: off the device (out by the end of its segment, not back before
  // it, or dropped) >= what is over the budget there.
void memory_rows(Lp& lp) {
  const LpOptions& opt = lp.opt;
  const int n = lp.n;
  const auto& need = lp.need;
  const auto& over = lp.over;
  const auto& gaps = lp.gaps;
  Matrix& mx = lp.mx;
  std::vector<int> mem_row(static_cast<size_t>(n), -1);
  for (int k : over) mem_row[static_cast<size_t>(k)] = mx.row(need[static_cast<size_t>(k)], kInf);
  for (const Gap& g : gaps) {
    for (int o = 0, i = 0; o < g.b - g.a - 1; ++o) {
      while (i + 1 < static_cast<int>(g.seg.size()) && g.seg_off[static_cast<size_t>(i) + 1] <= o) ++i;
      const int k = (g.a + 1 + o) % n;
      const int r = mem_row[static_cast<size_t>(k)];
      if (r < 0) continue;
      if (opt.in_flight_on_device) {  // out before this segment, back after it
        if (i > 0) mx.add(r, g.out0 + i - 1, g.mib);
        mx.add(r, g.in0 + i, -g.mib);
      } else {  // out by this segment's end, back after the previous one
        mx.add(r, g.out0 + i, g.mib);
        if (i > 0) mx.add(r, g.in0 + i - 1, -g.mib);
      }
      mx.add(r, g.y, g.mib);
      if (g.w >= 0) mx.add(r, g.w, g.saved_mib);
    }
  }
}

// The matrix's compressed columns and the LP solved: false where it has no optimum (`out` says why).
bool solve_relaxation(Lp& lp, ClpSimplex& model, LpResult& out) {
  const LpOptions& opt = lp.opt;
  const Matrix& mx = lp.mx;
  auto& start = lp.start;
  auto& index = lp.index;
  auto& value = lp.value;
  // Compressed columns for Clp.
  start.assign(mx.obj.size() + 1, 0);
  index.reserve(mx.entries.size()), value.reserve(mx.entries.size());
  for (const auto& e : mx.entries) {
    if (e.v == 0) continue;
    ++start[static_cast<size_t>(e.col) + 1];
    index.push_back(e.row), value.push_back(e.v);
  }
  for (size_t c = 0; c < mx.obj.size(); ++c) start[c + 1] += start[c];
  model.setLogLevel(0);
  model.setMaximumIterations(opt.max_iterations);
  // The net in wall seconds (Clp's plain limit counts the process's CPU time, which the other LP
  // solved beside this one spends too).
  if (opt.time_limit_s > 0) model.setMaximumWallSeconds(opt.time_limit_s);
  model.loadProblem(out.columns, out.rows, start.data(), index.data(), value.data(), mx.col_lo.data(),
                    mx.col_hi.data(), mx.obj.data(), mx.row_lo.data(), mx.row_hi.data());
  model.initialSolve();  // Clp picks the method (primal on these: 2-3x the dual's speed)
  out.iterations = model.numberIterations();
  const int status = model.status();
  if (status == 1) {
    // No fractions cover an op: it needs more than the budget (with copies in flight on the
    // device, only that no plan of this model fits).
    out.status = opt.in_flight_on_device ? "infeasible" : "working set";
    out.overhead_ms = kInf;
    out.bound = !opt.in_flight_on_device && !opt.codec;
    return false;
  }
  if (status != 0) {
    out.status = status != 3                                ? "solver status " + std::to_string(status)
                 : out.iterations >= opt.max_iterations ? "iteration limit"
                                                        : "time limit";
    return false;
  }
  out.status = "optimal";
  out.bound = !opt.in_flight_on_device && !opt.codec;
  return true;
}

  // A solution's moved gaps, with their timing.
std::vector<LpGap> moved_gaps(const Lp& lp, const double* sol) {
  const PlannerInput& in = lp.in;
  const PlannerTimeline& tl = lp.tl;
  const int n = lp.n;
  const auto& gaps = lp.gaps;
  std::vector<LpGap> v;
  for (const Gap& g : gaps) {
    const double x = std::clamp(sol[g.x], 0.0, 1.0), y = std::clamp(sol[g.y], 0.0, 1.0);
    const double w = g.w >= 0 ? std::clamp(sol[g.w], 0.0, 1.0) : 0.0;
    if (!(x > 1e-6 || y > 1e-6 || w > 1e-6)) continue;
    LpGap lg{g.id, g.a, g.b % n, static_cast<size_t>(std::llround(g.mib * kMiB)), x, y};
    lg.recompute_ms = std::max(0.0, g.rec_ms);
    if (w > 1e-6) lg.compress = w, lg.codec = g.codec;
    // Timing: the op after which the copy back starts (its first segment with any).
    if (x > 1e-6 && g.b < n)
      for (size_t i = 0; i < g.seg.size(); ++i)
        if (sol[g.in0 + static_cast<int>(i)] > 1e-6 * x) {
          lg.in_after_op = g.a + g.seg_off[i];
          break;
        }
    if (lg.in_after_op >= 0) {
      const double copy_ns = g.mib * kMiB * in.swap_ns_per_byte, back_ns = tl.start[static_cast<size_t>(g.b)];
      int q = lg.in_after_op;
      while (q > g.a && back_ns - tl.start[static_cast<size_t>(q) + 1] < copy_ns) --q;
      lg.whole_in_after_op = q;
    }
    v.push_back(lg);
  }
  return v;
}

// The LP optimum's totals and gaps.
void read_solution(const Lp& lp, const double* sol, LpResult& out) {
  for (int e : lp.extra) out.overhead_ms += sol[e];
  for (const Gap& g : lp.gaps) {
    const double x = std::clamp(sol[g.x], 0.0, 1.0), y = std::clamp(sol[g.y], 0.0, 1.0);
    out.swapped_bytes += x * g.mib * kMiB;
    out.recomputed_bytes += y * g.mib * kMiB;
    if (g.w >= 0) out.compressed_bytes += std::clamp(sol[g.w], 0.0, 1.0) * g.mib * kMiB;
    if (y > 0) out.recompute_ms += y * g.rec_ms;
  }
  out.gaps = moved_gaps(lp, sol);
  out.stall_ms = std::max(0.0, out.overhead_ms - out.recompute_ms);
}

  // The integer program: the same rows, each gap's x and y whole (over the optimum's
  // neighbourhood: the gaps it moves whole or not at all stay so). Cbc starts from the LP's
  // rounding up and stops at the time limit with its best.
void solve_integer(const Lp& lp, const double* sol, LpResult& out) {
  const LpOptions& opt = lp.opt;
  const Matrix& mx = lp.mx;
  const auto& gaps = lp.gaps;
  const auto& extra = lp.extra;
  const auto& start = lp.start;
  const auto& index = lp.index;
  const auto& value = lp.value;
  const auto i0 = std::chrono::steady_clock::now();
  LpInteger& ip = out.integer;
  std::vector<double> lo = mx.col_lo, hi = mx.col_hi;
  std::vector<int> start_cols;
  std::vector<double> start_vals;
  for (const Gap& g : gaps) {
    const double x = std::clamp(sol[g.x], 0.0, 1.0), y = std::clamp(sol[g.y], 0.0, 1.0);
    const double w = g.w >= 0 ? std::clamp(sol[g.w], 0.0, 1.0) : 0.0;
    auto is_whole = [](double f) { return f < 1e-6 || f > 1 - 1e-6; };
    const bool whole = is_whole(x) && is_whole(y) && is_whole(w);
    if (whole && opt.integer_neighbourhood) {
      lo[static_cast<size_t>(g.x)] = hi[static_cast<size_t>(g.x)] = std::round(x);
      lo[static_cast<size_t>(g.y)] = hi[static_cast<size_t>(g.y)] = std::round(y);
      if (g.w >= 0) lo[static_cast<size_t>(g.w)] = hi[static_cast<size_t>(g.w)] = std::round(w);
      ++ip.fixed_gaps;
      continue;
    }
    ip.integer_columns += g.w >= 0 ? 3 : 2;
    // The first solution: the LP's rounded up (feasible: more off the device everywhere, and
    // E absorbs the link and the recomputations), the larger fraction deciding; a compression
    // saves less than a swap, so a gap the LP compresses in part is swapped whole there.
    const bool rec = y > 1e-6 && y >= x && y >= w, swp = !rec && (x > 1e-6 || w > 1e-6);
    start_cols.push_back(g.x), start_vals.push_back(swp ? 1 : 0);
    start_cols.push_back(g.y), start_vals.push_back(rec ? 1 : 0);
    if (g.w >= 0) start_cols.push_back(g.w), start_vals.push_back(0);
  }
  if (ip.integer_columns == 0) {  // the optimum moves every gap whole or not at all: it is the answer
    ip.status = "optimal";
    ip.overhead_ms = ip.bound_ms = out.overhead_ms;
    ip.gaps = out.gaps;
    ip.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - i0).count();
    return;
  }
  std::unique_ptr<Cbc_Model, void (*)(Cbc_Model*)> cbc(Cbc_newModel(), Cbc_deleteModel);
  // VTENSOR_CBC_LOG=1: Cbc's own log on stdout (its heuristics, where its time limit stopped it).
  const char* cbc_log = std::getenv("VTENSOR_CBC_LOG");
  Cbc_setLogLevel(cbc.get(), cbc_log && std::strcmp(cbc_log, "0") != 0 ? 1 : 0);
  Cbc_loadProblem(cbc.get(), out.columns, out.rows, start.data(), index.data(), value.data(), lo.data(), hi.data(),
                  mx.obj.data(), mx.row_lo.data(), mx.row_hi.data());
  for (const Gap& g : gaps)
    if (lo[static_cast<size_t>(g.x)] != hi[static_cast<size_t>(g.x)] || lo[static_cast<size_t>(g.y)] != hi[static_cast<size_t>(g.y)]) {
      Cbc_setInteger(cbc.get(), g.x), Cbc_setInteger(cbc.get(), g.y);
      if (g.w >= 0) Cbc_setInteger(cbc.get(), g.w);
    }
  if (!start_cols.empty())
    Cbc_setMIPStartI(cbc.get(), static_cast<int>(start_cols.size()), start_cols.data(), start_vals.data());
  Cbc_setMaximumSeconds(cbc.get(), opt.integer_time_limit_s);
  Cbc_setParameter(cbc.get(), "timeMode", "elapsed");  // wall seconds, as the LP's (not the process's CPU time)
  // Cbc 2.10's preprocessing (CglPreProcess) can crash in its postProcess when the time limit
  // stops the search at the wrong moment (a null read in 2 of 60 runs at random limits up to 0.8 s,
  // both near 0.25 s): off. Cli.CbcRunsWithoutPreprocessingAndLogsOnlyWhenAsked checks it stays so.
  Cbc_setParameter(cbc.get(), "preprocess", "off");
  Cbc_solve(cbc.get());
  const double* best = Cbc_bestSolution(cbc.get());
  // The LP's optimum bounds the integer program too (Cbc's bound is -inf before its root).
  ip.bound_ms = std::max(Cbc_getBestPossibleObjValue(cbc.get()), out.overhead_ms);
  if (best) {
    ip.overhead_ms = 0;
    for (int e : extra) ip.overhead_ms += best[e];
    ip.gaps = moved_gaps(lp, best);
    ip.status = Cbc_isProvenOptimal(cbc.get()) ? "optimal" : "time limit";
  } else {
    // The program has a solution (the start above), so none here means the limit came first:
    // Cbc then may call its unfinished root "infeasible" (seen under ASan at a 1 s limit).
    ip.status = "no solution";
    ip.overhead_ms = kInf;
  }
  ip.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - i0).count();
}

}  // namespace

LpResult solve_lp(const PlannerInput& input, const LpOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  LpResult out;
  auto finish = [&] {
    out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return out;
  };
  Lp lp(input, opt);
  const int n = lp.n;
  if (n == 0) {
    out.status = "nothing over the budget";
    out.bound = true;
    return finish();
  }
  lp.period_ms = lp.tl.start[static_cast<size_t>(n)] * 1e-6;
  out.compute_ms = lp.period_ms;
  // MiB per ms; an unknown link (0) is infinitely fast, so the optimum still bounds.
  lp.bw = lp.in.swap_ns_per_byte > 0 ? 1e6 / lp.in.swap_ns_per_byte / kMiB : kInf;
  if (!find_over(lp)) {
    out.status = "nothing over the budget";
    out.bound = true;
    return finish();
  }
  collect_gaps(lp);
  recompute_costs(lp);
  limit_size(lp);
  out.segments = cut_segments(lp);
  gap_columns(lp);
  input_rows(lp);
  segment_rows(lp);
  memory_rows(lp);
  out.constrained_ops = static_cast<int>(lp.over.size());
  out.columns = static_cast<int>(lp.mx.obj.size());
  out.rows = static_cast<int>(lp.mx.row_lo.size());
  lp.mx.compress();
  out.nonzeros = static_cast<long long>(lp.mx.entries.size());

  ClpSimplex model;
  if (!solve_relaxation(lp, model, out)) return finish();
  const double* sol = model.primalColumnSolution();
  read_solution(lp, sol, out);
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (opt.integer_time_limit_s > 0) solve_integer(lp, sol, out);
  return out;
}


std::vector<PlanPin> lp_pins(const LpResult& r, double threshold, LpTiming timing, bool capped, bool recompute_only) {
  std::vector<const LpGap*> swaps, recs, compressed;
  for (const auto& g : r.gaps) {
    if (g.back_op <= g.evict_op) continue;  // across the iteration boundary: the ",wrap" plans' part
    if (g.compress >= threshold && g.compress >= g.swap && g.compress >= g.recompute)
      compressed.push_back(&g);
    else if (g.recompute >= threshold)
      recs.push_back(&g);
    else if (g.swap >= threshold || (g.swap + g.recompute >= threshold && g.swap >= g.recompute))
      swaps.push_back(&g);
    else if (g.swap + g.recompute >= threshold)
      recs.push_back(&g);
  }
  if (recompute_only) swaps.clear();
  if (capped) {
    double moved = 0, kept = 0;
    for (const auto& g : r.gaps)
      if (g.back_op > g.evict_op) moved += g.swap * static_cast<double>(g.bytes);
    std::stable_sort(swaps.begin(), swaps.end(), [](const LpGap* a, const LpGap* b) { return a->swap > b->swap; });
    size_t n = 0;
    while (n < swaps.size() && kept + static_cast<double>(swaps[n]->bytes) <= moved) kept += static_cast<double>(swaps[n++]->bytes);
    swaps.resize(n);
  }
  std::stable_sort(swaps.begin(), swaps.end(), [](const LpGap* a, const LpGap* b) { return a->evict_op < b->evict_op; });
  std::vector<PlanPin> pins;
  for (const LpGap* g : compressed) {  // first: what compress+capuchin plans first
    PlanPin p{g->id, g->back_op, CapuchinDecision::kCompress};
    p.codec = g->codec.codec, p.capacity = g->codec.capacity, p.codec_ns = g->codec.codec_ns;
    pins.push_back(p);
  }
  for (const LpGap* g : swaps) {
    PlanPin p{g->id, g->back_op, CapuchinDecision::kSwap};
    if (timing == LpTiming::kLp) p.trigger_op = g->in_after_op;
    if (timing == LpTiming::kWhole) p.trigger_op = g->whole_in_after_op;
    pins.push_back(p);
  }
  for (const LpGap* g : recs) pins.push_back({g->id, g->back_op, CapuchinDecision::kRecompute});
  return pins;
}

}  // namespace vtensor
