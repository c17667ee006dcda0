// Policy auto's report (the run report's policy_report) and its one-paragraph summary: what was
// rehearsed and chosen, the search, the finish, the bounds and the LPs, the planning clock.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "vtensor/core/errors.h"
#include "vtensor/policy/auto/auto.h"

namespace vtensor {

namespace {

// A rehearsal's figures, as the report names them.
void add_prediction(nlohmann::json& j, const RehearsalResult& r) {
  j["predicted_time_ms"] = r.time_ms;
  j["predicted_peak_bytes"] = r.peak_allocated;
  j["predicted_stall_ms"] = r.stall_ms;
  j["predicted_recompute_ms"] = r.recompute_ms;
  j["predicted_compactions"] = r.compactions;
  j["predicted_compaction_ms"] = r.compact_ms;
  j["predicted_evictions"] = r.evictions;
  j["predicted_swapped_out_bytes"] = r.swapped_out_bytes;
  j["predicted_recomputed_ops"] = r.recomputed_ops;
}

// The finish's rehearsed variants, for the report (null times: not trained / no long run).
nlohmann::json tries_json(const std::vector<AutoPolicy::FinishTry>& tries) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& t : tries)
    a.push_back({{"policy", t.policy.name()}, {"high_from_bytes", t.high_placement},
                 {"time_ms", t.time_ms > 0 ? nlohmann::json(t.time_ms) : nlohmann::json(nullptr)},
                 {"total_ms", t.total_ms > 0 ? nlohmann::json(t.total_ms) : nlohmann::json(nullptr)},
                 {"long_ms", t.long_ms > 0 ? nlohmann::json(t.long_ms) : nlohmann::json(nullptr)}});
  return a;
}

}  // namespace

nlohmann::json AutoPolicy::report() const {
  using nlohmann::json;
  json cands = json::array();
  for (const auto& r : rehearsals_) {
    json c = {{"policy", r.policy.name()}, {"trained", r.trained}, {"rehearsal_wall_ms", r.wall_ms}};
    if (r.trained) {
      add_prediction(c, r);
    } else {
      c["error"] = r.error;
    }
    cands.push_back(c);
  }
  json pins = json::array();
  for (const auto& p : pins_) pins.push_back(to_string(p));
  json out = {{"mode", "auto"}, {"chosen", chosen_.name()}, {"forced", !forced_.empty()}, {"planning_ms", planning_ms_},
              {"candidates", cands}, {"pins", pins}};
  report_clock(out);
  // What the plan was made from: the measured iteration as the clock recorded it (on sim the same
  // as the rehearsals'), or off sim as the rehearsals recorded it (choose).
  out["planned_from"] = !loaded_from_.empty() ? "plan file" : planned_from_ ? "rehearsed measured iteration" : "measured iteration";
  // The plan as data: `--auto-plan` runs it again without the search (load_plan).
  out["saved_plan"] = saved_plan();
  if (!loaded_from_.empty())
    out["plan_file"] = {{"path", loaded_from_}, {"made_on", loaded_.value("made_on", json(nullptr))},
                        {"predicted_ms", loaded_.value("predicted_ms", json(nullptr))}};
  // What a codec call was planned to cost: measured on the backend (off sim, where compression
  // candidates run), else the modelled GPU's memory bandwidth in the rehearsals and the ReLU
  // ops' rate in the planners.
  out["codec_rate"] = {{"source", codec_rate_ ? "measured" : "modelled"},
                       {"latency_ms", codec_rate_ ? json(codec_rate_->latency_ms) : json(nullptr)},
                       {"ns_per_byte", codec_rate_ ? json(codec_rate_->ms_per_byte * 1e6) : json(nullptr)},
                       {"probe_bytes", codec_rate_ ? json(codec_rate_->probe_bytes) : json(nullptr)},
                       {"relu_ns_per_byte", relu_ns_per_byte_}};
  // What the rehearsals charged a host<->device copy off sim (on sim the run's own link model):
  // the measured rate per byte, and what each copy adds queued behind others.
  out["link"] = {{"source", link_ms_per_byte_ > 0 ? "measured" : "modelled"},
                 {"ns_per_byte", link_ms_per_byte_ > 0 ? json(link_ms_per_byte_ * 1e6) : json(nullptr)},
                 {"queued_copy_ms", link_ms_per_byte_ > 0 ? json(copy_queued_ms_) : json(nullptr)},
                 {"lone_copy_ms", link_ms_per_byte_ > 0 ? json(copy_latency_ms_) : json(nullptr)},
                 {"queued_copies", queued_copies_}};
  report_guard(out);
  // The fallback where a plan does not fit (CapuchinPolicy::set_compact_unfit): what runs, and
  // the starts the search climbed with compact_unfit.
  out["unfit_fallback"] = {{"mode", compact_unfit_ ? "compact" : "evict"}, {"compact_starts", compact_starts_}};
  // The smallest persistent tensor the plan's greedy swaps over the iteration's end (0: any), and
  // the ",large-wraps" starts the search climbed.
  out["wrap_swaps"] = {{"min_bytes", min_wrap_bytes_}, {"large_wrap_starts", large_wrap_starts_}};
  if (chosen_result_.trained) add_prediction(out, chosen_result_);
  report_search(out);
  report_finish(out);
  report_lp(out);
  out["plan"] = current().report();
  return out;
}

// What the planning limits were counted against (set_planning_clock), and how much of it the
// plan took: on the rehearsals clock the same on every run.
void AutoPolicy::report_clock(nlohmann::json& out) const {
  using nlohmann::json;
  out["planning_clock"] = {{"mode", clock_ == PlanningClock::kWall ? "wall" : "rehearsals"},
                           {"rehearsed_iterations", rehearsed_iterations_.load()},
                           {"iteration_ms", iteration_ms_}, {"workers", kClockWorkers},
                           {"clock_ms", static_cast<double>(clock_ns_.load()) * 1e-6 / kClockWorkers},
                           {"charged_ms", static_cast<double>(charged_ns_.load()) * 1e-6 / kClockWorkers},
                           {"charged", {{"recomputed_ops", charged_recomputes_.load()},
                                        {"compactions", charged_compactions_.load()},
                                        {"evictions", charged_evictions_.load()},
                                        {"graph_ops", view_ ? view_->graph().num_ops() : 0},
                                        {"graph_tensors", view_ ? view_->graph().num_tensors() : 0}}},
                           {"rehearsals_wall_ms", static_cast<double>(rehearsals_wall_us_.load()) * 1e-3},
                           {"net_cuts", clock_net_cuts_.load()},
                           {"wall_cap_ms", clock_ == PlanningClock::kWall ? 0.0 : std::max(0.0, wall_cap_ms())},
                           {"wall_capped", wall_capped_.load()}};
}

// The replay guard (on_iteration_time): each plan that ran, its prediction and what it measured.
void AutoPolicy::report_guard(nlohmann::json& out) const {
  using nlohmann::json;
  json runs = json::array();
  for (const PlanRun& r : runs_) {
    const double mean = r.mean_ms();
    runs.push_back({{"policy", r.plan.policy.name()}, {"pins", r.plan.pins.size()}, {"kind", to_string(r.plan.kind)},
                    {"why", r.why}, {"predicted_ms", r.plan.predicted_ms}, {"from_iteration", r.from_iteration},
                    {"iterations", r.ms.size()}, {"mean_ms", r.ms.empty() ? json(nullptr) : json(mean)},
                    {"ratio", r.ms.empty() || !(r.plan.predicted_ms > 0) ? json(nullptr) : json(mean / r.plan.predicted_ms)}});
  }
  out["replay_guard"] = {{"on", guard_.on}, {"ratio", guard_.ratio}, {"min_excess_ms", guard_.min_excess_ms},
                         {"iterations", guard_.iterations}, {"fell_back", runs_.size() > 1}, {"runs", runs},
                         {"stopped", guard_stopped_}, {"note", guard_note_}};
}

// The search: its rehearsals and moves, where it started and climbed to, its starts and climbs,
// and the finished ends.
void AutoPolicy::report_search(nlohmann::json& out) const {
  using nlohmann::json;
  if (searched_.empty() && rehearsals_.empty()) return;
  double base = start_ms_;  // where the search started: a candidate, or the LP's pins on one
  int trained = 0;
  double wall = 0;
  for (const auto& r : searched_) trained += r.trained, wall += r.wall_ms;
  json tried = json::array();  // each move as rehearsed on the best plan of its round
  for (size_t i = 0; i < searched_.size() && i < searched_moves_.size(); ++i)
    tried.push_back({searched_moves_[i], searched_[i].trained ? json(searched_[i].time_ms) : json(nullptr)});
  out["search"] = {{"rehearsals", searched_.size()}, {"trained", trained}, {"rehearsal_wall_ms", wall},
                   {"candidate_time_ms", base}, {"start", start_}, {"start_policy", start_policy_.name()}, {"pins", pins_.size()},
                   {"time_ms", searched_ms_ > 0 ? searched_ms_ : chosen_result_.trained ? chosen_result_.time_ms : base},
                   {"tried", tried}};
  // The window search's share: where the climb ended, and the windows after it.
  out["search"]["climbed_time_ms"] = climbed_ms_ > 0 ? climbed_ms_ : out["search"]["time_ms"].get<double>();
  out["search"]["window"] = {{"windows", windows_}, {"rehearsals", window_tried_}};
  out["search"]["room"] = {{"rehearsals", room_tried_}, {"won", room_won_}};  // the climb's "make room" moves
  json headroom = json::array();  // the refined-headroom starts: the fastest of each candidate's
  for (const auto& h : headroom_rehearsals_) headroom.push_back({{"policy", h.policy.name()}, {"time_ms", h.time_ms}});
  out["search"]["headroom_starts"] = headroom;
  json edf = json::array();  // starts faster with the D2H queue in the other order (one more start each)
  for (const auto& e : edf_starts_) edf.push_back({{"policy", e.policy.name()}, {"time_ms", e.time_ms}, {"from_ms", e.start_ms}});
  out["search"]["edf_starts"] = edf;
  out["search"]["restored_starts"] = restored_starts_;  // starts also climbed restored
  out["search"]["duplicate_climbs"] = duplicate_climbs_;  // climbs not resumed (Climb::duplicate_of)
  out["search"]["start_state"] = to_string(searched_state_);  // the start state the winning climb rehearsed
  out["search"]["climbs"] = climbs_;  // in the order they started, fastest start first
  json fin = json::array();  // the fastest ends, each with its start state and warm start (the fastest runs)
  for (const auto& f : finished_) fin.push_back({{"start", f.start}, {"searched_ms", f.searched_ms}, {"time_ms", f.time_ms}});
  out["search"]["finished"] = fin;
}

// The finish: the start state (and the finalists where the plan drifted), the issue order, the
// placement and the warm start.
void AutoPolicy::report_finish(nlohmann::json& out) const {
  using nlohmann::json;
  if (long_ms_[0] > 0 || long_ms_[1] > 0 || long_ms_[2] > 0) {
    // The start state: each over kLongRunIterations (mean of the guided ones; null: OOM).
    auto runs = [](json& o, const LongRun& l) {
      for (size_t k = 0; k < kStartStates; ++k)
        o[std::string(to_string(static_cast<StartState>(k))) + "_ms"] = l[k] > 0 ? json(l[k]) : json(nullptr);
    };
    out["start_state"] = {{"state", to_string(start_state_)}, {"iterations", kLongRunIterations}};
    runs(out["start_state"], long_ms_);
    // Where the searched plan drifted: the next-fastest plans over the long run, and whether one
    // replaced it (replaced_ms: the searched plan's time in the search).
    json fin = json::array();
    for (const auto& f : finalists_) {
      json o = {{"policy", f.policy.name()}, {"pins", f.pins}, {"time_ms", f.time_ms}};
      runs(o, f.long_ms);
      fin.push_back(o);
    }
    out["start_state"]["finalists"] = fin;
    out["start_state"]["replaced_ms"] = drifted_from_ms_ > 0 ? json(drifted_from_ms_) : json(nullptr);
  }
  if (need_.tried)  // the issue order (need_order): the plan's time as searched, and the variant that won
    out["need_order"] = {{"won", need_.won}, {"variant", need_.won ? json(need_.variant) : json(nullptr)},
                         {"searched_policy", need_.before_policy.name()}, {"searched_ms", need_.before_ms},
                         {"time_ms", need_.time_ms > 0 ? json(need_.time_ms) : json(nullptr)},
                         {"long_ms", need_.long_ms > 0 ? json(need_.long_ms) : json(nullptr)}, {"tried", tries_json(need_.variants)}};
  // The device allocator's placement (placement): the size from which requests go high (0: none),
  // and the rehearsal that decided it.
  out["placement"] = {{"high_from_bytes", high_placement_}};
  if (placement_.tried) out["placement"].update({{"won", placement_.won}, {"searched_ms", placement_.before_ms}, {"tried", tries_json(placement_.variants)}});
  if (warm_.tried > 0) {  // the warm start (warm_start): what ran, and the plan's times without it
    out["warm_start"] = {{"variants", warm_.tried}, {"variant", warm_.variant.empty() ? json(nullptr) : json(warm_.variant)},
                         {"layout_blocks", warm_.layout_blocks}, {"trigger_moves", warm_.trigger_moves},
                         {"cold_ms", warm_.before_ms}, {"cold_measured_ms", warm_.before_measured_ms},
                         {"long_ms", warm_.variant.empty() ? json(nullptr) : json(warm_.long_ms)}};
  }
}

// The two lower bounds: the bound's (bound.h) and the LP's optimum, with the LP starts' rehearsals.
void AutoPolicy::report_lp(nlohmann::json& out) const {
  using nlohmann::json;
  if (bound_.compute_ms > 0) {
    const auto& b = bound_;
    out["bound"] = {{"compute_ms", b.compute_ms}, {"feasible", b.feasible}, {"binds", b.binds}, {"op", b.op},
                    {"over_bytes", b.over_bytes}, {"swap_bytes", b.swap_bytes}, {"recompute_bytes", b.recompute_bytes},
                    {"free_bytes", b.free_bytes}, {"ops_evaluated", b.ops_evaluated}, {"wall_ms", bound_wall_ms_}};
    out["bound"]["overhead_ms"] = b.feasible ? json(b.overhead_ms) : json(nullptr);
    out["bound"]["time_ms"] = b.feasible ? json(b.compute_ms + b.overhead_ms) : json(nullptr);
  }
  if (lp_.status != "not run") {
    const auto& l = lp_;
    json reh = json::array();
    for (size_t i = 0; i < lp_rehearsals_.size(); ++i) {
      const RehearsalResult& r = lp_rehearsals_[i];
      json c = {{"policy", r.policy.name()}, {"trained", r.trained}, {"rehearsal_wall_ms", r.wall_ms},
                {"variant", i < lp_variant_of_.size() ? lp_variants_[lp_variant_of_[i]].label() : ""}};
      if (r.trained)
        add_prediction(c, r);
      else
        c["error"] = r.error;
      reh.push_back(c);
    }
    out["lp"] = {{"status", l.status}, {"bound", l.bound}, {"compute_ms", l.compute_ms},
                 {"recompute_ms", l.recompute_ms}, {"stall_ms", l.stall_ms}, {"swapped_bytes", l.swapped_bytes},
                 {"recomputed_bytes", l.recomputed_bytes}, {"segments", l.segments}, {"columns", l.columns},
                 {"rows", l.rows}, {"nonzeros", l.nonzeros}, {"constrained_ops", l.constrained_ops},
                 {"iterations", l.iterations}, {"wall_ms", l.wall_ms}, {"pins", lp_variants_.empty() ? 0 : lp_variants_[0].pins.size()}, {"threshold", kLpThresholds[0]}, {"rehearsals", reh}};
    out["lp"]["model"] = lp_model_ == LpModel::kBound      ? "bound"
                         : lp_model_ == LpModel::kInFlight ? "in-flight"
                         : lp_model_ == LpModel::kBoth     ? "both"
                                                           : "compress";
    if (lp_model_ == LpModel::kCompress) {  // "not run" without the densities
      const auto& c = lp_compress_;
      out["lp"]["compress"] = {{"status", c.status}, {"overhead_ms", std::isfinite(c.overhead_ms) ? json(c.overhead_ms) : json(nullptr)},
                               {"recompute_ms", c.recompute_ms}, {"swapped_bytes", c.swapped_bytes},
                               {"recomputed_bytes", c.recomputed_bytes}, {"compressed_bytes", c.compressed_bytes},
                               {"iterations", c.iterations}, {"wall_ms", c.wall_ms}};
      int pins = 0;  // the compressions its first rounding pins
      for (const auto& p : lp_pins(c, kLpThresholds[0])) pins += p.decision == CapuchinDecision::kCompress;
      out["lp"]["compress"]["compress_pins"] = pins;
    } else if (lp_model_ != LpModel::kBound) {
      const auto& f = lp_in_flight_;
      out["lp"]["in_flight"] = {{"status", f.status}, {"overhead_ms", std::isfinite(f.overhead_ms) ? json(f.overhead_ms) : json(nullptr)},
                                {"recompute_ms", f.recompute_ms}, {"swapped_bytes", f.swapped_bytes},
                                {"recomputed_bytes", f.recomputed_bytes}, {"iterations", f.iterations}, {"wall_ms", f.wall_ms}};
    }
    const bool finite = l.bound && std::isfinite(l.overhead_ms);
    out["lp"]["overhead_ms"] = finite ? json(l.overhead_ms) : json(nullptr);
    out["lp"]["time_ms"] = finite ? json(l.compute_ms + l.overhead_ms) : json(nullptr);
    if (l.integer.status != "not run") {
      const auto& ip = l.integer;
      const bool found = std::isfinite(ip.overhead_ms);
      out["lp"]["integer"] = {{"status", ip.status}, {"overhead_ms", found ? json(ip.overhead_ms) : json(nullptr)},
                              {"bound_ms", ip.bound_ms}, {"integer_columns", ip.integer_columns},
                              {"fixed_gaps", ip.fixed_gaps}, {"gaps", ip.gaps.size()}, {"wall_ms", ip.wall_ms},
                              {"time_limit_s", ilp_seconds_}};
    }
  }
}

const char* to_string(AutoPolicy::PlanKind k) {
  switch (k) {
    case AutoPolicy::PlanKind::kRecompute: return "recompute";
    case AutoPolicy::PlanKind::kSwap: return "swap";
    case AutoPolicy::PlanKind::kCompress: return "compress";
  }
  return "?";
}

std::string AutoPolicy::summary() const {
  std::string s = "auto: ";
  if (chosen_.empty()) return s + "measuring";
  char buf[320];
  s += "chose " + chosen_.name();
  if (!loaded_from_.empty()) {
    const nlohmann::json predicted = loaded_.value("predicted_ms", nlohmann::json(nullptr));
    s += ", the plan in " + loaded_from_ + " (" + std::to_string(pins_.size()) + " pins";
    if (predicted.is_number()) {
      const nlohmann::json made = loaded_.value("made_on", nlohmann::json(nullptr));
      const std::string gpu = made.is_object() && made.value("gpu", nlohmann::json(nullptr)).is_string()
                                  ? "on sim " + made["gpu"].get<std::string>()
                                  : "off sim";
      std::snprintf(buf, sizeof buf, "; %.2f ms predicted where it was made, %s", predicted.get<double>(), gpu.c_str());
      s += buf;
    }
    s += "), no search";
  }
  if (chosen_result_.trained && chosen_result_.time_ms > 0) {
    std::snprintf(buf, sizeof buf, ", %.2f ms predicted per iteration (stall %.2f ms, recompute %.2f ms, compaction %.2f ms)",
                  chosen_result_.time_ms, chosen_result_.stall_ms, chosen_result_.recompute_ms, chosen_result_.compact_ms);
    s += buf;
    if (bound_.compute_ms > 0) {
      std::snprintf(buf, sizeof buf, ", %.3fx the measured kernels' %.2f ms", chosen_result_.time_ms / bound_.compute_ms, bound_.compute_ms);
      s += buf;
    }
  }
  // The replay guard's plans, each from the iteration it ran from.
  for (size_t i = 1; i < runs_.size(); ++i) {
    std::snprintf(buf, sizeof buf, "\n  replay guard: %s from iteration %d (%s plan, %.2f ms predicted, %.2f ms measured) because %s",
                  runs_[i].plan.policy.name().c_str(), runs_[i].from_iteration, to_string(runs_[i].plan.kind), runs_[i].plan.predicted_ms,
                  runs_[i].mean_ms(), runs_[i].why.c_str());
    s += buf;
  }
  if (!rehearsals_.empty()) s += summary_rehearsals();
  const std::string inner = current().summary();
  if (!inner.empty()) s += "\n  " + inner;
  return s;
}

// The candidates (how many trained, and the fastest few: all of them are in the report), the
// search, the plan's fallbacks and placement, the planning time, and the bounds.
std::string AutoPolicy::summary_rehearsals() const {
  std::string s;
  char buf[320];
  std::vector<const RehearsalResult*> trained;
  size_t oom = 0, skipped = 0;
  for (const auto& r : rehearsals_) {
    if (r.trained) trained.push_back(&r);
    else if (r.error.rfind("not rehearsed", 0) == 0) ++skipped;
    else ++oom;
  }
  std::stable_sort(trained.begin(), trained.end(), [](const RehearsalResult* a, const RehearsalResult* b) { return a->time_ms < b->time_ms; });
  std::snprintf(buf, sizeof buf, "\n  candidates: %zu rehearsed, %zu trained, %zu out of memory, %zu skipped at the time limit",
                rehearsals_.size(), trained.size(), oom, skipped);
  s += buf;
  for (size_t i = 0; i < trained.size() && i < kSummaryCandidates; ++i) {
    std::snprintf(buf, sizeof buf, "%s %s %.2f ms", i == 0 ? "; fastest:" : ",", trained[i]->policy.name().c_str(), trained[i]->time_ms);
    s += buf;
  }
  if (trained.size() > kSummaryCandidates) s += " (all: the report's policy_report.candidates)";
  s += "\n  ";
  if (!searched_.empty()) {
    std::snprintf(buf, sizeof buf, "per-gap search: %zu rehearsals, %zu decisions pinned, %.2f ms; ", searched_.size(),
                  pins_.size(), chosen_result_.time_ms);
    s += buf;
  }
  if (compact_unfit_) s += "fallback where the plan does not fit: compact; ";
  if (min_wrap_bytes_ > 0) s += "wrap swaps of " + std::to_string(min_wrap_bytes_) + " B or more unless pinned; ";
  if (high_placement_ > 0) s += "blocks of " + format_bytes(high_placement_) + " or more placed high; ";
  std::snprintf(buf, sizeof buf, "planned in %.1f s", planning_ms_ / 1e3);
  s += buf;
  if (wall_capped_)
    s += " (cut at the wall cap of " + format_number(wall_cap_ms() / 1e3) + " s: this plan depends on the machine's speed)";
  const std::string bounds = summary_bounds();
  if (!bounds.empty()) s += "\n  " + bounds;
  return s;
}

// The lower bounds: the bound's, the LP's, and the integer program's (empty: none).
std::string AutoPolicy::summary_bounds() const {
  char buf[320];
  std::string bounds;
  if (bound_.compute_ms > 0 && !bound_.feasible) {
    bounds = "bound: no keep / swap / recompute plan fits (working set)";
  } else if (bound_.compute_ms > 0) {
    std::snprintf(buf, sizeof buf, "bound: no keep / swap / recompute plan below %.2f ms (%.3fx the kernels; %s)",
                  bound_.compute_ms + bound_.overhead_ms, 1 + bound_.overhead_ms / bound_.compute_ms, bound_.binds.c_str());
    bounds = buf;
  }
  if (lp_.bound && std::isfinite(lp_.overhead_ms) && lp_.compute_ms > 0) {
    std::snprintf(buf, sizeof buf, "%sLP bound %.2f ms (%.3fx)", bounds.empty() ? "" : "; ", lp_.compute_ms + lp_.overhead_ms,
                  1 + lp_.overhead_ms / lp_.compute_ms);
    bounds += buf;
  }
  if (lp_.integer.status != "not run" && lp_.compute_ms > 0) {
    if (std::isfinite(lp_.integer.overhead_ms))
      std::snprintf(buf, sizeof buf, "%sinteger program %.2f ms (%s, %.1f s)", bounds.empty() ? "" : "; ",
                    lp_.compute_ms + lp_.integer.overhead_ms, lp_.integer.status.c_str(), lp_.integer.wall_ms * 1e-3);
    else
      std::snprintf(buf, sizeof buf, "%sinteger program: %s (%.1f s)", bounds.empty() ? "" : "; ", lp_.integer.status.c_str(),
                    lp_.integer.wall_ms * 1e-3);
    bounds += buf;
  }
  return bounds;
}

}  // namespace vtensor
