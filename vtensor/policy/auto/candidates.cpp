// Policy auto's candidates (candidates.h): names read and written, candidates made into their
// policies, the list, and the variants the search's headroom and weight moves use.
#include "vtensor/policy/auto/candidates.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "vtensor/policy/auto/tuning.h"
#include "vtensor/policy/capuchin.h"
#include "vtensor/policy/checkpoint.h"
#include "vtensor/policy/compress.h"
#include "vtensor/policy/registry.h"

namespace vtensor {

using namespace auto_detail;

namespace {

// The switches' suffixes (Candidate), in the order a name writes them.
constexpr const char* kFifo = ",fifo";
constexpr const char* kNeed = ",need";
constexpr const char* kEdf = ",edf";
constexpr const char* kWrap = ",wrap";
constexpr const char* kDtrFallback = ",dtr";

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() > n && s.compare(s.size() - n, n, suffix) == 0;
}

// "%g" where that reads back as v, else every digit.
std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%g", v);
  if (std::strtod(buf, nullptr) == v) return buf;
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// v as its name writes it and reads it back ("%g").
double as_named(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%g", v);
  return std::strtod(buf, nullptr);
}

// `c` planned for f of the budget (in hundredths) with swap weight w (with_fraction, with_weight).
std::optional<Candidate> respelled(Candidate c, double f, double w) {
  if (c.mode.rfind("capuchin", 0) != 0 || !(f > 0 && f <= 1) || !(w > 0)) return std::nullopt;
  c.fraction = as_named(std::round(f * 100) / 100);
  c.weight = w == 1 ? std::nullopt : std::optional<double>(as_named(w));
  if (!make_candidate(c)) return std::nullopt;
  return c;
}

std::optional<Candidate> valid(const Candidate& c) {
  if (!make_candidate(c)) return std::nullopt;
  return c;
}

}  // namespace

std::optional<Candidate> Candidate::parse(const std::string& name) {
  Candidate c;
  std::string head = name;
  auto peel = [&](const char* suffix, bool& flag) {
    if (!ends_with(head, suffix)) return;
    flag = true;
    head.resize(head.size() - std::strlen(suffix));
  };
  peel(kDtrFallback, c.dtr), peel(kWrap, c.wrap), peel(kEdf, c.edf), peel(kNeed, c.need), peel(kFifo, c.fifo);
  const size_t at = head.find('@');
  c.mode = head.substr(0, at);
  if (at != std::string::npos) {
    const std::string f = head.substr(at + 1);
    char* end = nullptr;
    c.fraction = std::strtod(f.c_str(), &end);
    if (f.empty() || end == f.c_str()) return std::nullopt;
    if (*end == ',' && end[1] == 'w' && c.mode == "capuchin") {
      const char* ws = end + 2;
      c.weight = std::strtod(ws, &end);
      if (end == ws) return std::nullopt;
    }
    if (*end != '\0') return std::nullopt;
  }
  return valid(c);
}

Candidate Candidate::named(const std::string& name) {
  const auto c = parse(name);
  if (!c) throw std::invalid_argument(unknown_candidate_message(name));
  return *c;
}

std::string Candidate::name() const {
  std::string s = mode;
  if (fraction) s += "@" + number(*fraction);
  if (weight) s += ",w" + number(*weight);
  return s + (fifo ? kFifo : "") + (need ? kNeed : "") + (edf ? kEdf : "") + (wrap ? kWrap : "") + (dtr ? kDtrFallback : "");
}

namespace auto_detail {

const std::vector<std::string>& planner_names() {
  static const std::vector<std::string> names = {"capuchin",   "capuchin-recompute", "capuchin-swap",
                                                 "checkpoint", "dtr",                "lru-recompute"};
  return names;
}

// After the others, so that the time limit's order of the others stays.
const std::vector<std::string>& compress_names() {
  static const std::vector<std::string> names = {"compress+capuchin", "compress+swap"};
  return names;
}

std::unique_ptr<Policy> make_candidate(const Candidate& cand) {
  bool known = false;
  for (const auto& n : planner_names()) known = known || n == cand.mode;
  for (const auto& n : compress_names()) known = known || n == cand.mode;
  if (!known) return nullptr;
  auto p = make_policy(cand.mode);
  if (auto* c = dynamic_cast<CheckpointPolicy*>(p.get())) c->set_budget_aware(true);
  auto* c = dynamic_cast<CapuchinPolicy*>(p.get());
  auto* z = dynamic_cast<CompressPolicy*>(p.get());
  if (c) c->set_feedback_iterations(kFeedbackIterations);
  if (cand.fraction) {
    const double v = *cand.fraction;
    if ((!c && !z) || !(v > 0 && v <= 1)) return nullptr;
    if (c) c->set_plan_fraction(v);
    if (z) z->set_plan_fraction(v);
  }
  if (cand.weight) {  // the hybrid's, written after its fraction
    if (!cand.fraction || cand.mode != "capuchin" || !(*cand.weight > 0)) return nullptr;
    c->set_swap_cost_weight(*cand.weight);
  }
  if (cand.dtr && !c && !z) return nullptr;
  if (cand.wrap) {
    if (!c || cand.mode == "capuchin-recompute") return nullptr;  // a recompute-only plan swaps nothing
    c->set_wrap_persistent(true);
  }
  // capuchin-recompute takes these too: the LP's and the search's pins swap on it
  if ((cand.edf || cand.need || cand.fifo) && !c) return nullptr;
  if (cand.edf) c->set_deadline_swap_outs(true);
  if (cand.need) c->set_need_ordered_prefetches(true);
  if (cand.fifo) c->set_fifo_prefetches(true);
  return p;
}

std::optional<Candidate> with_fraction(const Candidate& c, double f) { return respelled(c, f, c.swap_weight()); }

// The hybrid's only; its fraction is written (and in hundredths) from then on.
std::optional<Candidate> with_weight(const Candidate& c, double w) {
  return c.mode == "capuchin" ? respelled(c, c.plan_fraction(), w) : std::nullopt;
}

std::optional<Candidate> with_wrap_swaps(const Candidate& c) {
  if (c.wrap) return std::nullopt;
  Candidate w = c;
  w.wrap = true;
  return valid(w);
}

std::optional<Candidate> with_edf_toggled(const Candidate& c) {
  Candidate e = c;
  e.edf = !e.edf;
  return valid(e);
}

}  // namespace auto_detail

const std::vector<Candidate>& auto_candidates() {
  static const std::vector<Candidate> list = [] {
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
    std::vector<Candidate> out;
    for (const std::string& name : n) out.push_back(Candidate::named(name));
    return out;
  }();
  return list;
}

std::string unknown_candidate_message(const std::string& name) {
  std::string accepted;
  for (const auto& c : planner_names()) accepted += (accepted.empty() ? "" : ", ") + c;
  for (const auto& c : compress_names()) accepted += ", " + c;
  return "auto: unknown candidate '" + name + "'; accepted: " + accepted +
         ", or a Capuchin mode or compress policy with @F, the fraction of the budget it plans for (0 < F <= 1)";
}

}  // namespace vtensor
