// What the e2e tests of policy auto share (tests/e2e/test_auto*.cpp): a config for a model,
// policy and budget; a run that keeps its iterations, parameters, buffers and report; the search
// limits those tests set; and the bit-identity check.
#pragma once
#include <gtest/gtest.h>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include "vtensor/backend/sim/gpu_specs.h"
#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/policy/auto/auto.h"
#include "vtensor/train/densities.h"
#include "vtensor/train/rehearsal.h"
#include "vtensor/train/trainer.h"
#include "tests/support/cli.h"
#include "tests/support/training.h"

namespace vtensor::auto_test {

struct AutoRun {
  std::vector<IterationStats> iters;
  std::vector<std::vector<float>> params, buffers;
  nlohmann::json report;
};

inline TrainConfig config(const std::string& model, const std::string& policy, size_t budget, int iters,
                   const std::string& gpu = {}) {
  TrainConfig cfg;
  cfg.model.name = model;
  cfg.policy = policy;
  cfg.budget = budget;
  cfg.iters = iters;
  if (!gpu.empty()) cfg.backend = "sim", cfg.gpu = gpu;
  // The wall clock, not the default rehearsals clock: under the sanitizers a rehearsal runs
  // several times slower than the rehearsals clock counts it, so that clock would plan as much as
  // in release and take several times as long (CI's time). The clock's own tests set rehearsals.
  if (policy == "auto") cfg.policy_options.set("auto-clock", "wall");
  return cfg;
}

inline constexpr double kUnlimitedLpSeconds = 600;  // Clp's wall limit, for tests that assert the LP's status

inline AutoRun run(Trainer& t, const TrainConfig& cfg) {
  // Clp's wall limit (2 s) is reached on a loaded machine (bert-tiny's LP at 25% took 2.1 s there):
  // no test's LP stops at it, so its status and starts do not depend on the machine.
  if (auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy())) a->set_lp_seconds(kUnlimitedLpSeconds);
  AutoRun r;
  TrainResult res = t.run();
  r.iters = res.iterations;
  r.report = res.policy_report;
  if (cfg.backend == "sim") return r;
  r.params = t.read_params();
  for (const auto& info : t.graph().tensors())
    if (info.kind == TensorKind::kBuffer) r.buffers.push_back(t.read(info.id));
  return r;
}

inline AutoRun train(const TrainConfig& cfg) {
  Trainer t(cfg);
  return run(t, cfg);
}

// Tests of the search's own steps (its phases, its window, its pins) must not depend on the
// machine's speed: the starts share the planning limit, and under the sanitizers' slower clock a
// share could end before the step under test. A limit no tiny row reaches, and no LP start.
inline constexpr double kUnlimitedPlanningMs = 600000;
inline void unlimited_planning(Trainer& t) {
  if (auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy())) a->set_time_limit_ms(kUnlimitedPlanningMs);
}

// Tests that follow one plan through the start state and the warm start: only the search's
// fastest end is finished (not the kFinishedPlans fastest, whose fastest after its warm start runs).
inline void one_finished_plan(Trainer& t) {
  if (auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy())) a->set_finished_plans(1);
}

// Tests of what comes after the search (the start state, the long runs, the warm start) need a
// searched plan, not a long search: no LP start, a climb of `rehearsals` per start and no window
// search. With unlimited planning the choice stays the same under the sanitizers' slower clock,
// and the run takes a few hundred rehearsals, not thousands (under ASan one took 8 minutes).
inline void bounded_search(TrainConfig& cfg, int rehearsals = 32) {
  if (cfg.policy != "auto") return;  // the same row under another policy (its options are auto's)
  cfg.policy_options.set("auto-lp", 0).set("auto-search", rehearsals).set("auto-window", 0).set("auto-room", 0);
}

// cfg running the saved plan in `file`: the search's options go (--auto-plan runs a plan without one).
inline TrainConfig with_plan(TrainConfig cfg, const std::string& file) {
  PolicyOptions o;
  o.budget_given = cfg.policy_options.budget_given;
  if (const auto guard = cfg.policy_options.text("auto-replay-guard")) o.set("auto-replay-guard", *guard);
  cfg.policy_options = o.set("auto-plan", file);
  return cfg;
}

// The densities file one cpu iteration of `compress` records for `model` (what sim's --densities reads).
inline std::string record_densities(const std::string& model, const std::string& file) {
  const std::string path = vtensor::test::temp_path("auto", file);
  TrainConfig cpu = config(model, "compress", 0, 1);
  cpu.densities_out = path;
  Trainer(cpu).run();
  return path;
}

inline size_t max_peak(const AutoRun& r, size_t from = 0) {
  size_t p = 0;
  for (size_t i = from; i < r.iters.size(); ++i) p = std::max(p, r.iters[i].peak_allocated);
  return p;
}

inline double mean_guided_ms(const AutoRun& r) {
  double t = 0;
  for (size_t i = 1; i < r.iters.size(); ++i) t += r.iters[i].time_ms;
  return t / static_cast<double>(r.iters.size() - 1);
}

// The candidate auto chose, rehearsed again on sim from the run's graph with these pins.
inline RehearsalResult rehearse_again(const Graph& g, const AutoPolicy& a, size_t budget, const std::string& gpu,
                               std::vector<PlanPin> pins) {
  RehearsalSetup s;
  s.graph = &g;
  s.budget = budget;
  s.gpu = gpu;
  s.pins = std::move(pins);
  s.start_state = a.start_state();
  s.trigger_moves = a.trigger_moves();
  s.start_layout = a.warm_layout();
  s.compact_unfit = a.compact_unfit();
  s.min_wrap_bytes = a.min_wrap_bytes();
  s.high_placement_bytes = a.high_placement();
  return rehearse(a.chosen(), s);
}

// A rehearser that scales the times of the rehearsals that start from a layout (the warm start's)
// by `factor`: below 1 the warm layout wins, above 1 it loses.
inline void scale_warm_rehearsals(AutoPolicy& ap, double factor) {
  ap.set_rehearser([factor](const Candidate& policy, const RehearsalSetup& s) {
    RehearsalResult r = rehearse(policy, s);
    if (!s.start_layout.empty()) r.time_ms *= factor, r.measured_ms *= factor;
    return r;
  });
}

using test::expect_bit_identical;  // tests/support/training.h


// The finish's variants (AutoPolicy::need_order, then placement): did one win?
inline bool won(const nlohmann::json& report, const char* step) {
  return report.contains(step) && report[step].contains("won") && report[step]["won"].get<bool>();
}

// The plan's time before them: where the finish of the search ended.
inline double finished_ms(const nlohmann::json& report) {
  for (const char* step : {"need_order", "placement"})
    if (report.contains(step) && report[step].contains("searched_ms")) return report[step]["searched_ms"].get<double>();
  return report["predicted_time_ms"].get<double>();
}

}  // namespace vtensor::auto_test
