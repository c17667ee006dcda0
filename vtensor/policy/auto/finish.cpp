// The finish (AutoPolicy::choose's end): the search's fastest ends, each given the start state
// that runs it fastest over a long run (choose_start_state) and a warm start (warm_start); the
// fastest then tried in the H2D stream's issue order (need_order) and with large blocks placed
// high (placement), each kept only where it wins (finish_variant).
#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>

#include "vtensor/policy/auto/auto.h"
#include "vtensor/policy/auto/moves.h"

namespace vtensor {

using namespace auto_detail;

// The ends: the candidate as it is and each climb's, fastest first, distinct; each given its
// start state and warm start while the planning limit lasts (the first always); the fastest as it
// then runs is the plan.
void AutoPolicy::finish_ends(const RehearsalSetup& s, const std::vector<Climb>& climbs, std::chrono::steady_clock::time_point t0) {
  auto now_ms = [&] { return elapsed_ms(t0); };
  struct End {
    const RehearsalResult* r;
    double climbed_ms, start_ms;
    std::string label;
    Candidate policy;
  };
  const RehearsalResult candidate = chosen_result_;
  std::vector<End> ends{{&candidate, candidate.time_ms, start_ms_, start_, start_policy_}};
  for (const Climb& c : climbs)
    if (c.best.trained) ends.push_back({&c.best, c.climbed ? c.climbed_ms : c.best.time_ms, c.start_ms, c.label, c.start_policy});
  std::stable_sort(ends.begin(), ends.end(), [](const End& a, const End& b) { return a.r->time_ms < b.r->time_ms; });
  {
    std::vector<std::string> keys;
    std::vector<End> distinct;
    for (End& e : ends) {
      const std::string key = plan_key(e.r->policy, e.r->pins);
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      keys.push_back(key);
      distinct.push_back(std::move(e));
    }
    ends = std::move(distinct);
  }
  ends.resize(std::min(ends.size(), std::max<size_t>(1, finished_plans_)));
  record_climbs(climbs);
  search_until_ms_ = std::numeric_limits<double>::infinity();
  finished_.clear();
  std::optional<decltype(std::apply([](auto&... x) { return std::make_tuple(x...); }, finish_fields()))> kept;
  double kept_ms = 0;
  for (size_t k = 0; k < ends.size(); ++k) {
    const End& e = ends[k];
    if (k > 0 && now_ms() + kFinishRehearsals * rehearsal_ms(*e.r) > time_limit_ms_ + kSearchTimeMs) break;
    chosen_result_ = *e.r, pins_ = e.r->pins, chosen_ = e.r->policy;
    climbed_ms_ = e.climbed_ms, start_ms_ = e.start_ms, start_ = e.label, start_policy_ = e.policy;
    drifted_from_ms_ = 0, warm_ = {}, trigger_moves_.clear(), start_layout_.clear(), warm_layout_.clear();
    long_ms_ = {}, steady_ = {};
    RehearsalSetup se = s;  // the end's fallback, as its climb rehearsed it
    se.compact_unfit = compact_unfit_ = e.r->compact_unfit;
    se.min_wrap_bytes = min_wrap_bytes_ = e.r->min_wrap_bytes;
    choose_start_state(se, t0);
    warm_start(se);
    finished_.push_back({e.label, e.r->time_ms, chosen_result_.time_ms});
    if (!kept || (chosen_result_.trained && chosen_result_.time_ms < kept_ms * (1 - kMinGain)))
      kept = std::apply([](auto&... x) { return std::make_tuple(x...); }, finish_fields()), kept_ms = chosen_result_.time_ms;
  }
  if (kept) finish_fields() = *kept;
  RehearsalSetup se = s;
  se.compact_unfit = compact_unfit_;
  se.min_wrap_bytes = min_wrap_bytes_;
  need_order(se);
  placement(se);
}

// Each start's climb, for the report (in the order they started, fastest start first).
void AutoPolicy::record_climbs(const std::vector<Climb>& climbs) {
  climbs_ = nlohmann::json::array();
  for (const Climb& c : climbs)
    climbs_.push_back({{"start", c.label}, {"policy", c.start_policy.name()}, {"start_ms", c.start_ms},
                       {"first_round_ms", c.first_round_ms}, {"duplicate_of", c.duplicate_of}, {"climbed_ms", c.climbed ? c.climbed_ms : c.best.time_ms}, {"time_ms", c.best.time_ms},
                       {"rehearsals", c.done}, {"room_rehearsals", c.room_done}, {"window_rehearsals", c.window_done}, {"ended", c.ended}});
}

// The start state for the chosen plan (StartState): packed as the last iteration left it (what
// the search rehearsed), reordered, or restored to the layout the first guided iteration started
// from. Each is rehearsed for kLongRunIterations and the fastest over the guided ones runs; a
// start other than the packed one is then rehearsed again as the tables time it, for the
// prediction. The packed start's order can drift after the iterations the search rehearses; the
// reordered one makes every iteration alike but can suit a plan less; the restored one moves only
// the blocks the iteration displaced, but keeps the first layout, which can suit a plan less than
// the one packing drifts to. Where all are slower over the long run
// than the search saw (kLongRunDrift), the search's next-fastest plans (kLongRunFinalists, within
// kFinalistSlack, as many as the planning limit leaves time for) are rehearsed so too, and the
// fastest over the long run is the plan: the layout can drift under one plan and not under a
// neighbour (a plan steady for five iterations can evict hundreds of tensors in its seventh).
void AutoPolicy::choose_start_state(const RehearsalSetup& setup, std::chrono::steady_clock::time_point t0) {
  start_state_ = searched_state_ = chosen_result_.start_state;  // where no long run says otherwise
  if (!chosen_result_.trained || !rehearser_) return;
  searched_ms_ = chosen_result_.time_ms;
  finalists_.clear();
  drifted_from_ms_ = 0;
  std::vector<LongRehearsals> runs;  // the last long_runs' rehearsals
  auto spent = [&] { return elapsed_ms(t0); };
  const double before = spent();
  long_ms_ = long_runs(setup, {&chosen_result_}, runs)[0];
  steady_ = std::move(runs[0]);
  const double plan_ms = spent() - before;  // what a plan's long rehearsals take
  StartState state = fastest_start(long_ms_);
  double long_ms = long_ms_[static_cast<size_t>(state)];
  if (long_ms <= 0) return;
  if (long_ms > searched_ms_ * (1 + kLongRunDrift)) replace_drifted(setup, t0, plan_ms, state, long_ms);
  searched_state_ = chosen_result_.start_state;
  if (state == chosen_result_.start_state) {
    start_state_ = state;
    return;
  }
  // Another start than the search's is rehearsed again as the tables time it, for the prediction;
  // it runs unless it costs those iterations more than kLongRunDrift.
  RehearsalSetup s = setup;
  s.pins = pins_;
  s.time_limit_ms = 0;
  s.start_state = state;
  RehearsalResult r = rehearse_counted(chosen_, s);
  if (!r.trained || r.time_ms > chosen_result_.time_ms * (1 + kLongRunDrift)) {
    start_state_ = chosen_result_.start_state;
    return;
  }
  start_state_ = state;
  chosen_result_ = std::move(r);
}

// Each plan over kLongRunIterations from each start state (two rehearsals at a time; 0: OOM), and
// its rehearsals in `runs`.
std::vector<AutoPolicy::LongRun> AutoPolicy::long_runs(const RehearsalSetup& setup, const std::vector<const RehearsalResult*>& plans,
                                                       std::vector<LongRehearsals>& runs) {
  std::vector<LongRun> res(plans.size());
  runs.assign(plans.size(), LongRehearsals{});
  parallel(plans.size() * kStartStates, [&](size_t i) {
    RehearsalSetup s = setup;
    s.pins = plans[i / kStartStates]->pins;
    s.time_limit_ms = 0;
    s.iterations = kLongRunIterations;
    s.start_state = static_cast<StartState>(i % kStartStates);
    RehearsalResult& r = runs[i / kStartStates][i % kStartStates];
    r = rehearse_counted(plans[i / kStartStates]->policy, s);
    res[i / kStartStates][i % kStartStates] = r.trained ? r.time_ms : 0;
  });
  return res;
}

// The fastest start of a plan's long runs (kPacked where none trained).
StartState AutoPolicy::fastest_start(const LongRun& l) {
  size_t k = 0;
  for (size_t j = 1; j < kStartStates; ++j)
    if (l[j] > 0 && (l[k] <= 0 || l[j] < l[k])) k = j;
  return static_cast<StartState>(k);
}

// The plan drifts over the long run: the search's next-fastest distinct plans, over the long run
// too; the fastest there (`state`, `long_ms`) replaces it.
void AutoPolicy::replace_drifted(const RehearsalSetup& setup, std::chrono::steady_clock::time_point t0, double plan_ms, StartState& state,
                                 double& long_ms) {
  auto spent = [&] { return elapsed_ms(t0); };
  std::vector<const RehearsalResult*> near;
  for (const auto& r : searched_)
    if (r.trained && r.time_ms <= searched_ms_ * (1 + kFinalistSlack)) near.push_back(&r);
  std::stable_sort(near.begin(), near.end(), [](const auto* a, const auto* b) { return a->time_ms < b->time_ms; });
  std::vector<std::string> keys{plan_key(chosen_result_.policy, chosen_result_.pins)};
  // As many as fit in the planning limit, the prediction's rehearsal left room for.
  const double left = time_limit_ms_ + kSearchTimeMs - spent() - rehearsal_ms(chosen_result_);
  const auto fit = static_cast<size_t>(std::clamp(left / std::max(plan_ms, 1e-3), 0.0, double{kLongRunFinalists}));
  std::vector<const RehearsalResult*> pool;
  for (const RehearsalResult* r : near) {
    if (pool.size() == fit) break;
    const std::string key = plan_key(r->policy, r->pins);
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    keys.push_back(key);
    pool.push_back(r);
  }
  std::vector<LongRehearsals> runs;
  const auto res = long_runs(setup, pool, runs);
  const RehearsalResult* winner = nullptr;
  for (size_t k = 0; k < pool.size(); ++k) {
    finalists_.push_back({pool[k]->policy, pool[k]->pins.size(), pool[k]->time_ms, res[k]});
    const StartState f = fastest_start(res[k]);
    const double x = res[k][static_cast<size_t>(f)];
    if (x > 0 && x < long_ms * (1 - kMinGain)) long_ms = x, winner = pool[k], state = f, long_ms_ = res[k], steady_ = std::move(runs[k]);
  }
  if (winner) {  // what the short rehearsal of the winner said is the prediction
    drifted_from_ms_ = searched_ms_;
    chosen_result_ = *winner;
    chosen_ = chosen_result_.policy;
    pins_ = chosen_result_.pins;
  }
}

// The finish's variants of the plan as it will run (its start state and warm start), rehearsed at
// once: the fastest whose measured and guided iterations take less time in all is rehearsed
// over the long run, and kept where that does not drift (as warm_start keeps a variant); else
// the next.
int AutoPolicy::finish_variant(const RehearsalSetup& setup, const std::vector<FinishVariant>& variants, std::vector<FinishTry>& tried) {
  tried.clear();
  const RehearsalResult& steady = steady_[static_cast<size_t>(start_state_)];
  if (variants.empty() || !chosen_result_.trained || !rehearser_) return -1;
  auto rehearse = [&](const FinishVariant& v, int iterations) {
    RehearsalSetup s = setup;
    s.pins = pins_;
    s.trigger_moves = trigger_moves_;
    s.start_layout = start_layout_;
    s.start_state = start_state_;
    s.high_placement_bytes = v.high_placement;
    s.time_limit_ms = 0;
    s.iterations = iterations;
    return rehearse_counted(v.policy, s);
  };
  std::vector<RehearsalResult> res(variants.size());
  parallel(res.size(), [&](size_t i) { res[i] = rehearse(variants[i], kRehearsedIterations); });
  const double guided = kRehearsedIterations - 1;
  auto total = [&](const RehearsalResult& x) { return x.measured_ms + guided * x.time_ms; };
  std::vector<size_t> order;
  for (size_t i = 0; i < res.size(); ++i) {
    const RehearsalResult& r = res[i];
    tried.push_back({variants[i].policy, variants[i].high_placement, r.trained ? r.time_ms : 0, r.trained ? total(r) : 0});
    if (!r.trained || r.time_ms > chosen_result_.time_ms || (!start_layout_.empty() && !r.start_layout_applied)) continue;
    if (total(r) < total(chosen_result_) * (1 - kMinGain)) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return total(res[a]) < total(res[b]); });
  for (size_t i : order) {
    const RehearsalResult l = rehearse(variants[i], kLongRunIterations);
    tried[i].long_ms = l.trained ? l.time_ms : 0;
    if (!l.trained || (steady.trained && l.time_ms > steady.time_ms * (1 + kLongRunDrift))) continue;
    chosen_ = variants[i].policy;
    high_placement_ = variants[i].high_placement;
    chosen_result_ = res[i];
    return static_cast<int>(i);
  }
  return -1;
}

// The issue order: the plan made for the H2D stream's issue order, in three variants: one op's
// prefetches issued in the order their tensors are needed (",need"), the queue planned in issue
// order (",fifo": FifoLane, a prefetch charged the stall it adds to those queued after it), and
// both (finish_variant keeps the fastest). Capuchin's lane model
// puts each copy in the first gap that fits it, but the stream copies in issue order: a small
// prefetch chosen late waits behind a large one issued at the same op for a later access, and a
// prefetch issued early delays those queued after it. As starts for every candidate
// (",need" on all, ",fifo" on the fastest eight) each won on some rows and lost on more: the
// climbs then settled elsewhere (docs/experiments/auto.md).
void AutoPolicy::need_order(const RehearsalSetup& setup) {
  need_ = {};
  std::vector<FinishVariant> variants;
  for (const auto& [fifo, need] : {std::pair{false, true}, std::pair{true, false}, std::pair{true, true}}) {
    Candidate n = chosen_;
    if (n.fifo || n.need) break;
    n.fifo = fifo, n.need = need;
    if (make_candidate(n)) variants.push_back({n, high_placement_});
  }
  if (variants.empty() || !chosen_result_.trained || !rehearser_) return;
  need_ = {true, false, chosen_result_.time_ms, 0, 0, chosen_};
  const int won = finish_variant(setup, variants, need_.variants);
  if (won < 0) return;
  const FinishTry& w = need_.variants[static_cast<size_t>(won)];
  need_.won = true, need_.time_ms = w.time_ms, need_.long_ms = w.long_ms;
  const Candidate& n = w.policy;
  need_.variant = n.fifo && n.need ? "fifo,need" : n.fifo ? "fifo" : "need";
}

// The plan as it then is, with the device allocator placing the large requests high (from each
// of kHighPlacementFractions of the budget): the small blocks' holes then stay out of the large
// ones' way (else a large allocation can find enough bytes free but no block that holds it, and
// wait for swap-outs before the compaction can make one).
void AutoPolicy::placement(const RehearsalSetup& setup) {
  placement_ = {};
  if (!placement_search_ || high_placement_ > 0 || !chosen_result_.trained || !rehearser_ || setup.allocator != "caching") return;
  std::vector<FinishVariant> variants;
  for (const double f : kHighPlacementFractions) variants.push_back({chosen_, static_cast<size_t>(static_cast<double>(setup.budget) * f)});
  placement_ = {true, false, chosen_result_.time_ms};
  placement_.won = finish_variant(setup, variants, placement_.variants) >= 0;
}

// The warm start: the first guided iteration starts where the chosen plan's long rehearsal (in
// its start state) settled, not where the measured iteration left things. Two parts, each
// rehearsed with and without the other: the arena in the layout that rehearsal ended in, moved
// there at the measured iteration's end (where the arena is packed otherwise; Policy::
// take_start_layout), and the trigger moves Capuchin's feedback made there, replayed on the plan
// as it is made (TriggerMove; pinning the triggers instead re-plans the rest around them, and ran
// slower). Without it the first guided iterations pay for the switch from the measured one, and
// run slower than the later ones. A variant
// runs where the measured and guided iterations take less time in all, the guided ones no more,
// and its own long rehearsal no more than the plan's (kLongRunDrift).
void AutoPolicy::warm_start(const RehearsalSetup& setup) {
  const RehearsalResult& steady = steady_[static_cast<size_t>(start_state_)];
  if (!steady.trained || !chosen_result_.trained || !rehearser_) return;
  std::vector<TriggerMove> moves;
  for (const RehearsedGap& g : steady.gaps)
    if (!g.wrap && g.fed_back > 0) moves.push_back({g.id, g.back_op, g.fed_back});
  struct Variant {
    const char* label;
    std::vector<TriggerMove> moves;
    std::vector<LayoutBlock> layout;
  };
  std::vector<Variant> variants;
  if (!steady.end_layout.empty()) variants.push_back({"layout", {}, steady.end_layout});
  if (!moves.empty()) {
    variants.push_back({"triggers", moves, {}});
    if (!steady.end_layout.empty()) variants.push_back({"layout+triggers", moves, steady.end_layout});
  }
  if (variants.empty()) return;
  // Each as the tables time it, and over the long run (two at a time).
  std::vector<RehearsalResult> res(variants.size() * 2);
  parallel(res.size(), [&](size_t i) {
    RehearsalSetup s = setup;
    s.pins = pins_;
    s.trigger_moves = variants[i / 2].moves;
    s.start_layout = variants[i / 2].layout;
    s.time_limit_ms = 0;
    s.start_state = start_state_;
    s.iterations = i % 2 ? kLongRunIterations : kRehearsedIterations;
    res[i] = rehearse_counted(chosen_, s);
  });
  const double guided = kRehearsedIterations - 1;
  auto total = [&](const RehearsalResult& r) { return r.measured_ms + guided * r.time_ms; };
  warm_ = {};
  warm_.before_ms = chosen_result_.time_ms, warm_.before_measured_ms = chosen_result_.measured_ms;
  warm_.tried = variants.size();
  const RehearsalResult* best = &chosen_result_;
  size_t won = variants.size();
  for (size_t k = 0; k < variants.size(); ++k) {
    const RehearsalResult &r = res[2 * k], &l = res[2 * k + 1];
    if (!r.trained || !l.trained || r.time_ms > chosen_result_.time_ms) continue;
    if (!variants[k].layout.empty() && !r.start_layout_applied) continue;  // other blocks live: packed
    if (l.time_ms > steady.time_ms * (1 + kLongRunDrift)) continue;
    if (total(r) < total(*best) * (1 - kMinGain)) best = &r, won = k;
  }
  if (won == variants.size()) return;
  warm_.variant = variants[won].label;
  warm_.layout_blocks = variants[won].layout.size();
  warm_.trigger_moves = 0;
  for (const TriggerMove& m : variants[won].moves) warm_.trigger_moves += static_cast<size_t>(m.ops);
  warm_.long_ms = res[2 * won + 1].time_ms;
  trigger_moves_ = variants[won].moves;
  start_layout_ = warm_layout_ = variants[won].layout;
  chosen_result_ = *best;
}

}  // namespace vtensor
