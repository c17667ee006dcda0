// Policy auto's candidates: a Candidate is a value (a planner mode, the fraction of the budget it
// plans for, a swap-stall weight, and switches of planner options); its name
// ("capuchin@0.9,w4,wrap,dtr") is what reports, plan files and --auto-candidates spell. For auto's
// own files (auto_detail): a candidate made into its policy, and the variants the search tries.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vtensor/memory/policy.h"

namespace vtensor {

// A candidate's name is its mode, "@F" where a fraction is set, ",wW" where a weight is, then
// the switches in this order: ",fifo" (the H2D queue planned in issue order, PlannerInput::
// fifo_prefetches), ",need" (one op's prefetches in need order, need_ordered_prefetches; both only
// the finish tries), ",edf" (the D2H queue in deadline order, deadline_swap_outs), ",wrap"
// (persistent tensors also swapped over the iteration's end, wrap_persistent), ",dtr" (guided
// iterations evict as DTR does where the plan does not cover the budget).
struct Candidate {
  std::string mode;  // a planner (auto_detail::planner_names) or compress policy; empty: none
  std::optional<double> fraction;  // "@F": planned for F of the budget (0 < F <= 1; unset: all of it)
  std::optional<double> weight;    // ",wW" (the hybrid, after "@F"): a swap's stall weighed W times (unset: 1)
  bool fifo = false, need = false, edf = false, wrap = false, dtr = false;

  // The candidate `name` spells; nullopt where it is not one auto can rehearse.
  static std::optional<Candidate> parse(const std::string& name);
  // As parse; throws std::invalid_argument (unknown_candidate_message) where it is not one.
  static Candidate named(const std::string& name);
  // Its name: a number as "%g" writes it where that reads back the same, else all its digits.
  std::string name() const;
  bool empty() const { return mode.empty(); }
  bool compresses() const { return mode.rfind("compress", 0) == 0; }
  double plan_fraction() const { return fraction.value_or(1.0); }
  double swap_weight() const { return weight.value_or(1.0); }
  bool operator==(const Candidate&) const = default;
};

// The candidates auto rehearses, in order of preference on a tie: the planners as they are, then
// the search's variants (NAME@F: planned for F of the budget; capuchin@F,wW: swap stall weighed W),
// then the compression candidates (compress+capuchin, compress+swap; rehearsed only with densities).
const std::vector<Candidate>& auto_candidates();
// The message for a name that is not a candidate, naming what is accepted.
std::string unknown_candidate_message(const std::string& name);

namespace auto_detail {  // shared by the files of vtensor/policy/auto/ only

// The planners as they are, and the compression candidates' modes (compression first, then
// Capuchin on the rest; they need the measured iteration's non-zero counts, so they come last).
const std::vector<std::string>& planner_names();
const std::vector<std::string>& compress_names();

// The candidate's policy, its options set; null where it is not a candidate (an unknown mode, a
// fraction outside (0, 1] or on a mode without one, a weight but on the hybrid, a switch its
// planner does not have).
std::unique_ptr<Policy> make_candidate(const Candidate& c);

// The Capuchin candidate `c` with another fraction f of the budget (rounded to hundredths) or
// swap weight w, its switches kept; nullopt where that is not a candidate (a weight on another
// mode than the hybrid, f outside (0, 1]).
std::optional<Candidate> with_fraction(const Candidate& c, double f);
std::optional<Candidate> with_weight(const Candidate& c, double w);
// The candidate with wrap swaps (nullopt where it has them, or that is not a candidate).
std::optional<Candidate> with_wrap_swaps(const Candidate& c);
// The candidate with its D2H queue in the other order (",edf" switched; nullopt where that is
// not a candidate).
std::optional<Candidate> with_edf_toggled(const Candidate& c);

}  // namespace auto_detail
}  // namespace vtensor
