// Policy auto's planning (AutoPolicy::choose), as a pipeline that reads top to bottom: measure the
// setup, bound the overhead and solve the LPs, rehearse the candidates and the LP's roundings,
// gather the search's starts and climb from them (starts.cpp, search.cpp), finish the fastest
// ends (finish.cpp), then install the plan.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include "vtensor/policy/auto/auto.h"
#include "vtensor/policy/auto/moves.h"
#include "vtensor/policy/compress.h"
#include "vtensor/policy/registry.h"

namespace vtensor {

using namespace auto_detail;

void AutoPolicy::choose(const AccessTrace& trace) {
  const auto t0 = std::chrono::steady_clock::now();
  start_planning_clock(t0);
  chosen_ = forced_;
  if (chosen_.empty() && rehearser_) {
    std::string no_densities;
    const RehearsalSetup s = measure_setup(trace, &no_densities);
    bound_and_lps(trace, s);
    rehearse_candidates(s, no_densities, t0);
    rehearse_lp_variants(s, t0);
    Starts st;  // outlives the climbs: they start from its rehearsals
    if (first_starts(st)) {
      gather_starts(s, st, t0);
      std::vector<Climb> climbs = climb_starts(s, st, t0);
      finish_ends(s, climbs, t0);
    }
    plan_from_rehearsed_iteration(s, trace);
  }
  install_chosen(trace);
  planning_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// What a rehearsal needs from the run: on sim the run's own GPU model, off sim the measurement
// (kernel times, link, workspaces); the densities the compression candidates are sized with, and
// the codecs' rate (`no_densities`: why those candidates are not rehearsed, where they are not).
RehearsalSetup AutoPolicy::measure_setup(const AccessTrace& trace, std::string* no_densities) {
  RehearsalSetup s;
  s.graph = &view_->graph();
  s.budget = view_->budget();
  s.gpu = view_->modelled_gpu();
  s.allocator = view_->allocator_name();
  s.host_budget = view_->host_budget();
  if (const auto* ms = view_->modelled_op_ms()) s.op_ms = *ms;  // on sim, the op times the run charges
  if (s.gpu.empty()) {  // not on sim: model the measurement
    s.gpu = kRehearsalGpu;
    if (trace.op_ms.size() == view_->graph().num_ops()) s.op_ms = trace.op_ms;
    s.link_ms_per_byte = trace.swap_ns_per_byte > 0 ? trace.swap_ns_per_byte * 1e-6 : view_->copy_ms_per_byte();
    // Queued copies each add their call and start (the bytes alone put a queue of many small
    // copies at a small fraction of its wait).
    if (queued_copies_) s.copy_queued_ms = view_->copy_queued_ms();
    link_ms_per_byte_ = s.link_ms_per_byte, copy_queued_ms_ = s.copy_queued_ms;
    copy_latency_ms_ = view_->copy_latency_ms();
    // and the device's workspaces (cuDNN's on cuda, far above the op's own figures), so that a
    // plan that fits the rehearsal fits the device
    for (const Op& op : view_->graph().ops()) {
      s.workspace.push_back(view_->device_workspace_bytes(op, ConvAlgo::kFast));
      s.workspace_lean.push_back(view_->device_workspace_bytes(op, ConvAlgo::kLean));
    }
  }
  if (counts_nonzeros()) densities_ = measured_densities(no_densities);
  s.densities = densities_;
  std::vector<double> op_ns;
  for (double ms : trace.op_ms) op_ns.push_back(ms * 1e6);
  relu_ns_per_byte_ = element_ns_per_byte_ = element_ns_per_byte(view_->graph(), op_ns);
  // Off sim the codec's own time where the memory manager measured it, not a model of it (the
  // modelled GPU's bandwidth can put a slow codec kernel's milliseconds at microseconds).
  codec_rate_ = view_->modelled_gpu().empty() && densities_ ? view_->codec_rate() : std::nullopt;
  if (codec_rate_) {
    s.codec_latency_ms = codec_rate_->latency_ms, s.codec_ms_per_byte = codec_rate_->ms_per_byte;
    element_ns_per_byte_ = codec_rate_->ms_per_byte * 1e6;
  }
  return s;
}

// What no swap / recompute plan avoids, from the same measurement (the report's "bound"), and the
// LPs over the iteration, whose rounded optima are more starts for the search.
void AutoPolicy::bound_and_lps(const AccessTrace& trace, const RehearsalSetup& s) {
  PlannerInput in = planner_input(view_->graph(), trace, s.budget);
  if (in.swap_ns_per_byte <= 0) in.swap_ns_per_byte = s.link_ms_per_byte * 1e6;
  const auto b0 = std::chrono::steady_clock::now();
  bound_ = overhead_bound(in);
  bound_wall_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - b0).count();
  solve_lps(in);
  round_lps();
}

// The bound's LP, and beside it (another core; no integer program) the in-flight model or the LP
// that also compresses (where the densities are known), for the starts.
void AutoPolicy::solve_lps(const PlannerInput& in) {
  LpOptions lo;
  lo.time_limit_s = lp_seconds_;
  lo.integer_time_limit_s = ilp_seconds_;
  lp_in_flight_ = {};
  lp_compress_ = {};
  std::thread flight;
  std::exception_ptr flight_error;
  // A compressible output with its count (none in a model without ReLU / max-pool), and LP starts to round from it
  // (the second LP gives starts only).
  bool codecs = false;
  for (size_t id = 0; id < nonzeros_.size() && densities_ && element_ns_per_byte_ > 0 && search_rehearsals_ > 0 && lp_rehearsals_count_ > 0; ++id)
    codecs = codecs || (nonzeros_[id] && compressible(view_->graph(), static_cast<TensorId>(id)));
  if (lp_model_ != LpModel::kBound && (lp_model_ != LpModel::kCompress || codecs))
    flight = std::thread([&] {
      try {
        LpOptions lf = lo;
        lf.integer_time_limit_s = 0;
        if (lp_model_ == LpModel::kCompress) {
          const Graph& g = view_->graph();
          lf.codec = [&](TensorId id, int evict_op) -> std::optional<LpCodec> {
            const auto c = codec_of_gap(g, id, evict_op, nonzeros_, element_ns_per_byte_);
            if (!c) return std::nullopt;
            return LpCodec{c->codec, c->capacity, c->codec_ns};
          };
          lp_compress_ = solve_lp(in, lf);
        } else {
          lf.in_flight_on_device = true;
          lp_in_flight_ = solve_lp(in, lf);
        }
      } catch (...) {
        flight_error = std::current_exception();
      }
    });
  try {
    lp_ = solve_lp(in, lo);
  } catch (...) {
    if (flight.joinable()) flight.join();
    throw;
  }
  if (flight.joinable()) flight.join();
  if (flight_error) std::rethrow_exception(flight_error);
}

// The LPs rounded (lp_variants_): the bound's unless in-flight only, the in-flight one's where it
// has an optimum (its rows may cover no op where a gap's copies take a segment each way).
void AutoPolicy::round_lps() {
  struct Source {
    const LpResult* lp;
    bool in_flight, compress;
  };
  std::vector<Source> sources;
  const bool flight_ok = lp_in_flight_.status == "optimal";
  if (lp_model_ != LpModel::kInFlight || !flight_ok) sources.push_back({&lp_, false, false});
  if (lp_model_ != LpModel::kBound && flight_ok) sources.push_back({&lp_in_flight_, true, false});
  if (lp_compress_.status == "optimal") sources.push_back({&lp_compress_, false, true});
  // The rounded plans: at each threshold, with Capuchin's prefetch triggers, with the LP's
  // prefetch times and with those moved earlier for the whole tensor, then the last with
  // the swaps capped at the LP's bytes, and the recomputations alone (the same pins once).
  lp_variants_.clear();
  struct Rounding { LpTiming timing; bool capped, recompute_only; };
  for (const auto& [src, in_flight, compress] : sources)
    for (const double th : kLpThresholds)
      for (const Rounding& k : {Rounding{LpTiming::kPlanner, false, false}, Rounding{LpTiming::kLp, false, false},
                                Rounding{LpTiming::kWhole, false, false}, Rounding{LpTiming::kWhole, true, false},
                                Rounding{LpTiming::kPlanner, false, true}}) {
        LpVariant v{lp_pins(*src, th, k.timing, k.capped, k.recompute_only), th, k.timing, k.capped, k.recompute_only};
        v.in_flight = in_flight;
        v.compress = compress;
        bool seen = v.pins.empty();
        for (const auto& w : lp_variants_) seen = seen || w.pins == v.pins;
        if (!seen) lp_variants_.push_back(std::move(v));
      }
  // The integer program's plan (each gap whole already), with the same three timings.
  if (!lp_.integer.gaps.empty()) {
    LpResult ir = lp_;
    ir.gaps = lp_.integer.gaps;
    for (const LpTiming timing : {LpTiming::kPlanner, LpTiming::kLp, LpTiming::kWhole}) {
      LpVariant v{lp_pins(ir, 0.5, timing), 0.5, timing, false, false, true};
      bool seen = v.pins.empty();
      for (const auto& w : lp_variants_) seen = seen || w.pins == v.pins;
      if (!seen) lp_variants_.push_back(std::move(v));
    }
  }
}

// The candidates: the planners as they are first, then the search's variants while the time limit
// lasts; the rehearsals are independent (each its own sim backend and memory manager): a few at a time.
void AutoPolicy::rehearse_candidates(const RehearsalSetup& s, const std::string& no_densities, std::chrono::steady_clock::time_point t0) {
  rehearsals_.clear();
  rehearsals_.assign(candidates_.size(), {});
  parallel(candidates_.size(), [&](size_t i) {
    const double spent = elapsed_ms(t0, i);
    if (spent > time_limit_ms_ && i > 0) {
      rehearsals_[i].policy = candidates_[i];
      rehearsals_[i].error = "not rehearsed: planning time limit";
      return;
    }
    if (candidates_[i].compresses() && !s.densities) {
      rehearsals_[i].policy = candidates_[i];
      rehearsals_[i].error = no_densities;
      return;
    }
    RehearsalSetup si = s;
    // What is left of the limit; the first (Capuchin's hybrid, the fallback) runs to its end.
    si.time_limit_ms = i == 0 ? 0 : std::max(1.0, time_limit_ms_ - spent);
    rehearsals_[i] = rehearse_counted(candidates_[i], si);
  });
  // The fastest swapping Capuchin plans again, with their persistent tensors also swapped across
  // the iteration boundary: a choice of the whole plan (it frees memory everywhere the greedy
  // then plans around), so it is rehearsed on the best few rather than on all.
  std::vector<size_t> order;
  for (size_t i = 0; i < rehearsals_.size(); ++i)
    if (rehearsals_[i].trained && with_wrap_swaps(rehearsals_[i].policy)) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rehearsals_[a].time_ms < rehearsals_[b].time_ms; });
  order.resize(std::min(order.size(), kWrapCandidates));
  const size_t first_wrap = rehearsals_.size();
  for (size_t i : order) rehearsals_.push_back({.policy = *with_wrap_swaps(rehearsals_[i].policy)});
  parallel(rehearsals_.size() - first_wrap, [&](size_t j) {
    auto& r = rehearsals_[first_wrap + j];
    const double spent = elapsed_ms(t0, j);
    if (spent > time_limit_ms_) {
      r.error = "not rehearsed: planning time limit";
      return;
    }
    RehearsalSetup si = s;
    si.time_limit_ms = std::max(1.0, time_limit_ms_ - spent);
    r = rehearse_counted(r.policy, si);
  });
}

// The LP's rounded plans, pinned on the fastest Capuchin-based candidates without and with wrap
// swaps: more starts for the search (the greedy plans what the pins leave).
void AutoPolicy::rehearse_lp_variants(const RehearsalSetup& s, std::chrono::steady_clock::time_point t0) {
  lp_rehearsals_.clear();
  lp_variant_of_.clear();
  if (!lp_variants_.empty() && search_rehearsals_ > 0 && lp_rehearsals_count_ > 0) {
    std::vector<const RehearsalResult*> plain, wrapped;
    for (const auto& r : rehearsals_)
      if (r.trained && !r.gaps.empty()) (r.policy.wrap ? wrapped : plain).push_back(&r);
    auto faster = [](const RehearsalResult* a, const RehearsalResult* b) { return a->time_ms < b->time_ms; };
    std::stable_sort(plain.begin(), plain.end(), faster);
    std::stable_sort(wrapped.begin(), wrapped.end(), faster);
    std::vector<Candidate> bases;
    for (size_t i = 0; i < plain.size() && i < kLpStarts; ++i) bases.push_back(plain[i]->policy);
    if (!wrapped.empty()) bases.push_back(wrapped[0]->policy);
    bases.resize(std::min(bases.size(), static_cast<size_t>(lp_rehearsals_count_)));
    lp_rehearsals_.resize(bases.size() * lp_variants_.size());
    for (size_t j = 0; j < lp_rehearsals_.size(); ++j) lp_variant_of_.push_back(j / std::max<size_t>(1, bases.size()));
    parallel(lp_rehearsals_.size(), [&](size_t j) {
      auto& r = lp_rehearsals_[j];
      const Candidate& base = bases[j % bases.size()];
      r.policy = base;
      const double spent = elapsed_ms(t0, j);
      if (spent > time_limit_ms_) {
        r.error = "not rehearsed: planning time limit";
        return;
      }
      RehearsalSetup si = s;
      si.pins = lp_variants_[lp_variant_of_[j]].pins;
      si.time_limit_ms = std::max(1.0, time_limit_ms_ - spent);
      r = rehearse_counted(base, si);
    });
  }
}

// Off sim the plan is made from the rehearsal's record of the measured iteration, as every
// rehearsal made it, not from the clock's: the two differ in the last bits of the times, and a
// plan made from the clock's could wrap-swap other tensors than the warm layout was rehearsed
// with (the measured iteration's end then left another arena, and the layout was not taken).
void AutoPolicy::plan_from_rehearsed_iteration(const RehearsalSetup& s, const AccessTrace& trace) {
  if (view_->modelled_gpu().empty() && !chosen_.empty()) {
    RehearsalSetup m = s;
    m.measured_only = true;
    const RehearsalResult mr = rehearse_counted(chosen_, m);
    if (mr.measured_trace && use_sequence(*mr.measured_trace) == use_sequence(trace)) planned_from_ = mr.measured_trace;
  }
}

// The chosen plan made and installed (Capuchin's hybrid where nothing was rehearsed), and the
// replay guard's first run.
void AutoPolicy::install_chosen(const AccessTrace& trace) {
  if (chosen_.empty()) chosen_ = Candidate{"capuchin"};
  if (chosen_.dtr) fallback_ = make_policy("dtr");
  if (chosen_ == Candidate{"capuchin"}) {  // the measuring hybrid as it is
    static_cast<CapuchinPolicy&>(*measuring_).set_pins(pins_);
    static_cast<CapuchinPolicy&>(*measuring_).set_trigger_moves(trigger_moves_);
    static_cast<CapuchinPolicy&>(*measuring_).set_compact_unfit(compact_unfit_);
    static_cast<CapuchinPolicy&>(*measuring_).set_min_wrap_bytes(min_wrap_bytes_);
    measuring_->end_iteration(planned_from_ ? *planned_from_ : trace);  // it measured this iteration: it plans from it
    active_ = std::move(measuring_);
  }
  // The chosen plan as it runs: the replay guard's first.
  PlanSpec chosen = spec_of(chosen_result_);
  chosen.policy = chosen_, chosen.pins = pins_, chosen.trigger_moves = trigger_moves_, chosen.compact_unfit = compact_unfit_;
  chosen.min_wrap_bytes = min_wrap_bytes_, chosen.start_state = start_state_, chosen.high_placement = high_placement_;
  if (!active_) active_ = planned_policy(chosen, planned_from_ ? *planned_from_ : trace);
  runs_.clear(), pending_.reset(), over_ = 0, guard_stopped_ = false, guard_note_.clear();
  if (forced_.empty() && chosen_result_.trained && chosen_result_.time_ms > 0) {
    measured_trace_ = planned_from_ ? planned_from_ : std::make_shared<const AccessTrace>(trace);
    runs_.push_back({chosen, -1, {}, "chosen"});
  }
  saved_layout_ = start_layout_;
}

std::string AutoPolicy::LpVariant::label() const {
  std::string s = timing == LpTiming::kLp ? "lp-timed" : timing == LpTiming::kWhole ? "lp-whole" : "lp";
  if (in_flight) s.insert(2, "f");  // "lpf", "lpf-timed", ...: the in-flight LP's (--auto-lp-model)
  if (compress) s.insert(2, "c");   // "lpc", "lpc-timed", ...: the compressing LP's
  if (integer) return "i" + s;  // "ilp", "ilp-timed", "ilp-whole"
  if (recompute_only) s += "-rec";
  if (capped) s += "-capped";
  if (threshold != kLpThresholds[0]) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "@%g", threshold);
    s += buf;
  }
  return s;
}

}  // namespace vtensor
