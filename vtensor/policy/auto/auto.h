// auto (ours): keep / swap / recompute / compress chosen per access gap, each choice costed by
// its effect on the whole iteration (copy queues, compute stream, arena), not alone.
//   It measures one passive iteration (LRU swap on OOM, parameters last) and rehearses candidates
//   on the sim backend's model of it (the run's memory manager, allocator, queues and measured
//   times): the planners as they are (Capuchin, checkpointing, DTR, lru-recompute), Capuchin for
//   part of the budget or with its swap stall weighed, DTR's eviction as fallback, FreeLunch's
//   compression where densities are known, persistent tensors swapped over the iteration's end.
//   From the fastest and the rounded optima of a linear program (lp.h) it climbs over PlanPins
//   (capuchin.h), one gap's decision per move, then "make room" moves and an exhaustive window;
//   the fastest ends are finished (start state, warm start, issue order, placement). Limits count
//   rehearsals, so the plan does not depend on the machine; a replay guard hands over to a plan
//   relying on fewer modelled costs where guided iterations run far over the prediction.
// Deviations: an LP rounded and local search with the rehearsal as cost model, not an ILP / DP (a
// gap's cost depends on the queues and arena the rest leaves; the integer program is built but
// off); one placement per run, not per block. Notes: docs/design.md, "vtensor/policy/auto/".
//
// Where each part lives (vtensor/policy/auto/): choose.cpp the planning pipeline, starts.cpp the
// search's starts and climbs, search.cpp one climb, moves.cpp its moves, finish.cpp the finish,
// clock.cpp the planning clock, replay_guard.cpp the plans run and the guard, report.cpp the
// report, plan_file.cpp the saved plan, candidates.cpp the candidates (Candidate) and their names,
// options.cpp the --auto-* options, tuning.h the constants.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "vtensor/memory/planning_hooks.h"
#include "vtensor/memory/policy.h"
#include "vtensor/policy/auto/candidates.h"
#include "vtensor/policy/auto/rehearsal.h"
#include "vtensor/policy/auto/tuning.h"
#include "vtensor/policy/bound.h"
#include "vtensor/policy/capuchin.h"
#include "vtensor/policy/lp.h"
#include "vtensor/policy/planning.h"

namespace vtensor {

class AutoPolicy final : public Policy, public RehearsingPolicy, public PlanningHooks {
 public:
  // One rounding of the LP's optimum (lp_pins at a threshold of kLpThresholds, with a timing):
  // one more start for the search.
  struct LpVariant {
    std::vector<PlanPin> pins;
    double threshold = 0.5;
    LpTiming timing = LpTiming::kPlanner;
    bool capped = false;
    bool recompute_only = false;  // the rounding's recomputations only ("lp-rec")
    bool integer = false;  // the integer program's plan (LpResult::integer), not the LP's rounding
    bool in_flight = false;  // a rounding of the LP with copies in flight on the device ("lpf...")
    bool compress = false;   // a rounding of the LP that also compresses ("lpc...")
    // "lp", "lp-timed", "lp-whole" (at the first threshold), "lp@0.5", ... (at another): its name
    // in the report.
    std::string label() const;
  };
  // forced: run that candidate after the measured iteration without rehearsing (what a
  // rehearsal itself runs); empty: choose by rehearsal. Throws std::invalid_argument where it is
  // not a candidate.
  // pins: the search's decisions for a Capuchin-based forced candidate.
  explicit AutoPolicy(Candidate forced = {}, std::vector<PlanPin> pins = {});
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
  // rehearsal models rather than measures was wrong, as a codec's modelled time can be), the next iteration runs the fastest rehearsed plan that relies on fewer
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
  const Candidate& forced() const { return forced_; }  // the candidate run without rehearsing (empty: none)

  RehearsingPolicy* rehearsing() override { return this; }
  PlanningHooks* planning() override { return this; }
  // Set by the Trainer; without one auto runs Capuchin's hybrid.
  void set_rehearser(Rehearser r) override { rehearser_ = std::move(r); }
  // --auto-plan: a saved plan (a report holding one, as read) that prepare() loads, once the graph
  // and budget are known (auto/options.cpp).
  void set_plan_file(nlohmann::json plan, std::string source) { plan_file_ = std::move(plan), plan_source_ = std::move(source); }
  const std::string& plan_source() const { return plan_source_; }
  void prepare(const Graph& graph, size_t budget, bool sim_without_densities) override;
  // A rehearsal's policy: past this point after_op and choose_victims throw RehearsalTimeout.
  void set_deadline(std::chrono::steady_clock::time_point t) { deadline_ = t, has_deadline_ = true; }
  void set_candidates(std::vector<Candidate> c) { candidates_ = std::move(c); }
  // Once planning has taken this long, the remaining candidates are not rehearsed.
  void set_time_limit_ms(double ms) { time_limit_ms_ = ms; }
  // What the planning limits are counted against. kRehearsals (the default): each rehearsal
  // counts as a fixed time per rehearsed iteration, from the model's op count and the rehearsal's
  // own deterministic work (what it recomputed, compacted, evicted: clock_cost_ns), over
  // kClockWorkers rehearsals at once, as this project's 2-core machines run them; a rehearsal is
  // cut only past the net below, and the plan is the same on every run and machine. kWall (`--auto-clock wall`):
  // the wall clock, so what the search rehearses depends on the machine's speed and load.
  enum class PlanningClock { kWall, kRehearsals };
  // The clock's rates and its net (kClockNsPerOp ..., kClockNetFactor: tuning.h); a rehearsal the
  // net cuts is counted in the report's planning_clock.net_cuts.
  void set_planning_clock(PlanningClock c) { clock_ = c; }
  // The wall cap of the rehearsals clock: once planning has taken this long on the wall clock
  // (from the measured iteration's end, the LP included; less the finish's rehearsals, which run
  // regardless, at this run's wall time per counted ms), every limit counts as reached, so a slow
  // or loaded machine still plans within about the limits (the report's planning_clock.wall_capped;
  // that plan then depends on the machine). Default (negative): the candidates' limit +
  // kSearchTimeMs + kWallCapSlackMs; 0: none (the plan is the same on every run and machine).
  void set_wall_cap_ms(double ms) { wall_cap_ms_ = ms; }
  double wall_cap_ms() const { return wall_cap_ms_ < 0 ? time_limit_ms_ + kSearchTimeMs + kWallCapSlackMs : wall_cap_ms_; }
  const Candidate& chosen() const { return chosen_; }
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
  // Clp's wall-seconds net on each LP (LpOptions::time_limit_s; the LP's limit is counted in
  // iterations, LpOptions::max_iterations). Tests give one a test-sized LP cannot reach.
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
    Candidate policy;
    size_t high_placement = 0;
    double time_ms = 0, total_ms = 0;  // guided iteration; measured + guided (0: not trained)
    double long_ms = 0;                // its long run, where it got one (0: none)
  };

 private:
  Policy& current() { return active_ ? *active_ : *measuring_; }
  const Policy& current() const { return active_ ? *active_ : *measuring_; }
  using TimePoint = std::chrono::steady_clock::time_point;
  // The planning (choose.cpp): each stage of choose in the order it runs.
  void choose(const AccessTrace& trace);
  RehearsalSetup measure_setup(const AccessTrace& trace, std::string* no_densities);
  void bound_and_lps(const AccessTrace& trace, const RehearsalSetup& s);
  void solve_lps(const PlannerInput& in);
  void round_lps();
  void rehearse_candidates(const RehearsalSetup& s, const std::string& no_densities, TimePoint t0);
  void rehearse_lp_variants(const RehearsalSetup& s, TimePoint t0);
  void plan_from_rehearsed_iteration(const RehearsalSetup& s, const AccessTrace& trace);
  void install_chosen(const AccessTrace& trace);
  // One start's search (the climb, then the window search), resumable where its share of the
  // planning time ended it.
  struct Climb {
    RehearsalResult best;
    std::string label;  // the start: "candidate", "headroom", an LP variant's label
    double start_ms = 0;
    Candidate start_policy;
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
  // The search's starts (starts.cpp), each a rehearsal and its label. It owns the rehearsals they
  // point to that no member holds, sized before any pointer is taken: keep it alive while the
  // starts are read, and do not copy it.
  struct Starts {
    const RehearsalResult* best = nullptr;   // the fastest candidate without wrap swaps (the plan so far)
    const RehearsalResult* other = nullptr;  // the fastest with them (null: none, or no gaps)
    std::vector<const RehearsalResult*> lp_best;  // per LP variant, its fastest rehearsal (null: none)
    std::vector<const RehearsalResult*> starts;
    std::vector<std::string> labels;  // per start, what it is (the report's climbs[].start)
    size_t packed = 0;                // the starts before the restored ones
    std::vector<RehearsalResult> edf, restored, compact, large_wrap;  // the twins' rehearsals
    Starts() = default;
    Starts(const Starts&) = delete;
    Starts& operator=(const Starts&) = delete;
  };
  bool first_starts(Starts& st);
  void gather_starts(const RehearsalSetup& s, Starts& st, TimePoint t0);
  void add_headroom_starts(const RehearsalSetup& s, Starts& st, TimePoint t0);
  void add_edf_starts(const RehearsalSetup& s, Starts& st, TimePoint t0);
  void add_restored_starts(const RehearsalSetup& s, Starts& st, TimePoint t0);
  void add_compact_starts(const RehearsalSetup& s, Starts& st, TimePoint t0);
  void add_large_wrap_starts(const RehearsalSetup& s, Starts& st, TimePoint t0);
  std::vector<RehearsalResult> rehearse_twins(const RehearsalSetup& s, const Starts& st, const std::vector<size_t>& origins,
                                              const std::function<void(RehearsalSetup&)>& vary, TimePoint t0);
  std::vector<Climb> climb_starts(const RehearsalSetup& s, const Starts& st, TimePoint t0);
  // One start's search (search.cpp).
  void search(const RehearsalSetup& setup, Climb& c, TimePoint t0);
  using CompressMove = std::function<std::optional<PlanPin>(const RehearsedGap&)>;
  CompressMove compress_move(const RehearsalSetup& setup) const;
  bool rehearse_round(const RehearsalSetup& setup, Climb& c, const std::vector<std::vector<PlanPin>>& batch,
                      const std::vector<Candidate>& policies, const std::vector<std::string>& moves, TimePoint t0);
  bool climb_moves(const RehearsalSetup& setup, Climb& c, const CompressMove& compress, TimePoint t0);
  bool room_search(const RehearsalSetup& setup, Climb& c, TimePoint t0);
  void window_search(const RehearsalSetup& setup, Climb& c, const CompressMove& compress, TimePoint t0);
  // The finish (finish.cpp).
  void finish_ends(const RehearsalSetup& s, const std::vector<Climb>& climbs, TimePoint t0);
  void record_climbs(const std::vector<Climb>& climbs);
  void choose_start_state(const RehearsalSetup& setup, TimePoint t0);
  bool counts_nonzeros() const;
  std::shared_ptr<const DensityTable> measured_densities(std::string* why) const;
  // The report's parts (report.cpp).
  void report_clock(nlohmann::json& out) const;
  void report_guard(nlohmann::json& out) const;
  void report_search(nlohmann::json& out) const;
  void report_finish(nlohmann::json& out) const;
  void report_lp(nlohmann::json& out) const;
  std::string summary_rehearsals() const;
  std::string summary_bounds() const;

  Candidate forced_;
  std::vector<Candidate> candidates_;
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
  // The planning clock (clock.cpp): reset as planning starts at t0.
  void start_planning_clock(TimePoint t0);
  // ms of planning since t0 on the planning clock; within a batch, as its item `item` starts.
  double elapsed_ms(std::chrono::steady_clock::time_point t0, size_t item = 0) const;
  // What a rehearsal of `iterations` counts for on the planning clock (wall: as `r` took).
  double rehearsal_ms(const RehearsalResult& r, int iterations = kRehearsedIterations) const;
  // A finished rehearsal's work beyond its iterations' ops, in ns of the clock: its guided
  // iterations' recomputed ops, compactions and evictions (0 for one that did not finish).
  double clock_cost_ns(const RehearsalResult& r, int iterations) const;
  // rehearser_, counted on the planning clock (uncut under kRehearsals).
  RehearsalResult rehearse_counted(const Candidate& policy, const RehearsalSetup& setup);
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
  nlohmann::json plan_file_;  // set_plan_file's, loaded by prepare()
  std::string plan_source_;  // its path (empty: none)
  nlohmann::json loaded_;    // load_plan's plan, as read
  std::vector<LayoutBlock> warm_layout_;  // start_layout_ as the warm start chose it (kept)
  static constexpr size_t kStartStates = 3;  // StartState's values, in its order
  using LongRun = std::array<double, kStartStates>;  // a plan over kLongRunIterations from each (0: OOM)
  LongRun long_ms_{};  // the plan's
  using LongRehearsals = std::array<RehearsalResult, kStartStates>;
  LongRehearsals steady_;  // the plan's long rehearsals, from each start state
  std::vector<LongRun> long_runs(const RehearsalSetup& setup, const std::vector<const RehearsalResult*>& plans,
                                 std::vector<LongRehearsals>& runs);
  static StartState fastest_start(const LongRun& l);
  void replace_drifted(const RehearsalSetup& setup, TimePoint t0, double plan_ms, StartState& state, double& long_ms);
  void warm_start(const RehearsalSetup& setup);
  // The finish's variants of the plan (each a candidate and a high placement), rehearsed in
  // its start state and warm start: the fastest whose measured and guided iterations take less
  // time in all and whose long run does not drift becomes the plan. Its index, or -1.
  struct FinishVariant {
    Candidate policy;
    size_t high_placement = 0;
  };
  int finish_variant(const RehearsalSetup& setup, const std::vector<FinishVariant>& variants, std::vector<FinishTry>& tried);
  void need_order(const RehearsalSetup& setup);
  void placement(const RehearsalSetup& setup);
  struct NeedOrder {  // need_order's rehearsals of the plan, for the report
    bool tried = false, won = false;
    double before_ms = 0, time_ms = 0;  // the plan as it was; the variant that won (0: none)
    double long_ms = 0;                 // that variant over the long run (0: none)
    Candidate before_policy;            // the plan's candidate before
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
  size_t high_placement_ = 0;  // PlanningHooks::high_placement_bytes once the plan runs
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
    Candidate policy;
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
    Candidate policy;
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
  Candidate chosen_;
  std::vector<RehearsalResult> rehearsals_;
  std::vector<RehearsalResult> searched_;
  std::vector<std::string> searched_moves_;
  std::vector<RehearsalResult> headroom_rehearsals_;  // the refined-headroom starts (search's)
  struct EdfStart {
    Candidate policy;
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
  Candidate start_policy_;  // its candidate (the plan's may differ: the climb's headroom moves)
  std::string start_ = "candidate";  // and which: "candidate", "lp", "lp-timed" (the LP's timed pins), "lp-rec", ...
  double search_until_ms_ = std::numeric_limits<double>::infinity();  // this start's share of the limit
  std::vector<RehearsalResult> lp_rehearsals_;
  double time_limit_ms_ = kDefaultTimeLimitMs;
  std::chrono::steady_clock::time_point deadline_{};
  bool has_deadline_ = false;
  void check_deadline() const;
};

const char* to_string(AutoPolicy::PlanKind k);

}  // namespace vtensor
