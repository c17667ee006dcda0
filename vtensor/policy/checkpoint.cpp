#include "vtensor/policy/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <utility>

#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"

namespace vtensor {

namespace {

bool is_forward(const Op& op) { return !op.backward && !op.optimizer; }

constexpr int kMaxBalancedSegments = 64;  // the search's largest fixed count

// The forward pass in units (builder layers, or single forward ops) and what the partitions need
// per unit: the bytes backward reads that it produces and the bytes live across a cut after it.
struct Units {
  std::vector<int> of_op;          // per op: its unit (-1: not a forward op)
  std::vector<std::string> name;
  int count = 0;
  std::vector<double> saved;       // bytes backward reads produced by the unit
  std::vector<double> crossing;    // bytes produced up to the unit and read by a later one
};

Units make_units(const Graph& g, bool by_layer) {
  auto base = [&](TensorId t) {
    while (g.tensor(t).view_of != kNoTensor) t = g.tensor(t).view_of;
    return t;
  };
  // Builder layers in forward order (an op outside a layer joins the one before it); a graph
  // without layers (a replayed trace), or by_layer false, splits by forward op.
  bool has_layers = false;
  for (const Op& op : g.ops()) has_layers |= is_forward(op) && op.layer >= 0;
  by_layer &= has_layers;
  Units u;
  u.of_op.assign(g.num_ops(), -1);
  std::vector<char> seen_layer(g.layers().size(), 0);
  int current = -1;
  for (const Op& op : g.ops()) {
    if (!is_forward(op)) continue;
    if (!by_layer) {
      current = u.count++;
      u.name.push_back(op.name);
    } else if (op.layer >= 0 && !seen_layer[static_cast<size_t>(op.layer)]) {
      seen_layer[static_cast<size_t>(op.layer)] = 1;
      current = u.count++;  // a layer met again later stays in the current unit: units stay contiguous
      u.name.push_back(g.layers()[static_cast<size_t>(op.layer)].name);
    }
    u.of_op[static_cast<size_t>(op.index)] = std::max(current, 0);
  }
  u.count = std::max(u.count, 1);
  const size_t nt = g.num_tensors();
  std::vector<int> max_reader(nt, -1);
  std::vector<char> read_in_bwd(nt, 0);
  for (const Op& op : g.ops())
    for (TensorId in : op.inputs) {
      const auto b = static_cast<size_t>(base(in));
      if (is_forward(op)) max_reader[b] = std::max(max_reader[b], u.of_op[static_cast<size_t>(op.index)]);
      else read_in_bwd[b] = 1;
    }
  u.saved.assign(static_cast<size_t>(u.count), 0.0);
  std::vector<double> diff(static_cast<size_t>(u.count) + 1, 0.0);
  for (const TensorInfo& t : g.tensors()) {
    if (t.view_of != kNoTensor || t.persistent() || t.producer < 0 || !is_forward(g.op(t.producer))) continue;
    const int p = u.of_op[static_cast<size_t>(t.producer)];
    const auto bytes = static_cast<double>(t.bytes());
    if (read_in_bwd[static_cast<size_t>(t.id)]) u.saved[static_cast<size_t>(p)] += bytes;
    const int r = max_reader[static_cast<size_t>(t.id)];
    if (r > p) {
      diff[static_cast<size_t>(p)] += bytes;
      diff[static_cast<size_t>(r)] -= bytes;
    }
  }
  u.crossing.assign(static_cast<size_t>(u.count), 0.0);
  for (int i = 0; i < u.count; ++i)
    u.crossing[static_cast<size_t>(i)] = diff[static_cast<size_t>(i)] + (i > 0 ? u.crossing[static_cast<size_t>(i) - 1] : 0.0);
  return u;
}

// Exactly k segments of consecutive units: segment j takes units while their byte midpoint is
// below (j + 1) / k of the total, at least one, leaving one for each later segment.
std::vector<int> balanced_segments(const Units& u, int k) {
  double total = 0;
  for (double b : u.saved) total += b;
  std::vector<int> seg(static_cast<size_t>(u.count), 0);
  std::vector<double> before(static_cast<size_t>(u.count) + 1, 0.0);
  for (int i = 0; i < u.count; ++i) before[static_cast<size_t>(i) + 1] = before[static_cast<size_t>(i)] + u.saved[static_cast<size_t>(i)];
  auto mid = [&](int i) {
    return total > 0 ? (before[static_cast<size_t>(i)] + u.saved[static_cast<size_t>(i)] / 2) / total : (i + 0.5) / u.count;
  };
  for (int j = 0, i = 0; j < k; ++j) {
    seg[static_cast<size_t>(i++)] = j;
    while (i < u.count && (j == k - 1 || (i < u.count - (k - 1 - j) && mid(i) < static_cast<double>(j + 1) / k)))
      seg[static_cast<size_t>(i++)] = j;
  }
  return seg;
}

// Chen's greedy with threshold b: walk the units accumulating the bytes backward reads; once the
// open segment holds at least b, cut it. at_smallest_crossing: cut after the unit of the open
// segment with the fewest bytes live across the cut among those where it holds at least b / 2
// (on a tie the unit that crossed b, else the earliest), rather than after the unit that crossed
// b, and carry the units after the cut into the next segment.
std::vector<int> greedy_segments(const Units& u, double b, bool at_smallest_crossing) {
  std::vector<int> seg(static_cast<size_t>(u.count), 0);
  int k = 0, start = 0;
  double acc = 0;
  for (int i = 0; i < u.count; ++i) {
    seg[static_cast<size_t>(i)] = k;
    acc += u.saved[static_cast<size_t>(i)];
    if (acc < b || i == u.count - 1) continue;
    int cut = i;
    double upto = 0;  // the open segment's bytes up to unit j: cut only once it holds b / 2
    if (at_smallest_crossing)
      for (int j = start; j < i; ++j)
        if ((upto += u.saved[static_cast<size_t>(j)]) >= b / 2 && u.crossing[static_cast<size_t>(j)] < u.crossing[static_cast<size_t>(cut)]) cut = j;
    ++k;
    acc = 0;
    for (int j = cut + 1; j <= i; ++j) {
      seg[static_cast<size_t>(j)] = k;
      acc += u.saved[static_cast<size_t>(j)];
    }
    start = cut + 1;
  }
  return seg;
}

CheckpointPlan plan_from_segments(const Graph& g, const Units& units_of, const std::vector<int>& seg_of_unit);

}  // namespace

CheckpointPlan plan_checkpoint(const Graph& g, int segments) {
  if (segments < 0) throw std::invalid_argument("checkpoint segments must be >= 0 (0: sqrt of the layer count)");
  const Units u = make_units(g, true);
  const int k = std::clamp(segments > 0 ? segments : static_cast<int>(std::lround(std::sqrt(static_cast<double>(u.count)))), 1, u.count);
  CheckpointPlan p = plan_from_segments(g, u, balanced_segments(u, k));
  p.rule = "balanced layers";
  return p;
}

CheckpointPlan plan_checkpoint_search(const Graph& g, size_t* peak, size_t budget) {
  // Candidates: the byte-balanced layer plans for every count from 2 to L (at most 64: a
  // replayed trace has no layers; the sqrt(L) plan among them) and Chen's greedy over single forward ops, both cut rules, for thresholds b on a
  // geometric grid (ratio 2^(1/4)) from the smallest op's saved bytes to the total.
  const Units layers = make_units(g, true), ops = make_units(g, false);
  struct Candidate {
    const Units* units;
    std::vector<int> seg;
    std::string rule;
    double threshold;
  };
  std::vector<Candidate> cands;
  const int sqrt_k = static_cast<int>(std::lround(std::sqrt(static_cast<double>(layers.count))));
  for (int k = 2; k <= layers.count; ++k)
    if (k <= kMaxBalancedSegments || k == sqrt_k) cands.push_back({&layers, balanced_segments(layers, k), "balanced layers", 0});
  double lo = 0, total = 0;
  for (double b : ops.saved)
    if (b > 0) {
      lo = lo > 0 ? std::min(lo, b) : b;
      total += b;
    }
  std::set<std::vector<int>> seen;
  for (double b = lo; lo > 0 && b <= total; b *= std::pow(2.0, 0.25))
    for (bool smallest : {false, true}) {
      std::vector<int> seg = greedy_segments(ops, b, smallest);
      if (seg.back() == 0 || !seen.insert(seg).second) continue;  // one segment drops nothing
      cands.push_back({&ops, std::move(seg), smallest ? "greedy ops, cut at the smallest crossing" : "greedy ops", b});
    }
  // Without a budget: the lowest predicted peak; on a tie the fewest recomputed ops, then the
  // earlier candidate. With one: among the plans whose peak fits it (no drops at all first), the
  // fewest recomputed FLOPs, then the lower peak, then the earlier; none fits: the lowest peak.
  CheckpointPlan best, lowest;
  size_t best_peak = 0, lowest_peak = 0;
  bool have = false, have_fit = false;
  auto consider = [&](CheckpointPlan p, const std::string& rule, double threshold, bool fit_only) {
    const size_t pk = predict_drop_plan_peak(g, p.plan);
    p.rule = rule;
    p.threshold_bytes = static_cast<size_t>(threshold);
    if (budget > 0 && pk <= budget &&
        (!have_fit || p.expected_recompute_flops < best.expected_recompute_flops ||
         (p.expected_recompute_flops == best.expected_recompute_flops && pk < best_peak))) {
      best = p;
      best_peak = pk;
      have_fit = true;
    }
    if (fit_only) return;
    if (!have || pk < lowest_peak || (pk == lowest_peak && p.expected_recomputed_ops < lowest.expected_recomputed_ops)) {
      lowest = std::move(p);
      lowest_peak = pk;
      have = true;
    }
  };
  if (budget > 0) consider(plan_checkpoint(g, 1), "no drops", 0, true);  // none's peak, nothing recomputed
  for (const Candidate& c : cands) consider(plan_from_segments(g, *c.units, c.seg), c.rule, c.threshold, false);
  if (have_fit) {
    best.choice = "fewest recomputed FLOPs within the budget";
  } else {
    if (!have) {  // a single layer or op: nothing to cut
      lowest = plan_checkpoint(g, 1);
      lowest_peak = predict_drop_plan_peak(g, lowest.plan);
    }
    best = std::move(lowest);
    best_peak = lowest_peak;
    best.choice = budget > 0 ? "lowest peak (none fits the budget)" : "lowest peak";
  }
  best.candidates = static_cast<int>(cands.size());
  if (peak) *peak = best_peak;
  return best;
}

namespace {

// A tensor's base: the tensor whose storage it views (itself if not a view).
TensorId base_of(const Graph& g, TensorId t) {
  while (g.tensor(t).view_of != kNoTensor) t = g.tensor(t).view_of;
  return t;
}

// A base tensor a forward op makes, not persistent: what a plan may checkpoint or drop.
bool forward_made(const Graph& g, TensorId t) {
  const TensorInfo& i = g.tensor(t);
  return i.view_of == kNoTensor && !i.persistent() && i.producer >= 0 && is_forward(g.op(i.producer));
}

// Per base tensor: readers in forward and backward, last forward access.
struct BaseAccess {
  std::vector<int> last_fwd, max_reader_unit;
  std::vector<char> read_in_bwd;
};

// Scans the ops for each base tensor's last forward access, last forward reader's unit and backward reads.
BaseAccess scan_base_access(const Graph& g, const std::vector<int>& unit) {
  const size_t nt = g.num_tensors();
  BaseAccess a;
  a.last_fwd.assign(nt, -1);
  a.max_reader_unit.assign(nt, -1);
  a.read_in_bwd.assign(nt, 0);
  for (const Op& op : g.ops()) {
    for (TensorId in : op.inputs) {
      const auto b = static_cast<size_t>(base_of(g, in));
      if (is_forward(op)) {
        a.last_fwd[b] = std::max(a.last_fwd[b], op.index);
        a.max_reader_unit[b] = std::max(a.max_reader_unit[b], unit[static_cast<size_t>(op.index)]);
      } else {
        a.read_in_bwd[b] = 1;
      }
    }
    if (is_forward(op))
      for (TensorId o : op.outputs)
        a.last_fwd[static_cast<size_t>(base_of(g, o))] = std::max(a.last_fwd[static_cast<size_t>(base_of(g, o))], op.index);
  }
  return a;
}

// A forward op's segment, through its unit.
struct SegmentOf {
  const std::vector<int>& unit;
  const std::vector<int>& seg_of_unit;
  int operator()(int op) const { return seg_of_unit[static_cast<size_t>(unit[static_cast<size_t>(op)])]; }
};

// The plan's k segments with their first and last units (and names) and ops; counts the forward ops.
void fill_segment_bounds(const Graph& g, const Units& units_of, const std::vector<int>& seg_of_unit, int k,
                         CheckpointPlan& out) {
  const int units = units_of.count;
  out.layers = units;
  out.segments.resize(static_cast<size_t>(k));
  for (int u = 0; u < units; ++u) {
    CheckpointSegment& s = out.segments[static_cast<size_t>(seg_of_unit[static_cast<size_t>(u)])];
    if (s.first_layer < 0) s.first_layer = u;
    s.last_layer = u;
    if (static_cast<size_t>(u) < units_of.name.size()) {
      if (s.first_name.empty()) s.first_name = units_of.name[static_cast<size_t>(u)];
      s.last_name = units_of.name[static_cast<size_t>(u)];
    }
  }
  const SegmentOf seg_of_op{units_of.of_op, seg_of_unit};
  for (const Op& op : g.ops()) {
    if (!is_forward(op)) continue;
    ++out.forward_ops;
    CheckpointSegment& s = out.segments[static_cast<size_t>(seg_of_op(op.index))];
    if (s.first_op < 0) s.first_op = op.index;
    s.last_op = op.index;
  }
}

// Per base tensor: a checkpoint, a drop candidate, and dropped (for now: the candidates backward reads).
struct BaseClasses {
  std::vector<char> is_checkpoint, candidate, dropped;
};

// Classify the forward-made bases: checkpoints, kept, drop candidates; adds each segment's saved and checkpoint bytes.
BaseClasses classify_bases(const Graph& g, const BaseAccess& a, const std::vector<int>& seg_of_unit,
                           const SegmentOf& seg_of_op, int k, CheckpointPlan& out) {
  const size_t nt = g.num_tensors();
  BaseClasses c;
  c.is_checkpoint.assign(nt, 0);
  c.candidate.assign(nt, 0);
  c.dropped.assign(nt, 0);
  for (const TensorInfo& t : g.tensors()) {
    if (!forward_made(g, t.id)) continue;
    const auto i = static_cast<size_t>(t.id);
    const int seg = seg_of_op(t.producer);
    CheckpointSegment& s = out.segments[static_cast<size_t>(seg)];
    if (a.read_in_bwd[i]) s.saved_bytes += t.bytes();
    if (a.max_reader_unit[i] >= 0 && seg_of_unit[static_cast<size_t>(a.max_reader_unit[i])] > seg) {
      s.checkpoints.push_back(t.id);
      s.checkpoint_bytes += t.bytes();
      c.is_checkpoint[i] = 1;
      continue;
    }
    const bool keep = seg == k - 1 || t.kind != TensorKind::kActivation || !t.recomputable ||
                      !is_recomputable(g.op(t.producer));
    if (keep) continue;
    c.candidate[i] = 1;
    c.dropped[i] = a.read_in_bwd[i];  // backward reads it: drop after its last forward access
  }
  return c;
}

// Per op: the forward-made bases the executor releases after it (at their last use), where that op is a forward one.
std::vector<std::vector<TensorId>> forward_release_points(const Graph& g) {
  std::vector<int> last_use(g.num_tensors(), -1);  // the executor's release points
  for (const Op& op : g.ops()) {
    for (TensorId in : op.inputs) last_use[static_cast<size_t>(base_of(g, in))] = op.index;
    for (TensorId o : op.outputs)
      last_use[static_cast<size_t>(base_of(g, o))] = std::max(last_use[static_cast<size_t>(base_of(g, o))], op.index);
  }
  std::vector<std::vector<TensorId>> release_at(g.num_ops());
  for (const TensorInfo& t : g.tensors()) {
    const int u = std::max(last_use[static_cast<size_t>(t.id)], t.release_after);
    if (forward_made(g, t.id) && u >= 0 && is_forward(g.op(u))) release_at[static_cast<size_t>(u)].push_back(t.id);
  }
  return release_at;
}

// The forward pass as the executor and memory manager run it under the plan: releases at last
// uses, drops, lineage references (a released input of a dropped tensor comes back as dropped;
// one still alive is held until its dependants are recomputed).
class ForwardDropSim {
 public:
  enum class S : int8_t { kNone, kResident, kDropped };

  ForwardDropSim(const Graph& g, std::vector<std::vector<TensorId>> release_at)
      : g_(g), release_at_(std::move(release_at)), st_(g.num_tensors()), released_(g.num_tensors()),
        refs_(g.num_tensors()) {}

  // Runs the forward pass from nothing resident, dropping drops_at[op] after op where it is resident and recomputable.
  void run(const std::vector<std::vector<TensorId>>& drops_at) {
    const size_t nt = g_.num_tensors();
    std::fill(st_.begin(), st_.end(), S::kNone);
    std::fill(released_.begin(), released_.end(), 0);
    std::fill(refs_.begin(), refs_.end(), 0);
    for (const TensorInfo& t : g_.tensors())
      if (t.persistent()) st_[static_cast<size_t>(t.id)] = S::kResident;
    for (const Op& op : g_.ops()) {
      if (!is_forward(op)) continue;
      for (TensorId o : op.outputs) st_[static_cast<size_t>(base_of(g_, o))] = S::kResident;
      for (TensorId t : release_at_[static_cast<size_t>(op.index)]) {
        const auto i = static_cast<size_t>(t);
        released_[i] = 1;
        if (refs_[i] == 0) {
          if (st_[i] == S::kDropped) add_refs(t, -1);
          st_[i] = S::kNone;
        }
      }
      for (TensorId t : drops_at[static_cast<size_t>(op.index)]) {
        memo_.assign(nt, -1);
        if (st_[static_cast<size_t>(t)] != S::kResident || !can_recompute(t)) continue;
        st_[static_cast<size_t>(t)] = S::kDropped;
        add_refs(t, +1);
      }
    }
  }

  S state(size_t i) const { return st_[i]; }
  bool released(size_t i) const { return released_[i]; }

 private:
  // Adds delta to the lineage references t's producer's inputs hold, reviving or freeing them as dropped.
  void add_refs(TensorId t, int delta) {
    for (TensorId in : g_.op(g_.tensor(t).producer).inputs) {
      const TensorId bt = base_of(g_, in);
      const auto b = static_cast<size_t>(bt);
      if (delta > 0 && st_[b] == S::kNone && released_[b] && g_.tensor(bt).producer >= 0) {
        st_[b] = S::kDropped;
        add_refs(bt, +1);
      }
      refs_[b] += delta;
      if (delta < 0 && refs_[b] == 0 && released_[b] && st_[b] != S::kNone) {
        if (st_[b] == S::kDropped) add_refs(bt, -1);
        st_[b] = S::kNone;
      }
    }
  }

  // Whether t can be recomputed now from resident inputs or inputs that can themselves be (memoized per drop).
  bool can_recompute(TensorId t) {
    if (memo_[static_cast<size_t>(t)] >= 0) return memo_[static_cast<size_t>(t)] == 1;
    const TensorInfo& i = g_.tensor(t);
    bool ok = !i.persistent() && i.producer >= 0 && i.view_of == kNoTensor && i.recomputable &&
              is_recomputable(g_.op(i.producer));
    if (ok)
      for (TensorId in : g_.op(i.producer).inputs) {
        const auto b = static_cast<size_t>(base_of(g_, in));
        if (st_[b] == S::kNone && !released_[b]) ok = false;  // not produced yet
        else if (st_[b] != S::kResident && !can_recompute(base_of(g_, in))) ok = false;
      }
    memo_[static_cast<size_t>(t)] = ok ? 1 : 0;
    return ok;
  }

  const Graph& g_;
  const std::vector<std::vector<TensorId>> release_at_;
  std::vector<S> st_;
  std::vector<char> released_;
  std::vector<int> refs_;
  std::vector<int8_t> memo_;
};

// A candidate backward does not read is freed at its last use, unless a dropped tensor's
// lineage reference holds it then: drop those too, until none is held. sim is left at the last run.
void settle_drops(const Graph& g, const std::vector<int>& last_fwd, const std::vector<char>& candidate,
                  std::vector<char>& dropped, ForwardDropSim& sim) {
  const size_t nt = g.num_tensors();
  std::vector<std::vector<TensorId>> drops_at(g.num_ops());
  for (;;) {
    for (auto& d : drops_at) d.clear();
    for (const TensorInfo& t : g.tensors())
      if (dropped[static_cast<size_t>(t.id)]) drops_at[static_cast<size_t>(last_fwd[static_cast<size_t>(t.id)])].push_back(t.id);
    sim.run(drops_at);
    bool changed = false;
    for (size_t i = 0; i < nt; ++i)
      if (candidate[i] && !dropped[i] && sim.state(i) == ForwardDropSim::S::kResident && sim.released(i))
        dropped[i] = changed = true;
    if (!changed) break;
  }
}

// The plan's drop actions (in op order, each after its tensor's last forward access) and the bytes and tensors dropped.
void record_drops(const Graph& g, const std::vector<char>& dropped, const std::vector<int>& last_fwd,
                  const SegmentOf& seg_of_op, CheckpointPlan& out) {
  for (const TensorInfo& t : g.tensors()) {
    if (!dropped[static_cast<size_t>(t.id)]) continue;
    out.plan.actions.push_back({ActionKind::kDrop, t.id, last_fwd[static_cast<size_t>(t.id)]});
    CheckpointSegment& s = out.segments[static_cast<size_t>(seg_of_op(t.producer))];
    s.dropped_bytes += t.bytes();
    ++s.dropped;
    out.dropped_bytes += t.bytes();
  }
  std::stable_sort(out.plan.actions.begin(), out.plan.actions.end(), [](const Action& a, const Action& b) { return a.op < b.op; });
}

// Counts the forward ops before the last segment with an output that is neither a checkpoint nor data.
void count_segment_recompute_ops(const Graph& g, const std::vector<char>& is_checkpoint, const SegmentOf& seg_of_op,
                                 int k, CheckpointPlan& out) {
  for (const Op& op : g.ops()) {
    if (!is_forward(op) || seg_of_op(op.index) == k - 1) continue;
    bool only_kept = true;
    for (TensorId o : op.outputs) {
      const TensorInfo& t = g.tensor(base_of(g, o));
      only_kept &= is_checkpoint[static_cast<size_t>(t.id)] || t.kind == TensorKind::kData;
    }
    out.segment_recompute_ops += !only_kept;
  }
}

// The producers backward re-runs: those of the dropped tensors backward reads and, through
// their lineage, of every input dropped by the end of the forward pass. Each runs once (see
// the header).
void count_expected_recompute(const Graph& g, const ForwardDropSim& sim, const std::vector<char>& read_in_bwd,
                              CheckpointPlan& out) {
  const size_t nt = g.num_tensors();
  std::vector<char> op_counted(g.num_ops(), 0), visited(nt, 0);
  std::vector<TensorId> stack;
  for (size_t i = 0; i < nt; ++i)
    if (sim.state(i) == ForwardDropSim::S::kDropped && read_in_bwd[i]) {
      visited[i] = 1;
      stack.push_back(static_cast<TensorId>(i));
    }
  while (!stack.empty()) {
    const TensorId t = stack.back();
    stack.pop_back();
    const Op& op = g.op(g.tensor(t).producer);
    if (!op_counted[static_cast<size_t>(op.index)]) {
      op_counted[static_cast<size_t>(op.index)] = 1;
      ++out.expected_recomputed_ops;
      out.expected_recompute_flops += op.flops;
    }
    for (TensorId in : op.inputs) {
      const auto b = static_cast<size_t>(base_of(g, in));
      if (!visited[b] && sim.state(b) == ForwardDropSim::S::kDropped) {
        visited[b] = 1;
        stack.push_back(base_of(g, in));
      }
    }
  }
}

CheckpointPlan plan_from_segments(const Graph& g, const Units& units_of, const std::vector<int>& seg_of_unit) {
  const int k = seg_of_unit.empty() ? 1 : seg_of_unit.back() + 1;
  const SegmentOf seg_of_op{units_of.of_op, seg_of_unit};
  const BaseAccess access = scan_base_access(g, units_of.of_op);
  CheckpointPlan out;
  fill_segment_bounds(g, units_of, seg_of_unit, k, out);
  BaseClasses cls = classify_bases(g, access, seg_of_unit, seg_of_op, k, out);
  ForwardDropSim sim(g, forward_release_points(g));
  settle_drops(g, access.last_fwd, cls.candidate, cls.dropped, sim);
  record_drops(g, cls.dropped, access.last_fwd, seg_of_op, out);
  count_segment_recompute_ops(g, cls.is_checkpoint, seg_of_op, k, out);
  count_expected_recompute(g, sim, access.read_in_bwd, out);
  return out;
}

// The device bytes a drop plan peaks at. Mirrors Executor::run_op / recompute and MemoryManager
// (allocate, access -> recompute, release, drop, lineage references); no eviction, so nothing
// else moves.
class DropPlanPeak {
 public:
  DropPlanPeak(const Graph& g, const Plan& plan)
      : g_(g), release_at_(g.num_ops()), drops_at_(g.num_ops()), st_(g.num_tensors(), S::kNone),
        released_(g.num_tensors(), 0), refs_(g.num_tensors(), 0) {
    find_release_points();
    for (const Action& a : plan.actions)
      if (a.kind == ActionKind::kDrop) drops_at_.at(static_cast<size_t>(a.op)).push_back(base_of(g_, a.tensor));
  }

  size_t run() {
    for (const TensorInfo& t : g_.tensors())
      if (t.persistent()) {
        alloc(size_of(t.id));
        st_[static_cast<size_t>(t.id)] = S::kResident;
      }
    for (const Op& op : g_.ops()) {
      for (TensorId in : op.inputs) access(in);
      for (TensorId o : op.outputs)
        if (g_.tensor(o).view_of == kNoTensor) {
          alloc(size_of(o));
          st_[static_cast<size_t>(o)] = S::kResident;
        }
      workspace(op);
      for (TensorId t : release_at_[static_cast<size_t>(op.index)]) {
        released_[static_cast<size_t>(t)] = 1;
        if (refs_[static_cast<size_t>(t)] == 0) destroy(t);
      }
      for (TensorId t : drops_at_[static_cast<size_t>(op.index)])
        if (st_[static_cast<size_t>(t)] == S::kResident) {  // the plan only names recomputable tensors
          live_ -= size_of(t);
          st_[static_cast<size_t>(t)] = S::kDropped;
          add_refs(t, +1);
        }
    }
    return peak_;
  }

 private:
  enum class S : int8_t { kNone, kResident, kDropped };

  static size_t block(size_t b) { return b == 0 ? kAllocAlignment : align_up(b); }
  size_t size_of(TensorId t) const { return block(g_.tensor(t).bytes()); }
  void alloc(size_t b) { peak_ = std::max(peak_, live_ += b); }

  // Each base tensor's release op: its last use (a view's counts for its base) or its release_after.
  void find_release_points() {
    std::vector<int> last_use(g_.num_tensors(), -1);
    for (const Op& op : g_.ops()) {
      for (TensorId in : op.inputs) last_use[static_cast<size_t>(in)] = op.index;
      for (TensorId o : op.outputs) last_use[static_cast<size_t>(o)] = std::max(last_use[static_cast<size_t>(o)], op.index);
    }
    for (const TensorInfo& t : g_.tensors()) {
      int& lb = last_use[static_cast<size_t>(base_of(g_, t.id))];
      lb = std::max(lb, last_use[static_cast<size_t>(t.id)]);
    }
    for (const TensorInfo& t : g_.tensors()) {
      const int u = std::max(last_use[static_cast<size_t>(t.id)], t.release_after);
      if (!t.persistent() && t.view_of == kNoTensor && last_use[static_cast<size_t>(t.id)] >= 0)
        release_at_[static_cast<size_t>(u)].push_back(t.id);
    }
  }

  // Adds delta to the lineage references t's producer's inputs hold, reviving or freeing them as dropped.
  void add_refs(TensorId t, int delta) {
    for (TensorId in : g_.op(g_.tensor(t).producer).inputs) {
      const TensorId bt = base_of(g_, in);
      const auto b = static_cast<size_t>(bt);
      if (delta > 0 && st_[b] == S::kNone && released_[b]) {
        st_[b] = S::kDropped;
        add_refs(bt, +1);
      }
      refs_[b] += delta;
      if (delta < 0 && refs_[b] == 0 && released_[b]) destroy(bt);
    }
  }

  void destroy(TensorId t) {
    S& s = st_[static_cast<size_t>(t)];
    if (s == S::kResident) live_ -= size_of(t);
    if (s == S::kDropped) add_refs(t, -1);
    s = S::kNone;
  }

  void workspace(const Op& op) {
    if (op.workspace_bytes) {
      alloc(block(op.workspace_bytes));
      live_ -= block(op.workspace_bytes);
    }
  }

  // Makes t resident, recomputing it (and what it needs) where it is dropped: Executor::recompute.
  void access(TensorId t) {
    t = base_of(g_, t);
    if (st_[static_cast<size_t>(t)] != S::kDropped) return;
    const Op& op = g_.op(g_.tensor(t).producer);
    for (TensorId in : op.inputs) access(in);
    std::vector<TensorId> restored;
    size_t scratch = 0;
    for (TensorId o : op.outputs) {
      if (st_[static_cast<size_t>(base_of(g_, o))] == S::kDropped) {
        alloc(size_of(o));
        st_[static_cast<size_t>(base_of(g_, o))] = S::kResident;
        restored.push_back(o);
      } else {
        alloc(size_of(o));
        scratch += size_of(o);
      }
    }
    workspace(op);
    live_ -= scratch;
    for (TensorId o : restored) add_refs(o, -1);
  }

  const Graph& g_;
  std::vector<std::vector<TensorId>> release_at_, drops_at_;
  std::vector<S> st_;
  std::vector<char> released_;
  std::vector<int> refs_;
  size_t live_ = 0, peak_ = 0;
};

}  // namespace

size_t predict_drop_plan_peak(const Graph& g, const Plan& plan) { return DropPlanPeak(g, plan).run(); }

// ---------------------------------------------------------------- the policy

void CheckpointPolicy::attach(const MemoryView& view) {
  graph_ = &view.graph();
  if (segments_ > 0) {
    plan_ = plan_checkpoint(*graph_, segments_);
    plan_.choice = "--checkpoint-segments";
    planned_peak_ = predict_drop_plan_peak(*graph_, plan_.plan);
  } else {
    plan_ = plan_checkpoint_search(*graph_, &planned_peak_, budget_aware_ ? view.budget() : 0);
    sqrt_plan_peak_ = predict_drop_plan_peak(*graph_, plan_checkpoint(*graph_).plan);
  }
  actions_.assign(graph_->num_ops(), {});
  for (const Action& a : plan_.plan.actions) actions_.at(static_cast<size_t>(a.op)).push_back(a);
}

std::vector<Action> CheckpointPolicy::after_op(int op_index) {
  return static_cast<size_t>(op_index) < actions_.size() ? actions_[static_cast<size_t>(op_index)] : std::vector<Action>{};
}

void CheckpointPolicy::on_restore(TensorId, int, Residency from, double waited_ms) {
  if (from != Residency::kDropped) return;
  ++restores_;
  recompute_ms_ += waited_ms;
}

nlohmann::json CheckpointPolicy::report() const {
  using nlohmann::json;
  json segs = json::array();
  size_t ckpt_bytes = 0;
  int ckpts = 0;
  for (const auto& s : plan_.segments) {
    json names = json::array();
    for (TensorId t : s.checkpoints) names.push_back(graph_->tensor(t).name);
    ckpt_bytes += s.checkpoint_bytes;
    ckpts += static_cast<int>(s.checkpoints.size());
    segs.push_back({{"first_layer", s.first_name},
                    {"last_layer", s.last_name},
                    {"first_op", s.first_op},
                    {"last_op", s.last_op},
                    {"checkpoints", names},
                    {"checkpoint_bytes", s.checkpoint_bytes},
                    {"saved_bytes", s.saved_bytes},
                    {"dropped_tensors", s.dropped},
                    {"dropped_bytes", s.dropped_bytes}});
  }
  return {{"policy", name()},
          {"layers", plan_.layers},
          {"segments", plan_.segments.size()},
          {"rule", plan_.rule},
          {"choice", plan_.choice},
          {"expected_recompute_flops_per_iteration", plan_.expected_recompute_flops},
          {"threshold_bytes", plan_.threshold_bytes},
          {"candidates", plan_.candidates},
          {"sqrt_plan_peak_bytes", sqrt_plan_peak_},
          {"planned_peak_bytes", planned_peak_},
          {"checkpoints", ckpts},
          {"checkpoint_bytes", ckpt_bytes},
          {"dropped_bytes_per_iteration", plan_.dropped_bytes},
          {"forward_ops", plan_.forward_ops},
          {"expected_recomputed_ops_per_iteration", plan_.expected_recomputed_ops},
          {"segment_recompute_ops_per_iteration", plan_.segment_recompute_ops},
          {"iterations", iterations_},
          {"restores", restores_},
          {"recompute_ms", recompute_ms_},
          {"segment_plan", segs}};
}

std::string CheckpointPolicy::summary() const {
  size_t ckpt_bytes = 0;
  int ckpts = 0;
  for (const auto& s : plan_.segments) {
    ckpt_bytes += s.checkpoint_bytes;
    ckpts += static_cast<int>(s.checkpoints.size());
  }
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.2f", recompute_ms_);
  const std::string searched = plan_.candidates > 0 ? " (" + std::to_string(plan_.candidates) + " plans searched, kept by " + plan_.choice + "; sqrt(L) plan " + format_bytes(sqrt_plan_peak_) + ")" : "";
  return "planned peak " + format_bytes(planned_peak_) + searched + "; " + std::to_string(plan_.segments.size()) + " segments (" + plan_.rule + ") over " + std::to_string(plan_.layers) + " units, " +
         std::to_string(ckpts) + " checkpoints (" + format_bytes(ckpt_bytes) + "); drops " +
         std::to_string(plan_.plan.actions.size()) + " tensors, " + format_bytes(plan_.dropped_bytes) +
         " per iteration; recomputes " + std::to_string(plan_.expected_recomputed_ops) + " of " +
         std::to_string(plan_.forward_ops) + " forward ops per iteration, " + ms + " ms over " +
         std::to_string(iterations_) + " iterations";
}

const std::vector<PolicyOption>& checkpoint_options() {
  static const std::vector<PolicyOption> options = {
      {"checkpoint-segments", "policy checkpoint: segment count (default: search the segments for the lowest peak)"}};
  return options;
}

std::unique_ptr<Policy> make_checkpoint_policy(const PolicyOptions& options) {
  auto p = std::make_unique<CheckpointPolicy>();
  p->set_segments(options.positive("checkpoint-segments").value_or(0));
  p->set_budget_aware(options.budget_given);
  return p;
}

}  // namespace vtensor
