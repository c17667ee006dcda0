// The plan as data (AutoPolicy::saved_plan, load_plan; `--auto-plan`): the chosen plan's fields
// written into the report, and read back, checked against the graph and the budget, into an
// AutoPolicy that runs them without the search, as a rehearsal does. Its own file so that the
// fuzz build's coverage counters reach it (tests/fuzz, target `plan`) without slowing auto.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "vtensor/memory/allocator.h"
#include "vtensor/policy/auto/auto.h"

namespace vtensor {

namespace {
constexpr const char* kPlanFormat = "vtensor-auto-plan/1";

std::string codec_name(Codec c) { return c == Codec::kNone ? "none" : to_string(c); }

using nlohmann::json;

// Reads a saved plan's fields, checked against the graph and the budget; `where` names the file.
class PlanReader {
 public:
  PlanReader(const Graph& g, size_t budget, std::string where) : g_(g), budget_(budget), where_(std::move(where)) {}

  std::invalid_argument bad(const std::string& what) const {
    return std::invalid_argument(where_ + ": " + what + "; accepted: the `saved_plan` of an auto run's report, or the report itself");
  }

  // The plan in file: file itself, or a report's saved plan.
  const json& locate(const json& file) const {
    const json* plan = &file;
    if (file.is_object() && file.contains("policy_report")) {  // a report: its plan
      const json& pr = file["policy_report"];
      if (!pr.is_object() || !pr.contains("saved_plan") || pr["saved_plan"].is_null()) {
        const json::json_pointer at("/config/policy");
        const std::string policy = file.contains(at) && file[at].is_string() ? file[at].get<std::string>() : "?";
        throw bad("a report without a plan (policy '" + policy + "'; only auto's reports hold one)");
      }
      plan = &pr["saved_plan"];
    }
    if (!plan->is_object() || !plan->contains("format") || (*plan)["format"] != kPlanFormat)
      throw bad(std::string("not a plan (no \"format\": \"") + kPlanFormat + "\")");
    return *plan;
  }

  // A whole number (a JSON integer: a float such as 1e30 does not convert), at least 0 unless signed.
  long long whole(const json& v, const std::string& what, bool is_signed = false) const {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
      throw bad(what + " is not a whole number in range");
    const long long x = v.get<long long>();
    if (x < 0 && !is_signed) throw bad(what + " is negative");
    return x;
  }

  void check_graph(const json& p) const {
    const json& pg = p.at("graph");
    const size_t ops = static_cast<size_t>(whole(pg.at("ops"), "graph.ops")),
                 tensors = static_cast<size_t>(whole(pg.at("tensors"), "graph.tensors"));
    const std::string fp = pg.at("fingerprint").get<std::string>();
    if (ops != g_.num_ops() || tensors != g_.num_tensors() || fp != fingerprint(g_))
      throw std::invalid_argument(where_ + ": the plan was made for another graph (" + std::to_string(ops) + " ops, " +
                                  std::to_string(tensors) + " tensors, fingerprint " + fp + "), this run's has " +
                                  std::to_string(g_.num_ops()) + " ops, " + std::to_string(g_.num_tensors()) +
                                  " tensors, fingerprint " + fingerprint(g_) +
                                  "; accepted: a plan of the same model, batch, sizes and graph flags (--step-in-backward, "
                                  "--inplace-relu-grad, --optimizer)");
  }

  void check_budget(const json& p) const {
    const size_t made_for = static_cast<size_t>(whole(p.at("budget_bytes"), "budget_bytes"));
    if (made_for != budget_)
      throw std::invalid_argument(where_ + ": the plan was made for a budget of " + std::to_string(made_for) +
                                  " bytes, this run's is " + std::to_string(budget_) + "; accepted: --budget " +
                                  std::to_string(made_for) + "B");
  }

  std::vector<PlanPin> pins(const json& entries) const {
    std::vector<PlanPin> pins;
    for (const json& e : entries) pins.push_back(pin(e));
    return pins;
  }

  std::vector<TriggerMove> trigger_moves(const json& entries) const {
    std::vector<TriggerMove> moves;
    for (const json& e : entries) {
      const long long ops = whole(e.at("ops"), "trigger_moves: ops", true);
      if (ops < 0 || ops > static_cast<long long>(g_.num_ops()))
        throw bad("trigger_moves: ops " + std::to_string(ops) + " is not an op count in 0.." + std::to_string(g_.num_ops()));
      TriggerMove m{tensor_id(e, "trigger_moves"), op_at(e, "back_op", "trigger_moves", false), static_cast<int>(ops)};
      moves.push_back(m);
    }
    return moves;
  }

  std::vector<LayoutBlock> start_layout(const json& entries) const {
    std::vector<LayoutBlock> layout;
    for (const json& e : entries) {
      const long long id = whole(e.at("id"), "start_layout: id", true);
      LayoutBlock b{static_cast<TensorId>(id), e.at("buffer").get<bool>(), static_cast<size_t>(whole(e.at("offset"), "start_layout: offset")),
                    static_cast<size_t>(whole(e.at("size"), "start_layout: size"))};
      if (id != kNoTensor) tensor_id(e, "start_layout");
      if (b.offset > budget_ || b.size > budget_ - b.offset || b.size == 0 || b.offset % kAllocAlignment != 0 ||
          b.size % kAllocAlignment != 0)
        throw bad("start_layout: a block at " + std::to_string(b.offset) + " of " + std::to_string(b.size) +
                  " bytes is not an aligned block within the budget");
      layout.push_back(b);
    }
    {  // blocks that overlap would be moved onto each other
      std::vector<LayoutBlock> by_offset = layout;
      std::sort(by_offset.begin(), by_offset.end(), [](const LayoutBlock& a, const LayoutBlock& b) { return a.offset < b.offset; });
      for (size_t k = 1; k < by_offset.size(); ++k)
        if (by_offset[k - 1].offset + by_offset[k - 1].size > by_offset[k].offset)
          throw bad("start_layout: the blocks at " + std::to_string(by_offset[k - 1].offset) + " and " +
                    std::to_string(by_offset[k].offset) + " overlap");
    }
    return layout;
  }

  StartState start_state(const std::string& state) const {
    StartState s = StartState::kPacked;
    if (state == "reordered") s = StartState::kReordered;
    else if (state == "restored") s = StartState::kRestored;
    else if (state != "packed") throw bad("start_state '" + state + "' (accepted: packed, reordered, restored)");
    return s;
  }

 private:
  TensorId tensor_id(const json& e, const char* what) const {
    const long long id = whole(e.at("id"), std::string(what) + ": id", true);
    if (id < 0 || static_cast<size_t>(id) >= g_.num_tensors())
      throw bad(std::string(what) + ": tensor id " + std::to_string(id) + " is not one of the graph's 0.." + std::to_string(g_.num_tensors() - 1));
    if (e.contains("tensor") && e["tensor"].get<std::string>() != g_.tensor(static_cast<TensorId>(id)).name)
      throw bad(std::string(what) + ": tensor " + std::to_string(id) + " is '" + g_.tensor(static_cast<TensorId>(id)).name +
                "', the plan names '" + e["tensor"].get<std::string>() + "'");
    return static_cast<TensorId>(id);
  }

  int op_at(const json& e, const char* key, const char* what, bool optional) const {
    const long long op = whole(e.at(key), std::string(what) + ": " + key, true);
    if ((op < 0 && !(optional && op == -1)) || op >= static_cast<long long>(g_.num_ops()))
      throw bad(std::string(what) + ": " + key + " " + std::to_string(op) + " is not one of the graph's ops 0.." +
                std::to_string(g_.num_ops() - 1));
    return static_cast<int>(op);
  }

  PlanPin pin(const json& e) const {
    PlanPin pin;
    pin.id = tensor_id(e, "pins");
    pin.back_op = op_at(e, "back_op", "pins", false);
    const std::string d = e.at("decision").get<std::string>();
    if (d == "keep") pin.decision = CapuchinDecision::kKeep;
    else if (d == "swap") pin.decision = CapuchinDecision::kSwap;
    else if (d == "recompute") pin.decision = CapuchinDecision::kRecompute;
    else if (d == "compress") pin.decision = CapuchinDecision::kCompress;
    else throw bad("pins: decision '" + d + "' (accepted: keep, swap, recompute, compress)");
    const long long shift = e.contains("trigger_shift") ? whole(e["trigger_shift"], "pins: trigger_shift", true) : 0;
    if (shift < 0 || shift > static_cast<long long>(g_.num_ops()))
      throw bad("pins: trigger_shift " + std::to_string(shift) + " is not an op count in 0.." + std::to_string(g_.num_ops()));
    pin.trigger_shift = static_cast<int>(shift);
    pin.ahead_op = e.contains("ahead_op") ? op_at(e, "ahead_op", "pins", true) : -1;
    pin.trigger_op = e.contains("trigger_op") ? op_at(e, "trigger_op", "pins", true) : -1;
    const std::string codec = e.value("codec", std::string("none"));
    if (codec != "none" && codec != "bitmask" && codec != "sign") throw bad("pins: codec '" + codec + "' (accepted: none, bitmask, sign)");
    pin.codec = codec == "none" ? Codec::kNone : parse_codec(codec);
    if ((pin.decision == CapuchinDecision::kCompress) != (pin.codec != Codec::kNone))
      throw bad("pins: a compress pin names its codec (bitmask or sign), the others none");
    const double capacity = e.value("capacity", 0.0);
    pin.codec_ns = e.value("codec_ns", 0.0);
    if (!(capacity >= 0 && capacity <= static_cast<double>(budget_)) || !(pin.codec_ns >= 0 && std::isfinite(pin.codec_ns)))
      throw bad("pins: a compressed buffer's capacity must lie in 0..the budget and its codec_ns be a time >= 0");
    pin.capacity = static_cast<size_t>(capacity);
    return pin;
  }

  const Graph& g_;
  const size_t budget_;
  const std::string where_;
};
}  // namespace

nlohmann::json AutoPolicy::saved_plan() const {
  using nlohmann::json;
  if (!view_ || chosen_.empty() || !active_) return nullptr;
  const Graph& g = view_->graph();
  json pins = json::array();
  for (const PlanPin& p : pins_)
    pins.push_back({{"tensor", g.tensor(p.id).name}, {"id", p.id}, {"back_op", p.back_op}, {"decision", to_string(p.decision)},
                    {"trigger_shift", p.trigger_shift}, {"ahead_op", p.ahead_op}, {"trigger_op", p.trigger_op},
                    {"codec", codec_name(p.codec)}, {"capacity", p.capacity}, {"codec_ns", p.codec_ns}});
  json moves = json::array();
  for (const TriggerMove& m : trigger_moves_)
    moves.push_back({{"tensor", g.tensor(m.id).name}, {"id", m.id}, {"back_op", m.back_op}, {"ops", m.ops}});
  json layout = json::array();
  for (const LayoutBlock& b : saved_layout_)
    layout.push_back({{"id", b.id}, {"buffer", b.buffer}, {"offset", b.offset}, {"size", b.size}});
  double predicted = 0;
  if (chosen_result_.trained && chosen_result_.time_ms > 0) predicted = chosen_result_.time_ms;
  else if (loaded_.is_object() && loaded_.contains("predicted_ms") && loaded_["predicted_ms"].is_number())
    predicted = loaded_["predicted_ms"].get<double>();
  return {{"format", kPlanFormat},
          {"graph", {{"ops", g.num_ops()}, {"tensors", g.num_tensors()}, {"fingerprint", fingerprint(g)}}},
          {"budget_bytes", view_->budget()},
          {"made_on", loaded_.is_object() ? loaded_.value("made_on", json(nullptr))
                                          : json{{"gpu", view_->modelled_gpu().empty() ? json(nullptr) : json(view_->modelled_gpu())},
                                                 {"allocator", view_->allocator_name()}}},
          {"policy", chosen_.name()},
          {"pins", pins},
          {"trigger_moves", moves},
          {"compact_unfit", compact_unfit_},
          {"min_wrap_bytes", min_wrap_bytes_},
          {"start_state", to_string(start_state_)},
          {"high_placement_bytes", high_placement_},
          {"start_layout", layout},
          {"predicted_ms", predicted > 0 ? json(predicted) : json(nullptr)}};
}

bool AutoPolicy::loaded_plan_compresses() const {
  if (loaded_from_.empty()) return false;
  if (forced_.compresses()) return true;
  return std::any_of(pins_.begin(), pins_.end(), [](const PlanPin& p) { return p.decision == CapuchinDecision::kCompress; });
}

void AutoPolicy::load_plan(const nlohmann::json& file, const Graph& g, size_t budget, const std::string& source) {
  const PlanReader r(g, budget, "--auto-plan '" + source + "'");
  const json& p = r.locate(file);
  try {
    r.check_graph(p);
    r.check_budget(p);
    const std::string name = p.at("policy").get<std::string>();
    const std::optional<Candidate> policy = Candidate::parse(name);
    if (!policy) throw r.bad("policy: " + unknown_candidate_message(name));
    std::vector<PlanPin> pins = r.pins(p.at("pins"));
    std::vector<TriggerMove> moves = r.trigger_moves(p.at("trigger_moves"));
    std::vector<LayoutBlock> layout = r.start_layout(p.at("start_layout"));
    const StartState s = r.start_state(p.at("start_state").get<std::string>());
    forced_ = *policy, pins_ = std::move(pins), trigger_moves_ = std::move(moves), start_layout_ = std::move(layout);
    start_state_ = s;
    compact_unfit_ = p.at("compact_unfit").get<bool>();
    min_wrap_bytes_ = static_cast<size_t>(r.whole(p.at("min_wrap_bytes"), "min_wrap_bytes"));
    high_placement_ = static_cast<size_t>(r.whole(p.at("high_placement_bytes"), "high_placement_bytes"));
    // what the report and the summary repeat of it
    if (p.contains("predicted_ms") && !p["predicted_ms"].is_null() && !p["predicted_ms"].is_number())
      throw r.bad("predicted_ms is neither a time nor null");
    if (p.contains("made_on") && !p["made_on"].is_null() && !p["made_on"].is_object())
      throw r.bad("made_on is neither an object nor null");
  } catch (const json::exception& e) {  // a field missing or of the wrong type
    throw r.bad(std::string("malformed: ") + e.what());
  }
  loaded_from_ = source;
  loaded_ = p;
}

}  // namespace vtensor
