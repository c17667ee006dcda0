#include "vtensor/policy/auto/options.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "vtensor/core/input.h"
#include "vtensor/policy/auto/auto.h"

namespace vtensor {

const std::vector<PolicyOption>& auto_options() {
  static const std::vector<PolicyOption> options = {
      {"auto-search",
       "policy auto: rehearsals of its per-gap search (0: none; default 256, then 128 with compression moves where densities are known)"},
      {"auto-window",
       "policy auto: rehearsals of its window search after the per-gap climb (0: none; default 256)"},
      {"auto-room",
       "policy auto: rehearsals of its \"make room\" moves after each climb, a swap's prefetch earlier with a kept tensor over the new window recomputed or swapped (0: none; default 144)"},
      {"auto-lp",
       "policy auto: the fastest candidates its linear program's rounded plans (untimed and timed) are rehearsed on, each plan's fastest a start for its search (0: none, the LP still bounds; default 3)"},
      {"auto-lp-model",
       "policy auto: the linear programs its LP starts are rounded from: compress (the bound's, and one that may also keep ReLU / max-pool outputs compressed where the densities are known; default), bound (the lower bound's alone, a copy in flight counted off the device), in-flight (a copy holds its bytes on the device until it ends; the bound stays the first's) or both (bound and in-flight; each rounding's faster rehearsal is the start)"},
      {"auto-ilp",
       "policy auto: seconds for its integer program over the LP's fractional gaps (COIN-OR Cbc), whose plan is one more start for its search (0: none; default 0)"},
      {"auto-seconds",
       "policy auto: seconds its candidates' rehearsals may take, its search then 1.3 s more (default 8; at most 600)"},
      {"auto-placement",
       "policy auto: the device allocator's placement, search (its finish also rehearses the plan with requests of 2, 5 or 10% of the budget or more placed high, and keeps the fastest; default) or low (never)"},
      {"auto-clock",
       "policy auto: what its planning limits count: rehearsals (default: each rehearsal a fixed time from "
       "the model's op count and what it recomputed, compacted and evicted, a rehearsal cut only when 20x slower than "
       "counted: the same plan on every run and machine, "
       "whatever its speed or load, unless planning reaches --auto-wall-cap) or "
       "wall (seconds of this machine's time)"},
      {"auto-wall-cap",
       "policy auto, on the rehearsals clock: seconds of wall time after which planning stops as if its limits were "
       "reached, so that a slow or loaded machine still plans in about that time (the plan then depends on the machine; "
       "the report's planning_clock.wall_capped); 0: none, the same plan on every run and machine (default: the limits "
       "+ 0.2 s, 9.5 s; VTENSOR_AUTO_WALL_CAP=SECONDS sets the default)"},
      {"auto-replay-guard",
       "policy auto: on (default): where two guided iterations in a row each run over 2x the plan's prediction and 10 ms above it, the fastest rehearsed plan that relies on fewer modelled costs runs instead (compress, then swap, then recompute only; the report's replay_guard); off: the chosen plan runs to the end"},
      {"auto-codec-rate",
       "policy auto, off sim: measured (default: the memory manager times the backend's bitmask codec before the first iteration, and the plan charges each codec call that latency and rate; the report's codec_rate) or modelled (the modelled GPU's memory bandwidth in the rehearsals, the measured ReLU ops' rate in the planners)"},
      {"auto-copy-cost",
       "policy auto, off sim: queued (default: each copy in the rehearsals costs its bytes at the measured link rate plus what one more copy queued behind others added in the memory manager's calibration; the report's link) or bytes (its bytes alone)"},
      {"auto-candidates",
       "policy auto: the candidates it rehearses, comma-separated (default: all; e.g. compress+capuchin,compress+swap; `vtensor policies` names the planners)"},
      {"auto-plan",
       "policy auto: run the plan an earlier run made (its --report, which holds it as policy_report.saved_plan) after "
       "the measured iteration, without the search; the graph and the budget must be those it was made for", true},
  };
  return options;
}

namespace {

// VTENSOR_AUTO_WALL_CAP: the wall cap's default where --auto-wall-cap is not given (bench/run.py
// sets 0 so that its tables reproduce); negative: unset.
double wall_cap_from_env() {
  const char* v = std::getenv("VTENSOR_AUTO_WALL_CAP");
  if (!v || !*v) return -1;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s >= 0 && s <= 600))
    throw std::invalid_argument(std::string("VTENSOR_AUTO_WALL_CAP must be seconds in [0, 600] (0: no wall cap), got '") + v + "'");
  return s;
}

// What only the search reads: refused beside --auto-plan, which runs a saved plan without one.
void check_plan_without_search(const PolicyOptions& o) {
  if (!o.given("auto-plan")) return;
  for (const auto& opt : auto_options())
    if (opt.flag != "auto-plan" && opt.flag != "auto-replay-guard" && o.given(opt.flag))
      throw std::invalid_argument("--" + opt.flag + " sets auto's search; --auto-plan runs a saved plan without one");
}

}  // namespace

std::unique_ptr<Policy> make_auto_policy(const PolicyOptions& o) {
  check_plan_without_search(o);
  auto a = std::make_unique<AutoPolicy>();
  if (const auto n = o.rehearsals("auto-search", "no per-gap search")) a->set_search_rehearsals(*n);
  if (const auto n = o.rehearsals("auto-window", "no window search")) a->set_window_rehearsals(*n);
  if (const auto n = o.rehearsals("auto-room", "no make-room moves")) a->set_room_rehearsals(*n);
  if (const auto n = o.rehearsals("auto-lp", "no LP starts")) a->set_lp_rehearsals(*n);
  if (const auto m = o.choice("auto-lp-model", {"bound", "in-flight", "both", "compress"}))
    a->set_lp_model(*m == "both"        ? AutoPolicy::LpModel::kBoth
                    : *m == "in-flight" ? AutoPolicy::LpModel::kInFlight
                    : *m == "compress"  ? AutoPolicy::LpModel::kCompress
                                        : AutoPolicy::LpModel::kBound);
  if (const auto s = o.seconds("auto-ilp", 0, 60, false, "no integer program")) a->set_ilp_seconds(*s);
  if (const auto s = o.seconds("auto-seconds", 0, 600, true)) a->set_time_limit_ms(*s * 1e3);
  if (const auto p = o.choice("auto-placement", {"search", "low"})) a->set_placement_search(*p == "search");
  if (const auto c = o.choice("auto-clock", {"wall", "rehearsals"}))
    a->set_planning_clock(*c == "rehearsals" ? AutoPolicy::PlanningClock::kRehearsals : AutoPolicy::PlanningClock::kWall);
  const double cap = o.seconds("auto-wall-cap", 0, 600, false, "no wall cap").value_or(wall_cap_from_env());
  if (cap >= 0) a->set_wall_cap_ms(cap * 1e3);
  if (o.choice("auto-replay-guard", {"on", "off"}) == "off") {
    AutoPolicy::ReplayGuard g;
    g.on = false;
    a->set_replay_guard(g);
  }
  if (o.choice("auto-codec-rate", {"measured", "modelled"}) == "modelled") a->set_measure_codecs(false);
  if (o.choice("auto-copy-cost", {"queued", "bytes"}) == "bytes") a->set_queued_copies(false);
  if (const auto names = o.list("auto-candidates"); !names.empty()) {
    std::vector<Candidate> c;
    for (const std::string& name : names) {
      const auto k = Candidate::parse(name);
      if (!k) throw std::invalid_argument("--auto-candidates: " + unknown_candidate_message(name));
      c.push_back(*k);
    }
    a->set_candidates(std::move(c));
  }
  if (const auto path = o.text("auto-plan")) {
    try {
      a->set_plan_file(read_json(*path, "'" + *path + "'"), *path);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--auto-plan: ") + e.what());
    }
  }
  return a;
}

void AutoPolicy::prepare(const Graph& graph, size_t budget, bool sim_without_densities) {
  if (plan_source_.empty()) return;  // a file holding JSON null is no plan either: load_plan says so
  load_plan(plan_file_, graph, budget, plan_source_);
  if (loaded_plan_compresses() && sim_without_densities)
    throw std::invalid_argument("--auto-plan '" + plan_source_ + "': the plan compresses (" + forced().name() +
                                "), which on --backend sim needs --densities FILE, the non-zero counts it was made with");
}

}  // namespace vtensor
