// Policy auto's candidates by name (candidates.h): the list, the names read and made into their
// policies, and the respellings the search's headroom and weight moves use.
#include "vtensor/policy/auto/candidates.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "vtensor/policy/auto/tuning.h"
#include "vtensor/policy/capuchin.h"
#include "vtensor/policy/checkpoint.h"
#include "vtensor/policy/compress.h"
#include "vtensor/policy/registry.h"

namespace vtensor {

using namespace auto_detail;

namespace {

// The suffixes (CandidateName).
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

// The name respelled with fraction f and weight w (with_fraction, with_weight).
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

}  // namespace

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

bool is_compress_candidate(const std::string& name) { return name.rfind("compress", 0) == 0; }

std::string CandidateName::str() const {
  return head + (fifo ? kFifo : "") + (need ? kNeed : "") + (edf ? kEdf : "") + (wrap ? kWrap : "") + (dtr ? kDtrFallback : "");
}

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
bool wraps(const std::string& full) { return parse_name(full).wrap; }

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


double plan_fraction(const std::string& full) {
  const size_t at = full.find('@');
  return at == std::string::npos ? 1.0 : std::strtod(full.c_str() + at + 1, nullptr);
}

double swap_weight(const std::string& full) {
  const size_t at = full.find(",w");
  return at == std::string::npos || full.compare(at, std::string(kWrap).size(), kWrap) == 0
             ? 1.0 : std::strtod(full.c_str() + at + 2, nullptr);
}
std::optional<std::string> with_fraction(const std::string& full, double f) { return respelled(full, f, swap_weight(full)); }
std::optional<std::string> with_wrap_swaps(const std::string& full) {
  CandidateName n = parse_name(full);
  if (n.wrap) return std::nullopt;
  n.wrap = true;
  std::string out = n.str();
  if (!make_candidate(out)) return std::nullopt;
  return out;
}
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

}  // namespace auto_detail

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

}  // namespace vtensor
