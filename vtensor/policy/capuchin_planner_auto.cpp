// Policy auto's extensions to Capuchin's planner (PlannerInput's last block, capuchin_planner.h):
// ours, not the paper's, and each a no-op at PlannerInput's defaults, so plan_capuchin as
// Capuchin's own policy runs it is capuchin_planner.cpp alone. Pins fix one gap's decision
// before the greedy (auto's per-gap search, the LP's plans), a compression among them; wrap swaps
// take persistent tensors off the device across the iteration boundary; a pinned recomputation
// has the swapped tensors its chain reads prefetched for it; the D2H queue may go in deadline
// order and the H2D queue may be planned (and issued) in the order the stream runs it.
#include <algorithm>
#include <functional>
#include <map>

#include "vtensor/policy/capuchin_planner.h"
#include "vtensor/policy/capuchin_planner_impl.h"

namespace vtensor {

std::string to_string(const PlanPin& p) {
  std::string s = "t" + std::to_string(p.id) + "@" + std::to_string(p.back_op) + ":" + to_string(p.decision);
  if (p.trigger_shift > 0) s += "-" + std::to_string(p.trigger_shift);
  if (p.ahead_op >= 0) s += "^" + std::to_string(p.ahead_op);
  if (p.trigger_op >= 0) s += "@" + std::to_string(p.trigger_op);
  if (p.decision == CapuchinDecision::kCompress) s += std::string("/") + to_string(p.codec);
  return s;
}

namespace capuchin_detail {

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
void CapuchinPlanner::wrap_swaps(bool unpinned) {
  const size_t n = n_ops();
  const double period = start_[n];
  std::vector<size_t> order;
  std::vector<const PlanPin*> pin_of(in_.tensors.size(), nullptr);
  for (size_t id = 0; id < in_.tensors.size(); ++id) {
    const auto& t = in_.tensors[id];
    if (!t.persistent || t.bytes == 0 || t.excluded || t.pinned || ops_of_[id].empty()) continue;
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

// The search's decisions first (PlanPin), each taken as the greedy would take it: a swap or a
// drop that does not lower the bytes over the budget, or that breaks a chosen recomputation, is
// not taken (and left to the greedy). A kept pin only keeps the greedy away from that gap.
void CapuchinPlanner::apply_pins() {
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
bool CapuchinPlanner::compress_pinned(CapuchinCandidate& c, const PlanPin& p) {
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

// A recomputation at c's back-access whose chain reads a swapped tensor still on the host would
// copy it on demand, behind the lane's prefetches. Instead its prefetch moves earlier, walked
// back from that access as eval_swap walks from the tensor's own: it is then on the device
// for the chain. Kept only where it ends sooner than the copy on demand would.
void CapuchinPlanner::prefetch_for_chain(const CapuchinCandidate& c) {
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

// Where c's swap-out joins the D2H queue: at fifo_pos; with deadline_swap_outs, ahead of those
// queued there that have not started by its eviction and are prefetched after c is needed back:
// they are issued after it, later than their eviction.
size_t CapuchinPlanner::queue_pos(const CapuchinCandidate& c) const {
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

// In issue order, a copy queued later moves those issued after it: their starts, read back.
void CapuchinPlanner::read_prefetch_starts() {
  if (!fifo_) return;
  for (size_t k = 0; k < out_.candidates.size(); ++k) {
    auto& c = out_.candidates[k];
    if (c.decision != CapuchinDecision::kSwap) continue;
    c.prefetch_start_ns = inq_.start_of(static_cast<int>(k));
    c.swap_stall_ns = std::max(0.0, c.prefetch_start_ns + c.swap_ns - start_[static_cast<size_t>(c.back_op)]);
  }
}

// fifo_prefetches: at one op, the candidates' prefetches in the order the planner queued them
// (their predicted starts), which the stream then runs (the greedy's action order can differ).
void CapuchinPlanner::order_prefetches_as_queued() {
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

// need_ordered_prefetches: at one op, the prefetches in the order their tensors are needed (the
// H2D stream copies in issue order; the lane model placed each in a gap of its own).
void CapuchinPlanner::order_prefetches_by_need() {
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

}  // namespace capuchin_detail
}  // namespace vtensor
