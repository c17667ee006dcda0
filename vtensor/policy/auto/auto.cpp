#include "vtensor/policy/auto/auto.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <thread>

#include "vtensor/backend/backend.h"
#include "vtensor/core/errors.h"
#include "vtensor/policy/bound.h"
#include "vtensor/policy/capuchin.h"
#include "vtensor/policy/checkpoint.h"
#include "vtensor/policy/compress.h"
#include "vtensor/policy/lp.h"
#include "vtensor/policy/registry.h"

namespace vtensor {

namespace {

// The sim model a rehearsal of a cpu / cuda run uses for what the measurement does not give
// (compaction moves at HBM bandwidth); kernel times and the link come from the measurement.
constexpr const char* kRehearsalGpu = "h100-80g";
// The fractions of the budget the Capuchin modes are also planned for: headroom for what the
// plan's byte count leaves out (fragmentation, recomputations' working sets).
constexpr const char* kPlanFractions[] = {"0.97", "0.94", "0.9", "0.85"};
// Rehearsals run at once (at most; fewer on fewer cores).
constexpr unsigned kMaxRehearsalThreads = 4;
// The fastest Capuchin-based candidates without wrap swaps the LP's pins are rehearsed on (then
// the fastest with them; --auto-lp bounds the whole count).
constexpr size_t kLpStarts = 2;
// The hybrid's swap-stall weights searched beside Capuchin's 1.
constexpr const char* kSwapCostWeights[] = {"0.25", "4", "16"};

const std::vector<std::string>& planner_names() {
  static const std::vector<std::string> names = {"capuchin",   "capuchin-recompute", "capuchin-swap",
                                                 "checkpoint", "dtr",                "lru-recompute"};
  return names;
}

// The compression candidates: compression first, then Capuchin (hybrid or swap) on the rest.
// They need the non-zero counts of the measured iteration, so they come after the others (and
// the time limit's order of the others stays).
const std::vector<std::string>& compress_names() {
  static const std::vector<std::string> names = {"compress+capuchin", "compress+swap"};
  return names;
}

bool is_compress_candidate(const std::string& name) { return name.rfind("compress", 0) == 0; }

// Capuchin's trigger feedback (a late prefetch moves one op earlier) runs after the guided
// iterations a rehearsal times but its last: the rehearsed iterations less the measured one and
// the last. Later iterations keep the triggers the rehearsal's last one ran; left running, the
// feedback kept moving them, each move holding memory the plan had not counted (the U-Net log at
// 25% on h100-80g: 130 evictions per iteration in 1-3, 232 in 4-9; with the limit, 135).
constexpr int kFeedbackIterations = kRehearsedIterations - 2;

constexpr const char* kDtrFallback = ",dtr";
// "...,wrap" (before ",dtr"): a Capuchin plan that also swaps persistent tensors across the
// iteration boundary (PlannerInput::wrap_persistent).
constexpr const char* kWrap = ",wrap";
// "...,edf" (before ",wrap"): a Capuchin plan with its D2H queue in deadline order
// (PlannerInput::deadline_swap_outs).
constexpr const char* kEdf = ",edf";
// "...,need" (before ",edf"): a Capuchin plan issuing one op's prefetches in need order
// (PlannerInput::need_ordered_prefetches); only the searched plans' finish tries it.
constexpr const char* kNeed = ",need";
// "...,fifo" (before ",need"): a Capuchin plan made with its H2D queue in issue order
// (PlannerInput::fifo_prefetches); as ",need", only the searched plan's finish tries it.
constexpr const char* kFifo = ",fifo";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A candidate's name: its head ("capuchin@0.9,w4", "dtr", ...) and its suffixes, in the order
// written here (",dtr" last: guided iterations evict as DTR does where the plan does not cover the
// budget).
struct CandidateName {
  std::string head;
  bool fifo = false, need = false, edf = false, wrap = false, dtr = false;
  std::string str() const {
    return head + (fifo ? kFifo : "") + (need ? kNeed : "") + (edf ? kEdf : "") + (wrap ? kWrap : "") + (dtr ? kDtrFallback : "");
  }
};
CandidateName parse_name(const std::string& full) {
  CandidateName n{full};
  auto peel = [&](const std::string& suffix, bool& flag) {
    if (!ends_with(n.head, suffix)) return;
    flag = true;
    n.head.resize(n.head.size() - suffix.size());
  };
  peel(kDtrFallback, n.dtr), peel(kWrap, n.wrap), peel(kEdf, n.edf), peel(kNeed, n.need), peel(kFifo, n.fifo);
  return n;
}
bool dtr_fallback(const std::string& name) { return parse_name(name).dtr; }
// Does the candidate (with or without ",dtr") swap persistent tensors across the boundary?
bool wraps(const std::string& full) { return parse_name(full).wrap; }

// "NAME", "NAME@F" (a Capuchin mode or compress policy planning for F of the budget) or
// "capuchin@F,wW" (the hybrid weighing a swap's stall W times against recompute time): the
// policy, or null when the name is not a candidate; the suffixes (CandidateName) set its options.
std::unique_ptr<Policy> make_candidate(const std::string& full) {
  const CandidateName parsed = parse_name(full);
  const std::string& name = parsed.head;
  const bool wrap = parsed.wrap, edf = parsed.edf, need = parsed.need;
  const size_t at = name.find('@');
  const std::string base = name.substr(0, at);
  bool known = false;
  for (const auto& n : planner_names()) known = known || n == base;
  for (const auto& n : compress_names()) known = known || n == base;
  if (!known) return nullptr;
  auto p = make_policy(base);
  if (auto* c = dynamic_cast<CheckpointPolicy*>(p.get())) c->set_budget_aware(true);
  if (auto* c = dynamic_cast<CapuchinPolicy*>(p.get())) c->set_feedback_iterations(kFeedbackIterations);
  if (at != std::string::npos) {
    auto* c = dynamic_cast<CapuchinPolicy*>(p.get());
    auto* z = dynamic_cast<CompressPolicy*>(p.get());
    char* end = nullptr;
    const std::string f = name.substr(at + 1);
    const double v = std::strtod(f.c_str(), &end);
    if ((!c && !z) || f.empty() || end == f.c_str() || !(v > 0 && v <= 1)) return nullptr;
    if (c) c->set_plan_fraction(v);
    if (z) z->set_plan_fraction(v);
    if (*end == ',' && end[1] == 'w' && base == "capuchin") {
      const char* ws = end + 2;
      const double w = std::strtod(ws, &end);
      if (end == ws || !(w > 0)) return nullptr;
      c->set_swap_cost_weight(w);
    }
    if (*end != '\0') return nullptr;
  }
  if (dtr_fallback(full) && !dynamic_cast<CapuchinPolicy*>(p.get()) && !dynamic_cast<CompressPolicy*>(p.get())) return nullptr;
  if (wrap) {
    auto* c = dynamic_cast<CapuchinPolicy*>(p.get());
    if (!c || base == "capuchin-recompute") return nullptr;  // a recompute-only plan swaps nothing
    c->set_wrap_persistent(true);
  }
  if (edf) {  // capuchin-recompute too: the LP's and the search's pins swap on it
    auto* c = dynamic_cast<CapuchinPolicy*>(p.get());
    if (!c) return nullptr;
    c->set_deadline_swap_outs(true);
  }
  if (need) {
    auto* c = dynamic_cast<CapuchinPolicy*>(p.get());
    if (!c) return nullptr;
    c->set_need_ordered_prefetches(true);
  }
  if (parsed.fifo) {
    auto* c = dynamic_cast<CapuchinPolicy*>(p.get());
    if (!c) return nullptr;  // capuchin-recompute too, as with ",edf"
    c->set_fifo_prefetches(true);
  }
  return p;
}

// The per-gap search (AutoPolicy::search): rehearsals run at once per round, and the smallest
// gain that counts (sim times are deterministic; this keeps the search from chasing rounding).
constexpr size_t kSearchBatch = 4;
constexpr double kMinGain = 1e-5;
// The finish's high placements (AutoPolicy::placement): requests of each fraction of the budget
// and over. Each won on some paper row (0.02 on ResNet-50 at 25% on p100-16g, 0.05 on BERT-base at
// 50% on h100-80g, 0.1 on GPT-2 small at 50% on p100-16g); 0.2 on none.
constexpr double kHighPlacementFractions[] = {0.02, 0.05, 0.1};
constexpr double kMinCostMs = 1e-3;
// The fastest candidates the summary names (the report has all).
constexpr size_t kSummaryCandidates = 4;
// The ",large-wraps" starts (AutoPolicy::plan): at most this many rehearsed (each leaves the
// persistent tensors under a fraction of the budget to the device unless pinned:
// AutoPolicy::set_min_wrap_fraction).
constexpr size_t kLargeWrapStarts = 4;
constexpr int kMaxLosses = 4;
constexpr int kCompressRehearsals = 128;
// The starts' climbs (AutoPolicy::choose): in the first round each start climbs for at most
// this part of the search's time (an equal share each); then the kResumedClimbs lowest so far
// share the rest (the others go on in what they leave).
constexpr double kFirstRoundShare = 0.4;
constexpr size_t kResumedClimbs = 2;
// The climb's headroom moves (AutoPolicy::search): the plan fraction changed by these, at most
// this many times per climb.
const std::vector<double> kHeadroomSteps = {-0.04, -0.02, 0.02, 0.04};
const std::vector<double> kStartHeadroomSteps = {-0.03, -0.02, -0.01, 0.01, 0.02, 0.03};
// The same for the hybrid's swap-stall weight: multiplied by these.
const std::vector<double> kStartWeightFactors = {0.5, 2};
constexpr int kHeadroomRounds = 3;
// The fastest Capuchin candidates rehearsed again with wrap swaps (",wrap").
constexpr size_t kWrapCandidates = 8;
// The window search (AutoPolicy::window_search): gaps per window, combinations rehearsed per
// window, and the anchors tried without a gain before it ends.
constexpr size_t kWindowGaps = 4;
constexpr size_t kWindowCombos = 64;
constexpr size_t kWindowAnchors = 8;
// The climb's "make room" moves (room_moves): the costliest swaps they start from, how much
// earlier their prefetch is issued, and the largest kept tensors tried as the room.
constexpr size_t kRoomAnchors = 3;
const std::vector<int> kRoomShifts = {2, 4, 8};
constexpr size_t kRoomPartners = 8;

// "lp", "lp-timed", "lp-whole" (at the first threshold), "lp@0.5", ... (at another): an LP
// start's name in the report.
std::string lp_variant_label(const AutoPolicy::LpVariant& v) {
  std::string s = v.timing == LpTiming::kLp ? "lp-timed" : v.timing == LpTiming::kWhole ? "lp-whole" : "lp";
  if (v.in_flight) s.insert(2, "f");  // "lpf", "lpf-timed", ...: the in-flight LP's (--auto-lp-model)
  if (v.compress) s.insert(2, "c");   // "lpc", "lpc-timed", ...: the compressing LP's
  if (v.integer) return "i" + s;  // "ilp", "ilp-timed", "ilp-whole"
  if (v.recompute_only) s += "-rec";
  if (v.capped) s += "-capped";
  if (v.threshold != AutoPolicy::kLpThresholds[0]) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "@%g", v.threshold);
    s += buf;
  }
  return s;
}

// Runs fn(0..n-1), a few at a time.
void run_parallel(size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < n;) fn(i);
  };
  const unsigned t = std::max(1u, std::min(kMaxRehearsalThreads, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < t; ++k) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
}

bool recomputable(const Graph& g, TensorId id) {
  const TensorInfo& t = g.tensor(id);
  return !t.persistent() && t.recomputable && t.producer >= 0 && is_recomputable(g.op(t.producer));
}

// pins with p replacing any pin of the same gap.
std::vector<PlanPin> with_pin(std::vector<PlanPin> pins, const PlanPin& p) {
  for (auto& q : pins)
    if (q.id == p.id && q.back_op == p.back_op) {
      q = p;
      return pins;
    }
  pins.push_back(p);
  return pins;
}

std::string pins_key(const std::vector<PlanPin>& pins) {
  std::string k;
  for (const auto& p : pins) k += to_string(p) + " ";
  return k;
}

// A plan's key among those the search tried: its candidate and its pins.
std::string plan_key(const std::string& policy, const std::vector<PlanPin>& pins) { return policy + " | " + pins_key(pins); }

// The fraction of the budget a candidate plans for (1 without "@F").
double plan_fraction(const std::string& full) {
  const size_t at = full.find('@');
  return at == std::string::npos ? 1.0 : std::strtod(full.c_str() + at + 1, nullptr);
}

// The hybrid's swap-stall weight (1 without ",wW"; ",wrap" is not one).
double swap_weight(const std::string& full) {
  const size_t at = full.find(",w");
  return at == std::string::npos || full.compare(at, std::string(kWrap).size(), kWrap) == 0
             ? 1.0 : std::strtod(full.c_str() + at + 2, nullptr);
}

// The Capuchin candidate `full` planning for fraction f of the budget with swap weight w, its
// ",wrap" and ",dtr" kept ("capuchin@0.85,w4,wrap,dtr" with 0.87 and 4: "capuchin@0.87,w4,wrap,dtr");
// nullopt where that is not a candidate (a weight on another mode than the hybrid, f outside (0, 1]).
std::optional<std::string> respelled(const std::string& full, double f, double w) {
  CandidateName n = parse_name(full);
  const std::string base = n.head.substr(0, n.head.find_first_of("@,"));
  if (base.rfind("capuchin", 0) != 0 || !(f > 0 && f <= 1) || !(w > 0)) return std::nullopt;
  char buf[64];
  std::snprintf(buf, sizeof buf, w == 1 ? "@%g" : "@%g,w%g", std::round(f * 100) / 100, w);
  n.head = base + buf;
  std::string out = n.str();
  if (!make_candidate(out)) return std::nullopt;
  return out;
}
std::optional<std::string> with_fraction(const std::string& full, double f) { return respelled(full, f, swap_weight(full)); }
// The candidate with wrap swaps (nullopt where it has them, or that is not a candidate).
std::optional<std::string> with_wrap_swaps(const std::string& full) {
  CandidateName n = parse_name(full);
  if (n.wrap) return std::nullopt;
  n.wrap = true;
  std::string out = n.str();
  if (!make_candidate(out)) return std::nullopt;
  return out;
}
// The candidate with its D2H queue in the other order (",edf" added or removed; nullopt where
// that is not a candidate).
std::optional<std::string> with_edf_toggled(const std::string& full) {
  CandidateName n = parse_name(full);
  n.edf = !n.edf;
  std::string out = n.str();
  if (!make_candidate(out)) return std::nullopt;
  return out;
}
std::optional<std::string> with_weight(const std::string& full, double w) {
  return full.rfind("capuchin@", 0) == 0 || full.rfind("capuchin,", 0) == 0 || full == "capuchin"
             ? respelled(full, plan_fraction(full), w) : std::nullopt;
}

// The neighbours of a rehearsed plan, most promising first: a gap that cost time is given another
// decision. A stalling swap: its prefetch earlier, or recomputed. A recomputation: swapped, kept
// (the greedy frees the bytes elsewhere), or run ahead of its access at the op before the
// iteration's largest stall inside its gap, where the compute stream would wait on a copy anyway.
// A gap the plan kept but the passive fallback evicted (and waited for): planned as a swap or a
// recomputation. A wrap swap (a persistent tensor over the iteration's end): its prefetch
// earlier, or kept (its cost may be the wait for its swap-out, which no prefetch moves).
// The bound is the gap's measured cost; its fraction orders the moves.
// A gap compressed instead (FreeLunch's codec for it; nullopt where none applies or the
// densities are unknown).
using CompressMove = std::function<std::optional<PlanPin>(const RehearsedGap&)>;

// FreeLunch's codec for the gap of `id` opened after op `evict_op` (gap_codec over the ops that
// use it after that), nullopt where none applies or its density is unknown.
std::optional<GapCodec> codec_of_gap(const Graph& g, TensorId id, int evict_op, const std::vector<std::optional<size_t>>& nonzeros,
                                     double element_ns_per_byte) {
  if (!compressible(g, id) || static_cast<size_t>(id) >= nonzeros.size()) return std::nullopt;
  auto base = [&](TensorId t) {
    while (g.tensor(t).view_of != kNoTensor) t = g.tensor(t).view_of;
    return t;
  };
  std::vector<int> later;  // the ops that use it after the gap opens
  for (const Op& op : g.ops()) {
    if (op.index <= evict_op) continue;
    bool uses = false;
    for (TensorId t : op.inputs) uses = uses || base(t) == id;
    for (TensorId t : op.outputs) uses = uses || base(t) == id;
    if (uses) later.push_back(op.index);
  }
  return gap_codec(g, id, later, nonzeros[static_cast<size_t>(id)], CompressionOptions{}, element_ns_per_byte);
}

// Per op, the swap-in stall the rehearsal measured at it (where an ahead-of-access recomputation
// costs nothing extra: the compute stream waits there anyway).
std::vector<double> stall_map(const Graph& g, const RehearsalResult& r) {
  std::vector<double> stall_at(g.num_ops() + 1, 0.0);
  for (const auto& x : r.gaps)
    if (x.decision == CapuchinDecision::kSwap && x.back_op >= 0 && static_cast<size_t>(x.back_op) < stall_at.size())
      stall_at[static_cast<size_t>(x.back_op)] += x.cost_ms;
  return stall_at;
}

// The moves of one gap, each with its promise (the share of the gap's cost it may save).
std::vector<std::pair<double, PlanPin>> gap_moves(const Graph& g, const RehearsalResult& r, const RehearsedGap& x,
                                                  const std::vector<double>& stall_at, const CompressMove& compress) {
  std::vector<std::pair<double, PlanPin>> moves;
  if (x.cost_ms <= kMinCostMs) return moves;
  if (x.decision != CapuchinDecision::kCompress && compress && !x.wrap)
    if (auto pin = compress(x)) moves.push_back({0.4 * x.cost_ms, *pin});
  if (x.decision == CapuchinDecision::kCompress) {
    moves.push_back({0.5 * x.cost_ms, {x.id, x.back_op, CapuchinDecision::kSwap}});
    if (recomputable(g, x.id)) moves.push_back({0.5 * x.cost_ms, {x.id, x.back_op, CapuchinDecision::kRecompute}});
  } else if (x.decision == CapuchinDecision::kSwap) {
    PlanPin earlier{x.id, x.back_op, CapuchinDecision::kSwap};  // from the pin's trigger (an LP-timed one's too)
    for (const auto& p : r.pins)
      if (p.id == x.id && p.back_op == x.back_op && p.decision == CapuchinDecision::kSwap)
        earlier.trigger_shift = p.trigger_shift, earlier.trigger_op = p.trigger_op;
    for (const auto& [promise, more] : {std::pair{1.0, 2}, std::pair{0.9, 8}}) {
      PlanPin m = earlier;
      m.trigger_shift += more;
      moves.push_back({promise * x.cost_ms, m});
    }
    if (x.wrap) moves.push_back({0.5 * x.cost_ms, {x.id, x.back_op, CapuchinDecision::kKeep}});
    if (recomputable(g, x.id) && !x.wrap) moves.push_back({0.5 * x.cost_ms, {x.id, x.back_op, CapuchinDecision::kRecompute}});
  } else if (x.decision == CapuchinDecision::kRecompute) {
    int at = -1;
    for (int op = x.evict_op + 2; op < x.back_op; ++op)  // recomputed after op - 1, in (evict_op, back_op - 1)
      if (stall_at[static_cast<size_t>(op)] > kMinCostMs && (at < 0 || stall_at[static_cast<size_t>(op)] >= stall_at[static_cast<size_t>(at)])) at = op;
    if (at >= 0)
      moves.push_back({std::min(x.cost_ms, stall_at[static_cast<size_t>(at)]), {x.id, x.back_op, CapuchinDecision::kRecompute, 0, at - 1}});
    moves.push_back({0.75 * x.cost_ms, {x.id, x.back_op, CapuchinDecision::kSwap}});
    moves.push_back({0.25 * x.cost_ms, {x.id, x.back_op, CapuchinDecision::kKeep}});
  } else if (x.wrap) {  // a persistent tensor kept, evicted by the fallback: swapped over the iteration's end
    moves.push_back({0.75 * x.cost_ms, {x.id, x.back_op, CapuchinDecision::kSwap}});
    moves.push_back({0.6 * x.cost_ms, {x.id, x.back_op, CapuchinDecision::kSwap, 8}});
  } else {  // kept by the plan, evicted by the fallback: planned instead
    moves.push_back({0.75 * x.cost_ms, {x.id, x.back_op, CapuchinDecision::kSwap}});
    if (recomputable(g, x.id)) moves.push_back({0.5 * x.cost_ms, {x.id, x.back_op, CapuchinDecision::kRecompute}});
  }
  return moves;
}

// Do two gaps' intervals share an op? A wrap gap is [evict_op, end) and [0, back_op].
bool overlap(const RehearsedGap& a, const RehearsedGap& b) {
  auto parts = [](const RehearsedGap& x) {
    return x.wrap ? std::vector<std::pair<int, int>>{{x.evict_op, std::numeric_limits<int>::max()}, {0, x.back_op}}
                  : std::vector<std::pair<int, int>>{{x.evict_op, x.back_op}};
  };
  for (const auto& [lo, hi] : parts(a))
    for (const auto& [lo2, hi2] : parts(b))
      if (hi >= lo2 && lo <= hi2) return true;
  return false;
}

std::vector<PlanPin> neighbours(const Graph& g, const RehearsalResult& r, const CompressMove& compress) {
  std::vector<std::pair<double, PlanPin>> moves;
  const std::vector<double> stall_at = stall_map(g, r);
  for (const auto& x : r.gaps)
    for (auto& m : gap_moves(g, r, x, stall_at, compress)) moves.push_back(std::move(m));
  std::stable_sort(moves.begin(), moves.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<PlanPin> out;
  for (auto& m : moves) out.push_back(m.second);
  return out;
}

// Each tensor's accesses in op order (a view's are its base's).
std::vector<std::vector<int>> accesses(const Graph& g) {
  std::vector<std::vector<int>> acc(g.num_tensors());
  auto base = [&](TensorId t) {
    while (g.tensor(t).view_of != kNoTensor) t = g.tensor(t).view_of;
    return static_cast<size_t>(t);
  };
  for (const Op& op : g.ops()) {
    for (TensorId t : op.inputs) acc[base(t)].push_back(op.index);
    for (TensorId t : op.outputs) acc[base(t)].push_back(op.index);
  }
  return acc;
}

// "Make room": a swap that waits at the peak (a late prefetch, or a swap-out the forward waits
// for to free its block) gains nothing from an earlier prefetch alone, because the memory is full
// where it would start; the tensors that fill it cost nothing where they are, so no gap's move
// (gap_moves, which starts from a gap that cost time) touches them. The compound move: the
// prefetch of one of the kRoomAnchors costliest swaps kRoomShifts ops earlier, together with one
// of the kRoomPartners largest kept tensors alive over the new window recomputed or swapped.
// Each move: its pins and its name.
std::vector<std::pair<std::vector<PlanPin>, std::string>> room_moves(const Graph& g, const RehearsalResult& r,
                                                                     const std::vector<std::vector<int>>& acc) {
  std::vector<std::pair<std::vector<PlanPin>, std::string>> out;
  std::vector<const RehearsedGap*> anchors;
  std::vector<bool> planned(g.num_tensors(), false);  // tensors with a gap the plan swaps or recomputes
  for (const auto& x : r.gaps) {
    if (x.decision != CapuchinDecision::kKeep && static_cast<size_t>(x.id) < planned.size()) planned[static_cast<size_t>(x.id)] = true;
    if (x.decision == CapuchinDecision::kSwap && !x.wrap && x.cost_ms > kMinCostMs && x.trigger_op >= 0) anchors.push_back(&x);
  }
  std::stable_sort(anchors.begin(), anchors.end(), [](const auto* a, const auto* b) { return a->cost_ms > b->cost_ms; });
  anchors.resize(std::min(anchors.size(), kRoomAnchors));
  for (const RehearsedGap* a : anchors) {
    PlanPin earlier{a->id, a->back_op, CapuchinDecision::kSwap};
    for (const auto& p : r.pins)
      if (p.id == a->id && p.back_op == a->back_op && p.decision == CapuchinDecision::kSwap)
        earlier.trigger_shift = p.trigger_shift, earlier.trigger_op = p.trigger_op;
    for (const int more : kRoomShifts) {
      PlanPin m = earlier;
      m.trigger_shift += more;
      const int lo = std::max(0, a->trigger_op - more), hi = a->back_op;
      // The partners: kept, not persistent, a gap of theirs spanning [lo, hi]; largest first.
      std::vector<std::pair<size_t, PlanPin>> partners;
      for (size_t t = 0; t < acc.size(); ++t) {
        const auto id = static_cast<TensorId>(t);
        if (planned[t] || id == a->id || acc[t].size() < 2 || g.tensor(id).persistent()) continue;
        for (size_t i = 0; i + 1 < acc[t].size(); ++i)
          if (acc[t][i] < lo && acc[t][i + 1] > hi) {
            partners.push_back({g.tensor(id).bytes(), PlanPin{id, acc[t][i + 1], CapuchinDecision::kSwap}});
            break;
          }
      }
      std::stable_sort(partners.begin(), partners.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
      partners.resize(std::min(partners.size(), kRoomPartners));
      for (auto& [bytes, p] : partners)
        for (const CapuchinDecision d : {CapuchinDecision::kRecompute, CapuchinDecision::kSwap}) {
          if (d == CapuchinDecision::kRecompute && !recomputable(g, p.id)) continue;
          p.decision = d;
          out.push_back({{m, p}, "room: " + to_string(m) + " + " + to_string(p)});
        }
    }
  }
  return out;
}

// A guided plan and whether it fits (Capuchin's or a compression plan); false when not guided.
bool guided_plan_fits(const Policy& p, bool* fits) {
  if (const auto* c = dynamic_cast<const CapuchinPolicy*>(&p); c && c->guided()) return *fits = c->plan().fits, true;
  if (const auto* z = dynamic_cast<const CompressPolicy*>(&p); z && z->guided()) return *fits = z->plan().fits, true;
  return false;
}

}  // namespace

const std::vector<std::string>& auto_candidates() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = planner_names();
    for (const char* f : kPlanFractions)
      for (const char* mode : {"capuchin", "capuchin-recompute", "capuchin-swap"}) n.push_back(std::string(mode) + "@" + f);
    for (const char* f : {"1", "0.97", "0.94", "0.9"})
      for (const char* w : kSwapCostWeights) n.push_back(std::string("capuchin@") + f + ",w" + w);
    for (const char* f : {"1", "0.97", "0.94", "0.9", "0.85"})
      for (const char* mode : {"capuchin", "capuchin-recompute"}) n.push_back(std::string(mode) + "@" + f + kDtrFallback);
    for (const char* f : {"1", "0.94"})
      for (const char* w : kSwapCostWeights) n.push_back(std::string("capuchin@") + f + ",w" + w + kDtrFallback);
    // The compression candidates last (rehearsed only with densities).
    for (const char* f : {"", "@0.97", "@0.94", "@0.9"}) n.push_back(std::string("compress+capuchin") + f);
    n.push_back("compress+swap");
    for (const char* f : {"", "@0.94"}) n.push_back(std::string("compress+capuchin") + f + kDtrFallback);
    return n;
  }();
  return names;
}

std::string unknown_candidate_message(const std::string& name) {
  std::string accepted;
  for (const auto& c : planner_names()) accepted += (accepted.empty() ? "" : ", ") + c;
  for (const auto& c : compress_names()) accepted += ", " + c;
  return "auto: unknown candidate '" + name + "'; accepted: " + accepted +
         ", or a Capuchin mode or compress policy with @F, the fraction of the budget it plans for (0 < F <= 1)";
}

bool is_auto_candidate(const std::string& name) { return make_candidate(name) != nullptr; }

AutoPolicy::AutoPolicy(std::string forced, std::vector<PlanPin> pins)
    : forced_(std::move(forced)), candidates_(auto_candidates()),
      measuring_(std::make_unique<CapuchinPolicy>(CapuchinMode::kHybrid)), pins_(std::move(pins)) {
  static_cast<CapuchinPolicy&>(*measuring_).set_feedback_iterations(kFeedbackIterations);
  if (!forced_.empty() && !make_candidate(forced_)) throw std::invalid_argument(unknown_candidate_message(forced_));
}

AutoPolicy::~AutoPolicy() = default;

void AutoPolicy::attach(const MemoryView& view) {
  view_ = &view;
  measuring_->attach(view);
}

void AutoPolicy::begin_iteration(int iteration) {
  if (pending_) {
    install(pending_->first);
    runs_.push_back({pending_->first, -1, {}, pending_->second});
    pending_.reset();
    plan_changed_ = true;
  }
  current().begin_iteration(iteration);
}

// ---------------------------------------------------------------- the replay guard

double AutoPolicy::PlanRun::mean_ms() const {
  double sum = 0;
  for (double m : ms) sum += m;
  return ms.empty() ? 0 : sum / static_cast<double>(ms.size());
}

AutoPolicy::PlanKind AutoPolicy::kind_of(const RehearsalResult& r) {
  const bool compresses = is_compress_candidate(parse_name(r.policy).head) ||
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
  if (!next) throw std::logic_error("auto: '" + p.policy + "' is not a candidate");
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
  fallback_ = dtr_fallback(p.policy) ? make_policy("dtr") : nullptr;
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
    std::snprintf(why, sizeof why, "%s ran %.1fx its prediction of %.2f ms", run.plan.policy.c_str(), time_ms / predicted, predicted);
    pending_.emplace(std::move(*next), why);
  } else {
    guard_stopped_ = true;
    guard_note_ = "no rehearsed plan relies on fewer modelled costs";
  }
}
std::vector<ConvAlgo> AutoPolicy::conv_algorithms() const { return current().conv_algorithms(); }
void AutoPolicy::check_deadline() const {
  if (has_deadline_ && std::chrono::steady_clock::now() > deadline_) throw RehearsalTimeout();
}

double AutoPolicy::elapsed_ms(std::chrono::steady_clock::time_point t0, size_t item) const {
  if (clock_ == PlanningClock::kWall)
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The wall cap: past it, every limit counts as reached. The finish's rehearsals (the start state's,
  // the warm start's) still run after that, so the search stops their reserve earlier, at the wall
  // time the rehearsals so far took per counted millisecond.
  const double cap = wall_cap_ms();
  if (cap > 0 && !wall_capped_) {
    const double clock_ms = static_cast<double>(clock_ns_.load()) * 1e-6;
    const double wall_per_clock = clock_ms > 0 ? static_cast<double>(rehearsals_wall_us_.load()) * 1e-3 / clock_ms : 1.0;
    const double reserve = wall_reserve_ms_.load() * std::max(1.0, wall_per_clock);
    if (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - planning_t0_).count() >= cap - reserve)
      wall_capped_ = true;
  }
  if (cap > 0 && wall_capped_) {
    return time_limit_ms_ + kSearchTimeMs + 1;
  }
  // Within a batch, its item i starts after the i before it, shared over the workers: the same
  // reading whichever thread runs it, and however fast.
  // (The rehearsals of a batch add their own work to the clock as they end; an item's reading
  // counts only the ops of the items before it, which do not depend on the order they end in.)
  const double ns = batch_base_ >= 0
                        ? static_cast<double>(batch_base_) + static_cast<double>(item) * kRehearsedIterations * iteration_ms_ * 1e6
                        : static_cast<double>(clock_ns_.load());
  return ns * 1e-6 / kClockWorkers;
}

double AutoPolicy::clock_cost_ns(const RehearsalResult& r, int iterations) const {
  if (!r.trained) return 0;
  return iterations * (static_cast<double>(r.recomputed_ops) * kClockNsPerRecompute +
                       static_cast<double>(r.compactions) * kClockNsPerCompaction +
                       static_cast<double>(r.evictions) * eviction_ns_);
}

double AutoPolicy::rehearsal_ms(const RehearsalResult& r, int iterations) const {
  if (clock_ == PlanningClock::kWall) return r.wall_ms;
  return (iterations * iteration_ms_ + clock_cost_ns(r, iterations) * 1e-6) / kClockWorkers;
}

RehearsalResult AutoPolicy::rehearse_counted(const std::string& policy, const RehearsalSetup& setup) {
  rehearsed_iterations_ += setup.iterations;
  clock_ns_ += std::llround(setup.iterations * iteration_ms_ * 1e6);
  auto charged = [&](RehearsalResult r) {
    const auto ns = std::llround(clock_cost_ns(r, setup.iterations));
    clock_ns_ += ns, charged_ns_ += ns;
    rehearsals_wall_us_ += std::llround(r.wall_ms * 1e3);
    if (r.trained) {
      charged_recomputes_ += static_cast<long long>(r.recomputed_ops) * setup.iterations;
      charged_compactions_ += static_cast<long long>(r.compactions) * setup.iterations;
      charged_evictions_ += static_cast<long long>(r.evictions) * setup.iterations;
    }
    return r;
  };
  if (clock_ == PlanningClock::kWall || setup.time_limit_ms == 0) return charged(rehearser_(policy, setup));
  // Counted, and cut only where it runs far slower than the clock counts it (a plan that
  // thrashes, recomputing chains over and over: the wall clock would cut it too).
  RehearsalSetup net = setup;
  net.time_limit_ms = std::max(kClockNetMinMs, kClockNetFactor * setup.iterations * iteration_ms_);
  RehearsalResult r = rehearser_(policy, net);
  if (!r.trained && r.error.find("time limit") != std::string::npos) {
    ++clock_net_cuts_;
    r.error = "not rehearsed to the end: over " + format_number(net.time_limit_ms / 1e3) +
              " s, far slower than the planning clock counts it";
  }
  return charged(std::move(r));
}

void AutoPolicy::parallel(size_t n, const std::function<void(size_t)>& fn) {
  const bool outer = batch_base_ < 0;
  if (outer) batch_base_ = clock_ns_.load();
  run_parallel(n, fn);
  if (outer) batch_base_ = -1;
}

// Count non-zeros in the measured iteration when a compression candidate may run.
bool AutoPolicy::counts_nonzeros() const {
  if (!forced_.empty()) return is_compress_candidate(forced_);
  return std::any_of(candidates_.begin(), candidates_.end(), is_compress_candidate);
}

std::vector<Action> AutoPolicy::after_op(int op_index) {
  check_deadline();
  if (!active_ && view_ && op_index >= 0 && counts_nonzeros()) {
    // Measured iteration: how dense each compressible output is, while it is on the device (as
    // CompressPolicy's own measured iteration counts; on sim, the recorded densities).
    const Graph& g = view_->graph();
    nonzeros_.resize(g.num_tensors());
    for (TensorId out : g.op(op_index).outputs)
      if (compressible(g, out)) nonzeros_[static_cast<size_t>(out)] = view_->count_nonzeros(out);
  }
  return current().after_op(op_index);
}

// The densities the compression candidates are rehearsed with: the run's own table on sim, else
// one built from the counts of the measured iteration; null (and why) without a count for every
// compressible output.
std::shared_ptr<const DensityTable> AutoPolicy::measured_densities(std::string* why) const {
  const Graph& g = view_->graph();
  auto table = std::make_shared<DensityTable>();
  table->source = "auto's measured iteration";
  for (const TensorInfo& t : g.tensors()) {
    if (!compressible(g, t.id)) continue;
    const size_t id = static_cast<size_t>(t.id);
    if (id >= nonzeros_.size() || !nonzeros_[id]) {
      *why = "not rehearsed: no density measured for '" + t.name +
             "' (on sim, compression candidates need --densities FILE from a cpu run's --densities-out)";
      return nullptr;
    }
    table->tensors[density_key(t)] = {static_cast<uint64_t>(t.shape.numel()), *nonzeros_[id]};
  }
  if (table->tensors.empty()) {
    *why = "not rehearsed: no ReLU or max-pool output to compress";
    return nullptr;
  }
  if (auto recorded = view_->densities()) return recorded;  // sim: exactly what the run counts from
  return table;
}

std::vector<Victim> AutoPolicy::choose_victims(size_t bytes, const MemoryView& view) {
  check_deadline();
  bool fits = false;
  if (active_ && fallback_ && guided_plan_fits(*active_, &fits)) {
    // As Capuchin's own fallback: a request within the budget is fragmentation (compacted).
    const auto need = guided_fallback_bytes(bytes, view.allocated(), view.budget(), fits, compact_unfit_);
    return need ? fallback_->choose_victims(*need, view) : std::vector<Victim>{};
  }
  if (active_) return active_->choose_victims(bytes, view);
  // Measuring: swap the least recently used, parameters and optimizer state last. Swapping (not
  // dropping) never runs out where a recomputation's locked inputs would (measuring under DTR's
  // eviction stopped ResNet-50 at 50% at batch 76 where swapping reaches 152); keeping the
  // persistent tensors in place leaves the arena as a recomputing policy's own first iteration
  // does (after plain LRU swapping, DTR ran 5% slower than on its own).
  std::vector<TensorView> cands = view.evictable_views();
  // In that order (a total one: ids are unique), taken from a heap: a request needs few of them.
  const auto later = [](const TensorView& a, const TensorView& b) {
    if (a.persistent != b.persistent) return a.persistent;
    return a.last_access != b.last_access ? a.last_access > b.last_access : a.id > b.id;
  };
  std::make_heap(cands.begin(), cands.end(), later);
  std::vector<Victim> out;
  size_t freed = 0, room = view.host_room();
  for (auto end = cands.end(); end != cands.begin() && freed < bytes; --end) {
    std::pop_heap(cands.begin(), end, later);
    const TensorView& c = *(end - 1);
    if (c.bytes <= room) {
      out.push_back({c.id, EvictAction::kSwap});
      room -= c.bytes;
    } else if (view.can_recompute(c.id)) {
      out.push_back({c.id, EvictAction::kDrop});  // the host is full: recomputed instead
    } else {
      continue;
    }
    freed += c.bytes;
  }
  return out;
}

void AutoPolicy::on_restore(TensorId id, int op_index, Residency from, double waited_ms) {
  current().on_restore(id, op_index, from, waited_ms);
}
std::optional<size_t> AutoPolicy::smallest_working_budget() const { return current().smallest_working_budget(); }

void AutoPolicy::end_iteration(const AccessTrace& trace) {
  measured_last_ = !active_;
  if (active_) {
    active_->end_iteration(trace);
    return;
  }
  if (!view_) throw std::logic_error("auto: end_iteration before attach");
  choose(trace);
}

void AutoPolicy::choose(const AccessTrace& trace) {
  const auto t0 = std::chrono::steady_clock::now();
  planning_t0_ = t0;
  wall_capped_ = false;
  wall_reserve_ms_ = 0;
  rehearsed_iterations_ = 0;
  clock_ns_ = 0, charged_ns_ = 0;
  charged_recomputes_ = 0, charged_compactions_ = 0, charged_evictions_ = 0, rehearsals_wall_us_ = 0;
  clock_net_cuts_ = 0;
  iteration_ms_ = static_cast<double>(view_->graph().num_ops()) * kClockNsPerOp * 1e-6;
  eviction_ns_ = static_cast<double>(view_->graph().num_tensors()) * kClockNsPerEvictionTensor;
  chosen_ = forced_;
  if (chosen_.empty() && rehearser_) {
    RehearsalSetup s;
    s.graph = &view_->graph();
    s.budget = view_->budget();
    s.gpu = view_->modelled_gpu();
    s.allocator = view_->allocator_name();
    s.host_budget = view_->host_budget();
    if (s.gpu.empty()) {  // not on sim: model the measurement
      s.gpu = kRehearsalGpu;
      if (trace.op_ms.size() == view_->graph().num_ops()) s.op_ms = trace.op_ms;
      s.link_ms_per_byte = trace.swap_ns_per_byte > 0 ? trace.swap_ns_per_byte * 1e-6 : view_->copy_ms_per_byte();
      // Queued copies each add their call and start (ResNet-50 at 50% on the H200 swaps 495
      // tensors each way and waited 4.5 ms on copies that the bytes alone put at 0.01 ms).
      if (queued_copies_) s.copy_queued_ms = view_->copy_queued_ms();
      link_ms_per_byte_ = s.link_ms_per_byte, copy_queued_ms_ = s.copy_queued_ms;
      copy_latency_ms_ = view_->copy_latency_ms();
      // and the device's workspaces (cuDNN's on cuda, far above the op's own figures: VGG-16's
      // first layers ask 784 MiB), so that a plan that fits the rehearsal fits the device
      for (const Op& op : view_->graph().ops()) {
        s.workspace.push_back(view_->device_workspace_bytes(op, ConvAlgo::kFast));
        s.workspace_lean.push_back(view_->device_workspace_bytes(op, ConvAlgo::kLean));
      }
    }
    std::string no_densities;
    if (counts_nonzeros()) densities_ = measured_densities(&no_densities);
    s.densities = densities_;
    std::vector<double> op_ns;
    for (double ms : trace.op_ms) op_ns.push_back(ms * 1e6);
    relu_ns_per_byte_ = element_ns_per_byte_ = element_ns_per_byte(view_->graph(), op_ns);
    // Off sim the codec's own time where the memory manager measured it, not a model of it (the
    // modelled GPU's bandwidth charged the H200's single-block bitmask kernel, ~8 ms a call, as
    // microseconds).
    codec_rate_ = view_->modelled_gpu().empty() && densities_ ? view_->codec_rate() : std::nullopt;
    if (codec_rate_) {
      s.codec_latency_ms = codec_rate_->latency_ms, s.codec_ms_per_byte = codec_rate_->ms_per_byte;
      element_ns_per_byte_ = codec_rate_->ms_per_byte * 1e6;
    }
    {  // What no swap / recompute plan avoids, from the same measurement (the report's "bound").
      PlannerInput in = planner_input(view_->graph(), trace, s.budget);
      if (in.swap_ns_per_byte <= 0) in.swap_ns_per_byte = s.link_ms_per_byte * 1e6;
      const auto b0 = std::chrono::steady_clock::now();
      bound_ = overhead_bound(in);
      bound_wall_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - b0).count();
      LpOptions lo;
      lo.time_limit_s = lp_seconds_;
      lo.integer_time_limit_s = ilp_seconds_;
      // The in-flight model beside it (another core; no integer program), for the starts.
      // Or the LP that also compresses (where the densities are known).
      lp_in_flight_ = {};
      lp_compress_ = {};
      std::thread flight;
      std::exception_ptr flight_error;
      // A compressible output with its count (none in GPT / BERT), and LP starts to round from it
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
      // The LPs rounded: the bound's unless in-flight only, the in-flight one's where it has an
      // optimum (its rows may cover no op where a gap's copies take a segment each way: BERT-base
      // at 25%).
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
    rehearsals_.clear();
    const RehearsalResult* best = nullptr;
    // The planners as they are first, then the search's variants while the time limit lasts; the
    // rehearsals are independent (each its own sim backend and memory manager): a few at a time.
    rehearsals_.assign(candidates_.size(), {});
    parallel(candidates_.size(), [&](size_t i) {
      const double spent = elapsed_ms(t0, i);
      if (spent > time_limit_ms_ && i > 0) {
        rehearsals_[i].policy = candidates_[i];
        rehearsals_[i].error = "not rehearsed: planning time limit";
        return;
      }
      if (is_compress_candidate(candidates_[i]) && !s.densities) {
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
    // The LP's rounded plans, pinned on the fastest Capuchin-based candidates without and with
    // wrap swaps: more starts for the search (the greedy plans what the pins leave).
    lp_rehearsals_.clear();
    lp_variant_of_.clear();
    if (!lp_variants_.empty() && search_rehearsals_ > 0 && lp_rehearsals_count_ > 0) {
      std::vector<const RehearsalResult*> plain, wrapped;
      for (const auto& r : rehearsals_)
        if (r.trained && !r.gaps.empty()) (wraps(r.policy) ? wrapped : plain).push_back(&r);
      auto faster = [](const RehearsalResult* a, const RehearsalResult* b) { return a->time_ms < b->time_ms; };
      std::stable_sort(plain.begin(), plain.end(), faster);
      std::stable_sort(wrapped.begin(), wrapped.end(), faster);
      std::vector<std::string> names;
      for (size_t i = 0; i < plain.size() && i < kLpStarts; ++i) names.push_back(plain[i]->policy);
      if (!wrapped.empty()) names.push_back(wrapped[0]->policy);
      names.resize(std::min(names.size(), static_cast<size_t>(lp_rehearsals_count_)));
      lp_rehearsals_.resize(names.size() * lp_variants_.size());
      for (size_t j = 0; j < lp_rehearsals_.size(); ++j) lp_variant_of_.push_back(j / std::max<size_t>(1, names.size()));
      parallel(lp_rehearsals_.size(), [&](size_t j) {
        auto& r = lp_rehearsals_[j];
        const std::string& name = names[j % names.size()];
        r.policy = name;
        const double spent = elapsed_ms(t0, j);
        if (spent > time_limit_ms_) {
          r.error = "not rehearsed: planning time limit";
          return;
        }
        RehearsalSetup si = s;
        si.pins = lp_variants_[lp_variant_of_[j]].pins;
        si.time_limit_ms = std::max(1.0, time_limit_ms_ - spent);
        r = rehearse_counted(name, si);
      });
    }
    // The search climbs from the fastest plan without wrap swaps, from the fastest with them and
    // from the fastest rehearsal of each of the LP's rounded plans, and keeps the fastest end:
    // where a climb ends depends on where it starts more than on the start's own time (the timed
    // pins rehearse slower where their prefetches crowd the memory, yet their climb can end lower).
    const RehearsalResult* other = nullptr;
    std::vector<const RehearsalResult*> lp_best(lp_variants_.size(), nullptr);
    for (const auto& r : rehearsals_) {
      if (r.trained && !wraps(r.policy) && (!best || r.time_ms < best->time_ms)) best = &r;
      if (r.trained && wraps(r.policy) && (!other || r.time_ms < other->time_ms)) other = &r;
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
    if (best) {
      chosen_ = best->policy;
      chosen_result_ = *best;
      pins_ = best->pins;
      start_ms_ = best->time_ms, start_ = "candidate", start_policy_ = best->policy;
      // Each start is climbed with an equal share of what the planning limit leaves (a share one
      // leaves unused goes to the next), fastest start first; the fastest end is kept.
      std::vector<const RehearsalResult*> starts;
      if (!best->gaps.empty()) starts.push_back(best);
      if (other) starts.push_back(other);
      for (const RehearsalResult* r : lp_best)
        if (r) starts.push_back(r);
      // The start state's and the warm start's rehearsals come out of the search's time.
      start_state_reserve_ms_ =
          (kStartStateRehearsals + kWarmStartRehearsals + static_cast<double>(std::max<size_t>(1, finished_plans_) - 1) * kFinishRehearsals) *
          rehearsal_ms(*best);
      wall_reserve_ms_ = start_state_reserve_ms_;
      // The two candidates' headroom refined: each planned for a little more or less of the
      // budget; the fastest, where it beats its candidate, is one more start (not instead: the
      // climb's end depends on its start more than on the start's own time).
      headroom_rehearsals_.clear();
      for (const RehearsalResult* r : {best, other}) {
        if (!r || r->gaps.empty()) continue;
        std::vector<std::string> names;
        for (const double d : kStartHeadroomSteps)
          if (auto f = with_fraction(r->policy, plan_fraction(r->policy) + d)) names.push_back(*f);
        for (const double m : kStartWeightFactors)
          if (auto f = with_weight(r->policy, swap_weight(r->policy) * m)) names.push_back(*f);
        std::vector<RehearsalResult> res(names.size());
        parallel(names.size(), [&](size_t i) {
          RehearsalSetup si = s;
          si.pins = r->pins;
          const double spent = elapsed_ms(t0, i);
          si.time_limit_ms = std::max(1.0, search_limit_ms() - spent);
          res[i] = rehearse_counted(names[i], si);
        });
        const RehearsalResult* fastest = nullptr;
        for (const auto& x : res)
          if (x.trained && !x.gaps.empty() && x.time_ms < r->time_ms && (!fastest || x.time_ms < fastest->time_ms)) fastest = &x;
        if (fastest) headroom_rehearsals_.push_back(*fastest);
      }
      for (const auto& x : headroom_rehearsals_) starts.push_back(&x);
      std::vector<std::string> labels;  // what each start is, for the report
      for (const RehearsalResult* r : starts) {
        std::string l = "candidate";
        for (size_t v = 0; v < lp_best.size(); ++v)
          if (r == lp_best[v]) l = lp_variant_label(lp_variants_[v]);
        for (const auto& h : headroom_rehearsals_)
          if (r == &h) l = "headroom";
        labels.push_back(l);
      }
      // Each start with its D2H queue in the other order (deadline or eviction order, the same
      // pins): where that is faster, one more start. Neither order wins everywhere (a swap-out
      // that goes ahead delays the ones it passes, which then hold their blocks longer), and a
      // faster start need not climb lower, so it does not replace its origin.
      std::vector<RehearsalResult> edf_rehearsals(starts.size());  // outlives the climbs that start from them
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
        starts.push_back(&x), labels.push_back(labels[i]);
      }
      // Each start with a restored start state (StartState::kRestored; the search rehearses
      // packed ones): one more start, whose climb rehearses restored ones. A plan suits one start
      // state or the other (GPT-2 small at 50% on h100-80g: packing moves 391 blocks per
      // iteration, the restore 128), so the choice is made before the climb, and not only where
      // the restored start is faster: ResNet-50 at 25% on p100-16g climbs to 1.365x from a
      // restored start that was not, 1.412x without it.
      const size_t packed_starts = starts.size();
      // The starts `origins` rehearsed again, all at once, each as it was rehearsed (pins, start
      // state, fallback, wrap floor) but for the one setting `vary` changes.
      auto rehearse_twins = [&](const std::vector<size_t>& origins, const std::function<void(RehearsalSetup&)>& vary) {
        std::vector<RehearsalResult> res(origins.size());
        parallel(origins.size(), [&](size_t i) {
          const RehearsalResult& o = *starts[origins[i]];
          RehearsalSetup si = s;
          si.pins = o.pins, si.start_state = o.start_state, si.compact_unfit = o.compact_unfit, si.min_wrap_bytes = o.min_wrap_bytes;
          vary(si);
          const double spent = elapsed_ms(t0, i);
          si.time_limit_ms = std::max(1.0, search_limit_ms() - spent);
          res[i] = rehearse_counted(o.policy, si);
        });
        return res;
      };
      std::vector<size_t> packed(packed_starts);
      for (size_t i = 0; i < packed_starts; ++i) packed[i] = i;
      const std::vector<RehearsalResult> restored_rehearsals = rehearse_twins(packed, [](RehearsalSetup& x) { x.start_state = StartState::kRestored; });
      restored_starts_ = 0;
      duplicate_climbs_ = 0;
      for (size_t i = 0, n = starts.size(); i < n; ++i) {
        const auto& x = restored_rehearsals[i];
        if (!x.trained || x.gaps.empty()) continue;
        ++restored_starts_;
        starts.push_back(&x), labels.push_back(labels[i] + ",restored");
      }
      // Each packed start again with the other fallback where its plan does not fit
      // (compact_unfit: compact within the budget, evict the shortfall over it): one more start
      // where that rehearses another time. Which fallback wins depends on the row and shows only
      // after the climb: on BERT-base at 25% on h100-80g the LRU evictions of the whole request
      // cost 35 ms of stall; on VGG-16 at 50% on h100-80g the start compacting is faster but
      // climbs to a slower plan (the evictions within the budget made room for the prefetches).
      // Not the restored starts too: their twins climbed as the packed ones' did, in half the time.
      const std::vector<RehearsalResult> compact_rehearsals =
          rehearse_twins(compact_starts_on_ ? packed : std::vector<size_t>{}, [](RehearsalSetup& x) { x.compact_unfit = true; });
      compact_starts_ = 0;
      for (size_t i = 0; i < compact_rehearsals.size(); ++i) {
        const auto& x = compact_rehearsals[i];
        if (!x.trained || x.gaps.empty() || std::abs(x.time_ms - starts[i]->time_ms) <= kMinGain * starts[i]->time_ms) continue;
        ++compact_starts_;
        starts.push_back(&x), labels.push_back(labels[i] + ",compact");
      }
      // The kLargeWrapStarts fastest packed starts (or their compacting twins) whose plans swap a
      // persistent tensor under a floor over the iteration's end (min_wrap_fraction_ of the
      // budget), again with the greedy leaving those on the device (CapuchinPolicy::
      // set_min_wrap_bytes): where that rehearses faster, one more start. The small ones free next
      // to nothing and their copies queue behind the large ones (ResNet-50 at 25% on p100-16g: a
      // 1 KiB running mean's swap-out held its release op 6.4 ms), but they are not always waste
      // (BERT-base at 50% on h100-80g: 71.6 -> 74.5 ms without any of 16 KiB or less). Few, as a
      // row whose rehearsals are slow has no time left to climb (the LSTM log at 25% on p100-16g).
      const auto min_wrap = static_cast<size_t>(static_cast<double>(s.budget) * min_wrap_fraction_);
      std::vector<size_t> wrap_origins;
      for (size_t i = 0; i < starts.size(); ++i) {
        if (!large_wrap_starts_on_ || (i >= packed_starts && i < packed_starts + restored_starts_) || !wraps(starts[i]->policy)) continue;
        const auto& gaps = starts[i]->gaps;
        if (std::any_of(gaps.begin(), gaps.end(), [&](const RehearsedGap& x) { return x.wrap && x.decision == CapuchinDecision::kSwap && x.bytes < min_wrap; }))
          wrap_origins.push_back(i);
      }
      std::stable_sort(wrap_origins.begin(), wrap_origins.end(), [&](size_t a, size_t b) { return starts[a]->time_ms < starts[b]->time_ms; });
      wrap_origins.resize(std::min(wrap_origins.size(), kLargeWrapStarts));
      const std::vector<RehearsalResult> large_wrap_rehearsals = rehearse_twins(wrap_origins, [&](RehearsalSetup& x) { x.min_wrap_bytes = min_wrap; });
      large_wrap_starts_ = 0;
      for (size_t i = 0; i < large_wrap_rehearsals.size(); ++i) {
        const auto& x = large_wrap_rehearsals[i];
        if (!(x.trained && !x.gaps.empty() && x.time_ms < starts[wrap_origins[i]]->time_ms * (1 - kMinGain))) continue;
        ++large_wrap_starts_;
        starts.push_back(&x), labels.push_back(labels[wrap_origins[i]] + ",large-wraps");
      }
      std::vector<size_t> order(starts.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return starts[a]->time_ms < starts[b]->time_ms; });
      const double limit = search_limit_ms();
      auto now_ms = [&] { return elapsed_ms(t0); };
      std::vector<Climb> climbs;
      for (size_t i : order) {
        Climb c;
        c.best = *starts[i];
        c.label = labels[i], c.start_ms = starts[i]->time_ms, c.start_policy = starts[i]->policy;
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
      if (search_rehearsals_ > 0 && !climbs.empty()) {
        // First every start, fastest first, for first_round_rehearsals_ rehearsals (within
        // kFirstRoundShare of the time); then the kResumedClimbs lowest so far go on where they
        // paused, then the rest: where a climb ends depends on where it starts, and its first
        // rounds say more about that than the start's own time.
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
      }
      // The ends: the candidate as it is and each climb's, fastest first, distinct.
      struct End {
        const RehearsalResult* r;
        double climbed_ms, start_ms;
        std::string label, policy;
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
      climbs_ = nlohmann::json::array();
      for (const Climb& c : climbs)
        climbs_.push_back({{"start", c.label}, {"policy", c.start_policy}, {"start_ms", c.start_ms},
                           {"first_round_ms", c.first_round_ms}, {"duplicate_of", c.duplicate_of}, {"climbed_ms", c.climbed ? c.climbed_ms : c.best.time_ms}, {"time_ms", c.best.time_ms},
                           {"rehearsals", c.done}, {"room_rehearsals", c.room_done}, {"window_rehearsals", c.window_done}, {"ended", c.ended}});
      search_until_ms_ = std::numeric_limits<double>::infinity();
      // Each end given its start state and warm start while the planning limit lasts (the first
      // always); the fastest as it then runs is the plan.
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
    // Off sim the plan is made from the rehearsal's record of the measured iteration, as every
    // rehearsal made it, not from the clock's: the two differ in the last bits of the times, and a
    // plan made from the clock's could wrap-swap other tensors than the warm layout was rehearsed
    // with (the measured iteration's end then left another arena, and the layout was not taken).
    if (view_->modelled_gpu().empty() && !chosen_.empty()) {
      RehearsalSetup m = s;
      m.measured_only = true;
      const RehearsalResult mr = rehearse_counted(chosen_, m);
      if (mr.measured_trace && use_sequence(*mr.measured_trace) == use_sequence(trace)) planned_from_ = mr.measured_trace;
    }
  }
  if (chosen_.empty()) chosen_ = "capuchin";
  if (dtr_fallback(chosen_)) fallback_ = make_policy("dtr");
  if (chosen_ == "capuchin") {
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
  planning_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The start state for the chosen plan (StartState): packed as the last iteration left it (what
// the search rehearsed), reordered, or restored to the layout the first guided iteration started
// from. Each is rehearsed for kLongRunIterations and the fastest over the guided ones runs; a
// start other than the packed one is then rehearsed again as the tables time it, for the
// prediction. The packed start's order can drift after the iterations the search rehearses (the
// Transformer log at 25% on h100-80g); the reordered one makes every iteration alike but can suit
// a plan less (VGG-16 at 50% on p100-16g: 1421 against 1523 ms with the search's plan); the
// restored one moves only the blocks the iteration displaced, but keeps the first layout, which
// can suit a plan less than the one packing drifts to. Where all are slower over the long run
// than the search saw (kLongRunDrift), the search's next-fastest plans (kLongRunFinalists, within
// kFinalistSlack, as many as the planning limit leaves time for) are rehearsed so too, and the
// fastest over the long run is the plan: the layout can drift under one plan and not under a
// neighbour (ResNet-50 at 25% on h100-80g: a plan steady for five iterations whose seventh
// evicted 219 tensors).
void AutoPolicy::choose_start_state(const RehearsalSetup& setup, std::chrono::steady_clock::time_point t0) {
  start_state_ = searched_state_ = chosen_result_.start_state;  // where no long run says otherwise
  if (!chosen_result_.trained || !rehearser_) return;
  searched_ms_ = chosen_result_.time_ms;
  finalists_.clear();
  drifted_from_ms_ = 0;
  // Each plan over kLongRunIterations from each start state (two rehearsals at a time); 0: OOM.
  using Runs = std::array<RehearsalResult, kStartStates>;
  std::vector<Runs> runs;  // the last long_runs' rehearsals
  auto long_runs = [&](const std::vector<const RehearsalResult*>& plans) {
    std::vector<LongRun> res(plans.size());
    runs.assign(plans.size(), Runs{});
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
  };
  // The fastest start of a plan's long runs (kPacked where none trained).
  auto fastest = [](const LongRun& l) {
    size_t k = 0;
    for (size_t j = 1; j < kStartStates; ++j)
      if (l[j] > 0 && (l[k] <= 0 || l[j] < l[k])) k = j;
    return static_cast<StartState>(k);
  };
  auto spent = [&] { return elapsed_ms(t0); };
  const double before = spent();
  long_ms_ = long_runs({&chosen_result_})[0];
  steady_ = std::move(runs[0]);
  const double plan_ms = spent() - before;  // what a plan's long rehearsals take
  StartState state = fastest(long_ms_);
  double long_ms = long_ms_[static_cast<size_t>(state)];
  if (long_ms <= 0) return;
  if (long_ms > searched_ms_ * (1 + kLongRunDrift)) {
    // It drifts: the search's next-fastest distinct plans, over the long run too.
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
    const auto res = long_runs(pool);
    const RehearsalResult* winner = nullptr;
    for (size_t k = 0; k < pool.size(); ++k) {
      finalists_.push_back({pool[k]->policy, pool[k]->pins.size(), pool[k]->time_ms, res[k]});
      const StartState f = fastest(res[k]);
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
    CandidateName n = parse_name(chosen_);
    if (n.fifo || n.need) break;
    n.fifo = fifo, n.need = need;
    if (make_candidate(n.str())) variants.push_back({n.str(), high_placement_});
  }
  if (variants.empty() || !chosen_result_.trained || !rehearser_) return;
  need_ = {true, false, chosen_result_.time_ms, 0, 0, chosen_};
  const int won = finish_variant(setup, variants, need_.variants);
  if (won < 0) return;
  const FinishTry& w = need_.variants[static_cast<size_t>(won)];
  need_.won = true, need_.time_ms = w.time_ms, need_.long_ms = w.long_ms;
  const CandidateName n = parse_name(w.policy);
  need_.variant = n.fifo && n.need ? "fifo,need" : n.fifo ? "fifo" : "need";
}

// The plan as it then is, with the device allocator placing the large requests high (from each
// of kHighPlacementFractions of the budget): the small blocks' holes then stay out of the large
// ones' way. On BERT-base at 50% on h100-80g the plan's costliest stall was an allocation
// of 476 MiB that found 484 MiB free but no block over 176 MiB, and waited for three swap-outs
// before the compaction could make one.
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
// slower). Without it the first guided iterations pay for the switch: BERT-base at 50% on
// h100-80g took 1.129x the unmanaged iteration in the first, 1.057x from the third on. A variant
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

// Per-gap search from the chosen candidate's rehearsal (hill climbing, the rehearsal as the cost
// model): each round rehearses up to kSearchBatch neighbours (a gap's decision changed, the greedy
// planning the rest around it) and keeps the fastest if it beats the best so far; it ends when no
// neighbour is left, after search_rehearsals_ rehearsals, or kSearchTimeMs past the candidates'
// time limit; then the "make room" moves (room_moves), then the window search. It pauses
// (resumable: all of its state is in `c`) when its share of the time or the first round's
// rehearsals are spent.
void AutoPolicy::search(const RehearsalSetup& setup, Climb& c, std::chrono::steady_clock::time_point t0) {
  if (c.ended) return;
  RehearsalResult& best = c.best;
  if (c.tried.empty()) c.tried.push_back(plan_key(best.policy, best.pins)), c.cap = search_rehearsals_;
  // Moves that did not win, by gap and decision (c.lost): one that lost kMaxLosses times is not
  // tried again (from a neighbouring plan it mostly loses again; the budget goes to the untried).
  auto& lost = c.lost;
  auto& tried = c.tried;
  const double limit = std::min(search_limit_ms(), search_until_ms_);
  int& done = c.done;
  auto spent = [&] { return elapsed_ms(t0); };
  // Compression moves need the densities the rehearsal sizes them with, and the codecs' rate.
  const Graph& g = *setup.graph;
  CompressMove compress;
  if (setup.densities && element_ns_per_byte_ > 0)
    compress = [&](const RehearsedGap& x) -> std::optional<PlanPin> {
      const auto c = codec_of_gap(g, x.id, x.evict_op, nonzeros_, element_ns_per_byte_);
      if (!c) return std::nullopt;
      PlanPin p{x.id, x.back_op, CapuchinDecision::kCompress};
      p.codec = c->codec, p.capacity = c->capacity, p.codec_ns = c->codec_ns;
      return p;
    };
  // One round: each plan of the batch rehearsed (at once), recorded, and counted a loss where it
  // is not the fastest that beats the best so far; that one, if any, is the best now.
  auto rehearse_round = [&](const std::vector<std::vector<PlanPin>>& batch, const std::vector<std::string>& policies,
                            const std::vector<std::string>& moves) {
    std::vector<RehearsalResult> res(batch.size());
    parallel(batch.size(), [&](size_t i) {
      RehearsalSetup si = setup;
      si.pins = batch[i];
      si.start_state = best.start_state;
      si.compact_unfit = best.compact_unfit;
      si.min_wrap_bytes = best.min_wrap_bytes;
      si.time_limit_ms = std::max(1.0, search_limit_ms() - spent());  // a share's end does not cut a rehearsal
      res[i] = rehearse_counted(policies[i], si);
    });
    int better = -1;
    for (size_t i = 0; i < res.size(); ++i) {
      searched_.push_back(res[i]);
      searched_moves_.push_back(moves[i]);
      const double bar = better < 0 ? best.time_ms * (1 - kMinGain) : res[static_cast<size_t>(better)].time_ms;
      if (res[i].trained && res[i].time_ms < bar) better = static_cast<int>(i);
    }
    for (size_t i = 0; i < res.size(); ++i)
      if (static_cast<int>(i) != better) ++lost[moves[i]];
    if (better >= 0) best = res[static_cast<size_t>(better)];
    return better >= 0;
  };
  // Two phases: keep / swap / recompute moves (search_rehearsals_ at most), then, from where they
  // end, compression moves too (kCompressRehearsals more). Compression moves taken early lead the
  // climb elsewhere, and as often to a worse end as to a better one (docs/experiments/auto.md).
  const bool compressing = static_cast<bool>(compress);
  const CompressMove none;
  int& cap = c.cap;
  int& headroom_rounds = c.headroom_rounds;
  for (int& phase = c.phase; !c.climbed && phase < (compressing ? 2 : 1); ++phase, cap = done + kCompressRehearsals)
  while (true) {
    // The share is spent, or the first round's rehearsals: resumed here if the start goes on.
    if (spent() >= limit || c.rehearsed() >= c.pause_at) return;
    std::vector<std::vector<PlanPin>> batch;
    std::vector<std::string> moves, policies;
    auto add = [&](const std::string& policy, std::vector<PlanPin> pins, const std::string& move) {
      if (lost[move] >= kMaxLosses) return false;
      const std::string key = plan_key(policy, pins);
      if (std::find(tried.begin(), tried.end(), key) != tried.end()) return false;
      tried.push_back(key);
      moves.push_back(move);
      policies.push_back(policy);
      batch.push_back(std::move(pins));
      return batch.size() == kSearchBatch || done + static_cast<int>(batch.size()) >= cap;
    };
    if (done < cap && phase == 0) {
      // The persistent tensors the fallback evicted, swapped over the iteration's end together:
      // each alone saves one copy's wait, and there may be more of them than rehearsals.
      std::vector<PlanPin> group = best.pins;
      int n = 0;
      for (const auto& x : best.gaps)
        if (x.wrap && x.decision == CapuchinDecision::kKeep && x.cost_ms > kMinCostMs)
          group = with_pin(std::move(group), {x.id, x.back_op, CapuchinDecision::kSwap}), ++n;
      if (n >= 2) add(best.policy, std::move(group), "swap the " + std::to_string(n) + " evicted persistent over the end");
    }
    if (done < cap)
      for (const PlanPin& m : neighbours(*setup.graph, best, phase == 0 ? none : compress))
        if (add(best.policy, with_pin(best.pins, m), to_string(m))) break;
    // Where no single gap's move is left (or the rehearsals are spent), the plan's headroom: the
    // same pins, the greedy planning the rest for a little more or less of the budget.
    if (batch.empty() && phase == 0 && headroom_rounds < kHeadroomRounds) {
      ++headroom_rounds;
      for (const double d : kHeadroomSteps)
        if (auto f = with_fraction(best.policy, plan_fraction(best.policy) + d)) add(*f, best.pins, "headroom " + f->substr(f->find('@')));
    }
    if (batch.empty()) break;
    done += static_cast<int>(batch.size());
    rehearse_round(batch, policies, moves);
  }
  if (!c.climbed) c.climbed = true, c.climbed_ms = best.time_ms;
  // The "make room" moves (room_moves) from where the climb ended, first improvement, batch by
  // batch, until room_rehearsals_ or none is left.
  if (c.accesses.empty() && !c.roomed) c.accesses = accesses(g);
  while (!c.roomed && c.room_done < room_rehearsals_) {
    if (spent() >= limit || c.rehearsed() >= c.pause_at) return;  // resumed here
    std::vector<std::vector<PlanPin>> batch;
    std::vector<std::string> moves;
    for (auto& [pins, move] : room_moves(g, best, c.accesses)) {
      if (lost[move] >= kMaxLosses) continue;
      std::vector<PlanPin> with = best.pins;
      for (const PlanPin& p : pins) with = with_pin(std::move(with), p);
      const std::string key = plan_key(best.policy, with);
      if (std::find(tried.begin(), tried.end(), key) != tried.end()) continue;
      tried.push_back(key);
      batch.push_back(std::move(with));
      moves.push_back(move);
      if (batch.size() == kSearchBatch || c.room_done + static_cast<int>(batch.size()) >= room_rehearsals_) break;
    }
    if (batch.empty()) break;
    c.room_done += static_cast<int>(batch.size());
    room_tried_ += static_cast<int>(batch.size());
    room_won_ += rehearse_round(batch, std::vector<std::string>(batch.size(), best.policy), moves);
  }
  c.roomed = true;
  if (window_rehearsals_ > 0)
    window_search(setup, c, compress, t0);
  else
    c.ended = true;
}

// Window search, after the climb: one move at a time stops where every single move loses, but two
// gaps that share the copy queue and the arena can win together (a prefetch moved earlier pays
// only once the gap it now overlaps is recomputed). A window is the costliest remaining gap and
// the costliest gaps whose intervals overlap it (at most kWindowGaps); every combination of their
// moves (each gap as it is or one of its moves, at most kWindowCombos) that changes two gaps or
// more is rehearsed, exhaustively (one change alone is the climb's neighbourhood):
// the exact optimum over the window's options, the greedy planning the rest. The best is kept if
// it wins and the windows start again from it; otherwise the next gap anchors a window. Ends after
// window_rehearsals_ rehearsals, at the planning limit, or when no anchor is left; what the climb
// found stays the fallback.
void AutoPolicy::window_search(const RehearsalSetup& setup, Climb& c, const CompressMove& compress,
                               std::chrono::steady_clock::time_point t0) {
  const Graph& g = *setup.graph;
  const double limit = std::min(search_limit_ms(), search_until_ms_);
  auto spent = [&](size_t item = 0) { return elapsed_ms(t0, item); };
  RehearsalResult& best = c.best;
  auto& tried = c.tried;
  int& done = c.window_done;
  size_t& anchor = c.anchor;
  while (true) {
    if (done >= window_rehearsals_) break;
    if (spent() >= limit || c.rehearsed() >= c.pause_at) return;  // resumed here if the start goes on
    std::vector<const RehearsedGap*> order;
    for (const auto& x : best.gaps)
      if (x.cost_ms > kMinCostMs) order.push_back(&x);
    std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->cost_ms > b->cost_ms; });
    if (anchor >= order.size() || anchor >= kWindowAnchors) break;
    const RehearsedGap& a = *order[anchor];
    const std::vector<double> stall_at = stall_map(g, best);
    // The window's gaps and their options; a gap joins while the combinations stay within the cap.
    std::vector<std::vector<PlanPin>> options;
    std::vector<const RehearsedGap*> gaps;
    size_t combos = 1;
    std::vector<const RehearsedGap*> join{&a};
    for (const RehearsedGap* x : order)
      if (x != &a && overlap(*x, a)) join.push_back(x);
    for (const RehearsedGap* x : join) {
      if (gaps.size() == kWindowGaps) break;
      std::vector<PlanPin> opts;
      for (auto& m : gap_moves(g, best, *x, stall_at, compress)) opts.push_back(m.second);
      if (opts.empty() || combos * (opts.size() + 1) > kWindowCombos) continue;
      combos *= opts.size() + 1;
      options.push_back(std::move(opts));
      gaps.push_back(x);
    }
    if (gaps.size() < 2 || gaps.front() != &a) {  // one gap alone: the climb tried its moves
      ++anchor;
      continue;
    }
    // Every combination but the plan as it is, in mixed radix (digit 0: the gap as it is).
    std::vector<std::vector<PlanPin>> batch;
    std::vector<std::string> moves, keys;
    for (size_t code = 1; code < combos; ++code) {
      auto pins = best.pins;
      std::string move;
      int changed = 0;
      for (size_t k = 0, rest = code; k < options.size(); rest /= options[k].size() + 1, ++k)
        if (const size_t d = rest % (options[k].size() + 1); d > 0) {
          pins = with_pin(std::move(pins), options[k][d - 1]);
          move += (move.empty() ? "" : " + ") + to_string(options[k][d - 1]);
          ++changed;
        }
      if (changed < 2) continue;  // one gap's moves alone: the climb's
      const std::string key = plan_key(best.policy, pins);
      if (std::find(tried.begin(), tried.end(), key) != tried.end()) continue;
      tried.push_back(key);
      keys.push_back(key);
      batch.push_back(std::move(pins));
      moves.push_back("window: " + move);
    }
    const size_t n = std::min(batch.size(), static_cast<size_t>(window_rehearsals_ - done));
    std::vector<RehearsalResult> res(n);
    parallel(n, [&](size_t i) {
      if (spent(i) >= limit) {
        res[i].error = "not rehearsed: planning time limit";
        return;
      }
      RehearsalSetup si = setup;
      si.pins = batch[i];
      si.start_state = best.start_state;
      si.compact_unfit = best.compact_unfit;
      si.min_wrap_bytes = best.min_wrap_bytes;
      si.time_limit_ms = std::max(1.0, search_limit_ms() - spent());
      res[i] = rehearse_counted(best.policy, si);
    });
    ++windows_;
    int better = -1;
    bool cut = false;  // the share ran out within the window: its rest is rehearsed on resuming
    for (size_t i = 0; i < n; ++i) {
      if (!res[i].trained && res[i].error.rfind("not rehearsed", 0) == 0) {
        tried.erase(std::find(tried.begin(), tried.end(), keys[i]));
        cut = true;
        continue;
      }
      ++done;
      searched_.push_back(res[i]);
      searched_moves_.push_back(moves[i]);
      ++window_tried_;
      const double bar = better < 0 ? best.time_ms * (1 - kMinGain) : res[static_cast<size_t>(better)].time_ms;
      if (res[i].trained && res[i].time_ms < bar) better = static_cast<int>(i);
    }
    if (better >= 0) {
      best = res[static_cast<size_t>(better)];
      anchor = 0;
    } else if (!cut) {
      ++anchor;
    }
  }
  c.ended = true;
}

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

}  // namespace

namespace {
// The finish's rehearsed variants, for the report (null times: not trained / no long run).
nlohmann::json tries_json(const std::vector<AutoPolicy::FinishTry>& tries) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& t : tries)
    a.push_back({{"policy", t.policy}, {"high_from_bytes", t.high_placement},
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
    json c = {{"policy", r.policy}, {"trained", r.trained}, {"rehearsal_wall_ms", r.wall_ms}};
    if (r.trained) {
      add_prediction(c, r);
    } else {
      c["error"] = r.error;
    }
    cands.push_back(c);
  }
  json pins = json::array();
  for (const auto& p : pins_) pins.push_back(to_string(p));
  json out = {{"mode", "auto"}, {"chosen", chosen_}, {"forced", !forced_.empty()}, {"planning_ms", planning_ms_},
              {"candidates", cands}, {"pins", pins}};
  // What the planning limits were counted against (set_planning_clock), and how much of it the
  // plan took: on the rehearsals clock the same on every run.
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
  // The replay guard (on_iteration_time): each plan that ran, its prediction and what it measured.
  json runs = json::array();
  for (const PlanRun& r : runs_) {
    const double mean = r.mean_ms();
    runs.push_back({{"policy", r.plan.policy}, {"pins", r.plan.pins.size()}, {"kind", to_string(r.plan.kind)},
                    {"why", r.why}, {"predicted_ms", r.plan.predicted_ms}, {"from_iteration", r.from_iteration},
                    {"iterations", r.ms.size()}, {"mean_ms", r.ms.empty() ? json(nullptr) : json(mean)},
                    {"ratio", r.ms.empty() || !(r.plan.predicted_ms > 0) ? json(nullptr) : json(mean / r.plan.predicted_ms)}});
  }
  out["replay_guard"] = {{"on", guard_.on}, {"ratio", guard_.ratio}, {"min_excess_ms", guard_.min_excess_ms},
                         {"iterations", guard_.iterations}, {"fell_back", runs_.size() > 1}, {"runs", runs},
                         {"stopped", guard_stopped_}, {"note", guard_note_}};
  // The fallback where a plan does not fit (CapuchinPolicy::set_compact_unfit): what runs, and
  // the starts the search climbed with compact_unfit.
  out["unfit_fallback"] = {{"mode", compact_unfit_ ? "compact" : "evict"}, {"compact_starts", compact_starts_}};
  // The smallest persistent tensor the plan's greedy swaps over the iteration's end (0: any), and
  // the ",large-wraps" starts the search climbed.
  out["wrap_swaps"] = {{"min_bytes", min_wrap_bytes_}, {"large_wrap_starts", large_wrap_starts_}};
  if (chosen_result_.trained) add_prediction(out, chosen_result_);
  if (!searched_.empty() || !rehearsals_.empty()) {
    double base = start_ms_;  // where the search started: a candidate, or the LP's pins on one
    int trained = 0;
    double wall = 0;
    for (const auto& r : searched_) trained += r.trained, wall += r.wall_ms;
    json tried = json::array();  // each move as rehearsed on the best plan of its round
    for (size_t i = 0; i < searched_.size() && i < searched_moves_.size(); ++i)
      tried.push_back({searched_moves_[i], searched_[i].trained ? json(searched_[i].time_ms) : json(nullptr)});
    out["search"] = {{"rehearsals", searched_.size()}, {"trained", trained}, {"rehearsal_wall_ms", wall},
                     {"candidate_time_ms", base}, {"start", start_}, {"start_policy", start_policy_}, {"pins", pins_.size()},
                     {"time_ms", searched_ms_ > 0 ? searched_ms_ : chosen_result_.trained ? chosen_result_.time_ms : base},
                     {"tried", tried}};
    // The window search's share: where the climb ended, and the windows after it.
    out["search"]["climbed_time_ms"] = climbed_ms_ > 0 ? climbed_ms_ : out["search"]["time_ms"].get<double>();
    out["search"]["window"] = {{"windows", windows_}, {"rehearsals", window_tried_}};
    out["search"]["room"] = {{"rehearsals", room_tried_}, {"won", room_won_}};  // the climb's "make room" moves
    json headroom = json::array();  // the refined-headroom starts: the fastest of each candidate's
    for (const auto& h : headroom_rehearsals_) headroom.push_back({{"policy", h.policy}, {"time_ms", h.time_ms}});
    out["search"]["headroom_starts"] = headroom;
    json edf = json::array();  // starts faster with the D2H queue in the other order (one more start each)
    for (const auto& e : edf_starts_) edf.push_back({{"policy", e.policy}, {"time_ms", e.time_ms}, {"from_ms", e.start_ms}});
    out["search"]["edf_starts"] = edf;
    out["search"]["restored_starts"] = restored_starts_;  // starts also climbed restored
    out["search"]["duplicate_climbs"] = duplicate_climbs_;  // climbs not resumed (Climb::duplicate_of)
    out["search"]["start_state"] = to_string(searched_state_);  // the start state the winning climb rehearsed
    out["search"]["climbs"] = climbs_;  // in the order they started, fastest start first
    json fin = json::array();  // the fastest ends, each with its start state and warm start (the fastest runs)
    for (const auto& f : finished_) fin.push_back({{"start", f.start}, {"searched_ms", f.searched_ms}, {"time_ms", f.time_ms}});
    out["search"]["finished"] = fin;
  }
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
      json o = {{"policy", f.policy}, {"pins", f.pins}, {"time_ms", f.time_ms}};
      runs(o, f.long_ms);
      fin.push_back(o);
    }
    out["start_state"]["finalists"] = fin;
    out["start_state"]["replaced_ms"] = drifted_from_ms_ > 0 ? json(drifted_from_ms_) : json(nullptr);
  }
  if (need_.tried)  // the issue order (need_order): the plan's time as searched, and the variant that won
    out["need_order"] = {{"won", need_.won}, {"variant", need_.won ? json(need_.variant) : json(nullptr)},
                         {"searched_policy", need_.before_policy}, {"searched_ms", need_.before_ms},
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
      json c = {{"policy", r.policy}, {"trained", r.trained}, {"rehearsal_wall_ms", r.wall_ms},
                {"variant", i < lp_variant_of_.size() ? lp_variant_label(lp_variants_[lp_variant_of_[i]]) : ""}};
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
                 {"wall_ms", l.wall_ms}, {"pins", lp_variants_.empty() ? 0 : lp_variants_[0].pins.size()}, {"threshold", kLpThresholds[0]}, {"rehearsals", reh}};
    out["lp"]["model"] = lp_model_ == LpModel::kBound      ? "bound"
                         : lp_model_ == LpModel::kInFlight ? "in-flight"
                         : lp_model_ == LpModel::kBoth     ? "both"
                                                           : "compress";
    if (lp_model_ == LpModel::kCompress) {  // "not run" without the densities
      const auto& c = lp_compress_;
      out["lp"]["compress"] = {{"status", c.status}, {"overhead_ms", std::isfinite(c.overhead_ms) ? json(c.overhead_ms) : json(nullptr)},
                               {"recompute_ms", c.recompute_ms}, {"swapped_bytes", c.swapped_bytes},
                               {"recomputed_bytes", c.recomputed_bytes}, {"compressed_bytes", c.compressed_bytes},
                               {"wall_ms", c.wall_ms}};
      int pins = 0;  // the compressions its first rounding pins
      for (const auto& p : lp_pins(c, kLpThresholds[0])) pins += p.decision == CapuchinDecision::kCompress;
      out["lp"]["compress"]["compress_pins"] = pins;
    } else if (lp_model_ != LpModel::kBound) {
      const auto& f = lp_in_flight_;
      out["lp"]["in_flight"] = {{"status", f.status}, {"overhead_ms", std::isfinite(f.overhead_ms) ? json(f.overhead_ms) : json(nullptr)},
                                {"recompute_ms", f.recompute_ms}, {"swapped_bytes", f.swapped_bytes},
                                {"recomputed_bytes", f.recomputed_bytes}, {"wall_ms", f.wall_ms}};
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
  out["plan"] = current().report();
  return out;
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
  s += "chose " + chosen_;
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
                  runs_[i].plan.policy.c_str(), runs_[i].from_iteration, to_string(runs_[i].plan.kind), runs_[i].plan.predicted_ms,
                  runs_[i].mean_ms(), runs_[i].why.c_str());
    s += buf;
  }
  if (!rehearsals_.empty()) {
    // The candidates: how many trained, and the fastest few (all of them are in the report).
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
      std::snprintf(buf, sizeof buf, "%s %s %.2f ms", i == 0 ? "; fastest:" : ",", trained[i]->policy.c_str(), trained[i]->time_ms);
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
    if (!bounds.empty()) s += "\n  " + bounds;
  }
  const std::string inner = current().summary();
  if (!inner.empty()) s += "\n  " + inner;
  return s;
}

}  // namespace vtensor
