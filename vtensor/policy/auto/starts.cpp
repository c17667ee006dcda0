// The search's starts and climbs (AutoPolicy::choose's middle): the fastest candidates and LP
// roundings, each refined (headroom, weight), then each again with the D2H queue in the other
// order, a restored start state, the compacting fallback and large wrap swaps only, where that
// rehearses otherwise; then every start climbs (search.cpp) for a first round, and the lowest go on.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "vtensor/policy/auto/auto.h"
#include "vtensor/policy/auto/moves.h"

namespace vtensor {

using namespace auto_detail;

// The search's first starts: the fastest plan without wrap swaps (st.best, also the plan so far;
// false: none trained), the fastest with them (st.other) and the fastest rehearsal of each of the
// LP's rounded plans (st.lp_best). The search keeps the fastest end: where a climb ends depends on
// where it starts more than on the start's own time (the timed pins rehearse slower where their
// prefetches crowd the memory, yet their climb can end lower).
bool AutoPolicy::first_starts(Starts& st) {
  const RehearsalResult*& best = st.best;
  const RehearsalResult*& other = st.other;
  std::vector<const RehearsalResult*>& lp_best = st.lp_best;
  lp_best.assign(lp_variants_.size(), nullptr);
  for (const auto& r : rehearsals_) {
    if (r.trained && !r.policy.wrap && (!best || r.time_ms < best->time_ms)) best = &r;
    if (r.trained && r.policy.wrap && (!other || r.time_ms < other->time_ms)) other = &r;
  }
  for (size_t j = 0; j < lp_rehearsals_.size(); ++j) {
    const RehearsalResult& r = lp_rehearsals_[j];
    const RehearsalResult*& x = lp_best[lp_variant_of_[j]];
    if (r.trained && !r.gaps.empty() && (!x || r.time_ms < x->time_ms)) x = &r;
  }
  // Both LPs: each rounding's start is the faster of its two rehearsals (as many starts as one
  // LP gives, so the climbs' shares stay).
  for (size_t v = 0; v < lp_variants_.size(); ++v)
    for (size_t w = 0; w < lp_variants_.size(); ++w) {
      const LpVariant &a = lp_variants_[v], &b = lp_variants_[w];
      if (!(a.in_flight && !b.in_flight && a.threshold == b.threshold && a.timing == b.timing && a.capped == b.capped &&
            a.recompute_only == b.recompute_only && !a.integer && !b.integer && lp_best[v] && lp_best[w]))
        continue;
      (lp_best[v]->time_ms < lp_best[w]->time_ms ? lp_best[w] : lp_best[v]) = nullptr;
    }
  if (!best) std::swap(best, other);
  if (best && other && other->time_ms < best->time_ms && (best->gaps.empty() || search_rehearsals_ == 0))
    best = other, other = nullptr;  // no search from the first: the faster start is the plan
  if (other && other->gaps.empty()) other = nullptr;
  if (!best) return false;
  chosen_ = best->policy;
  chosen_result_ = *best;
  pins_ = best->pins;
  start_ms_ = best->time_ms, start_ = "candidate", start_policy_ = best->policy;
  // Each start is climbed with an equal share of what the planning limit leaves (a share one
  // leaves unused goes to the next), fastest start first; the fastest end is kept.
  if (!best->gaps.empty()) st.starts.push_back(best);
  if (other) st.starts.push_back(other);
  for (const RehearsalResult* r : lp_best)
    if (r) st.starts.push_back(r);
  // The start state's and the warm start's rehearsals come out of the search's time.
  start_state_reserve_ms_ =
      (kStartStateRehearsals + kWarmStartRehearsals + static_cast<double>(std::max<size_t>(1, finished_plans_) - 1) * kFinishRehearsals) *
      rehearsal_ms(*best);
  wall_reserve_ms_ = start_state_reserve_ms_;
  return true;
}

// The rest of the starts, each kind from the ones before it.
void AutoPolicy::gather_starts(const RehearsalSetup& s, Starts& st, std::chrono::steady_clock::time_point t0) {
  add_headroom_starts(s, st, t0);
  add_edf_starts(s, st, t0);
  add_restored_starts(s, st, t0);
  add_compact_starts(s, st, t0);
  add_large_wrap_starts(s, st, t0);
}

// The two candidates' headroom refined: each planned for a little more or less of the
// budget; the fastest, where it beats its candidate, is one more start (not instead: the
// climb's end depends on its start more than on the start's own time).
void AutoPolicy::add_headroom_starts(const RehearsalSetup& s, Starts& st, std::chrono::steady_clock::time_point t0) {
  std::vector<const RehearsalResult*>& starts = st.starts;
  headroom_rehearsals_.clear();
  for (const RehearsalResult* r : {st.best, st.other}) {
    if (!r || r->gaps.empty()) continue;
    std::vector<Candidate> variants;
    for (const double d : kStartHeadroomSteps)
      if (auto f = with_fraction(r->policy, r->policy.plan_fraction() + d)) variants.push_back(*f);
    for (const double m : kStartWeightFactors)
      if (auto f = with_weight(r->policy, r->policy.swap_weight() * m)) variants.push_back(*f);
    std::vector<RehearsalResult> res(variants.size());
    parallel(variants.size(), [&](size_t i) {
      RehearsalSetup si = s;
      si.pins = r->pins;
      const double spent = elapsed_ms(t0, i);
      si.time_limit_ms = std::max(1.0, search_limit_ms() - spent);
      res[i] = rehearse_counted(variants[i], si);
    });
    const RehearsalResult* fastest = nullptr;
    for (const auto& x : res)
      if (x.trained && !x.gaps.empty() && x.time_ms < r->time_ms && (!fastest || x.time_ms < fastest->time_ms)) fastest = &x;
    if (fastest) headroom_rehearsals_.push_back(*fastest);
  }
  for (const auto& x : headroom_rehearsals_) starts.push_back(&x);
  std::vector<std::string>& labels = st.labels;  // what each start is, for the report
  for (const RehearsalResult* r : starts) {
    std::string l = "candidate";
    for (size_t v = 0; v < st.lp_best.size(); ++v)
      if (r == st.lp_best[v]) l = lp_variants_[v].label();
    for (const auto& h : headroom_rehearsals_)
      if (r == &h) l = "headroom";
    labels.push_back(l);
  }
}

// Each start with its D2H queue in the other order (deadline or eviction order, the same
// pins): where that is faster, one more start. Neither order wins everywhere (a swap-out
// that goes ahead delays the ones it passes, which then hold their blocks longer), and a
// faster start need not climb lower, so it does not replace its origin.
void AutoPolicy::add_edf_starts(const RehearsalSetup& s, Starts& st, std::chrono::steady_clock::time_point t0) {
  std::vector<const RehearsalResult*>& starts = st.starts;
  std::vector<RehearsalResult>& edf_rehearsals = st.edf;
  edf_rehearsals.resize(starts.size());
  parallel(starts.size(), [&](size_t i) {
    const auto name = with_edf_toggled(starts[i]->policy);
    if (!name) return;
    RehearsalSetup si = s;
    si.pins = starts[i]->pins;
    const double spent = elapsed_ms(t0, i);
    si.time_limit_ms = std::max(1.0, search_limit_ms() - spent);
    edf_rehearsals[i] = rehearse_counted(*name, si);
  });
  edf_starts_.clear();
  for (size_t i = 0, n = starts.size(); i < n; ++i) {
    const auto& x = edf_rehearsals[i];
    if (!(x.trained && !x.gaps.empty() && x.time_ms < starts[i]->time_ms * (1 - kMinGain))) continue;
    edf_starts_.push_back({x.policy, x.time_ms, starts[i]->time_ms});
    starts.push_back(&x), st.labels.push_back(st.labels[i]);
  }
}

// Each start with a restored start state (StartState::kRestored; the search rehearses
// packed ones): one more start, whose climb rehearses restored ones. A plan suits one start
// state or the other (packing can move several times the blocks the restore does), so the choice
// is made before the climb, and not only where the restored start is faster: a restored start
// that was slower can climb lower.
void AutoPolicy::add_restored_starts(const RehearsalSetup& s, Starts& st, std::chrono::steady_clock::time_point t0) {
  st.packed = st.starts.size();
  std::vector<size_t> packed(st.packed);
  for (size_t i = 0; i < st.packed; ++i) packed[i] = i;
  st.restored = rehearse_twins(s, st, packed, [](RehearsalSetup& x) { x.start_state = StartState::kRestored; }, t0);
  restored_starts_ = 0;
  duplicate_climbs_ = 0;
  for (size_t i = 0, n = st.starts.size(); i < n; ++i) {
    const auto& x = st.restored[i];
    if (!x.trained || x.gaps.empty()) continue;
    ++restored_starts_;
    st.starts.push_back(&x), st.labels.push_back(st.labels[i] + ",restored");
  }
}

// The starts `origins` rehearsed again, all at once, each as it was rehearsed (pins, start
// state, fallback, wrap floor) but for the one setting `vary` changes.
std::vector<RehearsalResult> AutoPolicy::rehearse_twins(const RehearsalSetup& s, const Starts& st, const std::vector<size_t>& origins,
                                                       const std::function<void(RehearsalSetup&)>& vary,
                                                       std::chrono::steady_clock::time_point t0) {
  std::vector<RehearsalResult> res(origins.size());
  parallel(origins.size(), [&](size_t i) {
    const RehearsalResult& o = *st.starts[origins[i]];
    RehearsalSetup si = s;
    si.pins = o.pins, si.start_state = o.start_state, si.compact_unfit = o.compact_unfit, si.min_wrap_bytes = o.min_wrap_bytes;
    vary(si);
    const double spent = elapsed_ms(t0, i);
    si.time_limit_ms = std::max(1.0, search_limit_ms() - spent);
    res[i] = rehearse_counted(o.policy, si);
  });
  return res;
}

// Each packed start again with the other fallback where its plan does not fit
// (compact_unfit: compact within the budget, evict the shortfall over it): one more start
// where that rehearses another time. Which fallback wins depends on the model and budget and
// shows only after the climb: evicting the whole request can stall far longer, yet a start that
// compacts can climb to a slower plan (the evictions within the budget made room for prefetches).
// Not the restored starts too: their twins climbed as the packed ones' did, in half the time.
void AutoPolicy::add_compact_starts(const RehearsalSetup& s, Starts& st, std::chrono::steady_clock::time_point t0) {
  std::vector<size_t> packed(st.packed);
  for (size_t i = 0; i < st.packed; ++i) packed[i] = i;
  st.compact = rehearse_twins(s, st, compact_starts_on_ ? packed : std::vector<size_t>{}, [](RehearsalSetup& x) { x.compact_unfit = true; }, t0);
  compact_starts_ = 0;
  for (size_t i = 0; i < st.compact.size(); ++i) {
    const auto& x = st.compact[i];
    if (!x.trained || x.gaps.empty() || std::abs(x.time_ms - st.starts[i]->time_ms) <= kMinGain * st.starts[i]->time_ms) continue;
    ++compact_starts_;
    st.starts.push_back(&x), st.labels.push_back(st.labels[i] + ",compact");
  }
}

// The kLargeWrapStarts fastest packed starts (or their compacting twins) whose plans swap a
// persistent tensor under a floor over the iteration's end (min_wrap_fraction_ of the
// budget), again with the greedy leaving those on the device (CapuchinPolicy::
// set_min_wrap_bytes): where that rehearses faster, one more start. The small ones free next
// to nothing and their copies queue behind the large ones (a tiny running mean's swap-out can
// hold its release op for milliseconds), but they are not always waste (without them some plans
// run slower). Few, as a model whose rehearsals are slow has no time left to climb.
void AutoPolicy::add_large_wrap_starts(const RehearsalSetup& s, Starts& st, std::chrono::steady_clock::time_point t0) {
  const std::vector<const RehearsalResult*>& starts = st.starts;
  const size_t packed_starts = st.packed;
  const auto min_wrap = static_cast<size_t>(static_cast<double>(s.budget) * min_wrap_fraction_);
  std::vector<size_t> wrap_origins;
  for (size_t i = 0; i < starts.size(); ++i) {
    if (!large_wrap_starts_on_ || (i >= packed_starts && i < packed_starts + restored_starts_) || !starts[i]->policy.wrap) continue;
    const auto& gaps = starts[i]->gaps;
    if (std::any_of(gaps.begin(), gaps.end(), [&](const RehearsedGap& x) { return x.wrap && x.decision == CapuchinDecision::kSwap && x.bytes < min_wrap; }))
      wrap_origins.push_back(i);
  }
  std::stable_sort(wrap_origins.begin(), wrap_origins.end(), [&](size_t a, size_t b) { return starts[a]->time_ms < starts[b]->time_ms; });
  wrap_origins.resize(std::min(wrap_origins.size(), kLargeWrapStarts));
  st.large_wrap = rehearse_twins(s, st, wrap_origins, [&](RehearsalSetup& x) { x.min_wrap_bytes = min_wrap; }, t0);
  large_wrap_starts_ = 0;
  for (size_t i = 0; i < st.large_wrap.size(); ++i) {
    const auto& x = st.large_wrap[i];
    if (!(x.trained && !x.gaps.empty() && x.time_ms < starts[wrap_origins[i]]->time_ms * (1 - kMinGain))) continue;
    ++large_wrap_starts_;
    st.starts.push_back(&x), st.labels.push_back(st.labels[wrap_origins[i]] + ",large-wraps");
  }
}

// Every start climbed (search), fastest start first: first each for first_round_rehearsals_
// rehearsals (within kFirstRoundShare of the time); then the kResumedClimbs lowest so far go on
// where they paused, then the rest: where a climb ends depends on where it starts, and its first
// rounds say more about that than the start's own time.
std::vector<AutoPolicy::Climb> AutoPolicy::climb_starts(const RehearsalSetup& s, const Starts& st, std::chrono::steady_clock::time_point t0) {
  const std::vector<const RehearsalResult*>& starts = st.starts;
  std::vector<size_t> order(starts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return starts[a]->time_ms < starts[b]->time_ms; });
  const double limit = search_limit_ms();
  auto now_ms = [&] { return elapsed_ms(t0); };
  std::vector<Climb> climbs;
  for (size_t i : order) {
    Climb c;
    c.best = *starts[i];
    c.label = st.labels[i], c.start_ms = starts[i]->time_ms, c.start_policy = starts[i]->policy;
    climbs.push_back(std::move(c));
  }
  // Each of `which` in turn until `until`, the first `shares` of them with an equal share of
  // the time (a share one leaves unused goes to the next; the rest get what is left).
  auto climb = [&](const std::vector<size_t>& which, double until, size_t shares) {
    for (size_t k = 0; k < which.size(); ++k) {
      const double spent = now_ms();
      const size_t n = std::max<size_t>(1, std::min(shares, which.size()) - std::min(k, shares - 1));
      search_until_ms_ = spent + std::max(0.0, until - spent) / static_cast<double>(n);
      search(s, climbs[which[k]], t0);
    }
  };
  if (search_rehearsals_ == 0 || climbs.empty()) return climbs;
  std::vector<size_t> all(climbs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const double spent = now_ms();
  const bool rounds = first_round_rehearsals_ > 0;
  for (Climb& c : climbs)
    if (rounds) c.pause_at = first_round_rehearsals_;
  climb(all, rounds ? spent + std::max(0.0, limit - spent) * kFirstRoundShare : limit, all.size());
  std::vector<size_t> open;
  for (size_t i : all) {
    climbs[i].first_round_ms = climbs[i].best.time_ms;
    climbs[i].pause_at = std::numeric_limits<int>::max();
    if (!climbs[i].ended && climbs[i].best.trained) open.push_back(i);
  }
  std::stable_sort(open.begin(), open.end(), [&](size_t a, size_t b) { return climbs[a].best.time_ms < climbs[b].best.time_ms; });
  // A climb whose first round ended on the same plan in the same time as one ahead of it (a
  // restored start's twin, mostly: the start state made no difference to that plan) would
  // rehearse the same moves again: it does not go on.
  std::vector<size_t> resumed;
  for (size_t i : open) {
    const Climb& c = climbs[i];
    const auto same = std::find_if(resumed.begin(), resumed.end(), [&](size_t j) {
      return climbs[j].best.time_ms == c.best.time_ms && climbs[j].best.policy == c.best.policy && climbs[j].best.pins == c.best.pins;
    });
    if (same == resumed.end()) resumed.push_back(i);
    else climbs[i].duplicate_of = climbs[*same].label, ++duplicate_climbs_;
  }
  climb(resumed, limit, kResumedClimbs);
  return climbs;
}

}  // namespace vtensor
