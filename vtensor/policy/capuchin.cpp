// CapuchinPolicy (capuchin.h): the measured iteration's passive LRU fallback, the plan made at its
// end (plan_capuchin, capuchin_planner.cpp), the guided iterations' actions and feedback, and what
// each candidate's gap cost (policy auto reads it). The cycle between them: MeasuredCycle.
#include "vtensor/policy/capuchin.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace vtensor {

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
  if (cycle_.guided()) std::fill(cost_ms_.begin(), cost_ms_.end(), 0.0), std::fill(wrap_cost_ms_.begin(), wrap_cost_ms_.end(), 0.0);
  current_op_ = -1;
}

std::vector<Action> CapuchinPolicy::after_op(int op_index) {
  current_op_ = op_index;
  return cycle_.actions_after(op_index);
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
  if (cycle_.guided()) {
    const auto need = guided_fallback_bytes(bytes, view.allocated(), view.budget(), plan_.fits, compact_unfit_);
    if (!need) return {};
    bytes = *need;
  }
  auto awaited = [&](TensorId id) {
    if (!cycle_.guided() || static_cast<size_t>(id) >= candidates_of_.size()) return false;
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

void CapuchinPolicy::index_plan() { cycle_.index(plan_.plan, view_ ? view_->graph().num_ops() : 0); }

void CapuchinPolicy::end_iteration(const AccessTrace& trace) {
  if (!view_) throw std::logic_error("capuchin: end_iteration before attach");
  const MeasuredCycle::End end = cycle_.end_iteration(trace);
  if (end == MeasuredCycle::End::kChanged) return;
  if (end == MeasuredCycle::End::kGuided) {
    // Feedback: a prefetch that was late at its back-access starts one op earlier next time.
    const bool feedback = feedback_iterations_ < 0 || cycle_.guided_iterations() <= feedback_iterations_;
    for (size_t k = 0; k < plan_.candidates.size() && feedback; ++k)
      if (late_[k]) feed_back(k);
    index_plan();
    return;
  }
  PlannerInput in = planner_input(view_->graph(), trace, planned_budget(*view_, plan_fraction_));
  in.swap_cost_weight = swap_cost_weight_;  // policy auto's extensions (PlannerInput's last block)
  in.pins = pins_;
  in.wrap_persistent = wrap_persistent_;
  in.min_wrap_bytes = min_wrap_bytes_;
  in.deadline_swap_outs = deadline_swap_outs_;
  in.need_ordered_prefetches = need_ordered_prefetches_;
  in.fifo_prefetches = fifo_prefetches_;
  in.workspace_bytes = allocated_workspaces(*view_);
  plan_ = plan_capuchin(in, mode_);
  cycle_.planned();
  candidates_of_.assign(view_->graph().num_tensors(), {});
  for (size_t k = 0; k < plan_.candidates.size(); ++k)
    candidates_of_[static_cast<size_t>(plan_.candidates[k].id)].push_back(static_cast<int>(k));
  late_.assign(plan_.candidates.size(), 0);
  fed_back_.assign(plan_.candidates.size(), 0);
  cost_ms_.assign(plan_.candidates.size(), 0.0);
  wrap_cost_ms_.assign(view_->graph().num_tensors(), 0.0);
  first_use_.assign(view_->graph().num_tensors(), -1);
  last_use_.assign(view_->graph().num_tensors(), -1);
  for (const auto& [id, op] : cycle_.sequence()) {
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
}

// A persistent tensor's gap over the iteration's end: from its last use to its first.
bool CapuchinPolicy::wrap_gap(TensorId id, int op_index) const {
  const auto i = static_cast<size_t>(id);
  return i < first_use_.size() && view_->graph().tensor(id).persistent() && (op_index < 0 || first_use_[i] == op_index);
}

void CapuchinPolicy::on_restore(TensorId id, int op_index, Residency from, double waited_ms) {
  if (!cycle_.guided()) return;
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
  if (!cycle_.guided() || static_cast<size_t>(id) >= candidates_of_.size()) return;
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
  if (cycle_.guided())
    for (const auto& w : plan_.wrap_swaps) ids.push_back(w.id);
  return ids;
}

namespace {

// One candidate of the plan in the report: its gap, decision, predictions and measured cost.
nlohmann::json candidate_report(const CapuchinCandidate& c, const std::string& name, double measured_cost_ms) {
  nlohmann::json t = {{"tensor", c.id},
                      {"name", name},
                      {"bytes", c.bytes},
                      {"decision", to_string(c.decision)},
                      {"evict_after_op", c.evict_op},
                      {"back_access_op", c.back_op},
                      {"free_time_ms", c.free_time_ns * 1e-6},
                      {"predicted_stall_ms", c.swap_stall_ns * 1e-6},
                      {"predicted_recompute_ms", c.recompute_ns * 1e-6},
                      {"msps_bytes_per_s", c.msps},
                      {"measured_cost_ms", measured_cost_ms}};
  if (c.decision == CapuchinDecision::kSwap || c.decision == CapuchinDecision::kCompress)
    t["freed_after_op"] = c.release_op, t["prefetch_after_op"] = c.trigger_op;
  if (c.decision == CapuchinDecision::kSwap && c.swap_out_op != c.evict_op) t["swap_out_after_op"] = c.swap_out_op;
  if (c.order >= 0) t["chosen_order"] = c.order;
  if (c.pinned) t["pinned"] = true;
  if (c.ahead_op >= 0) t["recompute_after_op"] = c.ahead_op;
  return t;
}

}  // namespace

nlohmann::json CapuchinPolicy::report() const {
  using nlohmann::json;
  json tensors = json::array();
  size_t swap_bytes = 0, drop_bytes = 0, compress_bytes = 0;
  for (size_t k = 0; k < plan_.candidates.size(); ++k) {
    const auto& c = plan_.candidates[k];
    if (c.decision == CapuchinDecision::kSwap) swap_bytes += c.bytes;
    if (c.decision == CapuchinDecision::kRecompute) drop_bytes += c.bytes;
    if (c.decision == CapuchinDecision::kCompress) compress_bytes += c.bytes;
    tensors.push_back(candidate_report(c, view_ ? view_->graph().tensor(c.id).name : std::string(), k < cost_ms_.size() ? cost_ms_[k] : 0.0));
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
          {"guided", cycle_.guided()},
          {"measurements", cycle_.measurements()},
          {"guided_iterations", cycle_.guided_iterations()},
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
                name().c_str(), cycle_.measurements(), ns, static_cast<double>(bs) / mib, nr, static_cast<double>(br) / mib,
                static_cast<double>(plan_.peak_before) / mib, static_cast<double>(plan_.peak_after) / mib,
                plan_.fits ? "" : " (does not fit: passive eviction covers the rest)", trigger_moves_);
  return buf;
}

}  // namespace vtensor
