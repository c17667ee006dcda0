// The search's moves (auto's own files only): from a rehearsed plan, the other decisions worth
// rehearsing for each gap that cost time (gap_moves, neighbours), the compound "make room" moves
// (room_moves), and the small helpers the climb and the window search share (plan keys, pins).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vtensor/policy/auto/rehearsal.h"
#include "vtensor/policy/compress.h"

namespace vtensor::auto_detail {

// A gap compressed instead (FreeLunch's codec for it; nullopt where none applies or the
// densities are unknown).
using CompressMove = std::function<std::optional<PlanPin>(const RehearsedGap&)>;

bool recomputable(const Graph& g, TensorId id);
// pins with p replacing any pin of the same gap.
std::vector<PlanPin> with_pin(std::vector<PlanPin> pins, const PlanPin& p);
// A plan's key among those the search tried: its candidate and its pins.
std::string plan_key(const Candidate& policy, const std::vector<PlanPin>& pins);

// FreeLunch's codec for the gap of `id` opened after op `evict_op` (gap_codec over the ops that
// use it after that), nullopt where none applies or its density is unknown.
std::optional<GapCodec> codec_of_gap(const Graph& g, TensorId id, int evict_op, const std::vector<std::optional<size_t>>& nonzeros,
                                     double element_ns_per_byte);
// Per op, the swap-in stall the rehearsal measured at it (where an ahead-of-access recomputation
// costs nothing extra: the compute stream waits there anyway).
std::vector<double> stall_map(const Graph& g, const RehearsalResult& r);
// The moves of one gap, each with its promise (the share of the gap's cost it may save).
std::vector<std::pair<double, PlanPin>> gap_moves(const Graph& g, const RehearsalResult& r, const RehearsedGap& x,
                                                  const std::vector<double>& stall_at, const CompressMove& compress);
// Do two gaps' intervals share an op? A wrap gap is [evict_op, end) and [0, back_op].
bool overlap(const RehearsedGap& a, const RehearsedGap& b);
// The neighbours of a rehearsed plan, most promising first: a gap that cost time is given another
// decision. A stalling swap: its prefetch earlier, or recomputed. A recomputation: swapped, kept
// (the greedy frees the bytes elsewhere), or run ahead of its access at the op before the
// iteration's largest stall inside its gap, where the compute stream would wait on a copy anyway.
// A gap the plan kept but the passive fallback evicted (and waited for): planned as a swap or a
// recomputation. A wrap swap (a persistent tensor over the iteration's end): its prefetch
// earlier, or kept (its cost may be the wait for its swap-out, which no prefetch moves).
// The bound is the gap's measured cost; its fraction orders the moves.
std::vector<PlanPin> neighbours(const Graph& g, const RehearsalResult& r, const CompressMove& compress);
// Each tensor's accesses in op order (a view's are its base's).
std::vector<std::vector<int>> accesses(const Graph& g);
// "Make room": a swap that waits at the peak (a late prefetch, or a swap-out the forward waits
// for to free its block) gains nothing from an earlier prefetch alone, because the memory is full
// where it would start; the tensors that fill it cost nothing where they are, so no gap's move
// (gap_moves, which starts from a gap that cost time) touches them. The compound move: the
// prefetch of one of the kRoomAnchors costliest swaps kRoomShifts ops earlier, together with one
// of the kRoomPartners largest kept tensors alive over the new window recomputed or swapped.
// Each move: its pins and its name.
std::vector<std::pair<std::vector<PlanPin>, std::string>> room_moves(const Graph& g, const RehearsalResult& r,
                                                                     const std::vector<std::vector<int>>& acc);

}  // namespace vtensor::auto_detail
