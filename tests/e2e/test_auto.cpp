// End-to-end: policy auto (vtensor/policy/auto/). On cpu it trains every tiny preset
// bit-identically to `none` at the smallest budget of a ladder it reaches (whichever candidate the
// wall clock makes it choose: every candidate is lossless); on sim its rehearsal is the run, so
// the predicted peak and time equal the measured ones, and it is no slower than any candidate
// run on its own.
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

using namespace vtensor;

namespace {

struct AutoRun {
  std::vector<IterationStats> iters;
  std::vector<std::vector<float>> params, buffers;
  nlohmann::json report;
};

TrainConfig config(const std::string& model, const std::string& policy, size_t budget, int iters,
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

constexpr double kUnlimitedLpSeconds = 600;  // Clp's wall limit, for tests that assert the LP's status

AutoRun run(Trainer& t, const TrainConfig& cfg) {
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

AutoRun train(const TrainConfig& cfg) {
  Trainer t(cfg);
  return run(t, cfg);
}

// Tests of the search's own steps (its phases, its window, its pins) must not depend on the
// machine's speed: the starts share the planning limit, and under the sanitizers' slower clock a
// share could end before the step under test. A limit no tiny row reaches, and no LP start.
constexpr double kUnlimitedPlanningMs = 600000;
void unlimited_planning(Trainer& t) {
  if (auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy())) a->set_time_limit_ms(kUnlimitedPlanningMs);
}

// Tests that follow one plan through the start state and the warm start: only the search's
// fastest end is finished (not the kFinishedPlans fastest, whose fastest after its warm start runs).
void one_finished_plan(Trainer& t) {
  if (auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy())) a->set_finished_plans(1);
}

// Tests of what comes after the search (the start state, the long runs, the warm start) need a
// searched plan, not a long search: no LP start, a climb of `rehearsals` per start and no window
// search. With unlimited planning the choice stays the same under the sanitizers' slower clock,
// and the run takes a few hundred rehearsals, not thousands (under ASan one took 8 minutes).
void bounded_search(TrainConfig& cfg, int rehearsals = 32) {
  if (cfg.policy != "auto") return;  // the same row under another policy (its options are auto's)
  cfg.policy_options.set("auto-lp", 0).set("auto-search", rehearsals).set("auto-window", 0).set("auto-room", 0);
}

// cfg running the saved plan in `file`: the search's options go (--auto-plan runs a plan without one).
TrainConfig with_plan(TrainConfig cfg, const std::string& file) {
  PolicyOptions o;
  o.budget_given = cfg.policy_options.budget_given;
  if (const auto guard = cfg.policy_options.text("auto-replay-guard")) o.set("auto-replay-guard", *guard);
  cfg.policy_options = o.set("auto-plan", file);
  return cfg;
}

// The densities file one cpu iteration of `compress` records for `model` (what sim's --densities reads).
std::string record_densities(const std::string& model, const std::string& file) {
  const std::string path = vtensor::test::temp_path("auto", file);
  TrainConfig cpu = config(model, "compress", 0, 1);
  cpu.densities_out = path;
  Trainer(cpu).run();
  return path;
}

size_t max_peak(const AutoRun& r, size_t from = 0) {
  size_t p = 0;
  for (size_t i = from; i < r.iters.size(); ++i) p = std::max(p, r.iters[i].peak_allocated);
  return p;
}

double mean_guided_ms(const AutoRun& r) {
  double t = 0;
  for (size_t i = 1; i < r.iters.size(); ++i) t += r.iters[i].time_ms;
  return t / static_cast<double>(r.iters.size() - 1);
}

// The candidate auto chose, rehearsed again on sim from the run's graph with these pins.
RehearsalResult rehearse_again(const Graph& g, const AutoPolicy& a, size_t budget, const std::string& gpu,
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
void scale_warm_rehearsals(AutoPolicy& ap, double factor) {
  ap.set_rehearser([factor](const std::string& policy, const RehearsalSetup& s) {
    RehearsalResult r = rehearse(policy, s);
    if (!s.start_layout.empty()) r.time_ms *= factor, r.measured_ms *= factor;
    return r;
  });
}

void expect_bit_identical(const AutoRun& a, const AutoRun& b) {
  ASSERT_EQ(a.iters.size(), b.iters.size());
  for (size_t i = 0; i < a.iters.size(); ++i)
    EXPECT_EQ(0, std::memcmp(&a.iters[i].loss, &b.iters[i].loss, sizeof(float))) << "iteration " << i;
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * sizeof(float))) << "parameter " << i;
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a.buffers[i].data(), b.buffers[i].data(), a.buffers[i].size() * sizeof(float))) << "buffer " << i;
}

}  // namespace

class AutoTiny : public ::testing::TestWithParam<std::string> {};

// The smallest budget of the ladder at which auto trains (no OutOfMemoryError); there its
// losses, weights and running statistics equal `none`'s bit for bit and every iteration stays
// within the budget. The choice comes from wall-clock kernel times, so it may differ run to run:
// the assertions hold for any candidate.
TEST_P(AutoTiny, BitIdenticalToNoneAtTheSmallestBudgetItReaches) {
  const std::string model = GetParam();
  const int iters = 4;
  const AutoRun base = train(config(model, "none", 0, iters));
  bool trained = false;
  for (const double f : {0.25, 0.3, 0.4, 0.5, 0.62, 0.75}) {
    const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * f));
    SCOPED_TRACE(std::to_string(f) + " of the peak");
    AutoRun r;
    try {
      r = train(config(model, "auto", budget, iters));
    } catch (const OutOfMemoryError&) {
      continue;
    }
    trained = true;
    expect_bit_identical(base, r);
    for (const auto& s : r.iters) EXPECT_LE(s.peak_allocated, budget);
    ASSERT_TRUE(r.report.is_object());
    EXPECT_FALSE(r.report["chosen"].get<std::string>().empty());
    // The plan that runs was made from the measured iteration as the rehearsals recorded it: the
    // same accesses as the clock's record (else the clock's is used).
    EXPECT_EQ(r.report["planned_from"], "rehearsed measured iteration");
    ASSERT_GE(r.report["candidates"].size(), auto_candidates().size());
    for (size_t i = auto_candidates().size(); i < r.report["candidates"].size(); ++i)  // the wrap-swap reruns
      EXPECT_NE(r.report["candidates"][i]["policy"].get<std::string>().find(",wrap"), std::string::npos);
    // The compression candidates: rehearsed from the measured iteration's counts where the model
    // has ReLU outputs, skipped with the reason where it has none (GELU transformers).
    const bool relu = model != "gpt-tiny" && model != "bert-tiny";
    for (const auto& c : r.report["candidates"]) {
      if (c["policy"].get<std::string>().rfind("compress", 0) != 0) continue;
      SCOPED_TRACE(c.dump());
      if (relu) EXPECT_EQ(c.value("error", std::string()).find("not rehearsed"), std::string::npos);
      else EXPECT_NE(c["error"].get<std::string>().find("no ReLU or max-pool output"), std::string::npos);
    }
    break;
  }
  EXPECT_TRUE(trained) << "auto trained " << model << " at no budget of the ladder";
}

INSTANTIATE_TEST_SUITE_P(Models, AutoTiny, ::testing::Values("mlp-tiny", "vgg-tiny", "resnet-tiny", "gpt-tiny", "bert-tiny"));

// Persistent tensors swapped across the iteration boundary (the wrap swaps of auto's
// Capuchin-based plans) keep training bit-identical to none on cpu: weights and momentum leave
// after their last use (the optimizer step) and come back before their first use next iteration.
TEST(AutoWrap, PersistentSwapsAcrossIterationsAreBitIdentical) {
  for (const std::string model : {"resnet-tiny", "gpt-tiny"}) {
    SCOPED_TRACE(model);
    const AutoRun base = train(config(model, "none", 0, 5));
    const size_t budget = align_up(max_peak(base) / 2);
    const TrainConfig cfg = config(model, "capuchin-swap", budget, 5);
    Trainer t(cfg);
    auto* c = dynamic_cast<CapuchinPolicy*>(&t.memory().policy());
    ASSERT_NE(c, nullptr);
    c->set_wrap_persistent(true);
    const AutoRun r = run(t, cfg);
    ASSERT_TRUE(r.report.contains("wrap_swaps")) << r.report.dump();
    EXPECT_FALSE(r.report["wrap_swaps"].empty()) << "no persistent tensor swapped across the boundary";
    expect_bit_identical(base, r);
    for (const auto& s : r.iters) EXPECT_LE(s.peak_allocated, budget);
  }
}

// capuchin-swap with `set` applied to the policy, on each model at 50% and 25% of its unmanaged
// peak, on sim (p100-16g) and on cpu: every run holds the budget and on cpu is bit-identical to
// none; `check` sees each run (gpu empty: cpu), and with `plain` the same run without `set` on sim.
void capuchin_swap_rows(const std::vector<std::string>& models, const std::function<void(CapuchinPolicy&)>& set,
                        const std::function<void(const AutoRun&, const AutoRun* plain, const std::string& gpu)>& check,
                        bool plain = false) {
  for (const std::string& model : models)
    for (const double fraction : {0.5, 0.25}) {
      SCOPED_TRACE(model + " at " + std::to_string(fraction));
      for (const std::string gpu : {"p100-16g", ""}) {
        const AutoRun base = train(config(model, "none", 0, 4, gpu));
        const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * fraction));
        const TrainConfig cfg = config(model, "capuchin-swap", budget, 4, gpu);
        Trainer t(cfg);
        auto* c = dynamic_cast<CapuchinPolicy*>(&t.memory().policy());
        ASSERT_NE(c, nullptr);
        set(*c);
        const AutoRun r = run(t, cfg);
        for (const auto& s : r.iters) EXPECT_LE(s.peak_allocated, budget);
        if (gpu.empty()) expect_bit_identical(base, r);
        if (gpu.empty() || !plain) {
          check(r, nullptr, gpu);
        } else {
          const AutoRun without = train(cfg);
          check(r, &without, gpu);
        }
      }
    }
}

// A D2H queue in deadline order (the ",edf" starts of auto's search): some swap-outs are issued
// after ops later than their evictions, ahead of them others whose gaps close sooner. The
// memory manager carries that out: on sim the plan defers some swap-outs, holds the budget and
// runs its swaps; on cpu the run stays bit-identical to none.
TEST(AutoEdf, SwapOutsIssuedLaterThanTheirEvictionKeepTheRunBitIdentical) {
  int deferred = 0;
  capuchin_swap_rows({"resnet-tiny", "gpt-tiny"}, [](CapuchinPolicy& c) { c.set_deadline_swap_outs(true); },
                     [&](const AutoRun& r, const AutoRun*, const std::string& gpu) {
                       uint64_t swapped = 0;
                       for (size_t i = 1; i < r.iters.size(); ++i) swapped += r.iters[i].counters.swapped_out_bytes;
                       EXPECT_GT(swapped, 0u);
                       if (gpu.empty()) return;
                       for (const auto& x : r.report["tensors"])
                         if (x.contains("swap_out_after_op")) {
                           EXPECT_GT(x["swap_out_after_op"].get<int>(), x["evict_after_op"].get<int>());
                           EXPECT_LT(x["swap_out_after_op"].get<int>(), x["freed_after_op"].get<int>());
                           ++deferred;
                         }
                     });
  EXPECT_GT(deferred, 0) << "no swap-out was issued later than its eviction";
}

// The plans auto's finish tries for the H2D stream's issue order (AutoPolicy::need_order) on
// capuchin-swap's rows: on cpu the run stays bit-identical to none; on sim the budget holds, the
// plan prefetches, and on some row it is not the lane model's plan. How many rows differ.
int issue_order_rows(const std::function<void(CapuchinPolicy&)>& set) {
  int changed = 0;
  capuchin_swap_rows({"resnet-tiny", "bert-tiny"}, set,
                     [&](const AutoRun& r, const AutoRun* plain, const std::string&) {
                       uint64_t prefetched = 0;
                       for (size_t i = 1; i < r.iters.size(); ++i) prefetched += r.iters[i].counters.prefetches;
                       EXPECT_GT(prefetched, 0u);
                       if (plain) changed += r.report["plan"] != plain->report["plan"];
                     },
                     true);
  return changed;
}

// One op's prefetches in need order (",need"): the memory manager issues them in the plan's
// order, so the order changes only when copies run.
TEST(AutoNeed, PrefetchesInNeedOrderKeepTheRunBitIdentical) {
  EXPECT_GT(issue_order_rows([](CapuchinPolicy& c) { c.set_need_ordered_prefetches(true); }), 0)
      << "the need order never differed from the greedy's";
}

// The H2D queue planned in issue order (",fifo"): a prefetch is charged the stall it adds to
// those queued after it, so the greedy chooses other swaps and triggers.
TEST(AutoFifo, PlansForTheQueueInIssueOrderKeepTheRunBitIdentical) {
  EXPECT_GT(issue_order_rows([](CapuchinPolicy& c) { c.set_fifo_prefetches(true); }), 0)
      << "planning for the queue in issue order never changed a plan";
}

// High placement (AutoPolicy::placement: the device allocator puts the large requests at the
// top of their block) on cpu: the guided iterations' address space in use reaches the arena's
// top, and the run stays bit-identical to none within the budget.
TEST(AutoPlacement, LargeBlocksPlacedHighKeepTheRunBitIdentical) {
  for (const std::string model : {"resnet-tiny", "gpt-tiny"}) {
    SCOPED_TRACE(model);
    const AutoRun base = train(config(model, "none", 0, 4));
    const size_t budget = align_up(max_peak(base) / 2);
    TrainConfig cfg = config(model, "auto", budget, 4);
    bounded_search(cfg);
    Trainer t(cfg);
    auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
    ASSERT_NE(a, nullptr);
    a->set_high_placement(budget / 32);  // given before the run: kept (the finish does not choose)
    const AutoRun r = run(t, cfg);
    EXPECT_EQ(r.report["placement"]["high_from_bytes"].get<size_t>(), budget / 32);
    for (size_t i = 0; i < r.iters.size(); ++i) {
      EXPECT_LE(r.iters[i].peak_allocated, budget);
      if (i > 0) EXPECT_EQ(r.iters[i].peak_reserved, budget) << "iteration " << i;  // the measured one places low
    }
    expect_bit_identical(base, r);
  }
}

// On gpt-tiny at 36% on p100-16g the finish's rehearsal with high placement runs faster than the
// plan without it: it runs, the report says so, and the plan with it replays to the predicted
// run (without it, to the time the finish started from).
TEST(AutoPlacement, TheFinishPlacesHighWhereThatRunsFasterAndReplays) {
  const AutoRun base = train(config("gpt-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * 0.36));
  Trainer t(config("gpt-tiny", "auto", budget, 4, "p100-16g"));
  unlimited_planning(t);
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  const nlohmann::json rep = t.run().policy_report;
  const auto& pl = rep["placement"];
  ASSERT_TRUE(pl.contains("won")) << rep.dump();
  ASSERT_TRUE(pl["won"].get<bool>()) << "high placement did not win on this row: the check proves nothing; " << pl.dump();
  EXPECT_GT(a->high_placement(), 0u);
  EXPECT_EQ(pl["high_from_bytes"].get<size_t>(), a->high_placement());
  bool listed = false;  // the one that runs is among those tried, and faster than the plan without it
  for (const auto& x : pl["tried"])
    if (x["high_from_bytes"].get<size_t>() == a->high_placement()) {
      listed = true;
      EXPECT_LT(x["time_ms"].get<double>(), pl["searched_ms"].get<double>());
      EXPECT_EQ(x["time_ms"].get<double>(), rep["predicted_time_ms"].get<double>());
    }
  EXPECT_TRUE(listed) << pl.dump();
  RehearsalResult again = rehearse_again(t.graph(), *a, budget, "p100-16g", a->pins());
  ASSERT_TRUE(again.trained) << again.error;
  EXPECT_EQ(again.time_ms, rep["predicted_time_ms"].get<double>());
  a->set_high_placement(0);
  again = rehearse_again(t.graph(), *a, budget, "p100-16g", a->pins());
  EXPECT_EQ(again.time_ms, pl["searched_ms"].get<double>());
}

// A persistent tensor the plan keeps but the passive fallback evicts (momentum at the optimizer
// step, where the weights, their gradients and momentum do not fit) costs its wait at its first
// use or for its copy out: the rehearsal reports that gap over the iteration's end
// (RehearsedGap::wrap, from its last use to its first) with the stall it cost, and a pin on it
// has the plan swap the tensor over the end instead. With those, the gaps account for the
// iteration's stall and recompute time, where they used to leave a persistent tensor's out.
TEST(AutoWrap, TheFallbacksEvictionsOfPersistentTensorsAreGapsTheSearchPins) {
  int found = 0;
  for (const std::string model : {"bert-tiny", "gpt-tiny", "resnet-tiny"}) {
    SCOPED_TRACE(model);
    const AutoRun base = train(config(model, "none", 0, 2, "p100-16g"));
    Trainer t(config(model, "none", 0, 1, "p100-16g"));
    const Graph& g = t.graph();
    RehearsalSetup s;
    s.graph = &g;
    s.gpu = "p100-16g";
    s.iterations = 2;  // one guided iteration: its stall is the one the gaps' costs add up
    RehearsalResult r;
    for (const size_t part : {4, 3}) {  // 25% of the peak, or more where that is below an op's working set
      s.budget = align_up(max_peak(base) / part);
      if ((r = rehearse("capuchin", s)).trained) break;
    }
    ASSERT_TRUE(r.trained) << r.error;
    double attributed = 0, over_the_end = 0;
    const RehearsedGap* kept = nullptr;
    for (const auto& x : r.gaps) {
      attributed += x.cost_ms;
      if (!x.wrap) continue;
      over_the_end += x.cost_ms;
      EXPECT_TRUE(g.tensor(x.id).persistent()) << g.tensor(x.id).name;
      int first = -1, last = -1;
      for (const Op& op : g.ops())
        for (const auto* ids : {&op.inputs, &op.outputs, &op.inplace})
          for (TensorId u : *ids)
            if (u == x.id) last = op.index, first = first < 0 ? op.index : first;
      EXPECT_EQ(x.back_op, first) << g.tensor(x.id).name;
      EXPECT_EQ(x.evict_op, last) << g.tensor(x.id).name;
      if (x.decision == CapuchinDecision::kKeep && x.cost_ms > 0 && (!kept || x.cost_ms > kept->cost_ms)) kept = &x;
    }
    // Without the gaps over the end these presets leave 10-28% of it out. (A wait for a copy out
    // inside a restore counts for both gaps, hence no upper bound.)
    EXPECT_GE(attributed, 0.95 * (r.stall_ms + r.recompute_ms)) << "over the end: " << over_the_end;
    if (!kept) continue;
    ++found;
    s.pins = {{kept->id, kept->back_op, CapuchinDecision::kSwap}};
    const RehearsalResult pinned = rehearse("capuchin", s);
    ASSERT_TRUE(pinned.trained) << pinned.error;
    bool wrapped = false;
    for (const auto& x : pinned.gaps) wrapped = wrapped || (x.wrap && x.id == kept->id && x.decision == CapuchinDecision::kSwap);
    EXPECT_TRUE(wrapped) << g.tensor(kept->id).name << " not swapped over the iteration's end";
    // All of them at once (the climb's group move): swapped over the end together, but for those
    // that no longer lower the bytes over the budget once the others are off (the greedy's test).
    s.pins.clear();
    for (const auto& x : r.gaps)
      if (x.wrap && x.decision == CapuchinDecision::kKeep) s.pins.push_back({x.id, x.back_op, CapuchinDecision::kSwap});
    const RehearsalResult all = rehearse("capuchin", s);
    ASSERT_TRUE(all.trained) << all.error;
    size_t swapped = 0, one = 0;
    for (const auto& x : all.gaps) swapped += x.wrap && x.decision == CapuchinDecision::kSwap;
    for (const auto& x : pinned.gaps) one += x.wrap && x.decision == CapuchinDecision::kSwap;
    EXPECT_GT(swapped, one);
    EXPECT_LE(swapped, s.pins.size());
  }
  EXPECT_GT(found, 0) << "no tiny preset had a persistent tensor evicted by the fallback at 25%";
  // auto's climb tries them all at once where a plan leaves two or more evicted.
  const AutoRun base = train(config("bert-tiny", "none", 0, 2, "p100-16g"));
  TrainConfig cfg = config("bert-tiny", "auto", align_up(max_peak(base) / 4), 2, "p100-16g");
  Trainer t(cfg);
  unlimited_planning(t);
  auto* ap = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(ap, nullptr);
  ap->set_search_rehearsals(16);  // the move heads each round of the climb
  ap->set_window_rehearsals(0);
  const AutoRun a = run(t, cfg);
  int group = 0;
  for (const auto& m : a.report["search"]["tried"]) group += m[0].get<std::string>().find("evicted persistent over the end") != std::string::npos;
  EXPECT_GT(group, 0) << a.report["search"]["tried"].dump();
}

// The memory manager puts a new plan's wrap-swapped tensors on the host at the end of the
// iteration that made it (Policy::on_host_at_start), as the later iterations' own swap-outs do:
// the first guided iteration then starts from the state the later ones start from, where it used
// to find the weights and momentum still on the device and evict at its peak.
TEST(AutoWrap, EveryGuidedIterationStartsWithTheWrapSwapsOnTheHost) {
  for (const std::string model : {"resnet-tiny", "gpt-tiny"})
    for (const double fraction : {0.5, 0.25}) {
      SCOPED_TRACE(model + " at " + std::to_string(fraction));
      const AutoRun base = train(config(model, "none", 0, 2, "p100-16g"));
      const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * fraction));
      const TrainConfig cfg = config(model, "capuchin-swap", budget, 3, "p100-16g");
      Trainer t(cfg);
      auto* c = dynamic_cast<CapuchinPolicy*>(&t.memory().policy());
      ASSERT_NE(c, nullptr);
      c->set_wrap_persistent(true);
      int checked = 0;
      t.run([&](const IterationStats&) {
        ASSERT_TRUE(c->guided());
        ASSERT_FALSE(c->plan().wrap_swaps.empty()) << "no persistent tensor swapped across the boundary";
        for (const auto& w : c->plan().wrap_swaps) {
          EXPECT_EQ(t.memory().residency(w.id), Residency::kOnHost) << t.graph().tensor(w.id).name;
          ++checked;
        }
      });
      EXPECT_GT(checked, 0);
    }
}

// auto compacts the arena when an iteration ends (Policy::compact_at_iteration_end): every
// iteration, the measured one included, starts with the free space in one block, so the layout
// does not drift over a long run away from what the rehearsals timed. Checked on the arena
// itself after each iteration; a policy that does not ask (capuchin) is left as it is.
TEST(AutoRunLong, EveryIterationStartsFromAPackedArena) {
  for (const std::string model : {"resnet-tiny", "gpt-tiny"}) {
    SCOPED_TRACE(model);
    const AutoRun base = train(config(model, "none", 0, 2, "p100-16g"));
    const size_t budget = align_up(max_peak(base) / 4);
    int packed = 0, scattered = 0;
    for (const std::string policy : {"auto", "capuchin"}) {
      TrainConfig cfg = config(model, policy, budget, 6, "p100-16g");
      bounded_search(cfg);
      Trainer t(cfg);
      t.run([&](const IterationStats&) {
        const auto& a = t.memory().allocator().stats();
        if (policy == "auto") {
          EXPECT_EQ(a.largest_free_block, a.free_bytes) << "iteration ended with the free space scattered";
          ++packed;
        } else if (a.largest_free_block < a.free_bytes) {
          ++scattered;
        }
      });
    }
    EXPECT_EQ(packed, 6);
    // The check can fail: without the compaction the arena ends scattered on these rows.
    EXPECT_GT(scattered, 0) << "capuchin's arena ended every iteration packed: the check proves nothing here";
  }
}

// The fastest start state of a report's long runs (start_state, or one finalist): its name, time.
std::pair<std::string, double> fastest_start(const nlohmann::json& runs) {
  std::pair<std::string, double> best{"", 0};
  for (const std::string state : {"packed", "reordered", "restored"}) {
    const auto& ms = runs[state + "_ms"];
    if (!ms.is_null() && (best.first.empty() || ms.get<double>() < best.second)) best = {state, ms.get<double>()};
  }
  return best;
}

// The finish's variants (AutoPolicy::need_order, then placement): did one win?
bool won(const nlohmann::json& report, const char* step) {
  return report.contains(step) && report[step].contains("won") && report[step]["won"].get<bool>();
}

// The plan's time before them: where the finish of the search ended.
double finished_ms(const nlohmann::json& report) {
  for (const char* step : {"need_order", "placement"})
    if (report.contains(step) && report[step].contains("searched_ms")) return report[step]["searched_ms"].get<double>();
  return report["predicted_time_ms"].get<double>();
}

// What the run's guided iterations take over a long run on sim: the high placement's long
// rehearsal where one won, the need order's where it won, the warm start's where one runs, else
// the long run of the start state that runs.
double long_run_ms(const nlohmann::json& report) {
  if (won(report, "placement"))
    for (const auto& x : report["placement"]["tried"])
      if (x["high_from_bytes"] == report["placement"]["high_from_bytes"]) return x["long_ms"].get<double>();
  if (won(report, "need_order")) return report["need_order"]["long_ms"].get<double>();
  if (report.contains("warm_start") && !report["warm_start"]["variant"].is_null())
    return report["warm_start"]["long_ms"].get<double>();
  const auto& ss = report["start_state"];
  return ss[ss["state"].get<std::string>() + "_ms"].get<double>();
}

// The start state of the chosen plan: packed, reordered or restored, whichever its rehearsal
// over kLongRunIterations found fastest (unless that one costs the iterations the tables time
// over kLongRunDrift); on sim that rehearsal is the run, so the run's guided iterations 1-9 take
// what the chosen one predicted.
TEST(AutoRunLong, TheStartStateIsTheFastestOverALongRun) {
  for (const std::string model : {"resnet-tiny", "gpt-tiny"}) {
    SCOPED_TRACE(model);
    const AutoRun base = train(config(model, "none", 0, 2, "p100-16g"));
    TrainConfig cfg = config(model, "auto", align_up(max_peak(base) / 4), kLongRunIterations, "p100-16g");
    bounded_search(cfg);
    const AutoRun a = train(cfg);
    ASSERT_TRUE(a.report.contains("start_state")) << a.report.dump();
    const auto& ss = a.report["start_state"];
    const std::string state = ss["state"];
    const double ms = long_run_ms(a.report);
    EXPECT_NEAR(mean_guided_ms(a), ms, 1e-9 * ms);
    // The fastest, unless it cost the first iterations over kLongRunDrift: then the searched one.
    if (state != fastest_start(ss).first) EXPECT_EQ(state, a.report["search"]["start_state"]) << ss.dump();
  }
}

// Where the searched plan drifts over the long run, the search's next-fastest plans are rehearsed
// over the long run too and the fastest there runs. The drift is made here: the test's rehearser
// adds a fifth to the long rehearsals of the first plan asked for so (the searched one). Then the
// report lists the finalists and the time of the plan they replaced, another plan runs, and on sim
// its guided iterations 1-9 take what its own long rehearsal said. Without the added fifth, there
// are finalists only where the searched plan's long run is over kLongRunDrift slower than the
// search saw.
TEST(AutoRunLong, ADriftingPlanGivesWayToTheFastestFinalistOverALongRun) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(max_peak(base) / 4);
  for (const bool drift : {false, true}) {
    SCOPED_TRACE(drift ? "made to drift" : "as it is");
    TrainConfig cfg = config("resnet-tiny", "auto", budget, kLongRunIterations, "p100-16g");
    bounded_search(cfg);
    Trainer t(cfg);
    unlimited_planning(t);
    one_finished_plan(t);
    auto* ap = dynamic_cast<AutoPolicy*>(&t.memory().policy());
    ASSERT_NE(ap, nullptr);
    std::mutex m;
    std::optional<std::pair<std::string, std::vector<PlanPin>>> first;
    ap->set_rehearser([&](const std::string& policy, const RehearsalSetup& s) {
      RehearsalResult r = rehearse(policy, s);
      if (!drift || s.iterations != kLongRunIterations) return r;
      const std::lock_guard<std::mutex> lock(m);
      if (!first) first.emplace(policy, s.pins);
      if (first->first == policy && first->second == s.pins) r.time_ms *= 1.2;
      return r;
    });
    const AutoRun a = run(t, cfg);
    ASSERT_TRUE(a.report.contains("start_state")) << a.report.dump();
    const auto& ss = a.report["start_state"];
    const double long_ms = ss[ss["state"].get<std::string>() + "_ms"].get<double>();
    EXPECT_NEAR(mean_guided_ms(a), long_run_ms(a.report), 1e-9 * long_ms);
    if (!drift) {  // the long runs are the searched plan's unless a finalist replaced it
      const double searched = a.report["search"]["time_ms"].get<double>();
      if (ss["replaced_ms"].is_null())
        EXPECT_EQ(ss["finalists"].empty(), long_ms <= searched * (1 + kLongRunDrift));
      else
        EXPECT_FALSE(ss["finalists"].empty());
      continue;
    }
    ASSERT_TRUE(first.has_value());
    ASSERT_FALSE(ss["finalists"].empty()) << "no plan within the slack of the searched one: the check proves nothing";
    EXPECT_LE(ss["finalists"].size(), static_cast<size_t>(kLongRunFinalists));
    ASSERT_FALSE(ss["replaced_ms"].is_null()) << ss.dump();
    EXPECT_FALSE(ap->chosen() == first->first && ap->pins() == first->second) << "the drifting plan still runs";
    bool listed = false;  // the plan that runs is a finalist, with the long-run times the report gives
    for (const auto& f : ss["finalists"])
      listed |= f["policy"] == (a.report.contains("need_order") && a.report["need_order"]["won"].get<bool>() ? a.report["need_order"]["searched_policy"].get<std::string>() : ap->chosen()) && f["pins"].get<size_t>() == ap->pins().size() &&
                f["packed_ms"] == ss["packed_ms"] && f["reordered_ms"] == ss["reordered_ms"] &&
                f["restored_ms"] == ss["restored_ms"];
    EXPECT_TRUE(listed) << ss.dump();
    EXPECT_LE(ss["finalists"][0]["time_ms"].get<double>(), ss["replaced_ms"].get<double>() * (1 + kFinalistSlack));
  }
}

// A reordered start: the persistent tensors a guided iteration placed anew end above the others
// in the order it placed them, so where an iteration places the same ones as the last, from the
// third guided iteration on (the trigger feedback has stopped) every iteration ends in the same
// layout and takes the same time. On gpt-tiny at 40% the packed start alone does not repeat
// (checked below), so the check can fail. (Where the fallback evicts other persistent tensors
// each iteration, as on bert-tiny at 29%, the reordered start does not repeat either.)
TEST(AutoRunLong, AReorderedStartIsTheSameEveryIteration) {
  const AutoRun base = train(config("gpt-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(max_peak(base) * 2 / 5);
  using Layout = std::vector<std::pair<TensorId, const float*>>;
  auto run = [&](bool reorder, std::vector<double>& ms) {
    Trainer t(config("gpt-tiny", "auto", budget, 8, "p100-16g"));
    auto* ap = dynamic_cast<AutoPolicy*>(&t.memory().policy());
    std::vector<Layout> out;
    for (int i = 0; i < 8; ++i) {
      if (i == 1) ap->set_start_state(reorder ? StartState::kReordered : StartState::kPacked);  // auto has chosen
      ms.push_back(t.step().time_ms);
      Layout l;
      for (TensorId id = 0; id < static_cast<TensorId>(t.graph().num_tensors()); ++id)
        if (t.memory().residency(id) == Residency::kResident) l.emplace_back(id, t.memory().device_ptr(id));
      out.push_back(std::move(l));
    }
    return out;
  };
  std::vector<double> ms, packed_ms;
  const auto reordered = run(true, ms), packed = run(false, packed_ms);
  for (size_t i = 4; i < reordered.size(); ++i) {  // iterations 5-8 against the one before
    EXPECT_EQ(reordered[i], reordered[i - 1]) << "iteration " << i + 1 << " ended in another layout";
    EXPECT_NEAR(ms[i], ms[i - 1], 1e-9 * ms[i]) << "iteration " << i + 1;
  }
  bool packed_changes = false;
  for (size_t i = 4; i < packed.size(); ++i) packed_changes |= packed[i] != packed[i - 1];
  EXPECT_TRUE(packed_changes) << "the packed start repeats here too: the check proves nothing";
}

// A restored start: where a guided iteration ends with the blocks it started with, the ones it
// displaced (swapped out and back into another hole, or moved by a compaction) go back where it
// found them, so from the third guided iteration on every iteration ends in the same layout and
// takes the same time, on gpt-tiny at 40% where the packed start does not repeat (the test above)
// and blocks are displaced every iteration (checked): without the restore the check fails.
TEST(AutoRunLong, ARestoredStartIsTheSameEveryIteration) {
  const AutoRun base = train(config("gpt-tiny", "none", 0, 2, "p100-16g"));
  Trainer t(config("gpt-tiny", "auto", align_up(max_peak(base) * 2 / 5), 8, "p100-16g"));
  auto* ap = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  std::vector<std::vector<std::pair<TensorId, const float*>>> layouts;
  std::vector<double> ms;
  std::vector<uint64_t> restored;
  for (int i = 0; i < 8; ++i) {
    if (i == 1) ap->set_start_state(StartState::kRestored);
    const IterationStats r = t.step();
    ms.push_back(r.time_ms);
    restored.push_back(r.counters.restored_bytes);
    layouts.emplace_back();
    for (TensorId id = 0; id < static_cast<TensorId>(t.graph().num_tensors()); ++id)
      if (t.memory().residency(id) == Residency::kResident) layouts.back().emplace_back(id, t.memory().device_ptr(id));
  }
  for (size_t i = 4; i < layouts.size(); ++i) {  // iterations 5-8 against the one before
    EXPECT_EQ(layouts[i], layouts[i - 1]) << "iteration " << i + 1 << " ended in another layout";
    EXPECT_NEAR(ms[i], ms[i - 1], 1e-9 * ms[i]) << "iteration " << i + 1;
    EXPECT_GT(restored[i], 0u) << "iteration " << i + 1 << " displaced no block: the check proves nothing";
  }
}

// The reordered and restored starts move real bytes on cpu (the reorder: each placed tensor to a
// new block above the packed ones, then the packing again; the restore: each displaced block back
// where the iteration found it): losses, weights and running statistics stay bit-identical to
// `none`. The start state is forced after auto has chosen; the test checks that each moved
// tensors (reordered_bytes, restored_bytes) and that the packed start did neither. On cpu the
// plan follows the measured kernel times, and about one restored run in twelve moved no bytes
// back (seen under load; a plan that displaces nothing, or whose moves form a cycle, which the
// restore packs instead): each start state runs up to three times, every run checked, until one
// has moved bytes.
TEST(AutoRunLong, EveryStartStateIsBitIdenticalToNone) {
  const std::string model = "resnet-tiny";  // gpt-tiny's plans at 30% place no persistent tensor anew
  const int iters = 6;
  const AutoRun base = train(config(model, "none", 0, iters));
  TrainConfig cfg = config(model, "auto", align_up(max_peak(base) * 3 / 10), iters);
  bounded_search(cfg);
  for (const StartState state : {StartState::kPacked, StartState::kReordered, StartState::kRestored}) {
    SCOPED_TRACE(to_string(state));
    uint64_t reordered = 0, restored = 0;
    for (int run = 0; run < 3; ++run) {
      Trainer t(cfg);
      unlimited_planning(t);  // the same choice under the sanitizers' slower clock
      auto* ap = dynamic_cast<AutoPolicy*>(&t.memory().policy());
      AutoRun r;
      for (int i = 0; i < iters; ++i) {
        if (i == 1) ap->set_start_state(state);
        r.iters.push_back(t.step());
        reordered += r.iters.back().counters.reordered_bytes;
        restored += r.iters.back().counters.restored_bytes;
      }
      r.params = t.read_params();
      for (const auto& info : t.graph().tensors())
        if (info.kind == TensorKind::kBuffer) r.buffers.push_back(t.read(info.id));
      expect_bit_identical(base, r);
      if (state == StartState::kPacked || (state == StartState::kReordered ? reordered : restored) > 0) break;
    }
    if (state == StartState::kReordered) EXPECT_GT(reordered, 0u) << "the reorder moved nothing in 3 runs: the check proves nothing here";
    else EXPECT_EQ(reordered, 0u);
    if (state == StartState::kRestored) EXPECT_GT(restored, 0u) << "the restore moved nothing in 3 runs: the check proves nothing here";
    else EXPECT_EQ(restored, 0u);
  }
}

// The warm start replays the trigger moves Capuchin's feedback made over the plan's long
// rehearsal, so the first guided iteration runs the triggers the later ones run: on resnet-tiny at
// 40% on p100-16g it then takes within 0.1% of the last one (0.015%), and the guided iterations
// less than the cold start's rehearsal said. Cold (the warm variants made to fail in the test's
// rehearser), the first is 0.76% slower than the last, so the check can fail.
TEST(AutoRunLong, AWarmStartRunsTheSteadyIterationFromTheFirst) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(max_peak(base) * 2 / 5);
  for (const bool warm : {true, false}) {
    SCOPED_TRACE(warm ? "warm" : "cold");
    TrainConfig cfg = config("resnet-tiny", "auto", budget, kLongRunIterations, "p100-16g");
    bounded_search(cfg, 96);  // a climb that ends where the feedback moves triggers
    Trainer t(cfg);
    unlimited_planning(t);
    one_finished_plan(t);
    auto* ap = dynamic_cast<AutoPolicy*>(&t.memory().policy());
    ASSERT_NE(ap, nullptr);
    ap->set_rehearser([&](const std::string& policy, const RehearsalSetup& s) {
      if (!warm && (!s.trigger_moves.empty() || !s.start_layout.empty())) {
        RehearsalResult r;
        r.error = "cold";
        return r;
      }
      return rehearse(policy, s);
    });
    const AutoRun a = run(t, cfg);
    const double first = a.iters[1].time_ms, last = a.iters.back().time_ms;
    ASSERT_TRUE(a.report.contains("warm_start")) << a.report.dump();
    const auto& w = a.report["warm_start"];
    if (!warm) {
      EXPECT_TRUE(w["variant"].is_null());
      EXPECT_GT(first, last * (1 + 5e-3)) << "cold, the first guided iteration is as fast: the check proves nothing";
      continue;
    }
    ASSERT_FALSE(w["variant"].is_null()) << w.dump();
    EXPECT_GT(w["trigger_moves"].get<size_t>(), 0u);
    EXPECT_FALSE(ap->trigger_moves().empty());
    EXPECT_LT(a.report["predicted_time_ms"].get<double>(), w["cold_ms"].get<double>());
    EXPECT_LE(first, last * (1 + 1e-3));
    EXPECT_NEAR(mean_guided_ms(a), w["long_ms"].get<double>(), 1e-9 * last);
  }
}

// The warm start's layout, made to win here (the test's rehearser halves the times of the
// rehearsals that start from a layout, and doubles them in the cold runs): on sim the measured
// iteration then ends in another layout than the cold start's packed one (the same plan: the warm
// start comes after the search), the layout the plan's long rehearsal ended in; on cpu it moves
// real bytes there, and losses, weights and running statistics stay bit-identical to `none`.
TEST(AutoRunLong, AWarmLayoutIsBitIdenticalToNone) {
  const std::string model = "resnet-tiny";
  const int iters = 4;
  for (const std::string gpu : {"p100-16g", ""}) {
    SCOPED_TRACE(gpu.empty() ? "cpu" : gpu);
    const AutoRun base = train(config(model, "none", 0, iters, gpu));
    TrainConfig cfg = config(model, "auto", align_up(max_peak(base) * 3 / 10), iters, gpu);
    bounded_search(cfg);
    std::vector<LayoutBlock> layouts[2];  // after the measured iteration: cold, warm
    for (const bool warm : {false, true}) {
      SCOPED_TRACE(warm ? "warm" : "cold");
      Trainer t(cfg);
      unlimited_planning(t);
      auto* ap = dynamic_cast<AutoPolicy*>(&t.memory().policy());
      ASSERT_NE(ap, nullptr);
      scale_warm_rehearsals(*ap, warm ? 0.5 : 2);
      AutoRun r;
      r.iters.push_back(t.step());
      layouts[warm] = t.memory().live_device_blocks();
      for (int i = 1; i < iters; ++i) r.iters.push_back(t.step());
      if (warm) {
        ASSERT_FALSE(ap->warm_layout().empty()) << "the layout did not win";
        EXPECT_EQ(layouts[1], ap->warm_layout()) << "the measured iteration did not end in the warm layout";
        EXPECT_GT(r.iters[0].counters.compacted_blocks, 0u);
        // On cpu the plan is made from the rehearsal's record of the measured iteration, which
        // the warm layout was rehearsed with: the clock's record is off by a few ulps, and a plan
        // made from it can wrap-swap other tensors, and then the layout is not taken
        EXPECT_EQ(ap->report()["planned_from"], gpu.empty() ? "rehearsed measured iteration" : "measured iteration");
      } else {
        EXPECT_TRUE(ap->warm_layout().empty());
      }
      if (!gpu.empty()) continue;
      r.params = t.read_params();
      for (const auto& info : t.graph().tensors())
        if (info.kind == TensorKind::kBuffer) r.buffers.push_back(t.read(info.id));
      expect_bit_identical(base, r);
    }
    if (!gpu.empty()) EXPECT_NE(layouts[0], layouts[1]) << "the warm layout is the packed one: the check proves nothing";
  }
}

// Under auto, Capuchin's trigger feedback stops after the guided iterations a rehearsal times but
// its last (set_feedback_iterations(2)): later iterations run the triggers the rehearsal's last
// iteration ran. A GPU with a slow host link makes prefetches late on gpt- and bert-tiny at 50%;
// there Capuchin's own feedback (no limit) keeps moving triggers after the second guided
// iteration, so the check can fail.
TEST(AutoRunLong, TriggerFeedbackStopsWhereTheRehearsalStopped) {
  const std::string path = ::testing::TempDir() + "vtensor-slow-link.json";
  {
    std::ofstream f(path);
    f << R"({"name": "test-slow-link", "memory": "16GiB", "fp32_tflops": 10, "hbm_gbps": 700,)"
      << R"( "h2d_gbps": 0.5, "d2h_gbps": 0.5, "launch_us": 5})";
  }
  load_gpu_file(path);
  int capuchin_plans = 0;
  for (const std::string model : {"gpt-tiny", "bert-tiny"}) {
    SCOPED_TRACE(model);
    const AutoRun base = train(config(model, "none", 0, 2, "test-slow-link"));
    const size_t budget = align_up(max_peak(base) / 2);
    for (const int limit : {-1, 2}) {
      Trainer t(config(model, "capuchin", budget, 9, "test-slow-link"));
      auto* c = dynamic_cast<CapuchinPolicy*>(&t.memory().policy());
      ASSERT_NE(c, nullptr);
      c->set_feedback_iterations(limit);
      std::vector<int> moves;  // after each iteration; 0 measures, 1 and 2 are the first guided ones
      t.run([&](const IterationStats&) { moves.push_back(c->trigger_moves()); });
      ASSERT_EQ(moves.size(), 9u);
      if (limit < 0) EXPECT_GT(moves.back(), moves[2]) << "no trigger moved after the second guided iteration";
      else EXPECT_EQ(moves.back(), moves[2]) << "a trigger moved after the second guided iteration";
    }
    TrainConfig cfg = config(model, "auto", budget, 9, "test-slow-link");
    bounded_search(cfg);
    Trainer t(cfg);
    auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
    ASSERT_NE(a, nullptr);
    std::vector<int> moves;
    t.run([&](const IterationStats&) { moves.push_back(a->capuchin() ? a->capuchin()->trigger_moves() : 0); });
    ASSERT_EQ(moves.size(), 9u);
    EXPECT_EQ(moves.back(), moves[2]) << "under auto a trigger moved after the second guided iteration";
    capuchin_plans += a->capuchin() != nullptr;
  }
  EXPECT_GT(capuchin_plans, 0) << "auto chose no Capuchin-based plan: its part of the check proves nothing";
}

// The memory manager hands a compaction's moves to the backend as one batch, so the small blocks
// the start-state packing moves cost a few launches, not one each: resnet-tiny under auto at 50%
// on sim packs tens of blocks per iteration.
TEST(AutoSimMoves, PackingManySmallBlocksCostsAFewLaunches) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  const AutoRun a = train(config("resnet-tiny", "auto", align_up(max_peak(base) / 2), 4, "p100-16g"));
  const double launch_ms = find_gpu("p100-16g").launch_us * 1e-3;
  uint64_t many = 0;
  for (size_t i = 1; i < a.iters.size(); ++i) {
    const MemoryCounters& c = a.iters[i].counters;
    if (c.compacted_blocks < 8) continue;
    ++many;
    EXPECT_LT(c.compact_ms, static_cast<double>(c.compacted_blocks) * launch_ms / 2)
        << c.compacted_blocks << " blocks in " << c.compactions << " compactions";
  }
  EXPECT_GT(many, 0u) << "no iteration moved 8 blocks or more: the check proves nothing";
}

class AutoSim : public ::testing::TestWithParam<std::string> {};

// On sim the rehearsal models the run's own GPU, so the chosen candidate's rehearsal is the run:
// its predicted peak and mean guided iteration are the measured ones; no candidate run on its own
// is faster (on these tiny models: a passive policy run on its own from the first iteration
// leaves another arena than auto's measured iteration, which at paper scale can cost it a few
// percent; docs/experiments/auto.md); and it is never slower than the planners as they are.
TEST_P(AutoSim, PredictionIsTheRunAndNoCandidateIsFaster) {
  const std::string model = GetParam();
  const int iters = 4;  // the rehearsal's count
  const AutoRun base = train(config(model, "none", 0, iters, "p100-16g"));
  const size_t budget = align_up(max_peak(base) / 2);
  const AutoRun a = train(config(model, "auto", budget, iters, "p100-16g"));
  ASSERT_TRUE(a.report.contains("predicted_peak_bytes")) << a.report.dump();
  EXPECT_EQ(a.report["predicted_peak_bytes"].get<size_t>(), max_peak(a, 1));
  EXPECT_NEAR(a.report["predicted_time_ms"].get<double>(), mean_guided_ms(a), 1e-9 * mean_guided_ms(a));
  double compact_ms = 0;  // the breakdown's compaction part is the run's too
  for (size_t i = 1; i < a.iters.size(); ++i) compact_ms += a.iters[i].counters.compact_ms / static_cast<double>(a.iters.size() - 1);
  EXPECT_NEAR(a.report["predicted_compaction_ms"].get<double>(), compact_ms, 1e-9 * mean_guided_ms(a));
  EXPECT_LE(max_peak(a), budget);
  // Never slower than the planners as they are, but for a start state chosen over the long run
  // (it may cost the first iterations up to kLongRunDrift). What the search buys is a
  // measurement, taken at paper scale (bench/run.py auto-search-models), not asserted on tiny rows.
  const auto& ss = a.report["start_state"];
  const bool switched = ss.is_object() && ss["state"] != a.report["search"]["start_state"];
  const double slack = switched ? 1 + kLongRunDrift : 1;
  double plain = 1e300;
  for (const auto& c : a.report["candidates"]) {
    if (!c["trained"].get<bool>()) continue;
    EXPECT_GE(c["predicted_time_ms"].get<double>() * slack, a.report["predicted_time_ms"].get<double>()) << c.dump();
    if (c["policy"].get<std::string>().find('@') == std::string::npos) plain = std::min(plain, c["predicted_time_ms"].get<double>());
  }
  EXPECT_LE(a.report["predicted_time_ms"].get<double>(), plain * slack) << a.report["chosen"];
  // The per-gap search keeps only what beats the candidate it started from.
  ASSERT_TRUE(a.report.contains("search")) << a.report.dump();
  EXPECT_LE(a.report["search"]["time_ms"].get<double>(), a.report["search"]["candidate_time_ms"].get<double>());
  // The prediction is the search's end, rehearsed again from another start state where that
  // one ran faster over a long run ("start_state"), and again warm where that is faster.
  // Then planned for the H2D stream's issue order where that is faster ("need_order": ",need",
  // ",fifo" or both).
  const auto& warm = a.report["warm_start"];
  const bool warmed = warm.is_object() && !warm["variant"].is_null();
  const auto& need = a.report["need_order"];
  const bool needed = need.is_object() && need["won"].get<bool>();
  const std::string chosen = a.report["chosen"].get<std::string>();
  EXPECT_EQ(needed, chosen.find(",need") != std::string::npos || chosen.find(",fifo") != std::string::npos) << chosen;
  if (needed) EXPECT_EQ(chosen.find(",fifo") != std::string::npos, need["variant"].get<std::string>().rfind("fifo", 0) == 0) << chosen;
  if (needed) EXPECT_LT(a.report["predicted_time_ms"].get<double>(), need["searched_ms"].get<double>());
  // Then with the large blocks placed high where that is faster ("placement").
  const auto& placed = a.report["placement"];
  EXPECT_EQ(won(a.report, "placement"), placed["high_from_bytes"].get<size_t>() > 0) << placed.dump();
  if (won(a.report, "placement")) EXPECT_LT(a.report["predicted_time_ms"].get<double>(), placed["searched_ms"].get<double>());
  const double finished = finished_ms(a.report);
  const double cold = warmed ? warm["cold_ms"].get<double>() : finished;
  if (warmed) EXPECT_LE(finished, cold);
  if (switched)
    EXPECT_LT(ss[ss["state"].get<std::string>() + "_ms"].get<double>(),
              ss[a.report["search"]["start_state"].get<std::string>() + "_ms"].get<double>());
  else
    EXPECT_EQ(a.report["search"]["time_ms"].get<double>(), cold);
  for (const std::string p : {"capuchin", "capuchin-swap", "capuchin-recompute", "dtr", "lru-recompute"}) {
    SCOPED_TRACE(p);
    AutoRun r;
    try {
      r = train(config(model, p, budget, iters, "p100-16g"));
    } catch (const OutOfMemoryError&) {
      continue;
    }
    EXPECT_LE(mean_guided_ms(a), mean_guided_ms(r) * 1.001);
  }
}

// The bounds (bound.h, and the LP's optimum, lp.h) are below every swap / recompute plan auto
// rehearsed: each candidate, each plan its search tried, the LP's rounded plans, and the run (no
// densities: no compression). At 25% they bind.
TEST_P(AutoSim, NoSwapOrRecomputePlanBeatsTheBound) {
  const std::string model = GetParam();
  const AutoRun base = train(config(model, "none", 0, 2, "p100-16g"));
  for (const double f : {0.5, 0.25}) {
    SCOPED_TRACE(f);
    const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * f));
    // Counted work, not the machine's speed: a bounded search with no planning limit, and an LP
    // limit no tiny row's LP reaches (under a loaded sanitizer build Clp once stopped at 2 s).
    TrainConfig cfg = config(model, "auto", budget, 4, "p100-16g");
    cfg.policy_options.set("auto-search", 32).set("auto-window", 0).set("auto-room", 0);
    Trainer t(cfg);
    unlimited_planning(t);
    const AutoRun a = run(t, cfg);
    ASSERT_TRUE(a.report.contains("bound")) << a.report.dump();
    const auto& b = a.report["bound"];
    ASSERT_TRUE(b["feasible"].get<bool>()) << b.dump();
    const double bound = b["time_ms"].get<double>(), eps = 1e-9 * bound;
    EXPECT_NEAR(b["compute_ms"].get<double>(), mean_guided_ms(base), 1e-6 * bound) << "the unmanaged iteration";
    int plans = 0;
    for (const auto& c : a.report["candidates"])
      if (c["trained"].get<bool>()) {
        EXPECT_GE(c["predicted_time_ms"].get<double>(), bound - eps) << c.dump();
        ++plans;
      }
    for (const auto& t : a.report["search"]["tried"])
      if (!t[1].is_null()) {
        EXPECT_GE(t[1].get<double>(), bound - eps) << t.dump();
        ++plans;
      }
    EXPECT_GE(mean_guided_ms(a), bound - eps);
    EXPECT_GT(plans, 10);
    if (f == 0.25) EXPECT_GT(b["overhead_ms"].get<double>(), 0.0) << b.dump();
    // The linear program's optimum (lp.h) bounds them too, its own rounded plans included.
    ASSERT_TRUE(a.report.contains("lp")) << a.report.dump();
    const auto& l = a.report["lp"];
    ASSERT_EQ(l["status"].get<std::string>(), "optimal") << l.dump();
    const double lp = l["time_ms"].get<double>();
    EXPECT_NEAR(l["compute_ms"].get<double>(), b["compute_ms"].get<double>(), 1e-9 * bound);
    for (const auto& c : a.report["candidates"])
      if (c["trained"].get<bool>()) EXPECT_GE(c["predicted_time_ms"].get<double>(), lp - eps) << c.dump();
    for (const auto& t : a.report["search"]["tried"])
      if (!t[1].is_null()) EXPECT_GE(t[1].get<double>(), lp - eps) << t.dump();
    EXPECT_GE(mean_guided_ms(a), lp - eps);
    ASSERT_GT(l["pins"].get<int>(), 0) << l.dump();
    ASSERT_FALSE(l["rehearsals"].empty()) << "the LP's pins are rehearsed as a start";
    bool timed = false, rec = false;
    std::map<std::string, int> wrapped;  // per variant: pinned on the fastest wrap candidate only
    for (const auto& r : l["rehearsals"]) {
      if (r["trained"].get<bool>()) EXPECT_GE(r["predicted_time_ms"].get<double>(), lp - eps) << r.dump();
      timed = timed || r["variant"].get<std::string>() == "lp-timed";
      rec = rec || r["variant"].get<std::string>() == "lp-rec";
      wrapped[r["variant"].get<std::string>()] += r["policy"].get<std::string>().find(",wrap") != std::string::npos;
    }
    for (const auto& [variant, n] : wrapped) EXPECT_LE(n, 1) << variant << ": " << l.dump();
    if (f == 0.25) EXPECT_TRUE(timed) << "the LP's timed pins are rehearsed too: " << l.dump();
    // resnet-tiny at 25%: the LP both swaps and recomputes; its recomputations alone are a start too.
    if (f == 0.25 && model == "resnet-tiny") EXPECT_TRUE(rec) << "the LP's recomputations alone are rehearsed: " << l.dump();
    if (f == 0.25) EXPECT_GT(l["overhead_ms"].get<double>(), 0.0) << l.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, AutoSim, ::testing::Values("resnet-tiny", "gpt-tiny", "bert-tiny"));

// With the densities a cpu run recorded, auto on sim rehearses the compression candidates too, and
// its prediction is still the run, also when it chooses among them only (the run then compresses);
// without densities they are skipped, not counted as out of memory.
TEST(AutoSimRun, CompressionCandidatesWithDensities) {
  const std::string path = record_densities("resnet-tiny", "resnet-tiny-densities.json");
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  for (const double f : {0.5, 0.25}) {
    SCOPED_TRACE(std::to_string(f) + " of the peak");
    TrainConfig cfg = config("resnet-tiny", "auto", align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * f)), 4, "p100-16g");
    auto compress_moves = [](const AutoRun& r) {
      int n = 0;
      for (const auto& m : r.report["search"]["tried"]) n += m[0].get<std::string>().find(":compress") != std::string::npos;
      return n;
    };
    bounded_search(cfg, 16);  // then the compression phase's own rehearsals
    {
      SCOPED_TRACE("no densities");
      const AutoRun a = train(cfg);
      for (const auto& c : a.report["candidates"])
        if (c["policy"].get<std::string>().rfind("compress", 0) == 0)
          EXPECT_NE(c["error"].get<std::string>().find("--densities FILE"), std::string::npos) << c.dump();
      EXPECT_EQ(compress_moves(a), 0) << "no densities, no compression moves";
    }
    cfg.densities_path = path;
    Trainer ta(cfg);
    unlimited_planning(ta);
    const AutoRun a = run(ta, cfg);
    EXPECT_EQ(a.report["lp"]["compress"]["status"], "not run") << "no LP starts (--auto-lp 0): the compressing LP, which gives starts only, is not solved";
    ASSERT_TRUE(a.report.contains("predicted_peak_bytes")) << a.report.dump();
    EXPECT_EQ(a.report["predicted_peak_bytes"].get<size_t>(), max_peak(a, 1));
    EXPECT_NEAR(a.report["predicted_time_ms"].get<double>(), mean_guided_ms(a), 1e-9 * mean_guided_ms(a));
    EXPECT_LE(max_peak(a), cfg.budget);
    int compress = 0;
    for (const auto& c : a.report["candidates"]) {
      if (c["policy"].get<std::string>().rfind("compress", 0) != 0) continue;
      ++compress;
      EXPECT_EQ(c.value("error", std::string()).find("not rehearsed"), std::string::npos) << c.dump();
      if (c["trained"].get<bool>()) EXPECT_GE(c["predicted_time_ms"].get<double>(), a.report["predicted_time_ms"].get<double>());
    }
    EXPECT_EQ(compress, 7);
    if (f == 0.25) EXPECT_GT(compress_moves(a), 0) << "the search's second phase compresses single gaps";
    // Only compression candidates: the chosen one compresses, as predicted.
    Trainer t(cfg);
    auto* p = dynamic_cast<AutoPolicy*>(&t.memory().policy());
    ASSERT_NE(p, nullptr);
    p->set_candidates({"compress+capuchin", "compress+capuchin@0.94", "compress+swap", "compress+capuchin,dtr"});
    const TrainResult res = t.run();
    ASSERT_TRUE(res.policy_report.contains("predicted_peak_bytes")) << res.policy_report.dump();
    size_t peak = 0;
    double ms = 0;
    uint64_t compressions = 0;
    for (size_t i = 1; i < res.iterations.size(); ++i) {
      peak = std::max(peak, res.iterations[i].peak_allocated);
      ms += res.iterations[i].time_ms;
      compressions += res.iterations[i].counters.compressions;
    }
    ms /= static_cast<double>(res.iterations.size() - 1);
    EXPECT_EQ(res.policy_report["predicted_peak_bytes"].get<size_t>(), peak);
    EXPECT_NEAR(res.policy_report["predicted_time_ms"].get<double>(), ms, 1e-9 * ms);
    if (p->chosen().rfind("compress", 0) == 0) EXPECT_GT(compressions, 0u) << p->chosen();
    else ADD_FAILURE() << "chose " << p->chosen() << ": " << res.policy_summary;
  }
}

// The replay guard. The test's rehearser predicts every compressing plan at 0.3 of its time (as
// the H200's bitmask codec ran ~8 ms a call against the element-wise rate the plan assumed), so
// auto chooses one and its guided iterations run over 3x their prediction. After two of them
// the fastest rehearsed plan that does not compress runs: no compression from then on, that
// plan's own prediction replayed, and (every plan lossless) on cpu the same losses and weights as
// `none`. With the guard off the compressing plan runs to the end; with the rehearsals as they
// are (sim: the rehearsal is the run) the guard never moves.
bool compresses(const std::string& policy, const std::vector<PlanPin>& pins) {
  return policy.rfind("compress", 0) == 0 ||
         std::any_of(pins.begin(), pins.end(), [](const PlanPin& p) { return p.decision == CapuchinDecision::kCompress; });
}

AutoRun run_guarded(const TrainConfig& cfg, bool underpredict, bool guard, bool every_plan = false, double scale = 0.3) {
  Trainer t(cfg);
  unlimited_planning(t);
  one_finished_plan(t);
  auto* ap = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  EXPECT_NE(ap, nullptr);
  AutoPolicy::ReplayGuard g;
  g.on = guard, g.min_excess_ms = 0;  // the tiny preset's iterations are far under the default
  ap->set_replay_guard(g);
  if (underpredict)
    ap->set_rehearser([every_plan, scale](const std::string& policy, const RehearsalSetup& s) {
      RehearsalResult r = rehearse(policy, s);
      if (every_plan || compresses(policy, s.pins)) r.time_ms *= scale;
      return r;
    });
  return run(t, cfg);
}

int kind_rank(const nlohmann::json& kind) { return kind == "compress" ? 2 : kind == "swap" ? 1 : 0; }

// The guard's runs, one line each (docs/experiments/auto.md, "The replay guard", quotes them).
void print_runs(const std::string& what, const nlohmann::json& guard) {
  for (const auto& r : guard["runs"])
    std::printf("replay guard, %s: %s (%s, %zu pins) from iteration %d: %.3f ms measured, %.3f ms predicted (%.2fx)\n",
                what.c_str(), r["policy"].get<std::string>().c_str(), r["kind"].get<std::string>().c_str(),
                r["pins"].get<size_t>(), r["from_iteration"].get<int>(), r["mean_ms"].get<double>(),
                r["predicted_ms"].get<double>(), r["ratio"].get<double>());
}

uint64_t compressions(const AutoRun& r, size_t from, size_t to) {
  uint64_t n = 0;
  for (size_t i = from; i < to && i < r.iters.size(); ++i) n += r.iters[i].counters.compressions;
  return n;
}

TEST(AutoReplayGuard, ACompressingPlanThatReplaysSlowGivesWayToOneThatDoesNot) {
  constexpr int kIters = 7;
  for (const std::string backend : {"sim", "cpu"}) {
    SCOPED_TRACE(backend);
    const std::string path = record_densities("resnet-tiny", "resnet-tiny-guard-densities.json");
    const AutoRun base = train(config("resnet-tiny", "none", 0, kIters, backend == "sim" ? "p100-16g" : ""));
    TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) / 2), kIters, backend == "sim" ? "p100-16g" : "");
    bounded_search(cfg, 16);
    cfg.densities_path = backend == "sim" ? path : "";
    // On cpu at 0.2: a loaded machine's measured iteration can inflate the prediction.
    const AutoRun a = run_guarded(cfg, true, true, false, backend == "sim" ? 0.3 : 0.2);
    const auto& g = a.report["replay_guard"];
    print_runs(backend, g);
    ASSERT_EQ(g["runs"][0]["kind"], "compress") << "the under-predicted compressing plan was not chosen: the check proves nothing\n" << g.dump();
    ASSERT_TRUE(g["fell_back"].get<bool>()) << g.dump();
    const auto& f = g["runs"][1];
    EXPECT_NE(f["kind"], "compress") << g.dump();
    EXPECT_EQ(f["from_iteration"].get<int>(), 3) << "measured iteration 0, guided 1 and 2 over the guard";
    EXPECT_GT(compressions(a, 1, 3), 0u) << "the chosen plan compressed";
    // On cpu the times are the machine's: under load the fallback can itself run over the guard,
    // or slower than the plan before it, and the guard moves on; its first two iterations stand.
    EXPECT_EQ(compressions(a, 3, backend == "sim" ? kIters : 5), 0u) << "the fallback compresses nothing";
    if (backend == "sim") {
      ASSERT_EQ(g["runs"].size(), 2u) << g.dump();  // its own prediction, from another start than its rehearsal's
      EXPECT_NEAR(f["mean_ms"].get<double>(), f["predicted_ms"].get<double>(), 0.1 * f["predicted_ms"].get<double>()) << g.dump();
      const AutoRun off = run_guarded(cfg, true, false);
      EXPECT_FALSE(off.report["replay_guard"]["fell_back"].get<bool>());
      EXPECT_GT(compressions(off, 3, kIters), 0u) << "without the guard the compressing plan runs on";
      const AutoRun exact = run_guarded(cfg, false, true);
      EXPECT_FALSE(exact.report["replay_guard"]["fell_back"].get<bool>()) << exact.report["replay_guard"].dump();
    } else {
      expect_bit_identical(base, a);
    }
  }
}

// Off sim, where a compressing candidate may run, the memory manager times the backend's codec
// before the first iteration and the plan charges each call that rate (the report's codec_rate);
// the probe's blocks are freed again, so the measured iteration's peaks and evictions are what
// they are without it.
// On sim, or with --auto-codec-rate modelled, the cost model's.
TEST(AutoCodecRate, MeasuredOnTheBackendWithoutMovingTheArena) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 1));
  std::vector<AutoRun> runs;
  for (const std::string rate : {"measured", "modelled"}) {
    TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) / 2), 2);
    bounded_search(cfg, 4);
    cfg.policy_options.set("auto-candidates", "capuchin,compress+capuchin");
    cfg.policy_options.set("auto-codec-rate", rate);
    runs.push_back(train(cfg));
    const auto& c = runs.back().report["codec_rate"];
    SCOPED_TRACE(rate + ": " + c.dump());
    EXPECT_EQ(c["source"], rate);
    if (rate == "measured") {
      EXPECT_GT(c["ns_per_byte"].get<double>(), 0.0);
      EXPECT_GE(c["latency_ms"].get<double>(), 0.0);
      EXPECT_GT(c["probe_bytes"].get<size_t>(), 0u);
      EXPECT_LE(c["probe_bytes"].get<size_t>(), align_up(max_peak(base) / 2) / 3);
    } else {
      EXPECT_TRUE(c["ns_per_byte"].is_null());
    }
  }
  const IterationStats &m = runs[0].iters[0], &n = runs[1].iters[0];
  EXPECT_EQ(m.peak_allocated, n.peak_allocated);
  EXPECT_EQ(m.peak_reserved, n.peak_reserved);
  EXPECT_EQ(m.counters.evictions, n.counters.evictions);  // (its end's moves are the chosen plan's warm start)
  expect_bit_identical(runs[0], runs[1]);
  // On sim the rehearsal's codec is the run's.
  TrainConfig sim = config("resnet-tiny", "auto", align_up(max_peak(base) / 2), 2, "p100-16g");
  bounded_search(sim, 4);
  sim.policy_options.set("auto-candidates", "capuchin,compress+capuchin");
  sim.densities_path = record_densities("resnet-tiny", "resnet-tiny-rate-densities.json");
  EXPECT_EQ(train(sim).report["codec_rate"]["source"], "modelled");
}

// Off sim the rehearsals charge each copy its bytes at the calibrated rate and what a copy queued
// behind others added in the calibration (the report's link); with --auto-copy-cost bytes, its
// bytes alone. Either way the plan's math is none's. On sim the run's own link model.
TEST(AutoCopyCost, MeasuredOffSimAndItsBytesAloneWhenAsked) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 3));
  for (const std::string cost : {"queued", "bytes"}) {
    TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) / 2), 3);
    bounded_search(cfg, 4);
    cfg.policy_options.set("auto-candidates", "capuchin,capuchin-swap");
    cfg.policy_options.set("auto-copy-cost", cost);
    const AutoRun a = train(cfg);
    const auto& l = a.report["link"];
    SCOPED_TRACE(cost + ": " + l.dump());
    EXPECT_EQ(l["source"], "measured");
    EXPECT_GT(l["ns_per_byte"].get<double>(), 0.0);
    EXPECT_EQ(l["queued_copies"].get<bool>(), cost == "queued");
    const double q = l["queued_copy_ms"].get<double>();
    EXPECT_GE(q, 0.0);
    EXPECT_LE(q, l["lone_copy_ms"].get<double>()) << "a queued copy costs at most a lone one's round trip";
    if (cost == "bytes") EXPECT_EQ(q, 0.0);
    expect_bit_identical(base, a);
  }
  TrainConfig sim = config("resnet-tiny", "auto", align_up(max_peak(base) / 2), 2, "p100-16g");
  bounded_search(sim, 4);
  sim.policy_options.set("auto-candidates", "capuchin");
  const auto l = train(sim).report["link"];
  EXPECT_EQ(l["source"], "modelled") << l.dump();
  EXPECT_TRUE(l["queued_copy_ms"].is_null()) << l.dump();
}

// Every plan predicted at 0.3 of its time: each runs over the guard, so the chosen plan gives way
// to the fastest that relies on fewer modelled costs, and where that one measures slower than the
// plan before it, the fastest measured runs again and the guard stops there (resnet-tiny at 70%
// on sim: a swapping plan, then a recomputing one, then the swapping one back).
TEST(AutoReplayGuard, AFallbackSlowerThanThePlanBeforeGivesItBack) {
  constexpr int kIters = 9;
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) * 7 / 10), kIters, "p100-16g");
  bounded_search(cfg, 16);
  const AutoRun a = run_guarded(cfg, true, true, true);
  const auto& g = a.report["replay_guard"];
  print_runs("sim, every plan at 0.3", g);
  ASSERT_GE(g["runs"].size(), 2u) << g.dump();
  const auto& runs = g["runs"];
  const size_t last = runs.size() - 1;
  for (size_t i = 1; i < last; ++i)  // each fallback relies on fewer modelled costs than the plan before
    EXPECT_LT(kind_rank(runs[i]["kind"]), kind_rank(runs[i - 1]["kind"])) << g.dump();
  ASSERT_EQ(g["note"], "the fastest plan measured runs again") << "no fallback measured slower: the check proves nothing\n" << g.dump();
  EXPECT_TRUE(g["stopped"].get<bool>());
  size_t fastest = 0;
  for (size_t i = 1; i < last; ++i)
    if (runs[i]["mean_ms"].get<double>() < runs[fastest]["mean_ms"].get<double>()) fastest = i;
  EXPECT_EQ(runs[last]["policy"], runs[fastest]["policy"]) << g.dump();
  EXPECT_EQ(runs[last]["pins"], runs[fastest]["pins"]) << g.dump();
  EXPECT_EQ(runs[last]["from_iteration"].get<int>() + runs[last]["iterations"].get<int>(), kIters) << "it runs to the end";
  // Planned from the same measured iteration, it replays as it ran before (within the start's effect).
  EXPECT_NEAR(runs[last]["mean_ms"].get<double>(), runs[fastest]["mean_ms"].get<double>(), 0.1 * runs[fastest]["mean_ms"].get<double>());
}


// Without a rehearser (a policy built outside the Trainer) auto runs Capuchin's hybrid; a forced
// candidate must be one auto knows.
TEST(Auto, WithoutARehearserRunsCapuchinAndForcedNamesMustBeKnown) {
  try {
    AutoPolicy p("nonsense");
    FAIL() << "accepted an unknown candidate";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("capuchin-recompute"), std::string::npos) << e.what();
  }
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  RehearsalSetup s;
  Trainer t(config("resnet-tiny", "none", 0, 1, "p100-16g"));
  s.graph = &t.graph();
  s.budget = align_up(max_peak(base) / 2);
  s.gpu = "p100-16g";
  const RehearsalResult ok = rehearse("capuchin", s);
  EXPECT_TRUE(ok.trained) << ok.error;
  EXPECT_LE(ok.peak_allocated, s.budget);
  s.budget = align_up(max_peak(base) / 50);  // below one op's working set: a result, not a throw
  const RehearsalResult oom = rehearse("checkpoint", s);
  EXPECT_FALSE(oom.trained);
  EXPECT_NE(oom.error.find("out of memory"), std::string::npos) << oom.error;
  s.budget = align_up(max_peak(base) / 2);
  s.time_limit_ms = 1e-3;  // a rehearsal past its time limit stops: a result, not a throw
  const RehearsalResult late = rehearse("capuchin", s);
  EXPECT_FALSE(late.trained);
  EXPECT_NE(late.error.find("time limit"), std::string::npos) << late.error;
}

// Past the planning time limit the search's variants are not rehearsed; the planners as they
// are were (they come first), and auto still chooses and trains.
TEST(Auto, PlanningTimeLimitKeepsThePlainPlanners) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) / 2), 3, "p100-16g");
  cfg.policy_options.set("auto-seconds", 1e-6);  // --auto-seconds: past it at once
  Trainer t(cfg);
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  t.run();
  EXPECT_FALSE(a->chosen().empty());
  ASSERT_GE(a->rehearsals().size(), auto_candidates().size());  // and the wrap-swap reruns, not rehearsed either
  EXPECT_TRUE(a->rehearsals()[0].trained) << a->rehearsals()[0].error;  // the first always runs
  for (size_t i = 1; i < a->rehearsals().size(); ++i)
    EXPECT_NE(a->rehearsals()[i].error.find("time limit"), std::string::npos) << a->rehearsals()[i].policy;
}

// What auto prints at the end: the plan and its predicted time split, the candidates (how many,
// the fastest few, not all of them), the search and its planning time, and the bounds, each on
// a line of its own.
TEST(Auto, TheSummaryNamesThePlanTheFastestCandidatesAndTheBounds) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) / 2), 3, "p100-16g");
  bounded_search(cfg);  // the per-gap search runs whatever the machine's speed
  Trainer t(cfg);
  unlimited_planning(t);
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  const TrainResult res = t.run();
  const std::string s = a->summary();
  SCOPED_TRACE(s);
  char head[200];
  std::snprintf(head, sizeof head, "auto: chose %s, %.2f ms predicted per iteration (stall ", a->chosen().c_str(),
                res.policy_report["predicted_time_ms"].get<double>());
  EXPECT_EQ(s.rfind(head, 0), 0u);
  EXPECT_NE(s.find("\n  candidates: " + std::to_string(a->rehearsals().size()) + " rehearsed, "), std::string::npos);
  const RehearsalResult* fastest = nullptr;
  size_t trained = 0;
  for (const auto& r : a->rehearsals())
    if (r.trained && ++trained && (!fastest || r.time_ms < fastest->time_ms)) fastest = &r;
  ASSERT_NE(fastest, nullptr);
  EXPECT_NE(s.find("; fastest: " + fastest->policy + " "), std::string::npos);
  ASSERT_GT(trained, 4u);
  size_t named = 0;  // the four fastest, not every candidate
  for (const auto& r : a->rehearsals()) named += r.trained && s.find(" " + r.policy + " ") != std::string::npos;
  EXPECT_LT(named, trained);
  EXPECT_NE(s.find("\n  per-gap search: "), std::string::npos);
  EXPECT_NE(s.find(" planned in "), std::string::npos);
  EXPECT_NE(s.find("\n  bound: no keep / swap / recompute plan below "), std::string::npos);
  size_t from = 0;
  for (size_t nl = s.find('\n'); from < s.size(); from = nl + 1, nl = s.find('\n', from)) {
    EXPECT_LT((nl == std::string::npos ? s.size() : nl) - from, 400u) << "a line this long is not read";
    if (nl == std::string::npos) break;
  }
}

// The default planning clock (--auto-clock rehearsals): the limit counts rehearsed iterations (each
// the model's ops x kClockNsPerOp, over kClockWorkers, and the work each did: deterministic), so what auto rehearses and chooses does not
// depend on how fast the rehearsals run. The limit is set so the clock stops the candidates after the first
// ten; a second run whose every rehearsal takes 5 ms longer rehearses and chooses the same.
TEST(Auto, TheRehearsalsClockPlansTheSameWhateverTheSpeed) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) / 2), 3, "p100-16g");
  cfg.policy_options.set("auto-clock", "rehearsals");
  cfg.policy_options.set("auto-wall-cap", 0);  // the plan a function of the command alone
  bounded_search(cfg, 16);
  std::atomic<int> calls{0};  // rehearsals run: counted, not timed (the delay's effect on wall time varies with load)
  auto plan = [&](int delay_ms) {
    calls = 0;
    Trainer t(cfg);
    auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
    EXPECT_NE(a, nullptr);
    if (!a) return nlohmann::json{};
    const double iteration_ms = static_cast<double>(t.graph().num_ops()) * kClockNsPerOp * 1e-6;
    a->set_time_limit_ms(9.5 * kRehearsedIterations * iteration_ms / kClockWorkers);  // candidate 10 starts past it
    a->set_rehearser([delay_ms, &calls](const std::string& policy, const RehearsalSetup& s) {
      ++calls;
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      return rehearse(policy, s);
    });
    return t.run().policy_report;
  };
  const nlohmann::json fast = plan(0);
  const int fast_calls = calls;
  const nlohmann::json slow = plan(5);
  ASSERT_FALSE(fast.empty());
  EXPECT_EQ(fast["planning_clock"]["mode"], "rehearsals");
  for (size_t i = 0; i < fast["candidates"].size(); ++i) {  // rehearsed (trained or out of memory) or cut
    const bool cut = fast["candidates"][i].value("error", "").find("planning time limit") != std::string::npos;
    EXPECT_EQ(cut, i >= 10) << "the clock did not stop the candidates where the limit says: " << i << " "
                            << fast["candidates"][i].dump();
  }
  EXPECT_GT(fast_calls, 10) << "the search rehearsed nothing after the candidates: the check proves nothing";
  EXPECT_EQ(calls.load(), fast_calls) << "each of the slow run's rehearsals took 5 ms longer, and as many ran";
  for (const char* k : {"chosen", "pins", "predicted_time_ms"}) EXPECT_EQ(slow[k], fast[k]) << k;
  EXPECT_EQ(slow["search"]["rehearsals"], fast["search"]["rehearsals"]);
  EXPECT_EQ(slow["planning_clock"]["rehearsed_iterations"], fast["planning_clock"]["rehearsed_iterations"]);
  EXPECT_EQ(slow["planning_clock"]["clock_ms"], fast["planning_clock"]["clock_ms"]);
  for (size_t i = 0; i < fast["candidates"].size(); ++i) {
    const auto &f = fast["candidates"][i], &s = slow["candidates"][i];
    EXPECT_EQ(s["policy"], f["policy"]);
    EXPECT_EQ(s.contains("predicted_time_ms"), f.contains("predicted_time_ms")) << f["policy"];
    if (f.contains("predicted_time_ms")) EXPECT_EQ(s["predicted_time_ms"], f["predicted_time_ms"]) << f["policy"];
  }
  // On cpu the plan it chooses trains bit-identically to none, within the budget.
  const AutoRun cpu_base = train(config("resnet-tiny", "none", 0, 3));
  TrainConfig c = config("resnet-tiny", "auto", align_up(max_peak(cpu_base) / 2), 3);
  c.policy_options.set("auto-clock", "rehearsals");
  c.policy_options.set("auto-wall-cap", 0);
  bounded_search(c, 16);
  const AutoRun r = train(c);
  EXPECT_EQ(r.report["planning_clock"]["mode"], "rehearsals");
  expect_bit_identical(cpu_base, r);
  for (const auto& it : r.iters) EXPECT_LE(it.peak_allocated, c.budget);
}

// The wall cap: on the rehearsals clock, once planning has taken the cap's wall time every limit
// counts as reached; the report says so, the plan still trains within its budget, and without a
// cap (0) the same command plans as it always does.
TEST(Auto, TheWallCapStopsPlanningAndSaysSo) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) / 2), 3, "p100-16g");
  cfg.policy_options.set("auto-clock", "rehearsals");
  bounded_search(cfg, 16);
  std::atomic<int> calls{0};  // rehearsals run
  auto plan = [&](double cap_s, int delay_ms) {
    calls = 0;
    TrainConfig c = cfg;
    c.policy_options.set("auto-wall-cap", cap_s);
    Trainer t(c);
    auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
    EXPECT_NE(a, nullptr);
    if (!a) return AutoRun{};
    a->set_rehearser([delay_ms, &calls](const std::string& policy, const RehearsalSetup& s) {
      ++calls;
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      return rehearse(policy, s);
    });
    return run(t, c);
  };
  // 20 ms a rehearsal against a cap of 0.2 s: the cap stops it after about ten (fewer on a slow machine).
  const AutoRun capped = plan(0.2, 20);
  const int capped_calls = calls;
  const AutoRun free = plan(0, 0);
  ASSERT_FALSE(capped.report.empty());
  EXPECT_TRUE(capped.report["planning_clock"]["wall_capped"].get<bool>());
  EXPECT_EQ(capped.report["planning_clock"]["wall_cap_ms"].get<double>(), 200.0);
  EXPECT_FALSE(free.report["planning_clock"]["wall_capped"].get<bool>());
  EXPECT_EQ(free.report["planning_clock"]["wall_cap_ms"].get<double>(), 0.0);
  size_t cut = 0, cut_free = 0;
  for (const auto& c : capped.report["candidates"]) cut += c.value("error", "").find("planning time limit") != std::string::npos;
  for (const auto& c : free.report["candidates"]) cut_free += c.value("error", "").find("planning time limit") != std::string::npos;
  EXPECT_GT(cut, cut_free) << "the cap cut no candidate the limits had not";
  EXPECT_LT(capped_calls, calls.load()) << "the capped run rehearsed as much as the free one";
  for (const auto& it : capped.iters) EXPECT_LE(it.peak_allocated, cfg.budget);
}

// resnet-tiny on sim at 1/divisor of its unmanaged peak, auto on the rehearsals clock, the search bounded.
static TrainConfig rehearsals_clock_config(size_t divisor) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) / divisor), 3, "p100-16g");
  cfg.policy_options.set("auto-clock", "rehearsals");
  cfg.policy_options.set("auto-wall-cap", 0);  // the plan a function of the command alone
  bounded_search(cfg, 16);
  return cfg;
}

// The rehearsals clock counts each rehearsal's iterations at kClockNsPerOp per op, and adds what
// it recomputed, compacted and evicted (a rehearsal that thrashes takes longer here): the report's
// clock is exactly that sum, over kClockWorkers.
TEST(Auto, TheRehearsalsClockChargesWhatARehearsalRecomputesCompactsAndEvicts) {
  Trainer t(rehearsals_clock_config(3));
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  const auto& g = t.graph();
  std::mutex m;
  long long iterations = 0;
  double charged_ns = 0;
  size_t charged_rehearsals = 0;
  a->set_rehearser([&](const std::string& policy, const RehearsalSetup& s) {
    const RehearsalResult r = rehearse(policy, s);
    std::lock_guard<std::mutex> lock(m);
    iterations += s.iterations;
    if (r.trained) {
      const double ns = s.iterations * (static_cast<double>(r.recomputed_ops) * kClockNsPerRecompute +
                                        static_cast<double>(r.compactions) * kClockNsPerCompaction +
                                        static_cast<double>(r.evictions) * kClockNsPerEvictionTensor *
                                            static_cast<double>(g.num_tensors()));
      charged_ns += static_cast<double>(std::llround(ns));
      charged_rehearsals += ns > 0;
    }
    return r;
  });
  const nlohmann::json rep = t.run().policy_report;
  const auto& c = rep["planning_clock"];
  EXPECT_EQ(c["rehearsed_iterations"].get<long long>(), iterations);
  EXPECT_GT(charged_rehearsals, 0u) << "no rehearsal at a third of the peak recomputed, compacted or evicted";
  EXPECT_NEAR(c["charged_ms"].get<double>(), charged_ns * 1e-6 / kClockWorkers, 1e-6);
  const double ops_ms = static_cast<double>(iterations) * static_cast<double>(g.num_ops()) * kClockNsPerOp * 1e-6;
  EXPECT_NEAR(c["clock_ms"].get<double>(), (ops_ms + charged_ns * 1e-6) / kClockWorkers, 1e-3);
}

// On the rehearsals clock a rehearsal is cut only where it runs far slower than the clock counts
// it (a thrashing plan): its wall-clock limit is kClockNetFactor x its count, at least
// kClockNetMinMs; the first candidate is never cut. A cut is an error the report counts.
TEST(Auto, TheRehearsalsClockCutsOnlyARehearsalFarSlowerThanItCounts) {
  Trainer t(rehearsals_clock_config(2));
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  const double iteration_ms = static_cast<double>(t.graph().num_ops()) * kClockNsPerOp * 1e-6;
  std::mutex m;
  std::vector<std::pair<std::string, double>> limits;  // (policy, its rehearsal's time limit)
  a->set_rehearser([&](const std::string& policy, const RehearsalSetup& s) {
    {
      std::lock_guard<std::mutex> lock(m);
      limits.emplace_back(policy, s.time_limit_ms);
    }
    if (policy == auto_candidates()[1]) {  // as if the net had cut it
      RehearsalResult r;
      r.policy = policy;
      r.error = RehearsalTimeout().what();
      return r;
    }
    return rehearse(policy, s);
  });
  const nlohmann::json rep = t.run().policy_report;
  const double net = std::max(kClockNetMinMs, kClockNetFactor * kRehearsedIterations * iteration_ms);
  ASSERT_FALSE(limits.empty());
  EXPECT_TRUE(std::any_of(limits.begin(), limits.end(), [](const auto& p) { return p.first == auto_candidates()[0] && p.second == 0; }))
      << "the first candidate (the fallback) runs uncut";
  size_t cuttable = 0;
  for (const auto& [policy, l] : limits)
    if (l != 0) {
      EXPECT_GE(l, net) << policy;
      ++cuttable;
    }
  EXPECT_GT(cuttable, 0u);
  EXPECT_EQ(rep["planning_clock"]["net_cuts"], 1);
  EXPECT_NE(rep["candidates"][1]["error"].get<std::string>().find("far slower than the planning clock counts it"), std::string::npos)
      << rep["candidates"][1].dump();
}

// The per-gap search's result is data: the chosen candidate and its pins, rehearsed again, give
// the predicted run; without pins the candidate's own time; with the search off, no pins.
TEST(AutoSearch, PinsReplayToThePredictedRun) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(max_peak(base) / 4);
  TrainConfig cfg = config("resnet-tiny", "auto", budget, 4, "p100-16g");
  bounded_search(cfg, 64);  // no LP start: the start is a candidate, without pins its own time
  Trainer t(cfg);
  unlimited_planning(t);
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  const TrainResult res = t.run();
  const nlohmann::json& rep = res.policy_report;
  ASSERT_FALSE(a->pins().empty()) << "the search pinned nothing on this row: " << rep.dump();
  EXPECT_EQ(rep["pins"].size(), a->pins().size());
  EXPECT_GT(rep["search"]["rehearsals"].get<int>(), 0);
  EXPECT_LT(rep["search"]["time_ms"].get<double>(), rep["search"]["candidate_time_ms"].get<double>());
  const auto* c = a->capuchin();
  ASSERT_NE(c, nullptr);
  int pinned = 0;
  for (const auto& cand : c->plan().candidates) pinned += cand.pinned;
  EXPECT_GT(pinned, 0) << "the running plan carries the pinned decisions";

  const RehearsalResult again = rehearse_again(t.graph(), *a, budget, "p100-16g", a->pins());
  ASSERT_TRUE(again.trained) << again.error;
  EXPECT_EQ(again.time_ms, rep["predicted_time_ms"].get<double>());
  EXPECT_EQ(again.peak_allocated, rep["predicted_peak_bytes"].get<size_t>());
  RehearsalSetup start;
  start.graph = &t.graph(), start.budget = budget, start.gpu = "p100-16g";
  std::string label = rep["search"]["start"];  // ",restored" / ",compact" / ",large-wraps": a start rehearsed so
  if (label.size() > 12 && label.substr(label.size() - 12) == ",large-wraps")  // its floor is the plan's
    start.min_wrap_bytes = rep["wrap_swaps"]["min_bytes"].get<size_t>(), label.resize(label.size() - 12);
  if (label.size() > 8 && label.substr(label.size() - 8) == ",compact") start.compact_unfit = true, label.resize(label.size() - 8);
  if (label.size() > 9 && label.substr(label.size() - 9) == ",restored") start.start_state = StartState::kRestored;
  EXPECT_EQ(rehearse(rep["search"]["start_policy"].get<std::string>(), start).time_ms,
            rep["search"]["candidate_time_ms"].get<double>());

  cfg.policy_options.set("auto-search", 0);  // --auto-search 0
  Trainer off(cfg);
  auto* b = dynamic_cast<AutoPolicy*>(&off.memory().policy());
  off.run();
  EXPECT_TRUE(b->pins().empty());
  EXPECT_TRUE(b->searched().empty());
}

// The plan's headroom is searched too: the fastest candidates planned for a little more or less of
// the budget are more starts for the climb. On gpt-tiny at 50% on p100-16g such a start (a fraction
// no candidate has) wins over the candidate it refines, the climb from it ends fastest, and what
// auto chose (after the warm starts, another end) replays to the predicted run.
TEST(AutoSearch, TheRefinedHeadroomIsAStartAndReplays) {
  const AutoRun base = train(config("gpt-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(max_peak(base) / 2);
  TrainConfig cfg = config("gpt-tiny", "auto", budget, 3, "p100-16g");
  Trainer t(cfg);
  unlimited_planning(t);
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  const nlohmann::json rep = t.run().policy_report;
  const auto& search = rep["search"];
  const nlohmann::json* fastest = nullptr;  // the climb that ended fastest started from a headroom start
  for (const auto& c : search["climbs"])
    if (!fastest || c["time_ms"].get<double>() < (*fastest)["time_ms"].get<double>()) fastest = &c;
  ASSERT_NE(fastest, nullptr);
  EXPECT_EQ((*fastest)["start"], "headroom") << search.dump();
  ASSERT_FALSE(search["headroom_starts"].empty());
  auto without_fraction = [](std::string n) {
    const size_t at = n.find('@');
    if (at != std::string::npos) n.erase(at, n.find(',', at) == std::string::npos ? std::string::npos : n.find(',', at) - at);
    return n;
  };
  for (const auto& h : search["headroom_starts"]) {
    const std::string name = h["policy"];
    bool refines_a_slower_candidate = false;
    for (const auto& c : rep["candidates"]) {
      EXPECT_NE(c["policy"], name) << "a headroom start is a fraction no candidate has";
      if (c["trained"].get<bool>() && without_fraction(c["policy"]) == without_fraction(name) &&
          c["predicted_time_ms"].get<double>() > h["time_ms"].get<double>())
        refines_a_slower_candidate = true;
    }
    EXPECT_TRUE(refines_a_slower_candidate) << h.dump();
  }
  for (const auto& e : search["edf_starts"]) {  // a start with the D2H queue in deadline order, where faster
    EXPECT_NE(e["policy"].get<std::string>().find(",edf"), std::string::npos) << e.dump();
    EXPECT_LT(e["time_ms"].get<double>(), e["from_ms"].get<double>()) << e.dump();
  }
  const RehearsalResult again = rehearse_again(t.graph(), *a, budget, "p100-16g", a->pins());
  ASSERT_TRUE(again.trained) << again.error;
  EXPECT_EQ(again.time_ms, rep["predicted_time_ms"].get<double>());
}

// The window search (after the climb) rehearses combinations of two or more gaps' moves; on
// gpt-tiny at 36% on p100-16g one of them wins where every single move had lost. What it
// chose replays to the predicted run; with --auto-window 0 the plan is where a climb ended.
TEST(AutoSearch, TheWindowSearchCombinesMovesAndReplays) {
  const AutoRun base = train(config("gpt-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * 0.36));
  TrainConfig cfg = config("gpt-tiny", "auto", budget, 4, "p100-16g");
  cfg.policy_options.set("auto-lp", 0);
  Trainer t(cfg);
  unlimited_planning(t);
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  a->set_compact_starts(false);  // the window's win is on a climb with the evicting fallback
  const nlohmann::json rep = t.run().policy_report;
  const auto& search = rep["search"];
  ASSERT_GT(search["window"]["rehearsals"].get<int>(), 0) << search.dump();
  const double climbed = search["climbed_time_ms"].get<double>();
  EXPECT_LT(search["time_ms"].get<double>(), climbed) << "the window search found nothing on this row";
  int combined = 0;  // the window's rehearsals change two gaps or more
  for (const auto& m : search["tried"])
    if (m[0].get<std::string>().rfind("window: ", 0) == 0) combined += m[0].get<std::string>().find(" + ") != std::string::npos;
  EXPECT_EQ(combined, search["window"]["rehearsals"].get<int>());

  const RehearsalResult again = rehearse_again(t.graph(), *a, budget, "p100-16g", a->pins());
  ASSERT_TRUE(again.trained) << again.error;
  EXPECT_EQ(again.time_ms, rep["predicted_time_ms"].get<double>());

  cfg.policy_options.set("auto-window", 0);  // --auto-window 0
  Trainer off(cfg);
  unlimited_planning(off);
  dynamic_cast<AutoPolicy&>(off.memory().policy()).set_compact_starts(false);
  const nlohmann::json rep0 = off.run().policy_report;
  EXPECT_EQ(rep0["search"]["window"]["rehearsals"].get<int>(), 0);
  // The plan is where a climb ended; the fastest climb may be another start's than the one the
  // window search improved.
  EXPECT_EQ(rep0["search"]["time_ms"].get<double>(), rep0["search"]["climbed_time_ms"].get<double>());
  EXPECT_LE(rep0["search"]["time_ms"].get<double>(), climbed);
}

// Where a climb ends, the "make room" moves pair a waiting swap's earlier prefetch with a kept
// tensor alive over the new window, recomputed or swapped (two pins, neither a move the climb
// tries). On gpt-tiny at 36% on p100-16g, with no window search after them, one wins in a climb
// where every single move had lost; what auto chose replays to the predicted run; with
// --auto-room 0 every climb ends where its single moves did.
TEST(AutoSearch, AMakeRoomMoveWinsWhereTheClimbEndedAndReplays) {
  const AutoRun base = train(config("gpt-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * 0.36));
  TrainConfig cfg = config("gpt-tiny", "auto", budget, 4, "p100-16g");
  cfg.policy_options.set("auto-lp", 0).set("auto-window", 0);
  Trainer t(cfg);
  unlimited_planning(t);
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  const nlohmann::json rep = t.run().policy_report;
  const auto& search = rep["search"];
  const int rehearsed = search["room"]["rehearsals"].get<int>();
  ASSERT_GT(rehearsed, 0) << search.dump();
  EXPECT_GT(search["room"]["won"].get<int>(), 0) << "no make-room move won on this row: the check proves nothing";
  int won = 0;  // climbs whose make-room moves found a faster plan
  for (const auto& c : search["climbs"]) won += c["time_ms"].get<double>() < c["climbed_ms"].get<double>();
  EXPECT_GT(won, 0) << search["climbs"].dump();
  int room = 0;  // each names an earlier swap and a recomputed or swapped partner
  for (const auto& m : search["tried"]) {
    const std::string move = m[0].get<std::string>();
    if (move.rfind("room: ", 0) != 0) continue;
    ++room;
    const size_t plus = move.find(" + ");
    ASSERT_NE(plus, std::string::npos) << move;
    EXPECT_NE(move.substr(0, plus).find(":swap-"), std::string::npos) << move;
    const std::string partner = move.substr(plus + 3);
    EXPECT_TRUE(partner.find(":recompute") != std::string::npos || partner.find(":swap") != std::string::npos) << move;
  }
  EXPECT_EQ(room, rehearsed);
  int climbs_room = 0;
  for (const auto& c : search["climbs"]) climbs_room += c["room_rehearsals"].get<int>();
  EXPECT_EQ(climbs_room, rehearsed);
  // The fastest ends, each given its start state and warm start; the fastest then runs.
  const auto& fin = search["finished"];
  ASSERT_GE(fin.size(), 2U) << search.dump();
  double fastest = fin[0]["time_ms"].get<double>();
  for (const auto& f : fin) fastest = std::min(fastest, f["time_ms"].get<double>());
  EXPECT_EQ(finished_ms(rep), fastest) << fin.dump();
  for (size_t i = 1; i < fin.size(); ++i) EXPECT_LE(fin[i - 1]["searched_ms"].get<double>(), fin[i]["searched_ms"].get<double>());

  const RehearsalResult again = rehearse_again(t.graph(), *a, budget, "p100-16g", a->pins());
  ASSERT_TRUE(again.trained) << again.error;
  EXPECT_EQ(again.time_ms, rep["predicted_time_ms"].get<double>());

  cfg.policy_options.set("auto-room", 0);  // --auto-room 0
  Trainer off(cfg);
  unlimited_planning(off);
  const nlohmann::json rep0 = off.run().policy_report;
  EXPECT_EQ(rep0["search"]["room"]["rehearsals"].get<int>(), 0);
  for (const auto& c : rep0["search"]["climbs"]) EXPECT_EQ(c["time_ms"].get<double>(), c["climbed_ms"].get<double>()) << c.dump();
}

// On cpu, real training, a plan whose climb a make-room move improved stays bit-identical to
// none (bert-tiny at 30%). The test's rehearser models p100-16g instead of the measured kernel
// times, so the plan does not depend on the machine's speed; with no window search after them and
// the search's fastest end finished alone, the plan's time below its climb's end is the room
// moves' (checked, so the check can fail).
TEST(AutoSearch, AMakeRoomPlanIsBitIdenticalToNone) {
  const AutoRun base = train(config("bert-tiny", "none", 0, 4));
  TrainConfig cfg = config("bert-tiny", "auto", align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * 0.30)), 4);
  cfg.policy_options.set("auto-lp", 0).set("auto-window", 0);
  Trainer t(cfg);
  unlimited_planning(t);
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  a->set_finished_plans(1);  // the search's fastest end runs
  a->set_rehearser([](const std::string& policy, const RehearsalSetup& s) {
    RehearsalSetup m = s;
    m.gpu = "p100-16g", m.op_ms.clear(), m.link_ms_per_byte = 0, m.copy_queued_ms = 0, m.workspace.clear(), m.workspace_lean.clear();
    return rehearse(policy, m);
  });
  const AutoRun r = run(t, cfg);
  const auto& search = r.report["search"];
  ASSERT_GT(search["room"]["won"].get<int>(), 0) << search.dump();
  EXPECT_LT(search["time_ms"].get<double>(), search["climbed_time_ms"].get<double>())
      << "the plan that runs is not one a make-room move improved: the check proves nothing";
  for (const auto& it : r.iters) EXPECT_LE(it.peak_allocated, cfg.budget);
  expect_bit_identical(base, r);
}

// Where the plans do not fit, each packed start climbs again with the other fallback
// (compact_unfit: compact within the budget, evict only the shortfall over it). On resnet-tiny at
// 35% that start's climb is the fastest, and on cpu, real training, its plan is bit-identical to
// none: the compactions move the tensors' bytes in the arena. The rehearser models p100-16g, so
// the plan does not follow the machine's speed. At 50% every plan fits, the twins rehearse as
// their origins and none is climbed.
TEST(AutoSearch, ACompactingFallbackWinsWhereThePlansDoNotFitAndIsBitIdenticalToNone) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 4));
  auto rehearser = [](const std::string& policy, const RehearsalSetup& s) {
    RehearsalSetup m = s;
    m.gpu = "p100-16g", m.op_ms.clear(), m.link_ms_per_byte = 0, m.copy_queued_ms = 0, m.workspace.clear(), m.workspace_lean.clear();
    return rehearse(policy, m);
  };
  TrainConfig cfg = config("resnet-tiny", "auto", align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * 0.35)), 4);
  bounded_search(cfg);
  Trainer t(cfg);
  unlimited_planning(t);
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  a->set_rehearser(rehearser);
  const AutoRun r = run(t, cfg);
  EXPECT_GT(r.report["unfit_fallback"]["compact_starts"].get<int>(), 0) << r.report["unfit_fallback"].dump();
  ASSERT_EQ(r.report["unfit_fallback"]["mode"], "compact") << r.report["search"].dump();
  EXPECT_TRUE(a->compact_unfit());
  const std::string start = r.report["search"]["start"].get<std::string>();
  EXPECT_EQ(start.substr(start.size() - std::string(",compact").size()), ",compact") << start;
  uint64_t compactions = 0;
  for (size_t i = 1; i < r.iters.size(); ++i) compactions += r.iters[i].counters.compactions;
  EXPECT_GT(compactions, 0u) << "no compaction in the guided iterations: the check proves nothing";
  for (const auto& it : r.iters) EXPECT_LE(it.peak_allocated, cfg.budget);
  expect_bit_identical(base, r);

  TrainConfig fits = config("resnet-tiny", "auto", align_up(max_peak(base) / 2), 2, "p100-16g");
  bounded_search(fits);
  Trainer t2(fits);
  unlimited_planning(t2);
  const AutoRun r2 = run(t2, fits);
  EXPECT_EQ(r2.report["unfit_fallback"]["compact_starts"].get<int>(), 0) << r2.report["search"].dump();
  EXPECT_EQ(r2.report["unfit_fallback"]["mode"], "evict");
}

// The ",large-wraps" starts: the fastest packed (or compacting) starts with small wrap swaps
// rehearsed again with no unpinned wrap swap of a persistent tensor under a floor (a fraction of
// the budget). On
// resnet-tiny at 50%, with the floor at 1/256 of the budget (the default 1/65536 is under every
// tensor of the tiny presets), such a start's climb is the fastest; the plan that runs keeps the
// floor, swaps no unpinned persistent tensor under it, and on cpu, real training, is bit-identical
// to none. Without those starts the same bounded search ends slower (so the check can fail). The
// rehearser models p100-16g, so the plan does not follow the machine's speed.
TEST(AutoSearch, ALargeWrapsStartWinsAndIsBitIdenticalToNone) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 4));
  const size_t budget = align_up(max_peak(base) / 2);
  auto search = [&](bool large_wraps) {
    TrainConfig cfg = config("resnet-tiny", "auto", budget, 4);
    bounded_search(cfg);
    auto t = std::make_unique<Trainer>(cfg);
    unlimited_planning(*t);
    auto* a = dynamic_cast<AutoPolicy*>(&t->memory().policy());
    EXPECT_NE(a, nullptr);
    a->set_rehearser([](const std::string& policy, const RehearsalSetup& s) {
      RehearsalSetup m = s;
      m.gpu = "p100-16g", m.op_ms.clear(), m.link_ms_per_byte = 0, m.copy_queued_ms = 0, m.workspace.clear(), m.workspace_lean.clear();
      return rehearse(policy, m);
    });
    a->set_min_wrap_fraction(1.0 / 256);
    a->set_large_wrap_starts(large_wraps);
    return std::make_pair(std::move(t), cfg);
  };
  auto [t, cfg] = search(true);
  const auto* a = dynamic_cast<const AutoPolicy*>(&t->memory().policy());
  const AutoRun r = run(*t, cfg);
  const auto& w = r.report["wrap_swaps"];
  EXPECT_GT(w["large_wrap_starts"].get<int>(), 0) << w.dump();
  const std::string start = r.report["search"]["start"].get<std::string>();
  ASSERT_NE(start.find(",large-wraps"), std::string::npos) << start;
  const size_t floor = w["min_bytes"].get<size_t>();
  EXPECT_EQ(floor, static_cast<size_t>(static_cast<double>(budget) / 256));
  EXPECT_EQ(a->min_wrap_bytes(), floor);
  std::vector<std::string> pins;
  for (const auto& p : r.report["pins"]) pins.push_back(p.get<std::string>());
  int large = 0;
  for (const auto& x : r.report["plan"]["wrap_swaps"]) {
    const std::string id = "t" + std::to_string(x["tensor"].get<int>()) + "@" + std::to_string(x["back_access_op"].get<int>()) + ":swap";
    const bool pinned = std::any_of(pins.begin(), pins.end(), [&](const std::string& p) { return p.rfind(id, 0) == 0; });
    if (!pinned) EXPECT_GE(x["bytes"].get<size_t>(), floor) << x.dump();
    large += x["bytes"].get<size_t>() >= floor;
  }
  EXPECT_GT(large, 0) << "no wrap swap runs: the plan does not exercise the floor";
  for (const auto& it : r.iters) EXPECT_LE(it.peak_allocated, cfg.budget);
  expect_bit_identical(base, r);

  auto [t2, cfg2] = search(false);
  const AutoRun r2 = run(*t2, cfg2);
  EXPECT_EQ(r2.report["wrap_swaps"]["large_wrap_starts"].get<int>(), 0);
  EXPECT_EQ(r2.report["wrap_swaps"]["min_bytes"].get<size_t>(), 0u);
  EXPECT_LT(r.report["search"]["time_ms"].get<double>(), r2.report["search"]["time_ms"].get<double>());
}

// The search's first round pauses every start's climb after a few rehearsals and the lowest go
// on first; a paused climb keeps what it had tried, lost and reached, so it ends where the same
// climb run through at once ends. On bert-tiny at 30% on p100-16g (four starts, each climb capped
// at 48 rehearsals, its make-room moves at 16 and its window search at 48, to keep the test short
// under the sanitizers), every climb paused after 40 rehearsals (within its climb), after 56
// (within its make-room moves) or after 72 (within its window search) ends as it does with no
// first round, rehearsal for rehearsal, and so does the plan.
TEST(AutoSearch, AClimbPausedByTheFirstRoundEndsWhereItWouldHaveEnded) {
  const AutoRun base = train(config("bert-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * 0.30));
  auto search = [&](int first_round) {
    TrainConfig cfg = config("bert-tiny", "auto", budget, 2, "p100-16g");
    cfg.policy_options.set("auto-lp", 0).set("auto-search", 48).set("auto-window", 48).set("auto-room", 16);
    Trainer t(cfg);
    unlimited_planning(t);
    auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
    EXPECT_NE(a, nullptr);
    if (a) a->set_first_round_rehearsals(first_round);
    return t.run().policy_report;
  };
  const nlohmann::json through = search(0);
  const auto& q = through["search"]["climbs"];
  ASSERT_GE(q.size(), 2U) << through["search"].dump();
  for (const auto& c : q) EXPECT_EQ(c["first_round_ms"], c["time_ms"]) << "no first round: the climb ran through";
  for (const int pause : {40, 56, 72}) {
    const nlohmann::json paused = search(pause);
    const auto& p = paused["search"]["climbs"];
    ASSERT_EQ(p.size(), q.size());
    int went_on = 0;  // climbs the first round paused that then found a faster plan
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_EQ(p[i]["policy"], q[i]["policy"]);
      EXPECT_TRUE(p[i]["ended"].get<bool>() && q[i]["ended"].get<bool>()) << p[i].dump();
      EXPECT_EQ(p[i]["time_ms"].get<double>(), q[i]["time_ms"].get<double>()) << pause << ": " << p[i].dump() << q[i].dump();
      EXPECT_EQ(p[i]["rehearsals"], q[i]["rehearsals"]) << pause;
      EXPECT_EQ(p[i]["room_rehearsals"], q[i]["room_rehearsals"]) << pause;
      EXPECT_EQ(p[i]["window_rehearsals"], q[i]["window_rehearsals"]) << pause;
      went_on += p[i]["first_round_ms"].get<double>() > p[i]["time_ms"].get<double>();
    }
    if (pause == 40) EXPECT_GT(went_on, 0) << "no climb was paused before its end";
    EXPECT_EQ(paused["predicted_time_ms"].get<double>(), through["predicted_time_ms"].get<double>()) << pause;
    EXPECT_EQ(paused["pins"], through["pins"]) << pause;
  }
}

// A climb whose first round ends on the plan, and in the time, of a climb ahead of it (mostly a
// restored start's twin) is not resumed: it would rehearse the same moves again. The report names
// whose duplicate it is; it stopped where its first round did; the one it duplicates went on.
TEST(AutoSearch, ADuplicateClimbIsNotResumed) {
  int duplicates = 0;
  for (const std::string model : {"gpt-tiny"}) {  // 5 of its 36 climbs (resnet-tiny: 1 of 33)
    SCOPED_TRACE(model);
    const AutoRun base = train(config(model, "none", 0, 2, "p100-16g"));
    TrainConfig cfg = config(model, "auto", align_up(max_peak(base) / 4), 2, "p100-16g");
    cfg.policy_options.set("auto-search", 40).set("auto-window", 0).set("auto-room", 0);
    Trainer t(cfg);
    unlimited_planning(t);
    const nlohmann::json r = t.run().policy_report;
    const auto& climbs = r["search"]["climbs"];
    int n = 0;
    for (size_t i = 0; i < climbs.size(); ++i) {
      const auto& c = climbs[i];
      if (c["duplicate_of"].get<std::string>().empty()) continue;
      ++n;
      EXPECT_EQ(c["time_ms"], c["first_round_ms"]) << "a duplicate went on: " << c.dump();
      bool found = false;  // an earlier climb with that label, the same plan and first round
      for (size_t j = 0; j < climbs.size() && !found; ++j)
        found = j != i && climbs[j]["start"] == c["duplicate_of"] && climbs[j]["policy"] == c["policy"] &&
                climbs[j]["first_round_ms"] == c["first_round_ms"] && climbs[j]["duplicate_of"].get<std::string>().empty();
      EXPECT_TRUE(found) << c.dump();
    }
    EXPECT_EQ(n, r["search"]["duplicate_climbs"].get<int>());
    duplicates += n;
  }
  EXPECT_GT(duplicates, 0) << "no duplicate climb on these rows: the check proves nothing";
}

// --auto-ilp: the integer program over the LP's fractional gaps (lp.h, Cbc) runs after the LP.
// The LP relaxes it, so its plan costs no less than the LP's optimum, and Cbc's bound lies
// between them; where its plan differs from the LP's roundings it is rehearsed as more starts
// ("ilp", "ilp-timed", "ilp-whole"), none below the LP's optimum; the run is the prediction; and
// on cpu the run stays bit-identical to none. bert-tiny at 25% on p100-16g leaves 11 gaps to decide;
// Cbc proves their optimum in about 1.6 s here, and the 30 s limit leaves the sanitizers' slower
// clock room (at 1 s, ASan's Cbc ran out of time before its first solution).
TEST(AutoSearch, TheIntegerProgramIsAStartAndTheRunStaysBitIdentical) {
  const AutoRun base = train(config("bert-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * 0.25));
  TrainConfig cfg = config("bert-tiny", "auto", budget, 4, "p100-16g");
  cfg.policy_options.set("auto-ilp", 30);
  Trainer t(cfg);
  auto* a = dynamic_cast<AutoPolicy*>(&t.memory().policy());
  ASSERT_NE(a, nullptr);
  const AutoRun r = run(t, cfg);
  const auto& l = r.report["lp"];
  ASSERT_EQ(l["status"].get<std::string>(), "optimal") << l.dump();
  ASSERT_TRUE(l.contains("integer")) << l.dump();
  const auto& ip = l["integer"];
  const std::string status = ip["status"].get<std::string>();
  ASSERT_TRUE(status == "optimal" || status == "time limit") << ip.dump();
  EXPECT_GT(ip["integer_columns"].get<int>(), 0) << "nothing to decide: the check proves nothing";
  const double lp = l["overhead_ms"].get<double>(), eps = 1e-9 * l["compute_ms"].get<double>();
  EXPECT_GE(ip["overhead_ms"].get<double>(), lp - eps) << ip.dump();
  EXPECT_GE(ip["bound_ms"].get<double>(), lp - eps) << ip.dump();
  EXPECT_LE(ip["bound_ms"].get<double>(), ip["overhead_ms"].get<double>() + eps) << ip.dump();
  int integer_starts = 0;
  for (const auto& x : l["rehearsals"]) {
    if (x["variant"].get<std::string>().rfind("ilp", 0) != 0) continue;
    ++integer_starts;
    if (x["trained"].get<bool>()) EXPECT_GE(x["predicted_time_ms"].get<double>(), l["time_ms"].get<double>() - eps) << x.dump();
  }
  EXPECT_GT(integer_starts, 0) << l.dump();
  EXPECT_NEAR(r.report["predicted_time_ms"].get<double>(), mean_guided_ms(r), 1e-9 * mean_guided_ms(r));
  EXPECT_LE(max_peak(r), budget);

  // On cpu, real training: bit-identical to none at half the peak.
  const AutoRun cpu_base = train(config("bert-tiny", "none", 0, 4));
  TrainConfig cpu = config("bert-tiny", "auto", align_up(max_peak(cpu_base) / 2), 4);
  cpu.policy_options.set("auto-ilp", 1);
  const AutoRun cpu_run = train(cpu);
  ASSERT_TRUE(cpu_run.report["lp"].contains("integer")) << cpu_run.report["lp"].dump();
  expect_bit_identical(cpu_base, cpu_run);
}

// --auto-lp-model in-flight: the LP starts are rounded from the LP that holds a copy's bytes on
// the device while in flight ("lpf..." variants), where it has an optimum (else the bound's); the
// reported bound is the same LP's as without it, and no lower than the in-flight model's
// optimum; the run is the prediction; on cpu it stays bit-identical to none.
TEST(AutoSearch, TheInFlightLpRoundsTheStartsAndLeavesTheBound) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * 0.5));
  TrainConfig plain = config("resnet-tiny", "auto", budget, 4, "p100-16g");
  bounded_search(plain, 8);
  plain.policy_options.set("auto-lp", 1);
  plain.policy_options.set("auto-lp-model", "bound");
  TrainConfig cfg = plain;
  cfg.policy_options.set("auto-lp-model", "in-flight");
  const AutoRun b = train(plain), r = train(cfg);
  const auto& l = r.report["lp"];
  ASSERT_EQ(l["status"].get<std::string>(), "optimal") << l.dump();
  EXPECT_EQ(b.report["lp"]["model"], "bound");
  EXPECT_EQ(l["model"], "in-flight");
  EXPECT_FALSE(b.report["lp"].contains("in_flight"));
  ASSERT_TRUE(l.contains("in_flight")) << l.dump();
  EXPECT_EQ(l["overhead_ms"].get<double>(), b.report["lp"]["overhead_ms"].get<double>()) << "the bound is the bound LP's";
  const auto& f = l["in_flight"];
  ASSERT_EQ(f["status"].get<std::string>(), "optimal") << f.dump();
  const double eps = 1e-9 * l["compute_ms"].get<double>();
  EXPECT_GE(f["overhead_ms"].get<double>(), l["overhead_ms"].get<double>() - eps) << f.dump();
  ASSERT_FALSE(l["rehearsals"].empty()) << l.dump();
  for (const auto& x : l["rehearsals"]) EXPECT_EQ(x["variant"].get<std::string>().rfind("lpf", 0), 0u) << x.dump();
  for (const auto& x : b.report["lp"]["rehearsals"]) EXPECT_NE(x["variant"].get<std::string>().rfind("lpf", 0), 0u) << x.dump();
  EXPECT_NEAR(r.report["predicted_time_ms"].get<double>(), mean_guided_ms(r), 1e-9 * mean_guided_ms(r));
  EXPECT_LE(max_peak(r), budget);
  // Both: the bound's roundings and the in-flight ones not already among them.
  TrainConfig both_cfg = plain;
  both_cfg.policy_options.set("auto-lp-model", "both");
  const AutoRun both = train(both_cfg);
  EXPECT_EQ(both.report["lp"]["model"], "both");
  auto variants = [](const AutoRun& x) {
    std::set<std::string> v;
    for (const auto& y : x.report["lp"]["rehearsals"]) v.insert(y["variant"].get<std::string>());
    return v;
  };
  const auto vb = variants(b), vf = variants(r), v2 = variants(both);
  for (const auto& v : vb) EXPECT_TRUE(v2.count(v)) << v;
  for (const auto& v : v2) EXPECT_TRUE(vb.count(v) || vf.count(v)) << v;
  EXPECT_GT(v2.size(), vb.size()) << "no in-flight rounding differs from the bound's: the check proves nothing";

  const AutoRun cpu_base = train(config("resnet-tiny", "none", 0, 3));
  TrainConfig cpu = config("resnet-tiny", "auto", align_up(max_peak(cpu_base) / 2), 3);
  bounded_search(cpu, 8);
  cpu.policy_options.set("auto-lp", 1);
  cpu.policy_options.set("auto-lp-model", "in-flight");
  const AutoRun cpu_run = train(cpu);
  EXPECT_EQ(cpu_run.report["lp"]["model"], "in-flight");
  expect_bit_identical(cpu_base, cpu_run);
}

// --auto-lp-model compress (the default): with the densities a cpu run recorded, a second LP that may also keep
// ReLU / max-pool outputs compressed (LpOptions::codec) rounds more starts ("lpc..."), its
// compressed gaps pinned as compressions; its optimum is no higher than the bound's (it may
// compress nothing) and the reported bound stays the bound LP's; the run is the prediction. On
// cpu (its own counts) the run stays bit-identical to none.
TEST(AutoSearch, TheCompressingLpRoundsStartsThatCompress) {
  const std::string path = record_densities("resnet-tiny", "resnet-tiny-lpc-densities.json");
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(max_peak(base)) * 0.5));
  TrainConfig plain = config("resnet-tiny", "auto", budget, 4, "p100-16g");
  bounded_search(plain, 8);
  plain.policy_options.set("auto-lp", 1);
  plain.densities_path = path;
  plain.policy_options.set("auto-lp-model", "bound");
  TrainConfig cfg = plain;
  cfg.policy_options.erase("auto-lp-model");  // the default
  const AutoRun b = train(plain), r = train(cfg);
  const auto& l = r.report["lp"];
  ASSERT_EQ(l["status"].get<std::string>(), "optimal") << l.dump();
  EXPECT_EQ(l["model"], "compress");
  EXPECT_FALSE(b.report["lp"].contains("compress"));
  ASSERT_TRUE(l.contains("compress")) << l.dump();
  const auto& c = l["compress"];
  ASSERT_EQ(c["status"].get<std::string>(), "optimal") << c.dump();
  EXPECT_GT(c["compressed_bytes"].get<double>(), 0.0) << c.dump();
  EXPECT_EQ(l["overhead_ms"].get<double>(), b.report["lp"]["overhead_ms"].get<double>()) << "the bound is the bound LP's";
  EXPECT_LE(c["overhead_ms"].get<double>(), l["overhead_ms"].get<double>() + 1e-9 * l["compute_ms"].get<double>()) << c.dump();
  std::set<std::string> variants;
  for (const auto& x : l["rehearsals"]) variants.insert(x["variant"].get<std::string>());
  for (const auto& x : b.report["lp"]["rehearsals"]) EXPECT_NE(x["variant"].get<std::string>().rfind("lpc", 0), 0u) << x.dump();
  EXPECT_TRUE(variants.count("lpc")) << l.dump();
  EXPECT_GT(c["compress_pins"].get<int>(), 0) << "its rounding pins compressions: " << c.dump();
  EXPECT_NEAR(r.report["predicted_time_ms"].get<double>(), mean_guided_ms(r), 1e-9 * mean_guided_ms(r));
  EXPECT_LE(max_peak(r), budget);

  const AutoRun cpu_base = train(config("resnet-tiny", "none", 0, 3));
  TrainConfig cpu = config("resnet-tiny", "auto", align_up(max_peak(cpu_base) / 2), 3);
  bounded_search(cpu, 8);
  cpu.policy_options.set("auto-lp", 1);
  const AutoRun cpu_run = train(cpu);
  EXPECT_EQ(cpu_run.report["lp"]["compress"]["status"], "optimal") << cpu_run.report["lp"].dump();
  expect_bit_identical(cpu_base, cpu_run);
}

// Under auto the planned pool plans from the first guided iteration (the measured one runs
// another schedule), keeps the plan through auto's packing at each iteration's end, and serves
// the later iterations from it without a fallback (bert-tiny at 55%, where the plan fits; at 50%
// auto's plan now leaves the pool's greedy placement over the budget, and it falls back).
TEST(AutoSimRun, ThePlannedPoolKeepsItsPlanThroughAutosPacking) {
  const AutoRun base = train(config("bert-tiny", "none", 0, 2, "p100-16g"));
  TrainConfig cfg = config("bert-tiny", "auto", align_up(max_peak(base) * 55 / 100), 5, "p100-16g");
  cfg.allocator = "planned";
  Trainer t(cfg);
  const nlohmann::json a = t.run().allocator_report;
  ASSERT_TRUE(a.contains("plan")) << a.dump();
  EXPECT_TRUE(a["plan"].value("fits_budget", false)) << a.dump();
  EXPECT_EQ(a["plans_given_up"].get<uint64_t>(), 0u) << a.dump();
  EXPECT_EQ(a["replans"].get<uint64_t>(), 0u) << a.dump();
  EXPECT_EQ(a["fallback_requests"].get<uint64_t>(), 0u) << a.dump();
  EXPECT_EQ(a["iterations_planned"].get<uint64_t>(), 3u) << "iterations 3-5: planned after guided iteration 1";
  EXPECT_GT(a["planned_requests"].get<uint64_t>(), 0u);
}

// The rehearsal uses the run's allocator and host budget, so on sim the prediction is still the
// run with --allocator planned and --host-budget.
TEST(AutoSimRun, PredictionHoldsWithThePlannedPoolAndAHostBudget) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) / 4), 4, "p100-16g");
  cfg.allocator = "planned";
  cfg.host_budget = size_t{4} << 20;
  const AutoRun a = train(cfg);
  ASSERT_TRUE(a.report.contains("predicted_peak_bytes")) << a.report.dump();
  EXPECT_EQ(a.report["predicted_peak_bytes"].get<size_t>(), max_peak(a, 1));
  EXPECT_NEAR(a.report["predicted_time_ms"].get<double>(), mean_guided_ms(a), 1e-9 * mean_guided_ms(a));
  for (const auto& s : a.iters) EXPECT_LE(s.peak_host, cfg.host_budget);
}

// The plan as data (AutoPolicy::saved_plan, `--auto-plan`): a run from an earlier run's saved plan
// skips the search and, on sim, repeats that run's iterations exactly, warm layout, pins and
// placement included; on cpu it is bit-identical to `none`. The warm layout is made to win as in
// AWarmLayoutIsBitIdenticalToNone, so that every field of the plan is exercised.
TEST(AutoPlanFile, ASavedPlanRunsAgainWithoutTheSearch) {
  const std::string model = "resnet-tiny";
  const int iters = 4;
  for (const std::string gpu : {"p100-16g", ""}) {
    SCOPED_TRACE(gpu.empty() ? "cpu" : gpu);
    const AutoRun base = train(config(model, "none", 0, iters, gpu));
    TrainConfig cfg = config(model, "auto", align_up(max_peak(base) * 3 / 10), iters, gpu);
    bounded_search(cfg);
    AutoRun first;
    {
      Trainer t(cfg);
      unlimited_planning(t);
      auto* ap = dynamic_cast<AutoPolicy*>(&t.memory().policy());
      ASSERT_NE(ap, nullptr);
      scale_warm_rehearsals(*ap, 0.5);
      first = run(t, cfg);
    }
    const nlohmann::json& plan = first.report["saved_plan"];
    ASSERT_TRUE(plan.is_object()) << first.report.dump();
    // On sim the plan is a function of the command: it pins gaps and its warm layout wins. On cpu
    // it comes from measured kernel times, so on a loaded machine it may pin nothing; the replay
    // of the file is checked either way.
    if (!gpu.empty()) {
      ASSERT_FALSE(plan["pins"].empty()) << plan.dump();
      ASSERT_FALSE(plan["start_layout"].empty()) << "the warm layout did not win: the check proves less";
    }
    const std::string file = test::temp_path("auto_plan", "report.json");
    {
      std::ofstream out(file);
      out << nlohmann::json{{"config", {{"policy", "auto"}}}, {"policy_report", first.report}}.dump();
    }
    TrainConfig again = cfg;
    again = with_plan(again, file);
    const AutoRun second = train(again);
    std::filesystem::remove(file);
    EXPECT_EQ(second.report["planned_from"], "plan file");
    EXPECT_TRUE(second.report["candidates"].empty()) << "a plan from a file rehearses nothing";
    EXPECT_EQ(second.report["saved_plan"], plan);
    ASSERT_EQ(second.iters.size(), first.iters.size());
    if (gpu.empty()) {
      expect_bit_identical(base, second);
      continue;
    }
    for (size_t i = 0; i < first.iters.size(); ++i) {
      EXPECT_EQ(second.iters[i].time_ms, first.iters[i].time_ms) << "iteration " << i;
      EXPECT_EQ(second.iters[i].peak_allocated, first.iters[i].peak_allocated) << "iteration " << i;
      EXPECT_EQ(second.iters[i].counters.swapped_out_bytes, first.iters[i].counters.swapped_out_bytes) << "iteration " << i;
      EXPECT_EQ(second.iters[i].counters.recomputed_ops, first.iters[i].counters.recomputed_ops) << "iteration " << i;
    }
  }
}

// A saved plan names the graph and the budget it was made for; anything else, or a plan that is
// malformed, is refused before the run with a message that names what does not match.
TEST(AutoPlanFile, APlanForAnotherGraphOrBudgetOrMalformedIsRefused) {
  const AutoRun base = train(config("resnet-tiny", "none", 0, 2, "p100-16g"));
  TrainConfig cfg = config("resnet-tiny", "auto", align_up(max_peak(base) / 3), 2, "p100-16g");
  bounded_search(cfg, 8);
  const AutoRun made = train(cfg);
  const nlohmann::json plan = made.report["saved_plan"];
  ASSERT_TRUE(plan.is_object()) << made.report.dump();
  ASSERT_FALSE(plan["pins"].empty()) << plan.dump();
  const std::string file = test::temp_path("auto_plan", "plan.json");
  auto refused = [&](const nlohmann::json& doc, TrainConfig c) {
    {
      std::ofstream out(file);
      out << doc.dump();
    }
    c = with_plan(c, file);
    try {
      Trainer t(c);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  TrainConfig other_budget = cfg;
  other_budget.budget += size_t{1} << 20;
  std::string m = refused(plan, other_budget);
  EXPECT_NE(m.find("made for a budget of " + std::to_string(cfg.budget) + " bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("--budget " + std::to_string(cfg.budget) + "B"), std::string::npos) << m;
  TrainConfig other_batch = cfg;
  other_batch.model.batch = 16;
  m = refused(plan, other_batch);
  EXPECT_NE(m.find("made for another graph"), std::string::npos) << m;
  nlohmann::json bad = plan;
  bad["pins"][0]["id"] = 1 << 20;
  m = refused(bad, cfg);
  EXPECT_NE(m.find("pins: tensor id 1048576 is not one of the graph's"), std::string::npos) << m;
  bad = plan;
  bad["pins"][0]["tensor"] = "no.such.tensor";
  m = refused(bad, cfg);
  EXPECT_NE(m.find("the plan names 'no.such.tensor'"), std::string::npos) << m;
  bad = plan;
  bad["pins"][0]["decision"] = "drop";
  m = refused(bad, cfg);
  EXPECT_NE(m.find("decision 'drop' (accepted: keep, swap, recompute, compress)"), std::string::npos) << m;
  bad = plan;
  bad.erase("start_state");
  m = refused(bad, cfg);
  EXPECT_NE(m.find("malformed"), std::string::npos) << m;
  bad = plan;
  bad["pins"][0]["trigger_shift"] = 1 << 30;
  m = refused(bad, cfg);
  EXPECT_NE(m.find("pins: trigger_shift 1073741824 is not an op count"), std::string::npos) << m;
  bad = plan;
  bad["start_layout"] = {{{"id", plan["pins"][0]["id"]}, {"buffer", false}, {"offset", 0}, {"size", 512}},
                         {{"id", plan["pins"][1]["id"]}, {"buffer", false}, {"offset", 256}, {"size", 256}}};
  m = refused(bad, cfg);
  EXPECT_NE(m.find("start_layout: the blocks at 0 and 256 overlap"), std::string::npos) << m;
  bad["start_layout"][1]["offset"] = 700;
  m = refused(bad, cfg);
  EXPECT_NE(m.find("start_layout: a block at 700 of 256 bytes is not an aligned block"), std::string::npos) << m;
  m = refused(nullptr, cfg);
  EXPECT_NE(m.find("not a plan"), std::string::npos) << m;
  m = refused(nlohmann::json::object(), cfg);
  EXPECT_NE(m.find("not a plan"), std::string::npos) << m;
  m = refused({{"config", {{"policy", "dtr"}}}, {"policy_report", nullptr}}, cfg);
  EXPECT_NE(m.find("a report without a plan (policy 'dtr'"), std::string::npos) << m;
  TrainConfig not_auto = config("resnet-tiny", "capuchin", cfg.budget, 2, "p100-16g");
  m = refused(plan, not_auto);
  EXPECT_NE(m.find("--auto-plan applies to --policy auto only"), std::string::npos) << m;
  std::filesystem::remove(file);
  TrainConfig missing = cfg;
  missing = with_plan(missing, file);
  try {
    Trainer t(missing);
    ADD_FAILURE() << "a missing plan file was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--auto-plan: cannot read '" + file + "'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(refused(plan, cfg), "accepted");
  std::filesystem::remove(file);
}

// A plan that compresses sizes its buffers on sim from the densities it was made with: without
// them the same plan would compress nothing, so it is refused; with them it repeats the run.
TEST(AutoPlanFile, ACompressingPlanOnSimNeedsItsDensities) {
  const std::string densities = record_densities("resnet-tiny", "plan-densities.json");
  TrainConfig cfg = config("resnet-tiny", "auto", size_t{1} << 20, 3, "p100-16g");
  cfg.densities_path = densities;
  cfg.policy_options.set("auto-candidates", "compress+capuchin");
  const AutoRun made = train(cfg);
  ASSERT_EQ(made.report["saved_plan"]["policy"], "compress+capuchin") << made.report.dump();
  ASSERT_GT(made.iters.back().counters.compressions, 0u) << "the plan compresses nothing: the check proves nothing";
  const std::string file = test::temp_path("auto_plan", "compressing.json");
  {
    std::ofstream out(file);
    out << made.report["saved_plan"].dump();
  }
  TrainConfig again = cfg;
  again = with_plan(again, file);
  again.densities_path.clear();
  try {
    Trainer t(again);
    ADD_FAILURE() << "a compressing plan ran on sim without densities";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the plan compresses (compress+capuchin), which on --backend sim needs --densities FILE"),
              std::string::npos)
        << e.what();
  }
  again.densities_path = densities;
  const AutoRun replayed = train(again);
  for (size_t i = 0; i < made.iters.size(); ++i) {
    EXPECT_EQ(replayed.iters[i].time_ms, made.iters[i].time_ms) << "iteration " << i;
    EXPECT_EQ(replayed.iters[i].counters.compressions, made.iters[i].counters.compressions) << "iteration " << i;
  }
  std::filesystem::remove(file);
  std::filesystem::remove(densities);
}
