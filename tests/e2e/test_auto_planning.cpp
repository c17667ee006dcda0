// End-to-end: how policy auto plans: its candidates' names, without a rehearser, under a time
// limit, the summary it writes, and its planning clocks (rehearsals or wall, and the wall cap),
// which count work.
#include <gtest/gtest.h>

#include "tests/support/auto_runs.h"

using namespace vtensor;
using namespace vtensor::auto_test;

// A candidate's name reads back as the same candidate, in the order its switches are written;
// a name out of that order, or with what its planner does not have, is no candidate. The
// search's variants keep the switches and write the fraction in hundredths.
TEST(Auto, CandidateNamesReadBackAsTheCandidatesTheyName) {
  for (const Candidate& c : auto_candidates()) EXPECT_TRUE(Candidate::parse(c.name()) == c) << c.name();
  for (const char* name : {"capuchin", "capuchin@1", "capuchin@0.87,w4,fifo,need,edf,wrap,dtr", "capuchin-recompute@0.85,edf,dtr",
                           "compress+capuchin@0.94,dtr", "capuchin@0.9,w0.125,wrap"}) {
    const auto c = Candidate::parse(name);
    ASSERT_TRUE(c.has_value()) << name;
    EXPECT_EQ(c->name(), name);
  }
  for (const char* name : {"", "nonsense", "capuchin,dtr,wrap", "capuchin-swap@0.9,w4", "capuchin,w4", "capuchin@1.5", "capuchin@0",
                           "dtr,wrap", "dtr@0.9", "capuchin-recompute,wrap", "capuchin@0.9,w0", "capuchin@0.9x"})
    EXPECT_FALSE(Candidate::parse(name).has_value()) << name;
  const Candidate c = Candidate::named("capuchin@0.85,w4,wrap,dtr");
  EXPECT_EQ(auto_detail::with_fraction(c, 0.87)->name(), "capuchin@0.87,w4,wrap,dtr");
  EXPECT_EQ(auto_detail::with_weight(c, 2)->name(), "capuchin@0.85,w2,wrap,dtr");
  EXPECT_EQ(auto_detail::with_weight(Candidate{"capuchin"}, 2)->name(), "capuchin@1,w2");
  EXPECT_EQ(auto_detail::with_weight(Candidate{"capuchin", 0.9, 4}, 1)->name(), "capuchin@0.9");
  EXPECT_FALSE(auto_detail::with_weight(Candidate{"capuchin-swap"}, 2).has_value());
  EXPECT_FALSE(auto_detail::with_fraction(c, 1.02).has_value());
  EXPECT_FALSE(auto_detail::with_wrap_swaps(c).has_value());
  EXPECT_EQ(auto_detail::with_edf_toggled(Candidate::named("capuchin-swap@0.9,edf"))->name(), "capuchin-swap@0.9");
  EXPECT_THROW(Candidate::named("capuchin@2"), std::invalid_argument);
}

TEST(Auto, WithoutARehearserRunsCapuchinAndForcedNamesMustBeKnown) {
  try {
    AutoPolicy p(Candidate{"nonsense"});
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
  const RehearsalResult ok = rehearse(Candidate{"capuchin"}, s);
  EXPECT_TRUE(ok.trained) << ok.error;
  EXPECT_LE(ok.peak_allocated, s.budget);
  s.budget = align_up(max_peak(base) / 50);  // below one op's working set: a result, not a throw
  const RehearsalResult oom = rehearse(Candidate{"checkpoint"}, s);
  EXPECT_FALSE(oom.trained);
  EXPECT_NE(oom.error.find("out of memory"), std::string::npos) << oom.error;
  s.budget = align_up(max_peak(base) / 2);
  s.time_limit_ms = 1e-3;  // a rehearsal past its time limit stops: a result, not a throw
  const RehearsalResult late = rehearse(Candidate{"capuchin"}, s);
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
    EXPECT_NE(a->rehearsals()[i].error.find("time limit"), std::string::npos) << a->rehearsals()[i].policy.name();
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
  std::snprintf(head, sizeof head, "auto: chose %s, %.2f ms predicted per iteration (stall ", a->chosen().name().c_str(),
                res.policy_report["predicted_time_ms"].get<double>());
  EXPECT_EQ(s.rfind(head, 0), 0u);
  EXPECT_NE(s.find("\n  candidates: " + std::to_string(a->rehearsals().size()) + " rehearsed, "), std::string::npos);
  const RehearsalResult* fastest = nullptr;
  size_t trained = 0;
  for (const auto& r : a->rehearsals())
    if (r.trained && ++trained && (!fastest || r.time_ms < fastest->time_ms)) fastest = &r;
  ASSERT_NE(fastest, nullptr);
  EXPECT_NE(s.find("; fastest: " + fastest->policy.name() + " "), std::string::npos);
  ASSERT_GT(trained, 4u);
  size_t named = 0;  // the four fastest, not every candidate
  for (const auto& r : a->rehearsals()) named += r.trained && s.find(" " + r.policy.name() + " ") != std::string::npos;
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
    a->set_rehearser([delay_ms, &calls](const Candidate& policy, const RehearsalSetup& s) {
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
    a->set_rehearser([delay_ms, &calls](const Candidate& policy, const RehearsalSetup& s) {
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
  a->set_rehearser([&](const Candidate& policy, const RehearsalSetup& s) {
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
  a->set_rehearser([&](const Candidate& policy, const RehearsalSetup& s) {
    {
      std::lock_guard<std::mutex> lock(m);
      limits.emplace_back(policy.name(), s.time_limit_ms);
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
  EXPECT_TRUE(std::any_of(limits.begin(), limits.end(), [](const auto& p) { return p.first == auto_candidates()[0].name() && p.second == 0; }))
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
