#include "vtensor/policy/capuchin.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <queue>
#include <stdexcept>

#include "vtensor/memory/allocator.h"

namespace vtensor {

std::string to_string(const PlanPin& p) {
  std::string s = "t" + std::to_string(p.id) + "@" + std::to_string(p.back_op) + ":" + to_string(p.decision);
  if (p.trigger_shift > 0) s += "-" + std::to_string(p.trigger_shift);
  if (p.ahead_op >= 0) s += "^" + std::to_string(p.ahead_op);
  if (p.trigger_op >= 0) s += "@" + std::to_string(p.trigger_op);
  if (p.decision == CapuchinDecision::kCompress) s += std::string("/") + to_string(p.codec);
  return s;
}

const char* to_string(CapuchinDecision d) {
  switch (d) {
    case CapuchinDecision::kKeep: return "keep";
    case CapuchinDecision::kSwap: return "swap";
    case CapuchinDecision::kRecompute: return "recompute";
    case CapuchinDecision::kCompress: return "compress";
  }
  return "?";
}

namespace {

constexpr double kEpsNs = 1e-3;

}  // namespace

int capuchin_release_op(const std::vector<double>& op_start_ns, int evict_op, double copy_end_ns) {
  // The first op after evict_op that ends at or after the copy: op k ends at op_start_ns[k + 1].
  const auto first = static_cast<size_t>(evict_op) + 2;
  if (first >= op_start_ns.size()) return -1;
  const auto it = std::lower_bound(op_start_ns.begin() + static_cast<std::ptrdiff_t>(first), op_start_ns.end(), copy_end_ns - kEpsNs);
  return it == op_start_ns.end() ? -1 : static_cast<int>(it - op_start_ns.begin()) - 1;
}

double capuchin_free_time(const std::vector<double>& op_start_ns, int evict_op, int back_op, double swap_ns) {
  // The swap-out starts when evict_op ends (= the next op starts) and its block is freed at the
  // end of the op the copy ends in; the swap-in must end by back_op.
  const int r = capuchin_release_op(op_start_ns, evict_op, op_start_ns.at(static_cast<size_t>(evict_op + 1)) + swap_ns);
  const double freed = r < 0 ? op_start_ns.back() : op_start_ns[static_cast<size_t>(r) + 1];
  return (op_start_ns.at(static_cast<size_t>(back_op)) - swap_ns) - freed;
}

PlannerTimeline planner_timeline(const PlannerInput& in) {
  PlannerTimeline tl;
  const size_t n = static_cast<size_t>(std::max(in.num_ops, 0)), nt = in.tensors.size();
  auto& start_ = tl.start;
  start_.assign(n + 1, -1);
  tl.first.assign(nt, -1);
  tl.last.assign(nt, -1);
  tl.ops_of.assign(nt, {});
  double t_end = 0;
  for (const auto& a : in.accesses) {
    if (!is_use(a.kind)) continue;
    if (a.op_index < 0 || static_cast<size_t>(a.op_index) >= n || static_cast<size_t>(a.id) >= nt)
      throw std::invalid_argument("access trace does not match the graph (op " + std::to_string(a.op_index) +
                                  ", tensor " + std::to_string(a.id) + ")");
    const double t = static_cast<double>(a.time_ns);
    double& s = start_[static_cast<size_t>(a.op_index)];
    s = s < 0 ? t : std::min(s, t);
    t_end = std::max(t_end, t);
    const auto id = static_cast<size_t>(a.id);
    if (tl.first[id] < 0) tl.first[id] = a.op_index;
    tl.last[id] = std::max(tl.last[id], a.op_index);
    if (tl.ops_of[id].empty() || tl.ops_of[id].back() != a.op_index) tl.ops_of[id].push_back(a.op_index);
  }
  for (size_t i = 0; i < n; ++i)
    if (start_[i] < 0) start_[i] = i == 0 ? 0 : start_[i - 1];
  start_[n] = std::max(t_end, n ? start_[n - 1] : 0);
  for (size_t i = 1; i <= n; ++i) start_[i] = std::max(start_[i], start_[i - 1]);  // monotone
  if (in.op_ns.size() == n) {
    start_[0] = 0;
    for (size_t i = 0; i < n; ++i) start_[i + 1] = start_[i] + in.op_ns[i];
  }
  size_t persistent = 0;
  for (const auto& t : in.tensors)
    if (t.persistent) persistent += t.bytes;
  tl.mem.assign(n, persistent);
  for (size_t id = 0; id < nt; ++id) {
    if (in.tensors[id].persistent || tl.first[id] < 0) continue;
    tl.last[id] = std::max(tl.last[id], std::min(in.tensors[id].release_after, static_cast<int>(n) - 1));  // alive till then
    curve_add(tl.mem, tl.first[id], tl.last[id], static_cast<long long>(in.tensors[id].bytes));
  }
  if (in.workspace_bytes.size() == n)
    for (size_t i = 0; i < n; ++i) tl.mem[i] += in.workspace_bytes[i];
  if (in.memory_delta.size() == n)
    for (size_t i = 0; i < n; ++i)
      tl.mem[i] = static_cast<size_t>(std::max(0LL, static_cast<long long>(tl.mem[i]) + in.memory_delta[i]));
  return tl;
}

namespace {

class Planner {
 public:
  Planner(const PlannerInput& in, CapuchinMode mode) : in_(in), mode_(mode), fifo_(in.fifo_prefetches) {}

  CapuchinPlan run() {
    measure();
    find_candidates();
    out_.memory_before = mem_.values();
    out_.peak_before = peak();
    wrap_swaps(in_.wrap_persistent && mode_ != CapuchinMode::kRecompute);
    apply_pins();
    if (mode_ != CapuchinMode::kRecompute) hidden_swaps();
    greedy();
    if (mode_ != CapuchinMode::kRecompute) refine_triggers();
    read_prefetch_starts();
    issue_swap_outs();
    out_.memory_after = mem_.values();
    out_.peak_after = peak();
    out_.fits = out_.peak_after <= in_.budget;
    sort_actions(out_.plan);
    if (in_.need_ordered_prefetches) order_prefetches_by_need();
    else if (fifo_) order_prefetches_as_queued();
    out_.op_start_ns = start_;
    return std::move(out_);
  }

 private:
  struct SwapEval {
    bool ok = false;
    size_t pos = 0;                  // its place in the D2H queue (outq_)
    int trigger = -1, release = -1;  // prefetch after trigger; the block is freed after release
    double stall = 0, out_end = 0, in_start = 0;
    double issue = 0, delay = 0;  // the prefetch's issue time; the stall it adds to queued ones (fifo)
    double cost() const { return stall + delay; }
  };

  size_t n_ops() const { return static_cast<size_t>(in_.num_ops); }
  double dur(int op) const { return start_[static_cast<size_t>(op) + 1] - start_[static_cast<size_t>(op)]; }
  size_t peak() const { return mem_.peak(); }
  bool fits() const { return mem_.fits(); }
  unsigned long long excess() const { return mem_.excess(); }  // bytes over the budget, summed over the ops
  bool hits_over(int first, int last) const { return mem_.over(first, last); }
  // The H2D queue: CopyLane's gaps, or with fifo_prefetches the stream's issue order (FifoLane,
  // keyed by candidate; a wrap swap's copy is never removed: key -1).
  double in_fit(double issue, double dur) const { return fifo_ ? inq_.start_if(issue) : h2d_.earliest_fit(issue, dur); }
  double in_delay(double issue, double dur) const { return fifo_ ? inq_.delay(issue, dur) : 0; }
  void in_add(double issue, double start, double dur, double need, int key) {
    if (fifo_) inq_.add(issue, dur, need, key);
    else h2d_.add(start, dur);
  }
  void in_remove(double start, double dur, int key) {
    if (fifo_) inq_.remove(key);
    else h2d_.remove(start, dur);
  }
  double issue_at(int trigger, double out_end) const { return std::max(start_[static_cast<size_t>(trigger) + 1], out_end); }
  // In issue order, a copy queued later moves those issued after it: their starts, read back.
  void read_prefetch_starts() {
    if (!fifo_) return;
    for (size_t k = 0; k < out_.candidates.size(); ++k) {
      auto& c = out_.candidates[k];
      if (c.decision != CapuchinDecision::kSwap) continue;
      c.prefetch_start_ns = inq_.start_of(static_cast<int>(k));
      c.swap_stall_ns = std::max(0.0, c.prefetch_start_ns + c.swap_ns - start_[static_cast<size_t>(c.back_op)]);
    }
  }
  void add_mem(int first, int last, long long delta) { mem_.add(first, last, delta); }

  // Op start times, live intervals and the unmanaged memory curve from the trace.
  void measure() {
    PlannerTimeline tl = planner_timeline(in_);
    start_ = std::move(tl.start), first_ = std::move(tl.first), last_ = std::move(tl.last);
    ops_of_ = std::move(tl.ops_of), mem_ = MemoryCurve(std::move(tl.mem), in_.budget);
    for (size_t i = 0; i < mem_.size(); ++i)
      if (mem_[i] > in_.budget) {
        if (out_.peak_window_first < 0) out_.peak_window_first = static_cast<int>(i);
        out_.peak_window_last = static_cast<int>(i);
      }
  }

  // Tensors accessed more than once: each gap between two accesses that spans ops above the
  // budget is a candidate of its own.
  void find_candidates() {
    for (size_t id = 0; id < in_.tensors.size(); ++id) {
      const auto& t = in_.tensors[id];
      const auto& ops = ops_of_[id];
      if (t.bytes == 0 || t.excluded) continue;  // views; tensors another mechanism handles
      for (size_t k = 0; k + 1 < ops.size(); ++k) {  // parameters too: swapped between uses
        const int e = ops[k], b = ops[k + 1];
        if (b < e + 2 || !hits_over(e + 1, b - 1)) continue;
        CapuchinCandidate c;
        c.id = static_cast<TensorId>(id);
        c.bytes = t.bytes;
        c.evict_op = e;
        c.back_op = b;
        c.swap_ns = static_cast<double>(t.bytes) * in_.swap_ns_per_byte;
        c.free_time_ns = capuchin_free_time(start_, e, b, c.swap_ns);
        c.recompute_ns = -1;
        out_.candidates.push_back(c);
      }
    }
  }

  // Where c's swap-out joins the D2H queue (one copy at a time, in issue order): behind the
  // chosen ones issued at or before its eviction (the queue is in swap_out_op order).
  size_t fifo_pos(const CapuchinCandidate& c) const {
    const auto it = std::upper_bound(outq_.begin(), outq_.end(), c.evict_op,
                                     [&](int e, int k) { return e < out_.candidates[static_cast<size_t>(k)].swap_out_op; });
    return static_cast<size_t>(it - outq_.begin());
  }
  // With deadline_swap_outs, ahead of those of them that have not started by its eviction and
  // are prefetched after c is needed back: they are issued after it, later than their eviction.
  size_t queue_pos(const CapuchinCandidate& c) const {
    size_t i = fifo_pos(c);
    if (!in_.deadline_swap_outs) return i;
    const double ready = start_[static_cast<size_t>(c.evict_op) + 1];
    const int need = need_by(c);
    for (; i > 0; --i) {
      const auto j = static_cast<size_t>(outq_[i - 1]);
      const auto& x = out_.candidates[j];
      if (out_end_[j] - x.swap_ns < ready - kEpsNs || x.trigger_op < need) break;
    }
    return i;
  }
  // When c's swap-out ends, queued at `pos`.
  double queued_out_end(const CapuchinCandidate& c, size_t pos) const {
    const double ready = pos == 0 ? 0 : out_end_[static_cast<size_t>(outq_[pos - 1])];
    return std::max(start_[static_cast<size_t>(c.evict_op) + 1], ready) + c.swap_ns;
  }

  // Release: the op the queued swap-out ends in; the block is gone from the op after it. In-trigger:
  // walk back from the back-access until the copy is hidden; never before an op that would then
  // hold the tensor above the budget (the peak window), never before the release.
  SwapEval eval_swap(const CapuchinCandidate& c) const { return eval_swap(c, queue_pos(c)); }
  SwapEval eval_swap(const CapuchinCandidate& c, size_t pos) const {
    SwapEval r;
    const int b = need_by(c);
    r.pos = pos;
    r.out_end = queued_out_end(c, pos);
    r.release = capuchin_release_op(start_, c.evict_op, r.out_end);
    if (r.release < 0 || r.release + 1 > b - 1) return r;
    auto in_start = [&](int p) { return in_fit(issue_at(p, r.out_end), c.swap_ns); };
    const int p = walk_back_trigger(b - 1, r.release + 1, [&](int q) { return in_start(q) + c.swap_ns; },
                                    start_[static_cast<size_t>(b)], mem_.values(), in_.budget);
    r.trigger = p;
    r.in_start = in_start(p);
    r.issue = issue_at(p, r.out_end);
    r.delay = in_delay(r.issue, c.swap_ns);
    r.stall = std::max(0.0, r.in_start + c.swap_ns - start_[static_cast<size_t>(b)]);
    r.ok = hits_over(r.release + 1, p);  // gone over some op above the budget
    return r;
  }

  // Is `in` alive (no work to have it) at op b, for a tensor dropped after op e_ctx?
  // Recompute time of x's chain at back-access b. Each tensor of the chain counts once (a shared
  // ancestor is recomputed once; without this, diamonds in the lineage made the walk exponential).
  // `restored`, when given, is told each evicted candidate the chain brings back at b.
  double chain_ns(TensorId x, int b, int e_ctx, const std::function<void(int)>* restored = nullptr) const {
    if (seen_.size() != in_.tensors.size()) seen_.assign(in_.tensors.size(), 0);
    ++stamp_;
    return chain_walk(x, b, e_ctx, 0, restored);
  }
  double chain_walk(TensorId x, int b, int e_ctx, int depth, const std::function<void(int)>* restored) const {
    const auto& t = in_.tensors[static_cast<size_t>(x)];
    if (!t.recomputable || t.producer < 0 || depth > 10000) return -1;
    if (seen_[static_cast<size_t>(x)] == stamp_) return 0;
    seen_[static_cast<size_t>(x)] = stamp_;
    double cost = dur(t.producer);
    for (TensorId inp : t.inputs) {
      const auto i = static_cast<size_t>(inp);
      const auto& it = in_.tensors[i];
      bool handled = false;
      for (int ci : cands_of_[i]) {
        const auto& c = out_.candidates[static_cast<size_t>(ci)];
        if (c.decision == CapuchinDecision::kRecompute && c.evict_op < b && b < c.back_op) {
          const double sub = chain_walk(inp, b, c.evict_op, depth + 1, restored);
          if (sub < 0) return -1;
          cost += sub;
          handled = true;
        } else if (c.decision == CapuchinDecision::kSwap && c.release_op < b && b <= c.trigger_op) {
          // On host then: swapped back in for the recomputation, behind the prefetches on the lane.
          const double t = start_[static_cast<size_t>(b)];
          cost += in_fit(t, c.swap_ns) + c.swap_ns - t;
          handled = true;
        } else if (c.decision == CapuchinDecision::kSwap && c.trigger_op < b && b < c.back_op &&
                   c.prefetch_start_ns + c.swap_ns > start_[static_cast<size_t>(b)] + kEpsNs) {
          cost += c.prefetch_start_ns + c.swap_ns - start_[static_cast<size_t>(b)];  // its prefetch still copying
          handled = true;
        } else if (c.decision == CapuchinDecision::kSwap && c.evict_op < b && b <= c.release_op) {
          return -1;  // its swap-out is running: reading it would cancel the swap
        }
        if (handled && restored) (*restored)(ci);
        if (handled) break;
      }
      if (handled) continue;
      if (it.persistent || (first_[i] <= b && b <= last_[i]) || (last_[i] >= 0 && last_[i] < b && last_[i] > e_ctx)) {
        if (reads_) reads_->push_back(inp);  // alive, or held by the lineage reference
        continue;
      }
      const double sub = chain_walk(inp, b, e_ctx, depth + 1, restored);  // released before the drop: recomputed too
      if (sub < 0) return -1;
      cost += sub;
    }
    return cost;
  }

  // Takes the swap unless it does not lower the bytes over the budget: queued behind it, later
  // swap-outs end later and free their blocks later. Fails (and changes nothing) then, when a
  // delayed swap-out would no longer end before its prefetch, or when a chosen recomputation
  // would read a tensor mid swap-out.
  bool apply_swap(CapuchinCandidate& c, const SwapEval& s) {
    const size_t mark = mem_.mark();
    const std::vector<int> q = outq_;
    const CopyLane h2d = h2d_;
    const FifoLane inq = inq_;
    std::vector<int> releases, issued;
    for (int k : outq_) {
      releases.push_back(out_.candidates[static_cast<size_t>(k)].release_op);
      issued.push_back(out_.candidates[static_cast<size_t>(k)].swap_out_op);
    }
    const auto over = excess();
    const int k = static_cast<int>(&c - out_.candidates.data());
    c.decision = CapuchinDecision::kSwap;
    c.trigger_op = s.trigger;
    c.release_op = s.release;
    c.swap_out_op = c.evict_op;
    add_mem(s.release + 1, s.trigger, -static_cast<long long>(c.bytes));
    const size_t pos = s.pos, fifo = fifo_pos(c);  // the swap-outs queued before pos do not move
    for (size_t i = pos; i < fifo; ++i)  // the ones it goes ahead of are issued after it
      out_.candidates[static_cast<size_t>(outq_[i])].swap_out_op = c.evict_op;
    outq_.insert(outq_.begin() + static_cast<std::ptrdiff_t>(pos), k);
    in_add(s.issue, s.in_start, c.swap_ns, start_[static_cast<size_t>(need_by(c))], k);
    const bool queued = queue_swap_outs(pos);
    if (std::find(moved_.begin(), moved_.end(), k) == moved_.end()) moved_.push_back(k);
    if (!queued || excess() >= over || cancels_a_recompute()) {
      mem_.rollback(mark), outq_ = q, h2d_ = h2d, inq_ = inq;
      for (size_t i = 0; i < q.size(); ++i) {
        auto& x = out_.candidates[static_cast<size_t>(q[i])];
        x.release_op = releases[i], x.swap_out_op = issued[i];
      }
      queue_swap_outs(pos);  // the old ends
      c.decision = CapuchinDecision::kKeep;
      c.release_op = -1, c.swap_out_op = -1;
      return false;
    }
    mem_.commit(mark);
    c.swap_stall_ns = s.stall;
    c.prefetch_start_ns = s.in_start;
    c.order = order_++;
    out_.plan.actions.push_back({ActionKind::kSwapOut, c.id, c.evict_op, s.release});
    out_.plan.actions.push_back({ActionKind::kPrefetch, c.id, s.trigger});
    return true;
  }

  // Recomputations inside c's gap now recompute c too: can each still reach live sources (not a
  // swap-out still running)?
  bool breaks_a_recompute(const CapuchinCandidate& c) const {
    for (const auto& d : out_.candidates)
      if (&d != &c && d.decision == CapuchinDecision::kRecompute && c.evict_op < d.back_op && d.back_op < c.back_op &&
          chain_ns(d.id, d.back_op, d.evict_op) < 0)
        return true;
    return false;
  }

  // Would a chosen recomputation read a swapped tensor while its swap-out runs (the new swap, or
  // one that now ends later)? The memory manager would wait for the copy and cancel the swap.
  bool cancels_a_recompute() const {
    for (const auto& d : out_.candidates) {
      if (d.decision != CapuchinDecision::kRecompute) continue;
      for (int k : moved_) {
        const auto& x = out_.candidates[static_cast<size_t>(k)];
        if (x.evict_op < d.back_op && d.back_op <= x.release_op) {
          if (chain_ns(d.id, d.back_op, d.evict_op) < 0) return true;
          break;
        }
      }
    }
    return false;
  }

  // Runs the chosen swap-outs through the D2H lane in issue order; a swap-out that now ends in a
  // later op frees its block later (the curve holds it until then). False if one would end at or
  // after its prefetch. From queue position `from` on: the ones before it end as they did.
  bool queue_swap_outs(size_t from) {
    out_end_.resize(out_.candidates.size(), 0);
    moved_.clear();
    double ready = from > 0 ? out_end_[static_cast<size_t>(outq_[from - 1])] : 0;
    bool ok = true;
    for (size_t i = from; i < outq_.size(); ++i) {
      const int k = outq_[i];
      auto& c = out_.candidates[static_cast<size_t>(k)];
      ready = std::max(start_[static_cast<size_t>(c.swap_out_op) + 1], ready) + c.swap_ns;
      out_end_[static_cast<size_t>(k)] = ready;
      const int r = capuchin_release_op(start_, c.swap_out_op, ready);
      if (r < 0 || r >= c.trigger_op) {
        ok = false;
        continue;
      }
      if (r != c.release_op) moved_.push_back(k);
      if (r > c.release_op) add_mem(c.release_op + 1, r, static_cast<long long>(c.bytes));
      if (r < c.release_op) add_mem(r + 1, c.release_op, -static_cast<long long>(c.bytes));
      c.release_op = r;
    }
    return ok;
  }

  // Takes c's swap at its place in the D2H queue, or else at the queue's end (where the place
  // was ahead of queued swap-outs: one of them, now later, may no longer end in time). `accept`
  // may adjust the evaluation (a pin's trigger) and says whether to take it.
  bool take_swap(CapuchinCandidate& c, SwapEval s, const std::function<bool(SwapEval&)>& accept = {}) {
    if ((!accept || accept(s)) && s.ok && apply_swap(c, s)) return true;
    const size_t fifo = fifo_pos(c);
    if (s.pos == fifo) return false;
    s = eval_swap(c, fifo);
    return (!accept || accept(s)) && s.ok && apply_swap(c, s);
  }

  // The swap-out actions as queued: issued after swap_out_op, the block freed after the release
  // the queue moved it to; at one op in queue order (the D2H stream copies in issue order).
  void issue_swap_outs() {
    std::vector<int> place(out_.candidates.size(), -1);
    for (size_t i = 0; i < outq_.size(); ++i) place[static_cast<size_t>(outq_[i])] = static_cast<int>(i);
    std::vector<size_t> slots;
    std::vector<int> queued;
    for (size_t i = 0; i < out_.plan.actions.size(); ++i) {
      const auto& a = out_.plan.actions[i];
      if (a.kind != ActionKind::kSwapOut || static_cast<size_t>(a.tensor) >= cands_of_.size()) continue;
      for (int k : cands_of_[static_cast<size_t>(a.tensor)]) {
        const auto& c = out_.candidates[static_cast<size_t>(k)];
        if (c.evict_op == a.op && c.decision == CapuchinDecision::kSwap && place[static_cast<size_t>(k)] >= 0) {
          slots.push_back(i);
          queued.push_back(k);
        }
      }
    }
    std::stable_sort(queued.begin(), queued.end(), [&](int a, int b) { return place[static_cast<size_t>(a)] < place[static_cast<size_t>(b)]; });
    for (size_t i = 0; i < slots.size(); ++i) {
      const auto& c = out_.candidates[static_cast<size_t>(queued[i])];
      out_.plan.actions[slots[i]] = {ActionKind::kSwapOut, c.id, c.swap_out_op, c.release_op};
    }
  }

  size_t held_inputs(const CapuchinCandidate& c) const {
    size_t held = 0;
    for (TensorId inp : in_.tensors[static_cast<size_t>(c.id)].inputs) {
      const auto i = static_cast<size_t>(inp);
      if (!in_.tensors[i].persistent && last_[i] > c.evict_op && last_[i] < c.back_op) held += in_.tensors[i].bytes;
    }
    return held;
  }

  // An evicted input that a recomputation at op b brings back stays on the device from b until
  // its own back-access (recompute) or prefetch (swap): the curve holds it from b.
  void hold_from(int k, int b) {
    const auto& c = out_.candidates[static_cast<size_t>(k)];
    const int end = c.decision == CapuchinDecision::kSwap ? c.trigger_op : c.back_op - 1;
    int& from = held_from_[static_cast<size_t>(k)];
    if (from < 0) from = end + 1;
    if (b >= from) return;
    add_mem(b, from - 1, static_cast<long long>(c.bytes));
    from = b;
  }
  void hold_restored(const CapuchinCandidate& c) {
    const std::function<void(int)> f = [&](int k) { hold_from(k, c.back_op); };
    chain_ns(c.id, c.back_op, c.evict_op, &f);
  }

  // A recomputation taken: the live tensors its chain reads are noted (a later swap of one is
  // prefetched for it: need_by). A pinned one (the search's or the LP's, chosen as if its sources
  // were on the device) also has the swapped tensors it reads prefetched for it; the greedy's own
  // were chosen at their copy's cost, and pulling theirs too crowded VGG-16's plans (+13% at 50%
  // on h100-80g, docs/experiments/auto.md).
  void recompute_taken(CapuchinCandidate& c, bool pinned) {
    if (pinned) prefetch_for_chain(c);
    std::vector<TensorId> reads;
    reads_ = &reads;
    const double chain = chain_ns(c.id, c.back_op, c.evict_op);
    reads_ = nullptr;
    if (chain >= 0) c.recompute_ns = chain;
    read_by_.resize(in_.tensors.size());
    for (TensorId t : reads) read_by_[static_cast<size_t>(t)].push_back(static_cast<int>(&c - out_.candidates.data()));
  }

  void apply_recompute(CapuchinCandidate& c, double chain) {
    c.decision = CapuchinDecision::kRecompute;
    c.recompute_ns = chain;
    c.msps = static_cast<double>(c.bytes - std::min(c.bytes, held_inputs(c))) / std::max(chain, kEpsNs) * 1e9;
    c.order = order_++;
    add_mem(c.evict_op + 1, c.back_op - 1, -static_cast<long long>(c.bytes));
    // Inputs released between the drop and the recomputation stay alive for it.
    for (TensorId inp : in_.tensors[static_cast<size_t>(c.id)].inputs) {
      const auto i = static_cast<size_t>(inp);
      if (in_.tensors[i].persistent) continue;
      if (last_[i] > c.evict_op && last_[i] < c.back_op)
        add_mem(last_[i] + 1, c.back_op - 1, static_cast<long long>(in_.tensors[i].bytes));
    }
    out_.plan.actions.push_back({ActionKind::kDrop, c.id, c.evict_op});
    held_from_.resize(out_.candidates.size(), -1);
    hold_restored(c);
    // Earlier recomputations inside this gap whose chains now pass through c bring it back early.
    for (const auto& d : out_.candidates)
      if (&d != &c && d.decision == CapuchinDecision::kRecompute && c.evict_op < d.back_op && d.back_op < c.back_op)
        hold_restored(d);
  }

  // When c's tensor must be back on the device: its back-access, or the first chosen recomputation
  // in its gap whose chain reads it.
  int need_by(const CapuchinCandidate& c) const {
    int b = c.back_op;
    if (static_cast<size_t>(c.id) < read_by_.size())
      for (int k : read_by_[static_cast<size_t>(c.id)]) {
        const auto& d = out_.candidates[static_cast<size_t>(k)];
        if (d.decision == CapuchinDecision::kRecompute && c.evict_op < d.back_op && d.back_op < b) b = d.back_op;
      }
    return b;
  }

  // A recomputation at c's back-access whose chain reads a swapped tensor still on the host would
  // copy it on demand, behind the lane's prefetches. Instead its prefetch moves earlier, walked
  // back from that access as eval_swap walks from the tensor's own: it is then on the device
  // for the chain. Kept only where it ends sooner than the copy on demand would.
  void prefetch_for_chain(const CapuchinCandidate& c) {
    const int b = c.back_op;
    std::vector<int> on_host;
    const std::function<void(int)> f = [&](int k) {
      const auto& s = out_.candidates[static_cast<size_t>(k)];
      if (s.decision == CapuchinDecision::kSwap && s.release_op < b && b < s.back_op) on_host.push_back(k);
    };
    if (chain_ns(c.id, b, c.evict_op, &f) < 0) return;
    for (int k : on_host) {
      auto& s = out_.candidates[static_cast<size_t>(k)];
      if (!(s.release_op < b && b < s.back_op)) continue;
      const double t = start_[static_cast<size_t>(b)];
      if (fifo_) s.prefetch_start_ns = inq_.start_of(k);
      const double demand_end = b <= s.trigger_op ? in_fit(t, s.swap_ns) + s.swap_ns : s.prefetch_start_ns + s.swap_ns;
      if (demand_end <= t + kEpsNs) continue;
      in_remove(s.prefetch_start_ns, s.swap_ns, k);
      add_mem(s.release_op + 1, s.trigger_op, static_cast<long long>(s.bytes));
      const double out_end = out_end_[static_cast<size_t>(k)];
      auto in_start = [&](int q) { return in_fit(issue_at(q, out_end), s.swap_ns); };
      const int q = walk_back_trigger(b - 1, s.release_op + 1, [&](int x) { return in_start(x) + s.swap_ns; }, t, mem_.values(), in_.budget);
      const bool better = q < b && q > s.release_op && in_start(q) + s.swap_ns < demand_end;
      const int trig = better ? q : s.trigger_op;
      add_mem(s.release_op + 1, trig, -static_cast<long long>(s.bytes));
      const double st = better ? in_start(q) : s.prefetch_start_ns;
      in_add(issue_at(trig, out_end), st, s.swap_ns, start_[static_cast<size_t>(need_by(s))], k);
      if (!better) continue;
      for (auto& a : out_.plan.actions)
        if (a.kind == ActionKind::kPrefetch && a.tensor == s.id && a.op == s.trigger_op) a.op = q;
      s.prefetch_start_ns = st;
      s.trigger_op = q;
      s.swap_stall_ns = std::max(0.0, st + s.swap_ns - start_[static_cast<size_t>(s.back_op)]);
    }
  }

  // Early choices were placed while most ops were over the budget; now that the curve is lower,
  // walk the triggers of stalling swaps further back where the tensor fits.
  void refine_triggers() {
    for (size_t k = 0; k < out_.candidates.size(); ++k) {
      auto& c = out_.candidates[k];
      if (c.decision != CapuchinDecision::kSwap) continue;
      if (fifo_) {
        c.prefetch_start_ns = inq_.start_of(static_cast<int>(k));
        c.swap_stall_ns = std::max(0.0, c.prefetch_start_ns + c.swap_ns - start_[static_cast<size_t>(c.back_op)]);
      }
      if (c.swap_stall_ns <= kEpsNs) continue;
      in_remove(c.prefetch_start_ns, c.swap_ns, static_cast<int>(k));
      const double out_end = out_end_[k];
      auto in_start = [&](int p) { return in_fit(issue_at(p, out_end), c.swap_ns); };
      int p = c.trigger_op;
      while (in_start(p) + c.swap_ns > start_[static_cast<size_t>(c.back_op)] + kEpsNs && p - 1 >= c.release_op + 1 &&
             mem_[static_cast<size_t>(p)] + c.bytes <= in_.budget) {
        add_mem(p, p, static_cast<long long>(c.bytes));
        --p;
      }
      const double s = in_start(p);
      in_add(issue_at(p, out_end), s, c.swap_ns, start_[static_cast<size_t>(need_by(c))], static_cast<int>(k));
      c.prefetch_start_ns = s;
      c.swap_stall_ns = std::max(0.0, s + c.swap_ns - start_[static_cast<size_t>(c.back_op)]);
      if (p != c.trigger_op)
        for (auto& a : out_.plan.actions)
          if (a.kind == ActionKind::kPrefetch && a.tensor == c.id && a.op == c.trigger_op) a.op = p;
      c.trigger_op = p;
    }
  }

  // need_ordered_prefetches: at one op, the prefetches in the order their tensors are needed (the
  // H2D stream copies in issue order; the lane model placed each in a gap of its own).
  void order_prefetches_by_need() {
    std::map<std::pair<TensorId, int>, int> need;
    for (const auto& c : out_.candidates)
      if (c.decision == CapuchinDecision::kSwap) need[{c.id, c.trigger_op}] = need_by(c);
    for (const auto& w : out_.wrap_swaps) need[{w.id, w.trigger_op}] = w.back_op;
    auto& acts = out_.plan.actions;
    for (size_t i = 0; i < acts.size();) {
      size_t j = i;
      std::vector<size_t> pos;
      for (; j < acts.size() && acts[j].op == acts[i].op; ++j)
        if (acts[j].kind == ActionKind::kPrefetch) pos.push_back(j);
      std::vector<Action> pf;
      for (size_t q : pos) pf.push_back(acts[q]);
      auto key = [&](const Action& a) { const auto it = need.find({a.tensor, a.op}); return it == need.end() ? 1 << 30 : it->second; };
      std::stable_sort(pf.begin(), pf.end(), [&](const Action& a, const Action& b) { return key(a) < key(b); });
      for (size_t q = 0; q < pos.size(); ++q) acts[pos[q]] = pf[q];
      i = j;
    }
  }

  // fifo_prefetches: at one op, the candidates' prefetches in the order the planner queued them
  // (their predicted starts), which the stream then runs (the greedy's action order can differ).
  void order_prefetches_as_queued() {
    std::map<std::pair<TensorId, int>, double> start;
    for (const auto& c : out_.candidates)
      if (c.decision == CapuchinDecision::kSwap) start[{c.id, c.trigger_op}] = c.prefetch_start_ns;
    auto& acts = out_.plan.actions;
    for (size_t i = 0; i < acts.size();) {
      size_t j = i;
      std::vector<size_t> pos;
      for (; j < acts.size() && acts[j].op == acts[i].op; ++j)
        if (acts[j].kind == ActionKind::kPrefetch && start.count({acts[j].tensor, acts[j].op})) pos.push_back(j);
      std::vector<Action> pf;
      for (size_t q : pos) pf.push_back(acts[q]);
      std::stable_sort(pf.begin(), pf.end(), [&](const Action& a, const Action& b) { return start[{a.tensor, a.op}] < start[{b.tensor, b.op}]; });
      for (size_t q = 0; q < pos.size(); ++q) acts[pos[q]] = pf[q];
      i = j;
    }
  }

  void index_candidates() {
    cands_of_.assign(in_.tensors.size(), {});
    for (size_t k = 0; k < out_.candidates.size(); ++k)
      cands_of_[static_cast<size_t>(out_.candidates[k].id)].push_back(static_cast<int>(k));
  }

  // The search's decisions first (PlanPin), each taken as the greedy would take it: a swap or a
  // drop that does not lower the bytes over the budget, or that breaks a chosen recomputation, is
  // not taken (and left to the greedy). A kept pin only keeps the greedy away from that gap.
  void apply_pins() {
    if (in_.pins.empty()) return;
    index_candidates();
    held_from_.resize(out_.candidates.size(), -1);
    for (const PlanPin& p : in_.pins) {
      if (p.id < 0 || static_cast<size_t>(p.id) >= cands_of_.size()) continue;
      for (int k : cands_of_[static_cast<size_t>(p.id)]) {
        auto& c = out_.candidates[static_cast<size_t>(k)];
        if (c.back_op != p.back_op || c.pinned) continue;
        c.pinned = true;
        if (p.decision == CapuchinDecision::kSwap) {
          const auto shift = [&](SwapEval& s) {
            if (s.ok && (p.trigger_shift > 0 || (p.trigger_op >= 0 && p.trigger_op < s.trigger))) {
              const int latest = p.trigger_op >= 0 ? std::min(s.trigger, p.trigger_op) : s.trigger;
              s.trigger = std::max(s.release + 1, latest - p.trigger_shift);
              s.issue = issue_at(s.trigger, s.out_end);
              s.in_start = in_fit(s.issue, c.swap_ns);
              s.delay = in_delay(s.issue, c.swap_ns);
              s.stall = std::max(0.0, s.in_start + c.swap_ns - start_[static_cast<size_t>(c.back_op)]);
            }
            return true;
          };
          if (!take_swap(c, eval_swap(c), shift)) c.pinned = false;
        } else if (p.decision == CapuchinDecision::kRecompute) {
          const double chain = c.bytes > held_inputs(c) ? chain_ns(c.id, c.back_op, c.evict_op) : -1;
          if (chain < 0) {
            c.pinned = false;
            break;
          }
          const size_t mark = mem_.mark();
          const std::vector<int> held = held_from_;
          const auto over = excess();
          apply_recompute(c, chain);
          if (excess() >= over || breaks_a_recompute(c)) {
            mem_.rollback(mark), held_from_ = held;
            c.decision = CapuchinDecision::kKeep;
            c.order = -1, --order_;
            c.pinned = false;
            out_.plan.actions.pop_back();
            break;
          }
          mem_.commit(mark);
          recompute_taken(c, true);
          if (p.ahead_op > c.evict_op && p.ahead_op < c.back_op - 1) {  // back on the device from ahead_op + 1
            c.ahead_op = p.ahead_op;
            add_mem(p.ahead_op + 1, c.back_op - 1, static_cast<long long>(c.bytes));
            out_.plan.actions.push_back({ActionKind::kRecompute, c.id, p.ahead_op});
          }
        } else if (p.decision == CapuchinDecision::kCompress && (p.codec == Codec::kNone || !compress_pinned(c, p))) {
          c.pinned = false;
        }
        break;
      }
    }
  }

  // A pinned compression (FreeLunch's mechanism, one gap): compressed after evict_op on the codec
  // lane, its block freed at the op the compression ends in, decompressed after an in-trigger
  // walked back from the back-access until the decompression hides (not into ops over the budget,
  // not before the release); its buffer is allocated for this gap only (Action::per_use_buffer),
  // from the compression to the back-access. Taken only if it lowers the bytes over the budget.
  bool compress_pinned(CapuchinCandidate& c, const PlanPin& p) {
    const int e = c.evict_op, b = c.back_op;
    const double cs = codec_.earliest_fit(start_[static_cast<size_t>(e) + 1], p.codec_ns);
    const int release = capuchin_release_op(start_, e, cs + p.codec_ns);
    if (release < 0 || release + 1 > b - 1) return false;
    auto d_start = [&](int q) {
      return codec_.earliest_fit(std::max(start_[static_cast<size_t>(q) + 1], cs + p.codec_ns), p.codec_ns);
    };
    const int q = walk_back_trigger(b - 1, release + 1, [&](int x) { return d_start(x) + p.codec_ns; },
                                    start_[static_cast<size_t>(b)], mem_.values(), in_.budget);
    const size_t mark = mem_.mark();
    const auto over = excess();
    add_mem(release + 1, q, -static_cast<long long>(c.bytes));
    add_mem(e + 1, b - 1, static_cast<long long>(p.capacity));
    if (excess() >= over) {
      mem_.rollback(mark);
      return false;
    }
    mem_.commit(mark);
    const double ds = d_start(q);
    codec_.add(cs, p.codec_ns);
    codec_.add(ds, p.codec_ns);
    c.decision = CapuchinDecision::kCompress;
    c.release_op = release;
    c.trigger_op = q;
    c.swap_stall_ns = std::max(0.0, ds + p.codec_ns - start_[static_cast<size_t>(b)]);
    c.order = order_++;
    Action a{ActionKind::kCompress, c.id, e, release};
    a.codec = p.codec;
    a.capacity = p.capacity;
    a.per_use_buffer = true;
    out_.plan.actions.push_back(a);
    out_.plan.actions.push_back({ActionKind::kPrefetch, c.id, q});
    return true;
  }

  // Swaps whose copies hide completely, largest free time first.
  // Persistent tensors across the iteration boundary (ours, for policy auto; Capuchin plans
  // within one iteration): a parameter or optimizer state is unused from its last use in one
  // iteration to its first in the next (momentum: all but the optimizer step; the last layers'
  // weights: most of the forward pass). Swapped out after its last use, its block freed once the
  // copy has ended (in the next iteration when the copy runs past this one's end), prefetched to
  // end before its first use; taken, largest first, where the prefetch hides and the tensor is
  // then off over some op above the budget. The swap-out is not queued on the D2H lane model (the
  // iteration's end has no other swap-outs); the prefetch is.
  // A pin on its gap (id, first use) comes first: a swap (with wrap_persistent or not; its
  // prefetch moved earlier as a swap's pin moves it; taken where the prefetch is late too) or a
  // keep. Without wrap_persistent only the pinned are taken; with it, those of min_wrap_bytes or more.
  void wrap_swaps(bool unpinned) {
    const size_t n = n_ops();
    const double period = start_[n];
    std::vector<size_t> order;
    std::vector<const PlanPin*> pin_of(in_.tensors.size(), nullptr);
    for (size_t id = 0; id < in_.tensors.size(); ++id) {
      const auto& t = in_.tensors[id];
      if (!t.persistent || t.bytes == 0 || t.excluded || ops_of_[id].empty()) continue;
      for (const PlanPin& q : in_.pins)
        if (static_cast<size_t>(q.id) == id && q.back_op == ops_of_[id].front()) pin_of[id] = &q;
      if ((unpinned && t.bytes >= in_.min_wrap_bytes) || (pin_of[id] && pin_of[id]->decision == CapuchinDecision::kSwap)) order.push_back(id);
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if ((pin_of[a] != nullptr) != (pin_of[b] != nullptr)) return pin_of[a] != nullptr;
      return in_.tensors[a].bytes > in_.tensors[b].bytes;
    });
    for (size_t id : order) {
      const PlanPin* pin = pin_of[id];
      if (!pin && fits()) return;
      if (pin && pin->decision != CapuchinDecision::kSwap) continue;
      const auto& t = in_.tensors[id];
      const int u1 = ops_of_[id].front(), um = ops_of_[id].back();
      if (u1 < 1) continue;  // no op to prefetch after
      const double swap_ns = static_cast<double>(t.bytes) * in_.swap_ns_per_byte;
      const double out_end = start_[static_cast<size_t>(um) + 1] + swap_ns;
      int release = -1, lo = 0;  // lo: the first op it may be off at in this iteration's indices
      if (out_end <= period) {
        release = capuchin_release_op(start_, um, out_end);
        if (release < 0) continue;
      } else {
        for (size_t r = 0; r < n && release < 0; ++r)
          if (start_[r + 1] >= out_end - period) release = static_cast<int>(n + r);
        if (release < 0) continue;
        lo = release - static_cast<int>(n) + 1;
      }
      const double ready = out_end > period ? out_end - period : 0;  // the host copy exists (this iteration's clock)
      auto in_start = [&](int p) { return in_fit(issue_at(p, ready), swap_ns); };
      int p = walk_back_trigger(u1 - 1, lo, [&](int q) { return in_start(q) + swap_ns; },
                                start_[static_cast<size_t>(u1)], mem_.values(), in_.budget);
      if (p < lo || (!pin && in_start(p) + swap_ns > start_[static_cast<size_t>(u1)] + kEpsNs)) continue;  // not hidden
      if (pin && (pin->trigger_shift > 0 || (pin->trigger_op >= 0 && pin->trigger_op < p)))
        p = std::max(lo, (pin->trigger_op >= 0 ? std::min(p, pin->trigger_op) : p) - pin->trigger_shift);
      const bool wraps = release >= static_cast<int>(n);
      const bool over = hits_over(lo, p) || (!wraps && hits_over(release + 1, static_cast<int>(n) - 1));
      if (!over) continue;
      add_mem(lo, p, -static_cast<long long>(t.bytes));
      if (!wraps) add_mem(release + 1, static_cast<int>(n) - 1, -static_cast<long long>(t.bytes));
      in_add(issue_at(p, ready), in_start(p), swap_ns, start_[static_cast<size_t>(u1)], -1);
      const auto tid = static_cast<TensorId>(id);
      out_.wrap_swaps.push_back({tid, t.bytes, um, release, p, u1});
      out_.plan.actions.push_back({ActionKind::kSwapOut, tid, um, release});
      out_.plan.actions.push_back({ActionKind::kPrefetch, tid, p});
    }
  }

  void hidden_swaps() {
    index_candidates();
    std::vector<size_t> order(out_.candidates.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return out_.candidates[a].free_time_ns > out_.candidates[b].free_time_ns;
    });
    for (size_t k : order) {
      if (fits()) return;
      auto& c = out_.candidates[k];
      if (c.free_time_ns < 0) break;
      if (c.pinned || c.decision != CapuchinDecision::kKeep) continue;
      take_swap(c, eval_swap(c), [](SwapEval& s) { return s.cost() <= kEpsNs; });
    }
  }

  // The rest: best bytes per second of overhead (MSPS for recomputation, bytes per stall second
  // for swap) until the predicted peak fits. Scores only fall as choices are made (chains grow,
  // copy lanes fill), so re-ranking is lazy: the top candidate is evaluated again against the
  // current plan before it is taken, and goes back into the queue if it dropped below the next.
  struct Option {
    double score = -1;
    bool swap = false;
    double chain = 0;
    SwapEval eval;
  };
  Option evaluate(CapuchinCandidate& c) const {
    Option o;
    if (mode_ != CapuchinMode::kSwap) {
      const double chain = hits_over(c.evict_op + 1, c.back_op - 1) ? chain_ns(c.id, c.back_op, c.evict_op) : -1;
      c.recompute_ns = chain;
      c.msps = chain < 0 ? 0 : static_cast<double>(c.bytes) / std::max(chain, kEpsNs) * 1e9;
      // Memory saved is net of the inputs the drop keeps alive until the recomputation.
      const size_t held = held_inputs(c);
      if (chain >= 0 && held < c.bytes) {
        c.msps = static_cast<double>(c.bytes - held) / std::max(chain, kEpsNs) * 1e9;
        o.score = c.msps, o.chain = chain;
      }
    }
    if (mode_ != CapuchinMode::kRecompute && !no_swap_[static_cast<size_t>(&c - out_.candidates.data())]) {
      const SwapEval s = eval_swap(c);
      c.swap_stall_ns = s.stall;
      c.trigger_op = s.trigger;
      const double score = static_cast<double>(c.bytes) / std::max(s.cost() * in_.swap_cost_weight, kEpsNs) * 1e9;
      if (s.ok && score > o.score) o.score = score, o.swap = true, o.eval = s;
    }
    return o;
  }

  void greedy() {
    index_candidates();
    no_swap_.assign(out_.candidates.size(), 0);
    std::priority_queue<std::pair<double, int>> queue;  // (score, -index): ties to the lower index
    for (size_t k = 0; k < out_.candidates.size(); ++k) {
      auto& c = out_.candidates[k];
      if (c.decision != CapuchinDecision::kKeep || c.pinned) continue;
      const Option o = evaluate(c);
      if (o.score >= 0) queue.emplace(o.score, -static_cast<int>(k));
    }
    while (!queue.empty() && !fits()) {
      const int k = -queue.top().second;
      queue.pop();
      auto& c = out_.candidates[static_cast<size_t>(k)];
      const Option o = evaluate(c);
      if (o.score < 0) continue;  // no longer frees anything over the budget
      if (!queue.empty() && o.score < queue.top().first) {
        queue.emplace(o.score, -k);
        continue;
      }
      if (o.swap) {
        if (take_swap(c, o.eval)) continue;
        no_swap_[static_cast<size_t>(k)] = 1;  // not tried again; recomputed if it can be
        const Option r = evaluate(c);
        if (r.score >= 0) queue.emplace(r.score, -k);
        continue;
      }
      // A drop can cost memory elsewhere (later recomputations bring it back early): undo one
      // that does not lower the bytes over the budget, or that leaves a recomputation without a
      // source.
      const size_t mark = mem_.mark();
      const std::vector<int> held = held_from_;
      const auto over = excess();
      apply_recompute(c, o.chain);
      if (excess() >= over || breaks_a_recompute(c)) {
        mem_.rollback(mark), held_from_ = held;
        c.decision = CapuchinDecision::kKeep;
        c.order = -1;
        --order_;
        out_.plan.actions.pop_back();
      } else {
        mem_.commit(mark);
        recompute_taken(c, false);
      }
    }
  }

  const PlannerInput& in_;
  mutable std::vector<int> seen_;  // chain_walk: stamp_ when counted in the current chain
  mutable std::vector<TensorId>* reads_ = nullptr;  // chain_walk: the live tensors a chain reads
  std::vector<std::vector<int>> read_by_;  // per tensor: recomputations whose chains read it (candidate indices)
  mutable int stamp_ = 0;
  CapuchinMode mode_;
  CapuchinPlan out_;
  std::vector<double> start_;
  std::vector<int> first_, last_;
  std::vector<std::vector<int>> ops_of_, cands_of_;
  MemoryCurve mem_;  // the predicted curve as the choices change it
  std::vector<int> held_from_;  // per candidate: first op a recomputation holds it back from, -1: none
  bool fifo_ = false;
  CopyLane h2d_;
  FifoLane inq_;  // the H2D queue with fifo_prefetches (h2d_ is unused then)
  CopyLane codec_;  // the compression stream (pinned compressions)
  std::vector<int> outq_;       // chosen swaps in D2H issue order (swap-out op, then when chosen)
  std::vector<double> out_end_;  // per candidate: when its queued swap-out ends
  std::vector<int> moved_;       // swaps whose release the last queue_swap_outs moved
  int order_ = 0;
  std::vector<char> no_swap_;  // per candidate: its swap failed (greedy)
};

}  // namespace

CapuchinPlan plan_capuchin(const PlannerInput& in, CapuchinMode mode) {
  if (static_cast<int>(in.tensors.size()) == 0 || in.num_ops <= 0) return {};
  CapuchinPlan p = Planner(in, mode).run();
  for (auto& c : p.candidates)
    if (c.decision == CapuchinDecision::kKeep) c.trigger_op = -1, c.release_op = -1;
  return p;
}

PlannerInput planner_input(const Graph& g, const AccessTrace& trace, size_t budget) {
  PlannerInput in;
  in.num_ops = static_cast<int>(g.num_ops());
  in.budget = budget;
  in.swap_ns_per_byte = trace.swap_ns_per_byte;
  if (trace.op_ms.size() == g.num_ops())
    for (double ms : trace.op_ms) in.op_ns.push_back(ms * 1e6);
  for (const auto& a : trace.accesses)
    if (is_use(a.kind)) in.accesses.push_back(a);
  in.tensors.resize(g.num_tensors());
  for (const auto& t : g.tensors()) {
    auto& p = in.tensors[static_cast<size_t>(t.id)];
    p.bytes = t.bytes();
    p.persistent = t.persistent();
    p.producer = t.producer;
    p.release_after = t.release_after;
    if (t.producer >= 0) {
      p.inputs = g.op(t.producer).inputs;
      p.recomputable = !t.persistent() && t.recomputable && is_recomputable(g.op(t.producer));
    }
  }
  return in;
}

// ---------------------------------------------------------------- the policy

std::string CapuchinPolicy::name() const {
  switch (mode_) {
    case CapuchinMode::kSwap: return "capuchin-swap";
    case CapuchinMode::kRecompute: return "capuchin-recompute";
    case CapuchinMode::kHybrid: return "capuchin";
  }
  return "capuchin";
}

void CapuchinPolicy::begin_iteration(int iteration) {
  std::fill(late_.begin(), late_.end(), 0);
  if (guided_) std::fill(cost_ms_.begin(), cost_ms_.end(), 0.0), std::fill(wrap_cost_ms_.begin(), wrap_cost_ms_.end(), 0.0);
  current_op_ = -1;
}

std::vector<Action> CapuchinPolicy::after_op(int op_index) {
  current_op_ = op_index;
  if (!guided_ || op_index < 0 || static_cast<size_t>(op_index) >= at_op_.size()) return {};
  return at_op_[static_cast<size_t>(op_index)];
}

std::optional<size_t> guided_fallback_bytes(size_t bytes, size_t allocated, size_t budget, bool fits, bool compact_unfit) {
  if (allocated + bytes <= budget) return fits || compact_unfit ? std::nullopt : std::optional<size_t>(bytes);
  return compact_unfit ? std::min(bytes, allocated + bytes - budget) : bytes;
}

std::vector<Victim> CapuchinPolicy::choose_victims(size_t bytes, const MemoryView& view) {
  // Passive mode (and the fallback of guided mode): least recently used first, swapped. Tensors
  // the plan is bringing back for an access soon go last, so the fallback does not undo a prefetch.
  // Guided, with the request within the budget: the space is fragmented, not short. Nothing to
  // evict; the memory manager compacts instead of swapping out what the plan keeps. Where the
  // plan does not fit, so too with compact_unfit_ (and over the budget, the shortfall only).
  if (guided_) {
    const auto need = guided_fallback_bytes(bytes, view.allocated(), view.budget(), plan_.fits, compact_unfit_);
    if (!need) return {};
    bytes = *need;
  }
  auto awaited = [&](TensorId id) {
    if (!guided_ || static_cast<size_t>(id) >= candidates_of_.size()) return false;
    for (int k : candidates_of_[static_cast<size_t>(id)]) {
      const auto& c = plan_.candidates[static_cast<size_t>(k)];
      if (c.decision == CapuchinDecision::kSwap && c.trigger_op <= current_op_ && current_op_ < c.back_op) return true;
    }
    return false;
  };
  struct Cand {
    TensorView v;
    bool awaited;
  };
  std::vector<Cand> cands;
  for (const TensorView& v : view.evictable_views()) cands.push_back({v, awaited(v.id)});
  // In that order (a total one), taken from a heap: a request needs few of them.
  const auto later = [](const Cand& a, const Cand& b) {
    if (a.awaited != b.awaited) return a.awaited;
    return a.v.last_access != b.v.last_access ? a.v.last_access > b.v.last_access : a.v.id > b.v.id;
  };
  std::make_heap(cands.begin(), cands.end(), later);
  // Host budget: a victim the host cannot take is dropped where it can be recomputed (not by
  // capuchin-swap, which never recomputes), else skipped for the next; when none can go, the
  // plain choice, which the memory manager refuses and reports as out of host memory.
  std::vector<Victim> out, plain;
  size_t freed = 0, plain_freed = 0, room = view.host_room();
  for (auto end = cands.end(); end != cands.begin(); --end) {
    std::pop_heap(cands.begin(), end, later);
    const TensorView& c = (end - 1)->v;
    if (plain_freed < bytes) plain.push_back({c.id, EvictAction::kSwap}), plain_freed += c.bytes;
    if (freed >= bytes) break;
    if (c.bytes <= room) {
      out.push_back({c.id, EvictAction::kSwap});
      room -= c.bytes;
    } else if (mode_ != CapuchinMode::kSwap && view.can_recompute(c.id)) {
      out.push_back({c.id, EvictAction::kDrop});
    } else {
      continue;
    }
    freed += c.bytes;
  }
  return out.empty() ? plain : out;
}

bool CapuchinPolicy::feed_back(size_t k) {
  auto& c = plan_.candidates[k];
  if (c.decision != CapuchinDecision::kSwap || c.trigger_op <= c.release_op + 1) return false;
  // Op trigger_op would now hold the tensor: not into the peak window.
  auto& m = plan_.memory_after[static_cast<size_t>(c.trigger_op)];
  if (m + c.bytes > view_->budget()) return false;
  m += c.bytes;
  for (auto& a : plan_.plan.actions)
    if (a.kind == ActionKind::kPrefetch && a.tensor == c.id && a.op == c.trigger_op) a.op = c.trigger_op - 1;
  --c.trigger_op;
  ++trigger_moves_;
  ++fed_back_[k];
  return true;
}

void CapuchinPolicy::index_plan() { at_op_ = actions_by_op(plan_.plan, view_ ? view_->graph().num_ops() : 0); }

void CapuchinPolicy::end_iteration(const AccessTrace& trace) {
  if (!view_) throw std::logic_error("capuchin: end_iteration before attach");
  const auto seq = use_sequence(trace);
  repeats_ = false;
  if (guided_) {
    if (seq != measured_sequence_) {  // new shapes or a new graph: measure again
      guided_ = false;
      return;
    }
    repeats_ = true;
    ++guided_iterations_;
    // Feedback: a prefetch that was late at its back-access starts one op earlier next time.
    const bool feedback = feedback_iterations_ < 0 || guided_iterations_ <= feedback_iterations_;
    for (size_t k = 0; k < plan_.candidates.size() && feedback; ++k)
      if (late_[k]) feed_back(k);
    index_plan();
    return;
  }
  const auto planned = static_cast<size_t>(static_cast<double>(view_->budget()) * plan_fraction_);
  PlannerInput in = planner_input(view_->graph(), trace, planned);
  in.swap_cost_weight = swap_cost_weight_;
  in.pins = pins_;
  in.wrap_persistent = wrap_persistent_;
  in.min_wrap_bytes = min_wrap_bytes_;
  in.deadline_swap_outs = deadline_swap_outs_;
  in.need_ordered_prefetches = need_ordered_prefetches_;
  in.fifo_prefetches = fifo_prefetches_;
  for (const Op& op : view_->graph().ops()) {  // what the memory manager allocated (aligned) at each op
    const size_t ws = view_->workspace_bytes(op);
    in.workspace_bytes.push_back(ws ? align_up(ws) : 0);
  }
  plan_ = plan_capuchin(in, mode_);
  measured_sequence_ = std::move(seq);
  candidates_of_.assign(view_->graph().num_tensors(), {});
  for (size_t k = 0; k < plan_.candidates.size(); ++k)
    candidates_of_[static_cast<size_t>(plan_.candidates[k].id)].push_back(static_cast<int>(k));
  late_.assign(plan_.candidates.size(), 0);
  fed_back_.assign(plan_.candidates.size(), 0);
  cost_ms_.assign(plan_.candidates.size(), 0.0);
  wrap_cost_ms_.assign(view_->graph().num_tensors(), 0.0);
  first_use_.assign(view_->graph().num_tensors(), -1);
  last_use_.assign(view_->graph().num_tensors(), -1);
  for (const auto& [id, op] : measured_sequence_) {
    const auto i = static_cast<size_t>(id);
    if (i >= first_use_.size()) continue;
    if (first_use_[i] < 0) first_use_[i] = op;
    last_use_[i] = std::max(last_use_[i], op);
  }
  swap_ns_per_byte_ = trace.swap_ns_per_byte;
  for (const TriggerMove& t : trigger_moves_in_) {  // the warm start's: as the feedback moved them
    if (static_cast<size_t>(t.id) >= candidates_of_.size()) continue;
    for (int k : candidates_of_[static_cast<size_t>(t.id)]) {
      if (plan_.candidates[static_cast<size_t>(k)].back_op != t.back_op) continue;
      for (int i = 0; i < t.ops; ++i)
        if (!feed_back(static_cast<size_t>(k))) break;
    }
  }
  index_plan();
  guided_ = true;
  ++measurements_;
}

// A persistent tensor's gap over the iteration's end: from its last use to its first.
bool CapuchinPolicy::wrap_gap(TensorId id, int op_index) const {
  const auto i = static_cast<size_t>(id);
  return i < first_use_.size() && view_->graph().tensor(id).persistent() && (op_index < 0 || first_use_[i] == op_index);
}

void CapuchinPolicy::on_restore(TensorId id, int op_index, Residency from, double waited_ms) {
  if (!guided_) return;
  if (wrap_gap(id, op_index)) {  // a wrap swap's late prefetch, or the fallback's eviction
    wrap_cost_ms_[static_cast<size_t>(id)] += waited_ms;
    return;
  }
  if (static_cast<size_t>(id) >= candidates_of_.size() || candidates_of_[static_cast<size_t>(id)].empty()) return;
  size_t k = static_cast<size_t>(candidates_of_[static_cast<size_t>(id)].front());
  for (int ci : candidates_of_[static_cast<size_t>(id)])
    if (plan_.candidates[static_cast<size_t>(ci)].back_op == op_index) k = static_cast<size_t>(ci);
  cost_ms_[k] += waited_ms;
  const auto& c = plan_.candidates[k];
  if (c.decision == CapuchinDecision::kSwap && op_index == c.back_op &&
      (from == Residency::kOnHost || (from == Residency::kSwappingIn && waited_ms > 0)))
    late_[k] = 1;
}

void CapuchinPolicy::on_swap_out_wait(TensorId id, double waited_ms) {
  if (!guided_ || static_cast<size_t>(id) >= candidates_of_.size()) return;
  int k = -1;  // the gap of id this op is in (a planned swap, or the passive fallback's)
  for (int ci : candidates_of_[static_cast<size_t>(id)]) {
    const auto& c = plan_.candidates[static_cast<size_t>(ci)];
    if (c.evict_op <= current_op_ && current_op_ < c.back_op) k = ci;
  }
  if (k >= 0) cost_ms_[static_cast<size_t>(k)] += waited_ms;
  else if (wrap_gap(id, -1)) wrap_cost_ms_[static_cast<size_t>(id)] += waited_ms;  // out after its last use
}

// The wrap swaps' tensors: copied out after their last use, back before their first.
std::vector<TensorId> CapuchinPolicy::on_host_at_start() const {
  std::vector<TensorId> ids;
  if (guided_)
    for (const auto& w : plan_.wrap_swaps) ids.push_back(w.id);
  return ids;
}

nlohmann::json CapuchinPolicy::report() const {
  using nlohmann::json;
  json tensors = json::array();
  size_t swap_bytes = 0, drop_bytes = 0, compress_bytes = 0;
  for (size_t k = 0; k < plan_.candidates.size(); ++k) {
    const auto& c = plan_.candidates[k];
    if (c.decision == CapuchinDecision::kSwap) swap_bytes += c.bytes;
    if (c.decision == CapuchinDecision::kRecompute) drop_bytes += c.bytes;
    if (c.decision == CapuchinDecision::kCompress) compress_bytes += c.bytes;
    json t = {{"tensor", c.id},
              {"name", view_ ? view_->graph().tensor(c.id).name : std::string()},
              {"bytes", c.bytes},
              {"decision", to_string(c.decision)},
              {"evict_after_op", c.evict_op},
              {"back_access_op", c.back_op},
              {"free_time_ms", c.free_time_ns * 1e-6},
              {"predicted_stall_ms", c.swap_stall_ns * 1e-6},
              {"predicted_recompute_ms", c.recompute_ns * 1e-6},
              {"msps_bytes_per_s", c.msps},
              {"measured_cost_ms", k < cost_ms_.size() ? cost_ms_[k] : 0.0}};
    if (c.decision == CapuchinDecision::kSwap || c.decision == CapuchinDecision::kCompress)
      t["freed_after_op"] = c.release_op, t["prefetch_after_op"] = c.trigger_op;
    if (c.decision == CapuchinDecision::kSwap && c.swap_out_op != c.evict_op) t["swap_out_after_op"] = c.swap_out_op;
    if (c.order >= 0) t["chosen_order"] = c.order;
    if (c.pinned) t["pinned"] = true;
    if (c.ahead_op >= 0) t["recompute_after_op"] = c.ahead_op;
    tensors.push_back(t);
  }
  json wraps = json::array();  // persistent tensors swapped across the iteration boundary
  for (const auto& w : plan_.wrap_swaps)
    wraps.push_back({{"tensor", w.id},
                     {"name", view_ ? view_->graph().tensor(w.id).name : std::string()},
                     {"bytes", w.bytes},
                     {"evict_after_op", w.evict_op},
                     {"freed_after_op", w.release_op},
                     {"prefetch_after_op", w.trigger_op},
                     {"back_access_op", w.back_op},
                     {"measured_cost_ms", static_cast<size_t>(w.id) < wrap_cost_ms_.size() ? wrap_cost_ms_[static_cast<size_t>(w.id)] : 0.0}});
  // Persistent tensors the plan kept that the passive fallback evicted: their gap over the
  // iteration's end and what it cost (stall on the copy back, waits for the copy out).
  json evicted = json::array();
  std::vector<char> wrapped(wrap_cost_ms_.size(), 0);
  for (const auto& w : plan_.wrap_swaps)
    if (static_cast<size_t>(w.id) < wrapped.size()) wrapped[static_cast<size_t>(w.id)] = 1;
  for (size_t i = 0; i < wrap_cost_ms_.size(); ++i)
    if (!wrapped[i] && wrap_cost_ms_[i] > 0) {
      const auto id = static_cast<TensorId>(i);
      evicted.push_back({{"tensor", id},
                         {"name", view_->graph().tensor(id).name},
                         {"bytes", view_->graph().tensor(id).bytes()},
                         {"evict_after_op", last_use(id)},
                         {"back_access_op", first_use(id)},
                         {"measured_cost_ms", wrap_cost_ms_[i]}});
    }
  return {{"mode", name()},
          {"guided", guided_},
          {"measurements", measurements_},
          {"guided_iterations", guided_iterations_},
          {"swap_ns_per_byte", swap_ns_per_byte_},
          {"predicted_peak_before_bytes", plan_.peak_before},
          {"predicted_peak_after_bytes", plan_.peak_after},
          {"predicted_fits", plan_.fits},
          {"predicted_peak_op", plan_.memory_after.empty() ? -1
                                : static_cast<int>(std::max_element(plan_.memory_after.begin(), plan_.memory_after.end()) -
                                                   plan_.memory_after.begin())},
          {"peak_window_ops", {plan_.peak_window_first, plan_.peak_window_last}},
          {"swap_bytes", swap_bytes},
          {"recompute_bytes", drop_bytes},
          {"compress_bytes", compress_bytes},
          {"trigger_moves", trigger_moves_},
          {"plan", plan_.plan.str()},
          {"tensors", tensors},
          {"wrap_swaps", wraps},
          {"evicted_persistent", evicted}};
}

std::string CapuchinPolicy::summary() const {
  size_t ns = 0, nr = 0, bs = 0, br = 0;
  for (const auto& c : plan_.candidates) {
    if (c.decision == CapuchinDecision::kSwap) ++ns, bs += c.bytes;
    if (c.decision == CapuchinDecision::kRecompute) ++nr, br += c.bytes;
  }
  const double mib = 1024.0 * 1024.0;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s: measured %d time(s); plan swaps %zu tensors (%.2f MiB), recomputes %zu (%.2f MiB); predicted peak "
                "%.2f -> %.2f MiB%s; %d trigger(s) moved earlier",
                name().c_str(), measurements_, ns, static_cast<double>(bs) / mib, nr, static_cast<double>(br) / mib,
                static_cast<double>(plan_.peak_before) / mib, static_cast<double>(plan_.peak_after) / mib,
                plan_.fits ? "" : " (does not fit: passive eviction covers the rest)", trigger_moves_);
  return buf;
}

}  // namespace vtensor
