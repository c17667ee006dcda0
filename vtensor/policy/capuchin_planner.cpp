// Capuchin's planner (plan_capuchin, capuchin_planner.h): the paper's greedy. From the measured
// iteration: op start times laid end to end from its kernel times, live intervals and the
// unmanaged memory curve; candidates, one per access gap over the budget; swaps whose copies hide,
// largest free time first (not in recompute mode); then the greedy by bytes per second of overhead
// (MSPS for a recomputation, bytes per stall second for a swap), lazily re-ranked, until the
// predicted peak fits; then late swaps' triggers walked further back where the tensor now fits.
// Policy auto's extensions run from run() too, each a no-op at PlannerInput's defaults; they are
// capuchin_planner_auto.cpp's. Full notes: docs/design.md.
#include "vtensor/policy/capuchin_planner.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <stdexcept>

#include "vtensor/policy/capuchin_planner_impl.h"

namespace vtensor {

using capuchin_detail::kEpsNs;

const char* to_string(CapuchinDecision d) {
  switch (d) {
    case CapuchinDecision::kKeep: return "keep";
    case CapuchinDecision::kSwap: return "swap";
    case CapuchinDecision::kRecompute: return "recompute";
    case CapuchinDecision::kCompress: return "compress";
  }
  return "?";
}

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

namespace capuchin_detail {

CapuchinPlan CapuchinPlanner::run() {
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

// Op start times, live intervals and the unmanaged memory curve from the trace.
void CapuchinPlanner::measure() {
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
void CapuchinPlanner::find_candidates() {
  for (size_t id = 0; id < in_.tensors.size(); ++id) {
    const auto& t = in_.tensors[id];
    const auto& ops = ops_of_[id];
    if (t.bytes == 0 || t.excluded || t.pinned) continue;  // views; tensors another mechanism handles or none may move
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
size_t CapuchinPlanner::fifo_pos(const CapuchinCandidate& c) const {
  const auto it = std::upper_bound(outq_.begin(), outq_.end(), c.evict_op,
                                   [&](int e, int k) { return e < out_.candidates[static_cast<size_t>(k)].swap_out_op; });
  return static_cast<size_t>(it - outq_.begin());
}

// When c's swap-out ends, queued at `pos`.
double CapuchinPlanner::queued_out_end(const CapuchinCandidate& c, size_t pos) const {
  const double ready = pos == 0 ? 0 : out_end_[static_cast<size_t>(outq_[pos - 1])];
  return std::max(start_[static_cast<size_t>(c.evict_op) + 1], ready) + c.swap_ns;
}

CapuchinPlanner::SwapEval CapuchinPlanner::eval_swap(const CapuchinCandidate& c, size_t pos) const {
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
double CapuchinPlanner::chain_ns(TensorId x, int b, int e_ctx, const std::function<void(int)>* restored) const {
  if (seen_.size() != in_.tensors.size()) seen_.assign(in_.tensors.size(), 0);
  ++stamp_;
  return chain_walk(x, b, e_ctx, 0, restored);
}

double CapuchinPlanner::chain_walk(TensorId x, int b, int e_ctx, int depth, const std::function<void(int)>* restored) const {
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
bool CapuchinPlanner::apply_swap(CapuchinCandidate& c, const SwapEval& s) {
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
bool CapuchinPlanner::breaks_a_recompute(const CapuchinCandidate& c) const {
  for (const auto& d : out_.candidates)
    if (&d != &c && d.decision == CapuchinDecision::kRecompute && c.evict_op < d.back_op && d.back_op < c.back_op &&
        chain_ns(d.id, d.back_op, d.evict_op) < 0)
      return true;
  return false;
}

// Would a chosen recomputation read a swapped tensor while its swap-out runs (the new swap, or
// one that now ends later)? The memory manager would wait for the copy and cancel the swap.
bool CapuchinPlanner::cancels_a_recompute() const {
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
bool CapuchinPlanner::queue_swap_outs(size_t from) {
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
bool CapuchinPlanner::take_swap(CapuchinCandidate& c, SwapEval s, const std::function<bool(SwapEval&)>& accept) {
  if ((!accept || accept(s)) && s.ok && apply_swap(c, s)) return true;
  const size_t fifo = fifo_pos(c);
  if (s.pos == fifo) return false;
  s = eval_swap(c, fifo);
  return (!accept || accept(s)) && s.ok && apply_swap(c, s);
}

// The swap-out actions as queued: issued after swap_out_op, the block freed after the release
// the queue moved it to; at one op in queue order (the D2H stream copies in issue order).
void CapuchinPlanner::issue_swap_outs() {
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

size_t CapuchinPlanner::held_inputs(const CapuchinCandidate& c) const {
  size_t held = 0;
  for (TensorId inp : in_.tensors[static_cast<size_t>(c.id)].inputs) {
    const auto i = static_cast<size_t>(inp);
    if (!in_.tensors[i].persistent && last_[i] > c.evict_op && last_[i] < c.back_op) held += in_.tensors[i].bytes;
  }
  return held;
}

// An evicted input that a recomputation at op b brings back stays on the device from b until
// its own back-access (recompute) or prefetch (swap): the curve holds it from b.
void CapuchinPlanner::hold_from(int k, int b) {
  const auto& c = out_.candidates[static_cast<size_t>(k)];
  const int end = c.decision == CapuchinDecision::kSwap ? c.trigger_op : c.back_op - 1;
  int& from = held_from_[static_cast<size_t>(k)];
  if (from < 0) from = end + 1;
  if (b >= from) return;
  add_mem(b, from - 1, static_cast<long long>(c.bytes));
  from = b;
}

void CapuchinPlanner::hold_restored(const CapuchinCandidate& c) {
  const std::function<void(int)> f = [&](int k) { hold_from(k, c.back_op); };
  chain_ns(c.id, c.back_op, c.evict_op, &f);
}

// A recomputation taken: the live tensors its chain reads are noted (a later swap of one is
// prefetched for it: need_by). A pinned one (the search's or the LP's, chosen as if its sources
// were on the device) also has the swapped tensors it reads prefetched for it; the greedy's own
// were chosen at their copy's cost, and pulling theirs too crowded VGG-16's plans (+13% at 50%
// on h100-80g, docs/experiments/auto.md).
void CapuchinPlanner::recompute_taken(CapuchinCandidate& c, bool pinned) {
  if (pinned) prefetch_for_chain(c);
  std::vector<TensorId> reads;
  reads_ = &reads;
  const double chain = chain_ns(c.id, c.back_op, c.evict_op);
  reads_ = nullptr;
  if (chain >= 0) c.recompute_ns = chain;
  read_by_.resize(in_.tensors.size());
  for (TensorId t : reads) read_by_[static_cast<size_t>(t)].push_back(static_cast<int>(&c - out_.candidates.data()));
}

void CapuchinPlanner::apply_recompute(CapuchinCandidate& c, double chain) {
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
int CapuchinPlanner::need_by(const CapuchinCandidate& c) const {
  int b = c.back_op;
  if (static_cast<size_t>(c.id) < read_by_.size())
    for (int k : read_by_[static_cast<size_t>(c.id)]) {
      const auto& d = out_.candidates[static_cast<size_t>(k)];
      if (d.decision == CapuchinDecision::kRecompute && c.evict_op < d.back_op && d.back_op < b) b = d.back_op;
    }
  return b;
}

// Early choices were placed while most ops were over the budget; now that the curve is lower,
// walk the triggers of stalling swaps further back where the tensor fits.
void CapuchinPlanner::refine_triggers() {
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

void CapuchinPlanner::index_candidates() {
  cands_of_.assign(in_.tensors.size(), {});
  for (size_t k = 0; k < out_.candidates.size(); ++k)
    cands_of_[static_cast<size_t>(out_.candidates[k].id)].push_back(static_cast<int>(k));
}

// Swaps whose copies hide completely, largest free time first.
void CapuchinPlanner::hidden_swaps() {
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
CapuchinPlanner::Option CapuchinPlanner::evaluate(CapuchinCandidate& c) const {
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

void CapuchinPlanner::greedy() {
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

}  // namespace capuchin_detail

CapuchinPlan plan_capuchin(const PlannerInput& in, CapuchinMode mode) {
  if (static_cast<int>(in.tensors.size()) == 0 || in.num_ops <= 0) return {};
  CapuchinPlan p = capuchin_detail::CapuchinPlanner(in, mode).run();
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
    p.pinned = t.pinned;
    p.producer = t.producer;
    p.release_after = t.release_after;
    if (t.producer >= 0) {
      p.inputs = g.op(t.producer).inputs;
      p.recomputable = !t.persistent() && t.recomputable && is_recomputable(g.op(t.producer));
    }
  }
  return in;
}

}  // namespace vtensor
