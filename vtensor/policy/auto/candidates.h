// Policy auto's candidates by name: the list it rehearses, and (for auto's own files, in
// auto_detail) how a name is read, made into its policy and respelled by the search
// ("capuchin@0.9,w4,wrap,dtr": a mode, the fraction of the budget it plans for, a swap-stall
// weight, and suffixes that switch planner options on).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vtensor/memory/policy.h"

namespace vtensor {

// The candidates auto rehearses, in order of preference on a tie: the planners as they are, then
// the search's variants (NAME@F: planned for F of the budget; capuchin@F,wW: swap stall weighed W),
// then the compression candidates (compress+capuchin, compress+swap; rehearsed only with densities).
const std::vector<std::string>& auto_candidates();
// Whether `name` is a candidate auto can rehearse (those above, and their suffixes); the message
// for one that is not, naming what is accepted.
bool is_auto_candidate(const std::string& name);
std::string unknown_candidate_message(const std::string& name);

namespace auto_detail {  // shared by the files of vtensor/policy/auto/ only

// The planners as they are, and the compression candidates (compression first, then Capuchin on
// the rest; they need the measured iteration's non-zero counts, so they come last).
const std::vector<std::string>& planner_names();
const std::vector<std::string>& compress_names();
bool is_compress_candidate(const std::string& name);

// A candidate's name: its head ("capuchin@0.9,w4", "dtr", ...) and its suffixes, written in this
// order: ",fifo" (the H2D queue planned in issue order, PlannerInput::fifo_prefetches), ",need"
// (one op's prefetches in need order, need_ordered_prefetches; both only the finish tries),
// ",edf" (the D2H queue in deadline order, deadline_swap_outs), ",wrap" (persistent tensors also
// swapped over the iteration's end, wrap_persistent), ",dtr" last (guided iterations evict as
// DTR does where the plan does not cover the budget).
struct CandidateName {
  std::string head;
  bool fifo = false, need = false, edf = false, wrap = false, dtr = false;
  std::string str() const;
};
CandidateName parse_name(const std::string& full);
bool dtr_fallback(const std::string& name);
// Does the candidate (with or without ",dtr") swap persistent tensors across the boundary?
bool wraps(const std::string& full);

// "NAME", "NAME@F" (a Capuchin mode or compress policy planning for F of the budget) or
// "capuchin@F,wW" (the hybrid weighing a swap's stall W times against recompute time): the
// policy, or null when the name is not a candidate; the suffixes (CandidateName) set its options.
std::unique_ptr<Policy> make_candidate(const std::string& full);

// The fraction of the budget a candidate plans for (1 without "@F").
double plan_fraction(const std::string& full);
// The hybrid's swap-stall weight (1 without ",wW"; ",wrap" is not one).
double swap_weight(const std::string& full);
// The Capuchin candidate `full` respelled with another fraction f of the budget or swap weight w,
// its suffixes kept ("capuchin@0.85,w4,wrap,dtr" with 0.87: "capuchin@0.87,w4,wrap,dtr"); nullopt
// where that is not a candidate (a weight on another mode than the hybrid, f outside (0, 1]).
std::optional<std::string> with_fraction(const std::string& full, double f);
std::optional<std::string> with_weight(const std::string& full, double w);
// The candidate with wrap swaps (nullopt where it has them, or that is not a candidate).
std::optional<std::string> with_wrap_swaps(const std::string& full);
// The candidate with its D2H queue in the other order (",edf" added or removed; nullopt where
// that is not a candidate).
std::optional<std::string> with_edf_toggled(const std::string& full);

}  // namespace auto_detail
}  // namespace vtensor
