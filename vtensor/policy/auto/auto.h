// auto (ours): keep / swap / recompute / compress chosen per access gap, each choice
// costed by its effect on the whole iteration (queues, compute stream, arena), not alone.
//   Measured iteration: passive (LRU swap on OOM, parameters last), every access and kernel timed.
//   Candidates (auto_candidates()): the planners as they are (Capuchin's modes, checkpointing,
//   DTR, lru-recompute), Capuchin for 85-97% of the budget, its swap stall weighed 0.25-16x or
//   DTR's eviction as its fallback, FreeLunch's compress+capuchin / compress+swap where densities
//   are known, and the fastest swapping plans with weights and momentum swapped across the
//   iteration boundary (",wrap"). Each is rehearsed on the sim backend's model of the measured
//   iteration (the run's memory manager, caching allocator, copy queues and compute stream, the
//   measured kernel times and link); out of memory discards it.
//   Search: from the fastest candidates and from the rounded optima of a linear program over the
//   iteration (lp.h), hill climbing over PlanPins (capuchin.h), one gap's decision per move, each
//   neighbour rehearsed with Capuchin's greedy planning the rest; then "make room" moves and an
//   exhaustive window over the costliest gaps. The fastest ends are finished (start state, warm
//   start, H2D issue order, large blocks placed high) and the fastest is the plan. The limits
//   count rehearsals, so the plan does not depend on the machine (wall cap 9.5 s). The report
//   adds two lower bounds (bound.h; the LP's optimum). A replay guard hands over to a plan that
//   relies on fewer modelled costs where guided iterations run far over the prediction.
// Deviations from the issue: an LP rounded, then local and windowed search with the rehearsal as
// the cost model, not an ILP / DP (a gap's cost depends on the queues and arena the rest leaves;
// the integer program is built but off: it bought under 1%); arena placement is one choice for
// the run, not per block (the planned pool ran slower under it). Without a Rehearser (set by the
// Trainer) it runs Capuchin's hybrid. Full notes: docs/design.md, "vtensor/policy/auto.h".
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "vtensor/memory/policy.h"
#include "vtensor/policy/bound.h"
#include "vtensor/policy/capuchin.h"
#include "vtensor/policy/lp.h"

namespace vtensor {

// The iterations a rehearsal runs by default: the measured one and three guided ones (as the
// benchmarks run).
constexpr int kRehearsedIterations = 4;
// The iterations the chosen plan is rehearsed for with each start state: a drift that only shows
// after the fourth iteration decides too.
constexpr int kLongRunIterations = 10;
// Where the chosen plan's long run is slower than the search saw (by more than kLongRunDrift),
// the fastest other plans the search rehearsed (at most kLongRunFinalists, distinct, within
// kFinalistSlack of its time, as many as the planning limit leaves time for) are rehearsed over
// the long run too, and the fastest there runs.
constexpr double kLongRunDrift = 0.01;
constexpr int kLongRunFinalists = 2;
constexpr double kFinalistSlack = 0.02;
// What those rehearsals cost, in rehearsals of kRehearsedIterations (a long one about 2.5): the
// plan's three long ones and each finalist's three (two at a time: two rounds each), the
// prediction's again, with margin; kept out of the search's time.
constexpr double kStartStateRehearsals = 2 * 2.5 * (1 + kLongRunFinalists) + 1.5;
// The warm start's (AutoPolicy::warm_start): three variants, each rehearsed short and long, two at
// a time.
constexpr double kWarmStartRehearsals = 3 * (1 + 2.5) / 2;
// The search's ends given a start state and a warm start each (the kFinishedPlans fastest
// distinct ones; AutoPolicy::choose): the fastest as it then runs is the plan. A plan's short
// rehearsal does not say how it settles (BERT-base at 50% on h100-80g: a climb's end 0.5 ms
// faster than another's ran 1.2 ms slower after its warm start). Each one past the first costs
// its three long rehearsals (two rounds) and a warm start, without finalists.
constexpr size_t kFinishedPlans = 4;
constexpr double kFinishRehearsals = 2 * 2.5 + 1.5 + kWarmStartRehearsals;

// What a rehearsal of one candidate needs from the run.
struct RehearsalSetup {
  const Graph* graph = nullptr;
  size_t budget = 0;
  std::string gpu;                 // the GPU the sim models (the run's own on sim)
  std::vector<double> op_ms;       // per op, the measured kernel time (empty: the cost model's)
  double link_ms_per_byte = 0;     // measured host link (0: the GPU's)
  // measured codec calls (MemoryView::codec_rate; ms_per_byte 0: the GPU's memory bandwidth)
  double codec_latency_ms = 0, codec_ms_per_byte = 0;
  double copy_queued_ms = 0;       // what each copy adds queued (MemoryView::copy_queued_ms; 0: its bytes alone)
  // per op, the device's scratch with the fast / lean convolution algorithm (empty: the op's own)
  std::vector<size_t> workspace, workspace_lean;
  std::string allocator = "caching";  // the run's device allocator (its default planner)
  size_t host_budget = 0;          // the run's --host-budget (0: unlimited)
  int iterations = kRehearsedIterations;  // the measured one and the guided ones
  double time_limit_ms = 0;        // wall time the rehearsal may take (0: no limit)
  std::vector<PlanPin> pins;       // the search's fixed decisions (Capuchin-based candidates)
  StartState start_state = StartState::kPacked;  // what each iteration's end leaves (Policy::start_state)
  // The layout the measured iteration's end leaves instead of its start state (empty: none; the
  // warm start, Policy::take_start_layout).
  std::vector<LayoutBlock> start_layout;
  std::vector<TriggerMove> trigger_moves;  // replayed on the plan (CapuchinPolicy::set_trigger_moves)
  bool compact_unfit = false;      // the fallback where the plan does not fit (CapuchinPolicy::set_compact_unfit)
  size_t min_wrap_bytes = 0;       // the smallest unpinned wrap swap (CapuchinPolicy::set_min_wrap_bytes)
  size_t high_placement_bytes = 0;  // requests placed high from the first guided iteration (Policy::high_placement_bytes)
  // Non-zero counts of the compressible outputs (the run's --densities on sim, or those auto's
  // measured iteration counted): what sizes the compression candidates' tensors. Null: the
  // compression candidates are not rehearsed.
  std::shared_ptr<const DensityTable> densities;
  bool measured_only = false;      // run the measured iteration only; its trace comes back (measured_trace)
};

// One access gap of a rehearsed Capuchin-based plan: what the plan decided and what it cost in
// the last guided iteration (stall on its swap-in or swap-out, or its recomputation; a kept gap
// costs when the passive fallback evicted it). The search's input. A wrap swap's gap
// (CapuchinPlan::wrap_swaps) runs from evict_op over the iteration's end to back_op.
struct RehearsedGap {
  TensorId id = kNoTensor;
  int evict_op = -1, back_op = -1, trigger_op = -1;
  CapuchinDecision decision = CapuchinDecision::kKeep;
  size_t bytes = 0;
  double cost_ms = 0;
  bool wrap = false;
  int fed_back = 0;  // ops its trigger moved earlier by Capuchin's feedback (the one trigger_op has)
};

struct RehearsalResult {
  std::string policy;
  bool trained = false;
  std::string error;               // why not (out of memory, ...)
  double time_ms = 0;              // mean over the guided iterations
  double measured_ms = 0;          // the measured iteration's time (its end's moves included)
  bool start_layout_applied = false;  // the measured iteration ended in setup.start_layout
  size_t peak_allocated = 0;       // over the guided iterations
  double stall_ms = 0, recompute_ms = 0;  // means over the guided iterations
  double compact_ms = 0;                  // the compaction moves' compute time (mean)
  uint64_t compactions = 0, evictions = 0, swapped_out_bytes = 0, recomputed_ops = 0;  // per guided iteration (mean)
  double wall_ms = 0;              // how long the rehearsal took
  std::vector<PlanPin> pins;       // as rehearsed
  StartState start_state = StartState::kPacked;  // as rehearsed
  bool compact_unfit = false;                    // as rehearsed (RehearsalSetup::compact_unfit)
  size_t min_wrap_bytes = 0;                     // as rehearsed (RehearsalSetup::min_wrap_bytes)
  size_t high_placement_bytes = 0;               // as rehearsed (RehearsalSetup::high_placement_bytes)
  std::vector<RehearsedGap> gaps;  // the gaps the plan swaps or recomputes (Capuchin-based candidates)
  std::vector<LayoutBlock> end_layout;  // the arena the last iteration's end left
  // The measured iteration's trace as the rehearsal recorded it (RehearsalSetup::measured_only):
  // what each rehearsed plan was made from.
  std::shared_ptr<const AccessTrace> measured_trace;
};

// A rehearsal ran past its time limit (thrown by the rehearsed policy, caught by the rehearsal).
struct RehearsalTimeout : std::runtime_error {
  RehearsalTimeout() : std::runtime_error("not rehearsed to the end: planning time limit") {}
};

using Rehearser = std::function<RehearsalResult(const std::string& policy, const RehearsalSetup& setup)>;

// The candidates auto rehearses, in order of preference on a tie: the planners as they are, then
// the search's variants (NAME@F: planned for F of the budget; capuchin@F,wW: swap stall weighed W),
// then the compression candidates (compress+capuchin, compress+swap; rehearsed only with densities).
const std::vector<std::string>& auto_candidates();
// Whether `name` is a candidate auto can rehearse (those above, and their suffixes); the message
// for one that is not, naming what is accepted.
bool is_auto_candidate(const std::string& name);
std::string unknown_candidate_message(const std::string& name);

class AutoPolicy final : public Policy {
 public:
  // The LP's optimum rounded at each threshold (lp_pins: a gap moved where the LP moves at least
  // that fraction of it), each also timed: more starts. 0.3 rather than 1/2: the pins then cover
  // more of what the LP frees, and the climbs end lower (docs/experiments/auto.md, "The linear program").
  static constexpr double kLpThresholds[] = {0.3};
  struct LpVariant {
    std::vector<PlanPin> pins;
    double threshold = 0.5;
    LpTiming timing = LpTiming::kPlanner;
    bool capped = false;
    bool recompute_only = false;  // the rounding's recomputations only ("lp-rec")
    bool integer = false;  // the integer program's plan (LpResult::integer), not the LP's rounding
    bool in_flight = false;  // a rounding of the LP with copies in flight on the device ("lpf...")
    bool compress = false;   // a rounding of the LP that also compresses ("lpc...")
  };
  // forced: run that candidate after the measured iteration without rehearsing (what a
  // rehearsal itself runs); empty: choose by rehearsal.
  // pins: the search's decisions for a Capuchin-based forced candidate.
  explicit AutoPolicy(std::string forced = {}, std::vector<PlanPin> pins = {});
  ~AutoPolicy() override;
  std::string name() const override { return "auto"; }
  void attach(const MemoryView& view) override;
  void begin_iteration(int iteration) override;
  std::vector<ConvAlgo> conv_algorithms() const override;
  std::vector<Action> after_op(int op_index) override;
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) override;
  void end_iteration(const AccessTrace& trace) override;
  void on_restore(TensorId id, int op_index, Residency from, double waited_ms) override;
  void on_swap_out_wait(TensorId id, double waited_ms) override { current().on_swap_out_wait(id, waited_ms); }
  // The replay guard: where `iterations` guided iterations in a row each run over `ratio` times
  // the running plan's prediction and more than `min_excess_ms` above it (off sim, a cost the
  // rehearsal models rather than measures was wrong: the H200's bitmask codec ran ~8 ms a call,
  // 15x the plan), the next iteration runs the fastest rehearsed plan that relies on fewer
  // modelled costs (PlanKind: a compressing plan gives way to one that only swaps and recomputes,
  // a swapping one to one that only recomputes), planned from the same measured iteration. A plan
  // it fell back to that runs `iterations` iterations slower than one before it gives way to the
  // fastest measured, and the guard stops. Every plan is lossless: the math does not change.
  struct ReplayGuard {
    bool on = true;
    double ratio = 2;            // as the CLI's warning (summary.replay_ratio)
    double min_excess_ms = 10;   // above a tiny model's host overhead, which no plan changes
    int iterations = 2;
  };
  void set_replay_guard(const ReplayGuard& g) { guard_ = g; }
  void on_iteration_time(int iteration, double time_ms) override;
  bool take_plan_change() override { return std::exchange(plan_changed_, false); }
  // Off sim, where a compressing candidate may run: its codec time is measured, not modelled.
  bool wants_codec_rate() const override { return measure_codecs_ && forced_.empty() && counts_nonzeros(); }
  // Off: the codecs' time modelled as before (the GPU's bandwidth in the rehearsals, the ReLU ops'
  // rate in the planners), to compare (--auto-codec-rate modelled).
  void set_measure_codecs(bool on) { measure_codecs_ = on; }
  // Off sim each copy in the rehearsals also costs what one more queued copy added in the memory
  // manager's calibration (MemoryView::copy_queued_ms); off: its bytes alone at the measured
  // rate, to compare (--auto-copy-cost bytes).
  void set_queued_copies(bool on) { queued_copies_ = on; }
  // What a plan relies on beyond the measured kernels: its codecs' time is modelled from the
  // element-wise rate (compress), its copies from the measured link (swap), its recomputations
  // are measured kernels (recompute).
  enum class PlanKind { kRecompute, kSwap, kCompress };
  std::vector<TensorId> on_host_at_start() const override { return current().on_host_at_start(); }
  // Every plan auto runs or rehearses starts its iterations from a packed arena.
  bool compact_at_iteration_end() const override { return true; }
  StartState start_state() const override { return start_state_; }
  // The start state a rehearsal runs (the run's is chosen after the search).
  void set_start_state(StartState s) { start_state_ = s; }
  // The layout the measured iteration's end leaves (a rehearsal's; the run's is chosen).
  void set_start_layout(std::vector<LayoutBlock> l) { start_layout_ = std::move(l); }
  void set_trigger_moves(std::vector<TriggerMove> m) { trigger_moves_ = std::move(m); }
  // The fallback of a Capuchin-based plan that does not fit (CapuchinPolicy::set_compact_unfit; a
  // rehearsal's; the run's is its plan's, as the search climbed it: the ",compact" starts).
  void set_compact_unfit(bool on) { compact_unfit_ = on; }
  bool compact_unfit() const { return compact_unfit_; }
  // The smallest persistent tensor a Capuchin-based plan's greedy swaps over the iteration's end
  // (CapuchinPolicy::set_min_wrap_bytes; a rehearsal's; the run's is its plan's: the ",large-wraps" starts).
  void set_min_wrap_bytes(size_t b) { min_wrap_bytes_ = b; }
  size_t min_wrap_bytes() const { return min_wrap_bytes_; }
  // The device allocator's high placement once the plan runs (a rehearsal's; the run's is chosen
  // after the search: AutoPolicy::placement). The measured iteration places every block low.
  size_t high_placement_bytes() const override { return active_ ? high_placement_ : 0; }
  void set_high_placement(size_t b) { high_placement_ = b; }
  size_t high_placement() const { return high_placement_; }
  // Whether the finish tries high placement (on by default; --auto-placement low turns it off).
  void set_placement_search(bool on) { placement_search_ = on; }
  // Whether the search also climbs from the packed starts with compact_unfit (on by default;
  // tests of one phase of the search turn it off).
  void set_compact_starts(bool on) { compact_starts_on_ = on; }
  // Likewise the ",large-wraps" starts (min_wrap_bytes): on by default.
  void set_large_wrap_starts(bool on) { large_wrap_starts_on_ = on; }
  // Their floor as a fraction of the budget (1/65536 by default; tests of the tiny presets, whose
  // persistent tensors are all above it, raise it).
  void set_min_wrap_fraction(double f) { min_wrap_fraction_ = f; }
  // The warm start that runs (warm_start; empty: none): the feedback's moves replayed, and the
  // layout the measured iteration's end leaves.
  const std::vector<TriggerMove>& trigger_moves() const { return trigger_moves_; }
  const std::vector<LayoutBlock>& warm_layout() const { return warm_layout_; }
  std::vector<LayoutBlock> take_start_layout() override {
    return measured_last_ && active_ ? std::exchange(start_layout_, {}) : std::vector<LayoutBlock>{};
  }
  // The measured iteration does not repeat; after it, the chosen policy says.
  bool iteration_repeats() const override { return !measured_last_ && current().iteration_repeats(); }
  bool measuring() const override { return !active_ || active_->measuring(); }
  std::optional<size_t> smallest_working_budget() const override;
  nlohmann::json report() const override;
  std::string summary() const override;
  // The chosen plan as data (the report's `saved_plan`): its candidate, pins, warm start, start
  // state, placement and fallback, with the graph (fingerprint) and budget it was made for. Null
  // before the plan is made.
  nlohmann::json saved_plan() const;
  // Runs `plan` (saved_plan's, or a report holding it) after the measured iteration instead of
  // searching (`--auto-plan FILE`; `source` names it in messages and the report): on sim the
  // iterations of the run that saved it. Throws std::invalid_argument naming what is malformed or
  // does not match `graph` or `budget`.
  void load_plan(const nlohmann::json& plan, const Graph& graph, size_t budget, const std::string& source);
  // Whether the loaded plan compresses (a compress candidate, or a compress pin): on sim it then
  // needs the densities it was made with to size what it compresses.
  bool loaded_plan_compresses() const;
  const std::string& forced() const { return forced_; }  // the candidate run without rehearsing (empty: none)

  void set_rehearser(Rehearser r) { rehearser_ = std::move(r); }
  // A rehearsal's policy: past this point after_op and choose_victims throw RehearsalTimeout.
  void set_deadline(std::chrono::steady_clock::time_point t) { deadline_ = t, has_deadline_ = true; }
  void set_candidates(std::vector<std::string> c) { candidates_ = std::move(c); }
  // Once planning has taken this long, the remaining candidates are not rehearsed.
  void set_time_limit_ms(double ms) { time_limit_ms_ = ms; }
  // What the planning limits are counted against. kRehearsals (the default): each rehearsal
  // counts as a fixed time per rehearsed iteration, from the model's op count and the rehearsal's
  // own deterministic work (what it recomputed, compacted, evicted: clock_cost_ns), over
  // kClockWorkers rehearsals at once, as this project's 2-core machines run them; a rehearsal is
  // cut only past the net below, and the plan is the same on every run and machine. kWall (`--auto-clock wall`):
  // the wall clock, so what the search rehearses depends on the machine's speed and load.
  enum class PlanningClock { kWall, kRehearsals };
  // The clock's rates: this machine's rehearsals fitted over 13 rows (recomputed ops, compactions,
  // and evictions, each a choice over the tensors on the device), scaled up 1.5x so that the
  // slowest for its counts rehearses in 0.9 of its count here (bench/fit_clock.py; docs/design.md).
  static constexpr double kClockNsPerOp = 2000;           // per op of each rehearsed iteration
  static constexpr double kClockNsPerRecompute = 12000;   // per recomputed op
  static constexpr double kClockNsPerCompaction = 14000;  // per compaction of the arena
  static constexpr double kClockNsPerEvictionTensor = 8;  // per eviction and tensor of the graph
  static constexpr double kClockWorkers = 2;
  // On the rehearsals clock a rehearsal is cut only past kClockNetFactor times what the clock
  // counts it for, and at least kClockNetMinMs of wall time (the report's planning_clock.net_cuts):
  // a plan that thrashes (the DTR logs' unroll_gan at 25%: chains of recomputations hundreds deep)
  // would otherwise run for many minutes. Only such a rehearsal's end depends on the machine.
  static constexpr double kClockNetFactor = 20;
  static constexpr double kClockNetMinMs = 1000;
  void set_planning_clock(PlanningClock c) { clock_ = c; }
  // The wall cap of the rehearsals clock: once planning has taken this long on the wall clock
  // (from the measured iteration's end, the LP included; less the finish's rehearsals, which run
  // regardless, at this run's wall time per counted ms), every limit counts as reached, so a slow
  // or loaded machine still plans within about the limits (the report's planning_clock.wall_capped;
  // that plan then depends on the machine). Default (negative): the candidates' limit +
  // kSearchTimeMs + kWallCapSlackMs; 0: none (the plan is the same on every run and machine).
  void set_wall_cap_ms(double ms) { wall_cap_ms_ = ms; }
  static constexpr double kWallCapSlackMs = 200;
  double wall_cap_ms() const { return wall_cap_ms_ < 0 ? time_limit_ms_ + kSearchTimeMs + kWallCapSlackMs : wall_cap_ms_; }
  const std::string& chosen() const { return chosen_; }
  const std::vector<RehearsalResult>& rehearsals() const { return rehearsals_; }
  // The per-gap search's rehearsals, in order (each: the chosen candidate with its pins).
  const std::vector<RehearsalResult>& searched() const { return searched_; }
  const std::vector<PlanPin>& pins() const { return pins_; }
  // The running Capuchin-based planner (null for the others): its plan and per-gap costs.
  const CapuchinPolicy* capuchin() const { return dynamic_cast<const CapuchinPolicy*>(&current()); }
  // The per-gap search: at most this many rehearsals (after the candidates), within this much
  // more wall time than the candidates' limit.
  void set_search_rehearsals(int n) { search_rehearsals_ = n; }
  // The window search after the climb: at most this many rehearsals (0: none).
  void set_window_rehearsals(int n) { window_rehearsals_ = n; }
  void set_room_rehearsals(int n) { room_rehearsals_ = n; }
  // How many of the search's ends are given a start state and a warm start (kFinishedPlans).
  void set_finished_plans(size_t n) { finished_plans_ = n; }
  // The search's first round: each start's climb pauses after this many rehearsals (0: none, each
  // climbs to its end in turn); the lowest climbs then go on first.
  void set_first_round_rehearsals(int n) { first_round_rehearsals_ = n; }
  // The LP's rounded plan is rehearsed on this many of the fastest Capuchin-based candidates (the
  // two fastest without wrap swaps, then the fastest with them), each a start for the search.
  void set_lp_rehearsals(int n) { lp_rehearsals_count_ = n; }
  // The LPs whose roundings are the LP starts: the bound's, the one that holds a copy's bytes on
  // the device while in flight (LpOptions::in_flight_on_device; where it has an optimum, else the
  // bound's), or both (each rounding's faster rehearsal is the start). The bound is the first's.
  // kCompress: the bound's roundings and those of the LP that also compresses (LpOptions::codec;
  // where the densities are known, else as kBound).
  enum class LpModel { kBound, kInFlight, kBoth, kCompress };
  void set_lp_model(LpModel m) { lp_model_ = m; }
  // Seconds for the integer program over the LP's fractional gaps (lp.h, Cbc; 0: none). Its plan,
  // where it differs from the LP's rounding, is rehearsed as the LP's are: more starts.
  void set_ilp_seconds(double s) { ilp_seconds_ = s; }
  // Clp's wall limit on each LP (LpOptions::time_limit_s). Tests give one a test-sized LP cannot
  // reach, so that what they assert does not depend on the machine's speed.
  void set_lp_seconds(double s) { lp_seconds_ = s; }
  // The densities the measured iteration had for the compression candidates (null: none).
  const std::shared_ptr<const DensityTable>& densities() const { return densities_; }
  double planning_ms() const { return planning_ms_; }
  // The lower bound on any swap / recompute plan's overhead, from the measured iteration.
  const OverheadBound& bound() const { return bound_; }
  // The linear program over the whole iteration (lp.h): its optimum bounds every keep / swap /
  // recompute plan; rounded, its pins are rehearsed as more starts for the search.
  const LpResult& lp() const { return lp_; }
  // The rehearsals of the LP's pins (each on one of the fastest Capuchin-based candidates).
  const std::vector<RehearsalResult>& lp_rehearsals() const { return lp_rehearsals_; }

  struct FinishTry {  // one variant as rehearsed, the finish's (need_order, placement), for the report
    std::string policy;
    size_t high_placement = 0;
    double time_ms = 0, total_ms = 0;  // guided iteration; measured + guided (0: not trained)
    double long_ms = 0;                // its long run, where it got one (0: none)
  };

 private:
  Policy& current() { return active_ ? *active_ : *measuring_; }
  const Policy& current() const { return active_ ? *active_ : *measuring_; }
  void choose(const AccessTrace& trace);
  void choose_start_state(const RehearsalSetup& setup, std::chrono::steady_clock::time_point t0);
  // One start's search (the climb, then the window search), resumable where its share of the
  // planning time ended it.
  struct Climb {
    RehearsalResult best;
    std::string label;  // the start: "candidate", "headroom", an LP variant's label
    double start_ms = 0;
    std::string start_policy;
    std::vector<std::string> tried;  // plan keys rehearsed
    std::map<std::string, int> lost;  // moves that did not win, by gap and decision
    int done = 0, phase = 0, cap = 0, headroom_rounds = 0;
    bool climbed = false;  // the climb ended; the window search goes on
    double climbed_ms = 0;
    int window_done = 0;
    size_t anchor = 0;
    bool ended = false;  // nothing left to rehearse
    int pause_at = std::numeric_limits<int>::max();  // it pauses once it has rehearsed this many
    double first_round_ms = 0;  // its plan's time when the first round paused it
    std::string duplicate_of;   // not resumed: its first round ended where this climb's did
    std::vector<std::vector<int>> accesses;  // each tensor's accesses (for the "make room" moves)
    int room_done = 0;  // the "make room" moves rehearsed
    bool roomed = false;  // they ended; the window search goes on
    int rehearsed() const { return done + room_done + window_done; }
  };
  nlohmann::json climbs_ = nlohmann::json::array();  // each start's climb, for the report
  int duplicate_climbs_ = 0;  // climbs not resumed as another's duplicate (Climb::duplicate_of)
  void search(const RehearsalSetup& setup, Climb& c, std::chrono::steady_clock::time_point t0);
  using CompressMove = std::function<std::optional<PlanPin>(const RehearsedGap&)>;
  void window_search(const RehearsalSetup& setup, Climb& c, const CompressMove& compress,
                     std::chrono::steady_clock::time_point t0);
  bool counts_nonzeros() const;
  std::shared_ptr<const DensityTable> measured_densities(std::string* why) const;

  std::string forced_;
  std::vector<std::string> candidates_;
  Rehearser rehearser_;
  // The planning clock (set_planning_clock): the iterations rehearsed so far, what one counts for
  // under kRehearsals, and the count a batch of rehearsals run at once started from (-1: none).
  PlanningClock clock_ = PlanningClock::kRehearsals;
  std::atomic<long long> rehearsed_iterations_{0};
  std::atomic<long long> clock_ns_{0};     // the rehearsals' count on the clock, before the workers
  std::atomic<long long> charged_ns_{0};   // the part of it their recomputations etc. add
  // What was charged, summed over the finished rehearsals (each count x its iterations), and the
  // rehearsals' own wall time: the report's, to fit the clock's rates to a machine.
  std::atomic<long long> charged_recomputes_{0}, charged_compactions_{0}, charged_evictions_{0};
  std::atomic<long long> rehearsals_wall_us_{0};
  std::atomic<long long> clock_net_cuts_{0};  // rehearsals the wall-clock net cut (kClockNetFactor)
  double wall_cap_ms_ = -1;                      // set_wall_cap_ms
  std::chrono::steady_clock::time_point planning_t0_{};
  mutable std::atomic<bool> wall_capped_{false};  // the wall cap was reached
  std::atomic<double> wall_reserve_ms_{0};        // start_state_reserve_ms_, for the rehearsals' threads
  double iteration_ms_ = 0;
  double eviction_ns_ = 0;     // what one eviction counts for (kClockNsPerEvictionTensor)
  long long batch_base_ = -1;  // clock_ns_ as the batch started
  // ms of planning since t0 on the planning clock; within a batch, as its item `item` starts.
  double elapsed_ms(std::chrono::steady_clock::time_point t0, size_t item = 0) const;
  // What a rehearsal of `iterations` counts for on the planning clock (wall: as `r` took).
  double rehearsal_ms(const RehearsalResult& r, int iterations = kRehearsedIterations) const;
  // A finished rehearsal's work beyond its iterations' ops, in ns of the clock: its guided
  // iterations' recomputed ops, compactions and evictions (0 for one that did not finish).
  double clock_cost_ns(const RehearsalResult& r, int iterations) const;
  // rehearser_, counted on the planning clock (uncut under kRehearsals).
  RehearsalResult rehearse_counted(const std::string& policy, const RehearsalSetup& setup);
  // fn(0..n-1), a few at a time; the planning clock reads as each item starts.
  void parallel(size_t n, const std::function<void(size_t)>& fn);
  const MemoryView* view_ = nullptr;
  std::unique_ptr<Policy> measuring_;  // Capuchin's hybrid, passive until it plans
  std::unique_ptr<Policy> active_;     // the chosen planner's policy, once chosen
  bool measured_last_ = false;         // the last iteration was the measured one
  std::shared_ptr<const AccessTrace> planned_from_;  // off sim: the rehearsal's measured iteration (choose)
  StartState start_state_ = StartState::kPacked;  // what each iteration's end leaves
  std::vector<LayoutBlock> start_layout_;  // the measured iteration's end leaves it (the warm start)
  std::vector<TriggerMove> trigger_moves_;  // the plan's feedback moves, replayed (the warm start)
  std::vector<LayoutBlock> saved_layout_;  // start_layout_ as the plan was made (saved_plan)
  std::string loaded_from_;  // load_plan's source
  nlohmann::json loaded_;    // load_plan's plan, as read
  std::vector<LayoutBlock> warm_layout_;  // start_layout_ as the warm start chose it (kept)
  static constexpr size_t kStartStates = 3;  // StartState's values, in its order
  using LongRun = std::array<double, kStartStates>;  // a plan over kLongRunIterations from each (0: OOM)
  LongRun long_ms_{};  // the plan's
  std::array<RehearsalResult, kStartStates> steady_;  // the plan's long rehearsals, from each start state
  void warm_start(const RehearsalSetup& setup);
  // The finish's variants of the plan (each a candidate name and a high placement), rehearsed in
  // its start state and warm start: the fastest whose measured and guided iterations take less
  // time in all and whose long run does not drift becomes the plan. Its index, or -1.
  struct FinishVariant {
    std::string policy;
    size_t high_placement = 0;
  };
  int finish_variant(const RehearsalSetup& setup, const std::vector<FinishVariant>& variants, std::vector<FinishTry>& tried);
  void need_order(const RehearsalSetup& setup);
  void placement(const RehearsalSetup& setup);
  struct NeedOrder {  // need_order's rehearsals of the plan, for the report
    bool tried = false, won = false;
    double before_ms = 0, time_ms = 0;  // the plan as it was; the variant that won (0: none)
    double long_ms = 0;                 // that variant over the long run (0: none)
    std::string before_policy;          // the plan's candidate before
    std::string variant;                // "need", "fifo" or "fifo,need"
    std::vector<FinishTry> variants;    // every one rehearsed
  };
  NeedOrder need_;
  struct Placement {  // placement's rehearsal of the plan, for the report
    bool tried = false, won = false;
    double before_ms = 0;
    std::vector<FinishTry> variants;
  };
  Placement placement_;
  size_t high_placement_ = 0;  // Policy::high_placement_bytes once the plan runs
  bool placement_search_ = true;
  // What choose_start_state and warm_start decide for a plan, and where its climb started: saved
  // per finished plan (kFinishedPlans), the fastest restored.
  auto finish_fields() {
    return std::tie(chosen_result_, chosen_, pins_, start_state_, searched_state_, searched_ms_, finalists_, drifted_from_ms_,
                    long_ms_, steady_, warm_, trigger_moves_, start_layout_, warm_layout_, climbed_ms_, start_ms_, start_,
                    start_policy_, compact_unfit_, min_wrap_bytes_);
  }
  struct Finished {  // a plan given a start state and a warm start, for the report
    std::string start;
    double searched_ms = 0, time_ms = 0;
  };
  std::vector<Finished> finished_;
  size_t finished_plans_ = kFinishedPlans;
  struct Warm {
    size_t tried = 0;        // variants rehearsed
    std::string variant;     // the one that runs (empty: none, the cold start)
    size_t layout_blocks = 0, trigger_moves = 0;
    double before_ms = 0, before_measured_ms = 0;  // the cold start's rehearsal: guided mean, measured
    double long_ms = 0;      // its long rehearsal
  };
  Warm warm_;
  size_t restored_starts_ = 0;  // starts the search climbed from with a restored start state
  StartState searched_state_ = StartState::kPacked;  // the plan's short rehearsal (the search's end) was so
  struct Finalist {  // a plan rehearsed over the long run because the chosen one drifted
    std::string policy;
    size_t pins = 0;
    double time_ms = 0;  // the search's
    LongRun long_ms{};
  };
  std::vector<Finalist> finalists_;
  double drifted_from_ms_ = 0;  // the searched plan's search time, where a finalist replaced it
  double searched_ms_ = 0;  // the search's end (packed start), before the start state is chosen
  double start_state_reserve_ms_ = 0;  // wall time kept for choose_start_state's rehearsals
  // Where the search stops: the candidates' limit and kSearchTimeMs, less that reserve.
  double search_limit_ms() const { return time_limit_ms_ + kSearchTimeMs - start_state_reserve_ms_; }
  std::unique_ptr<Policy> fallback_;   // "...,dtr": evicts in guided iterations instead of LRU swapping
  // The replay guard's state: each plan run after the measured iteration, in order.
  struct PlanSpec {
    std::string policy;
    std::vector<PlanPin> pins;
    std::vector<TriggerMove> trigger_moves;
    bool compact_unfit = false;
    size_t min_wrap_bytes = 0;
    StartState start_state = StartState::kPacked;
    size_t high_placement = 0;
    double predicted_ms = 0;  // its rehearsal's guided mean
    PlanKind kind = PlanKind::kRecompute;
  };
  struct PlanRun {
    PlanSpec plan;
    int from_iteration = -1;
    std::vector<double> ms;  // its iterations' times
    std::string why;         // why it runs
    double mean_ms() const;
  };
  ReplayGuard guard_;
  std::shared_ptr<const AccessTrace> measured_trace_;  // what a fallback plans from
  std::vector<PlanRun> runs_;
  int over_ = 0;  // guided iterations in a row over the guard
  std::optional<std::pair<PlanSpec, std::string>> pending_;  // runs from the next iteration
  bool guard_stopped_ = false;
  bool plan_changed_ = false;  // take_plan_change
  std::string guard_note_;
  static PlanKind kind_of(const RehearsalResult& r);
  static PlanSpec spec_of(const RehearsalResult& r);
  // The fastest rehearsed plan of a kind below `kind` not run yet.
  std::optional<PlanSpec> replay_fallback(PlanKind kind) const;
  std::unique_ptr<Policy> planned_policy(const PlanSpec& p, const AccessTrace& measured) const;
  void install(const PlanSpec& p);
  bool compact_unfit_ = false;
  int compact_starts_ = 0;  // the starts with compact_unfit the search climbed from
  size_t min_wrap_bytes_ = 0;
  int large_wrap_starts_ = 0;  // the starts with min_wrap_bytes the search climbed from
  bool compact_starts_on_ = true;
  bool large_wrap_starts_on_ = true;
  double min_wrap_fraction_ = 1.0 / 65536;
  std::string chosen_;
  std::vector<RehearsalResult> rehearsals_;
  std::vector<RehearsalResult> searched_;
  std::vector<std::string> searched_moves_;
  std::vector<RehearsalResult> headroom_rehearsals_;  // the refined-headroom starts (search's)
  struct EdfStart {
    std::string policy;
    double time_ms = 0, start_ms = 0;  // rehearsed so, and the start it was toggled from
  };
  std::vector<EdfStart> edf_starts_;  // the starts that were faster so
  std::vector<PlanPin> pins_;
  RehearsalResult chosen_result_;
  double element_ns_per_byte_ = 0;  // the codecs' rate: measured (codec_rate_), else the measured ReLU ops'
  std::optional<CodecRate> codec_rate_;  // the backend's, as the memory manager measured it (off sim)
  bool measure_codecs_ = true;
  double link_ms_per_byte_ = 0, copy_queued_ms_ = 0;  // what the rehearsals charge a copy (off sim)
  double copy_latency_ms_ = 0;  // a lone copy's round trip, for the report
  bool queued_copies_ = true;
  double relu_ns_per_byte_ = 0;          // the ReLU ops' rate (the report's, beside it)
  int search_rehearsals_ = kDefaultSearchRehearsals;
  int window_rehearsals_ = kDefaultWindowRehearsals;
  int room_rehearsals_ = kDefaultRoomRehearsals;
  int first_round_rehearsals_ = kDefaultFirstRoundRehearsals;
  int lp_rehearsals_count_ = kDefaultLpRehearsals;
  double ilp_seconds_ = 0;
  double lp_seconds_ = LpOptions{}.time_limit_s;
  double climbed_ms_ = 0;  // the plan's time after the climb, before the window search
  int windows_ = 0, window_tried_ = 0;
  int room_tried_ = 0, room_won_ = 0;  // the climbs' "make room" moves: rehearsed, won
  std::vector<std::optional<size_t>> nonzeros_;  // per tensor, counted in the measured iteration
  std::shared_ptr<const DensityTable> densities_;
  double planning_ms_ = 0;
  OverheadBound bound_;
  double bound_wall_ms_ = 0;
  LpResult lp_;
  LpModel lp_model_ = LpModel::kCompress;
  LpResult lp_in_flight_;  // the in-flight model's optimum (lp_model_ other than kBound)
  LpResult lp_compress_;   // the compressing LP's optimum (LpModel::kCompress)
  std::vector<LpVariant> lp_variants_;  // its rounded plans (distinct)
  std::vector<size_t> lp_variant_of_;   // per LP rehearsal, its variant
  double start_ms_ = 0;    // the rehearsal the kept search started from
  std::string start_policy_;  // its candidate (the plan's may differ: the climb's headroom moves)
  std::string start_ = "candidate";  // and which: "candidate", "lp", "lp-timed" (the LP's timed pins), "lp-rec", ...
  double search_until_ms_ = std::numeric_limits<double>::infinity();  // this start's share of the limit
  std::vector<RehearsalResult> lp_rehearsals_;
  double time_limit_ms_ = kDefaultTimeLimitMs;
  std::chrono::steady_clock::time_point deadline_{};
  bool has_deadline_ = false;
  void check_deadline() const;

 public:
  static constexpr double kDefaultTimeLimitMs = 8000;
  static constexpr double kSearchTimeMs = 1300;
  static constexpr int kDefaultSearchRehearsals = 256;
  static constexpr int kDefaultWindowRehearsals = 256;
  static constexpr int kDefaultRoomRehearsals = 144;
  static constexpr int kDefaultFirstRoundRehearsals = 32;
  static constexpr int kDefaultLpRehearsals = 3;
};

const char* to_string(AutoPolicy::PlanKind k);

}  // namespace vtensor
