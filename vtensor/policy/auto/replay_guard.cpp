// The plans auto runs after the measured iteration: each made from that iteration
// (planned_policy, install), and the replay guard (on_iteration_time), which hands over to a plan
// relying on fewer modelled costs where the running one's iterations run far over its prediction.
#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "vtensor/policy/auto/auto.h"
#include "vtensor/policy/compress.h"
#include "vtensor/policy/registry.h"

namespace vtensor {

using namespace auto_detail;

double AutoPolicy::PlanRun::mean_ms() const {
  double sum = 0;
  for (double m : ms) sum += m;
  return ms.empty() ? 0 : sum / static_cast<double>(ms.size());
}

AutoPolicy::PlanKind AutoPolicy::kind_of(const RehearsalResult& r) {
  const bool compresses = r.policy.compresses() ||
                          std::any_of(r.pins.begin(), r.pins.end(), [](const PlanPin& p) { return p.decision == CapuchinDecision::kCompress; });
  if (compresses) return PlanKind::kCompress;
  return r.swapped_out_bytes > 0 ? PlanKind::kSwap : PlanKind::kRecompute;
}

AutoPolicy::PlanSpec AutoPolicy::spec_of(const RehearsalResult& r) {
  PlanSpec p;
  p.policy = r.policy, p.pins = r.pins, p.compact_unfit = r.compact_unfit, p.min_wrap_bytes = r.min_wrap_bytes;
  p.start_state = r.start_state, p.high_placement = r.high_placement_bytes, p.predicted_ms = r.time_ms, p.kind = kind_of(r);
  return p;
}

std::optional<AutoPolicy::PlanSpec> AutoPolicy::replay_fallback(PlanKind kind) const {
  const RehearsalResult* best = nullptr;
  for (const auto* list : {&rehearsals_, &searched_, &lp_rehearsals_})
    for (const RehearsalResult& r : *list) {
      if (!r.trained || !(r.time_ms > 0) || kind_of(r) >= kind || !make_candidate(r.policy)) continue;
      const bool ran = std::any_of(runs_.begin(), runs_.end(), [&](const PlanRun& x) { return x.plan.policy == r.policy && x.plan.pins == r.pins; });
      if (!ran && (!best || r.time_ms < best->time_ms)) best = &r;
    }
  if (!best) return std::nullopt;
  return spec_of(*best);
}

// A plan's policy, made from a measured iteration: the chosen one's (choose), or one the replay
// guard runs from the next iteration (install: the arena as the last iteration's end left it; its
// persistent tensors on the host come back when accessed).
std::unique_ptr<Policy> AutoPolicy::planned_policy(const PlanSpec& p, const AccessTrace& measured) const {
  std::unique_ptr<Policy> next = make_candidate(p.policy);
  if (!next) throw std::logic_error("auto: '" + p.policy.name() + "' is not a candidate");
  if (auto* c = dynamic_cast<CapuchinPolicy*>(next.get()))
    c->set_pins(p.pins), c->set_trigger_moves(p.trigger_moves), c->set_compact_unfit(p.compact_unfit), c->set_min_wrap_bytes(p.min_wrap_bytes);
  next->attach(*view_);
  // A compression plan needs the non-zero counts the measured iteration counted.
  if (auto* z = dynamic_cast<CompressPolicy*>(next.get())) z->set_measured_nonzeros(nonzeros_);
  next->end_iteration(measured);  // a measuring planner plans from it; the others ignore it
  return next;
}

void AutoPolicy::install(const PlanSpec& p) {
  compact_unfit_ = p.compact_unfit, min_wrap_bytes_ = p.min_wrap_bytes;
  start_state_ = p.start_state, high_placement_ = p.high_placement;
  fallback_ = p.policy.dtr ? make_policy("dtr") : nullptr;
  active_ = planned_policy(p, *measured_trace_);
}

void AutoPolicy::on_iteration_time(int iteration, double time_ms) {
  // Not the measured iteration (its time holds the planning), nor a rehearsal's forced plan.
  if (!forced_.empty() || !active_ || measured_last_ || runs_.empty() || !measured_trace_) return;
  PlanRun& run = runs_.back();
  if (run.from_iteration < 0) run.from_iteration = iteration;
  run.ms.push_back(time_ms);
  if (!guard_.on || guard_stopped_ || pending_) return;
  const int n = std::max(1, guard_.iterations);
  // A plan the guard fell back to, slower than one before it: the fastest measured comes back.
  if (runs_.size() > 1 && run.ms.size() >= static_cast<size_t>(n)) {
    size_t fastest = runs_.size() - 1;
    for (size_t i = 0; i + 1 < runs_.size(); ++i)
      if (runs_[i].mean_ms() < runs_[fastest].mean_ms()) fastest = i;
    if (fastest + 1 != runs_.size()) {
      guard_stopped_ = true;
      guard_note_ = "the fastest plan measured runs again";
      pending_.emplace(runs_[fastest].plan, "it measured the fastest of the plans run");
      return;
    }
  }
  const double predicted = run.plan.predicted_ms;
  const bool over = predicted > 0 && time_ms > guard_.ratio * predicted && time_ms - predicted > guard_.min_excess_ms;
  over_ = over ? over_ + 1 : 0;
  if (over_ < n) return;
  over_ = 0;
  if (auto next = replay_fallback(run.plan.kind)) {
    char why[160];
    std::snprintf(why, sizeof why, "%s ran %.1fx its prediction of %.2f ms", run.plan.policy.name().c_str(), time_ms / predicted, predicted);
    pending_.emplace(std::move(*next), why);
  } else {
    guard_stopped_ = true;
    guard_note_ = "no rehearsed plan relies on fewer modelled costs";
  }
}

}  // namespace vtensor
