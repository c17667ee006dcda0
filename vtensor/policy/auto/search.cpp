// One start's search (AutoPolicy::search): hill climbing over one gap's decision at a time
// (climb_moves), then the compound "make room" moves (room_search), then an exhaustive search over
// windows of overlapping gaps (window_search). Every step rehearses its plans, a few at a time;
// a climb pauses where its share of the time ends and resumes from its Climb.
#include <algorithm>
#include <string>

#include "vtensor/policy/auto/auto.h"
#include "vtensor/policy/auto/moves.h"

namespace vtensor {

using namespace auto_detail;

namespace {

// A window of the window search: its gaps (the anchor first) and each gap's options.
struct Window {
  std::vector<std::vector<PlanPin>> options;
  std::vector<const RehearsedGap*> gaps;
  size_t combos = 1;
};

// The window anchored at `a`: the costliest gaps (`order`) whose intervals overlap it; a gap joins
// while the combinations stay within kWindowCombos.
Window window_at(const Graph& g, const RehearsalResult& best, const std::vector<const RehearsedGap*>& order, const RehearsedGap& a,
                 const CompressMove& compress) {
  Window w;
  std::vector<std::vector<PlanPin>>& options = w.options;
  std::vector<const RehearsedGap*>& gaps = w.gaps;
  size_t& combos = w.combos;
  const std::vector<double> stall_at = stall_map(g, best);
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
  return w;
}

// Every combination of the window's options but the plan as it is, in mixed radix (digit 0: the
// gap as it is), that changes two gaps or more and was not tried: its pins, move and key.
void window_plans(const Window& w, const RehearsalResult& best, std::vector<std::string>& tried, std::vector<std::vector<PlanPin>>& batch,
                  std::vector<std::string>& moves, std::vector<std::string>& keys) {
  const std::vector<std::vector<PlanPin>>& options = w.options;
  for (size_t code = 1; code < w.combos; ++code) {
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
}

}  // namespace

// Per-gap search from the chosen candidate's rehearsal (hill climbing, the rehearsal as the cost
// model): each round rehearses up to kSearchBatch neighbours (a gap's decision changed, the greedy
// planning the rest around it) and keeps the fastest if it beats the best so far; it ends when no
// neighbour is left, after search_rehearsals_ rehearsals, or kSearchTimeMs past the candidates'
// time limit; then the "make room" moves (room_moves), then the window search. It pauses
// (resumable: all of its state is in `c`) when its share of the time or the first round's
// rehearsals are spent.
void AutoPolicy::search(const RehearsalSetup& setup, Climb& c, std::chrono::steady_clock::time_point t0) {
  if (c.ended) return;
  if (c.tried.empty()) c.tried.push_back(plan_key(c.best.policy, c.best.pins)), c.cap = search_rehearsals_;
  const CompressMove compress = compress_move(setup);
  if (!climb_moves(setup, c, compress, t0)) return;  // paused: resumed there
  if (!c.climbed) c.climbed = true, c.climbed_ms = c.best.time_ms;
  if (!room_search(setup, c, t0)) return;  // paused: resumed there
  c.roomed = true;
  if (window_rehearsals_ > 0)
    window_search(setup, c, compress, t0);
  else
    c.ended = true;
}

// Compression moves need the densities the rehearsal sizes them with, and the codecs' rate (none:
// an empty move).
AutoPolicy::CompressMove AutoPolicy::compress_move(const RehearsalSetup& setup) const {
  const Graph* g = setup.graph;
  CompressMove compress;
  if (setup.densities && element_ns_per_byte_ > 0)
    compress = [this, g](const RehearsedGap& x) -> std::optional<PlanPin> {
      const auto c = codec_of_gap(*g, x.id, x.evict_op, nonzeros_, element_ns_per_byte_);
      if (!c) return std::nullopt;
      PlanPin p{x.id, x.back_op, CapuchinDecision::kCompress};
      p.codec = c->codec, p.capacity = c->capacity, p.codec_ns = c->codec_ns;
      return p;
    };
  return compress;
}

// One round: each plan of the batch rehearsed (at once), recorded, and counted a loss where it
// is not the fastest that beats the best so far; that one, if any, is the best now.
bool AutoPolicy::rehearse_round(const RehearsalSetup& setup, Climb& c, const std::vector<std::vector<PlanPin>>& batch,
                                const std::vector<Candidate>& policies, const std::vector<std::string>& moves,
                                std::chrono::steady_clock::time_point t0) {
  RehearsalResult& best = c.best;
  auto spent = [&] { return elapsed_ms(t0); };
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
    if (static_cast<int>(i) != better) ++c.lost[moves[i]];
  if (better >= 0) best = res[static_cast<size_t>(better)];
  return better >= 0;
}

// The climb: rounds of neighbours (moves.h) until none is left or the rehearsals are spent; false
// where it paused (its share of the time, or the first round's rehearsals, spent). Two phases:
// keep / swap / recompute moves (search_rehearsals_ at most), then, from where they end,
// compression moves too (kCompressRehearsals more). Compression moves taken early lead the climb
// elsewhere, and as often to a worse end as to a better one (docs/experiments/auto.md).
bool AutoPolicy::climb_moves(const RehearsalSetup& setup, Climb& c, const CompressMove& compress, std::chrono::steady_clock::time_point t0) {
  RehearsalResult& best = c.best;
  // Moves that did not win, by gap and decision (c.lost): one that lost kMaxLosses times is not
  // tried again (from a neighbouring plan it mostly loses again; the budget goes to the untried).
  auto& lost = c.lost;
  auto& tried = c.tried;
  const double limit = std::min(search_limit_ms(), search_until_ms_);
  int& done = c.done;
  auto spent = [&] { return elapsed_ms(t0); };
  const bool compressing = static_cast<bool>(compress);
  const CompressMove none;
  int& cap = c.cap;
  int& headroom_rounds = c.headroom_rounds;
  for (int& phase = c.phase; !c.climbed && phase < (compressing ? 2 : 1); ++phase, cap = done + kCompressRehearsals)
  while (true) {
    // The share is spent, or the first round's rehearsals: resumed here if the start goes on.
    if (spent() >= limit || c.rehearsed() >= c.pause_at) return false;
    std::vector<std::vector<PlanPin>> batch;
    std::vector<std::string> moves;
    std::vector<Candidate> policies;
    auto add = [&](const Candidate& policy, std::vector<PlanPin> pins, const std::string& move) {
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
        if (auto f = with_fraction(best.policy, best.policy.plan_fraction() + d)) {
          const std::string name = f->name();
          add(*f, best.pins, "headroom " + name.substr(name.find('@')));
        }
    }
    if (batch.empty()) break;
    done += static_cast<int>(batch.size());
    rehearse_round(setup, c, batch, policies, moves, t0);
  }
  return true;
}

// The "make room" moves (room_moves) from where the climb ended, first improvement, batch by
// batch, until room_rehearsals_ or none is left; false where it paused.
bool AutoPolicy::room_search(const RehearsalSetup& setup, Climb& c, std::chrono::steady_clock::time_point t0) {
  const Graph& g = *setup.graph;
  const RehearsalResult& best = c.best;
  const double limit = std::min(search_limit_ms(), search_until_ms_);
  auto spent = [&] { return elapsed_ms(t0); };
  if (c.accesses.empty() && !c.roomed) c.accesses = accesses(g);
  while (!c.roomed && c.room_done < room_rehearsals_) {
    if (spent() >= limit || c.rehearsed() >= c.pause_at) return false;  // resumed here
    std::vector<std::vector<PlanPin>> batch;
    std::vector<std::string> moves;
    for (auto& [pins, move] : room_moves(g, best, c.accesses)) {
      if (c.lost[move] >= kMaxLosses) continue;
      std::vector<PlanPin> with = best.pins;
      for (const PlanPin& p : pins) with = with_pin(std::move(with), p);
      const std::string key = plan_key(best.policy, with);
      if (std::find(c.tried.begin(), c.tried.end(), key) != c.tried.end()) continue;
      c.tried.push_back(key);
      batch.push_back(std::move(with));
      moves.push_back(move);
      if (batch.size() == kSearchBatch || c.room_done + static_cast<int>(batch.size()) >= room_rehearsals_) break;
    }
    if (batch.empty()) break;
    c.room_done += static_cast<int>(batch.size());
    room_tried_ += static_cast<int>(batch.size());
    room_won_ += rehearse_round(setup, c, batch, std::vector<Candidate>(batch.size(), best.policy), moves, t0);
  }
  return true;
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
    const Window w = window_at(g, best, order, a, compress);
    if (w.gaps.size() < 2 || w.gaps.front() != &a) {  // one gap alone: the climb tried its moves
      ++anchor;
      continue;
    }
    std::vector<std::vector<PlanPin>> batch;
    std::vector<std::string> moves, keys;
    window_plans(w, best, tried, batch, moves, keys);
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

}  // namespace vtensor
