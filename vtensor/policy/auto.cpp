#include "vtensor/policy/auto.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "vtensor/policy/capuchin.h"
#include "vtensor/policy/checkpoint.h"
#include "vtensor/policy/registry.h"

namespace vtensor {

namespace {

// The sim model a rehearsal of a cpu / cuda run uses for what the measurement does not give
// (compaction moves at HBM bandwidth); kernel times and the link come from the measurement.
constexpr const char* kRehearsalGpu = "h100-80g";

std::unique_ptr<Policy> make_candidate(const std::string& name) {
  auto p = make_policy(name);
  if (auto* c = dynamic_cast<CheckpointPolicy*>(p.get())) c->set_budget_aware(true);
  return p;
}

}  // namespace

const std::vector<std::string>& auto_candidates() {
  static const std::vector<std::string> names = {"capuchin",   "capuchin-recompute", "capuchin-swap",
                                                 "checkpoint", "dtr",                "lru-recompute"};
  return names;
}

AutoPolicy::AutoPolicy(std::string forced)
    : forced_(std::move(forced)), candidates_(auto_candidates()),
      measuring_(std::make_unique<CapuchinPolicy>(CapuchinMode::kHybrid)), dtr_(make_policy("dtr")) {

  if (!forced_.empty()) {
    bool known = false;
    for (const auto& c : candidates_) known = known || c == forced_;
    if (!known) {
      std::string accepted;
      for (const auto& c : candidates_) accepted += (accepted.empty() ? "" : ", ") + c;
      throw std::invalid_argument("auto: unknown candidate '" + forced_ + "'; accepted: " + accepted);
    }
  }
}

AutoPolicy::~AutoPolicy() = default;

void AutoPolicy::attach(const MemoryView& view) {
  view_ = &view;
  measuring_->attach(view);
}

void AutoPolicy::begin_iteration(int iteration) { current().begin_iteration(iteration); }
std::vector<ConvAlgo> AutoPolicy::conv_algorithms() const { return current().conv_algorithms(); }
std::vector<Action> AutoPolicy::after_op(int op_index) { return current().after_op(op_index); }
std::vector<Victim> AutoPolicy::choose_victims(size_t bytes, const MemoryView& view) {
  // Measuring: DTR's eviction (drops, recomputed on access; parameters swapped last), which
  // leaves the arena as DTR's own first iteration does.
  return active_ ? active_->choose_victims(bytes, view) : dtr_->choose_victims(bytes, view);
}
void AutoPolicy::on_restore(TensorId id, int op_index, Residency from, double waited_ms) {
  current().on_restore(id, op_index, from, waited_ms);
}
std::optional<size_t> AutoPolicy::smallest_working_budget() const { return current().smallest_working_budget(); }

void AutoPolicy::end_iteration(const AccessTrace& trace) {
  if (active_) {
    active_->end_iteration(trace);
    return;
  }
  if (!view_) throw std::logic_error("auto: end_iteration before attach");
  choose(trace);
}

void AutoPolicy::choose(const AccessTrace& trace) {
  const auto t0 = std::chrono::steady_clock::now();
  chosen_ = forced_;
  if (chosen_.empty() && rehearser_) {
    RehearsalSetup s;
    s.graph = &view_->graph();
    s.budget = view_->budget();
    s.gpu = view_->modelled_gpu();
    if (s.gpu.empty()) {  // not on sim: model the measurement
      s.gpu = kRehearsalGpu;
      if (trace.op_ms.size() == view_->graph().num_ops()) s.op_ms = trace.op_ms;
      s.link_ms_per_byte = trace.swap_ns_per_byte > 0 ? trace.swap_ns_per_byte * 1e-6 : view_->copy_ms_per_byte();
    }
    rehearsals_.clear();
    const RehearsalResult* best = nullptr;
    for (const auto& c : candidates_) rehearsals_.push_back(rehearser_(c, s));
    for (const auto& r : rehearsals_)
      if (r.trained && (!best || r.time_ms < best->time_ms)) best = &r;
    if (best) chosen_ = best->policy;
  }
  if (chosen_.empty()) chosen_ = "capuchin";
  if (chosen_ == "capuchin") {
    measuring_->end_iteration(trace);  // it measured this iteration: it plans from it
    active_ = std::move(measuring_);
  } else if (chosen_ == "dtr") {
    active_ = std::move(dtr_);  // it evicted in this iteration: the same instance goes on
  } else {
    active_ = make_candidate(chosen_);
    active_->attach(*view_);
    active_->end_iteration(trace);  // a measuring planner plans from it; the others ignore it
  }
  planning_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json AutoPolicy::report() const {
  using nlohmann::json;
  json cands = json::array();
  for (const auto& r : rehearsals_) {
    json c = {{"policy", r.policy}, {"trained", r.trained}, {"rehearsal_wall_ms", r.wall_ms}};
    if (r.trained) {
      c["predicted_time_ms"] = r.time_ms;
      c["predicted_peak_bytes"] = r.peak_allocated;
      c["predicted_stall_ms"] = r.stall_ms;
      c["predicted_recompute_ms"] = r.recompute_ms;
      c["predicted_compactions"] = r.compactions;
      c["predicted_evictions"] = r.evictions;
      c["predicted_swapped_out_bytes"] = r.swapped_out_bytes;
      c["predicted_recomputed_ops"] = r.recomputed_ops;
    } else {
      c["error"] = r.error;
    }
    cands.push_back(c);
  }
  json out = {{"mode", "auto"}, {"chosen", chosen_}, {"forced", !forced_.empty()}, {"planning_ms", planning_ms_},
              {"candidates", cands}};
  for (const auto& r : rehearsals_)
    if (r.policy == chosen_ && r.trained) {
      out["predicted_time_ms"] = r.time_ms;
      out["predicted_peak_bytes"] = r.peak_allocated;
    }
  out["plan"] = current().report();
  return out;
}

std::string AutoPolicy::summary() const {
  std::string s = "auto: ";
  if (chosen_.empty()) return s + "measuring";
  s += "chose " + chosen_;
  if (!rehearsals_.empty()) {
    s += " of";
    for (const auto& r : rehearsals_) {
      char buf[96];
      if (r.trained)
        std::snprintf(buf, sizeof buf, " %s %.2f ms;", r.policy.c_str(), r.time_ms);
      else
        std::snprintf(buf, sizeof buf, " %s OOM;", r.policy.c_str());
      s += buf;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, " planned in %.0f ms", planning_ms_);
    s += buf;
  }
  const std::string inner = current().summary();
  if (!inner.empty()) s += "\n  " + inner;
  return s;
}

}  // namespace vtensor
