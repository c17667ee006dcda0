// The search's moves (moves.h).
#include "vtensor/policy/auto/moves.h"

#include <algorithm>
#include <limits>

#include "vtensor/policy/auto/tuning.h"
#include "vtensor/policy/capuchin.h"

namespace vtensor::auto_detail {

namespace {

std::string pins_key(const std::vector<PlanPin>& pins) {
  std::string k;
  for (const auto& p : pins) k += to_string(p) + " ";
  return k;
}

}  // namespace

bool recomputable(const Graph& g, TensorId id) {
  const TensorInfo& t = g.tensor(id);
  return !t.persistent() && t.recomputable && t.producer >= 0 && is_recomputable(g.op(t.producer));
}

std::vector<PlanPin> with_pin(std::vector<PlanPin> pins, const PlanPin& p) {
  for (auto& q : pins)
    if (q.id == p.id && q.back_op == p.back_op) {
      q = p;
      return pins;
    }
  pins.push_back(p);
  return pins;
}

std::string plan_key(const Candidate& policy, const std::vector<PlanPin>& pins) { return policy.name() + " | " + pins_key(pins); }

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

std::vector<double> stall_map(const Graph& g, const RehearsalResult& r) {
  std::vector<double> stall_at(g.num_ops() + 1, 0.0);
  for (const auto& x : r.gaps)
    if (x.decision == CapuchinDecision::kSwap && x.back_op >= 0 && static_cast<size_t>(x.back_op) < stall_at.size())
      stall_at[static_cast<size_t>(x.back_op)] += x.cost_ms;
  return stall_at;
}

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

}  // namespace vtensor::auto_detail
