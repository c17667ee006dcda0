// The Capuchin planner on hand-built access traces, no device: free time, in-trigger placement
// (walk back, one copy at a time per direction, not into the peak window), MSPS ranking and its
// update after each choice, and the hybrid's per-tensor choice.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <cmath>

#include "tests/support/trace_builder.h"
#include "vtensor/policy/capuchin.h"

using namespace vtensor;

namespace {

const CapuchinCandidate& candidate(const CapuchinPlan& p, TensorId id) {
  for (const auto& c : p.candidates)
    if (c.id == id) return c;
  throw std::runtime_error("no candidate " + std::to_string(id));
}

bool has_candidate(const CapuchinPlan& p, TensorId id) {
  for (const auto& c : p.candidates)
    if (c.id == id) return true;
  return false;
}

TEST(CapuchinPlanner, FreeTimeRunsFromTheEndOfTheReleaseOp) {
  const std::vector<double> start = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90};
  // Out after op 1: the copy starts at op 2's start (20) and ends at 25, in op 2: freed at 30.
  // Back at op 8 (80): (80 - 5) - 30.
  EXPECT_EQ(capuchin_release_op(start, 1, 25), 2);
  EXPECT_EQ(capuchin_release_op(start, 1, 30), 2) << "ends with op 2";
  EXPECT_EQ(capuchin_release_op(start, 1, 31), 3);
  EXPECT_EQ(capuchin_release_op(start, 1, 95), -1) << "ends after the last op";
  EXPECT_DOUBLE_EQ(capuchin_free_time(start, 1, 8, 5), 45);
  EXPECT_DOUBLE_EQ(capuchin_free_time(start, 1, 8, 40), -20);  // ends at 60, in op 5: the copy cannot hide

  TraceBuilder b(10);
  b.in.swap_ns_per_byte = 0.25;  // 100 bytes: 25 ns
  const TensorId a = b.tensor(100, 0, {}, true);
  b.accesses(a, {1, 9});
  const TensorId big = b.tensor(1000, 0, {}, true);
  b.live(big, 3, 5);
  b.in.budget = 1050;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kSwap);
  ASSERT_TRUE(has_candidate(p, a));
  EXPECT_FALSE(has_candidate(p, big)) << "accessed at consecutive ops only: no gap to evict in";
  EXPECT_DOUBLE_EQ(candidate(p, a).swap_ns, 25);
  EXPECT_DOUBLE_EQ(candidate(p, a).free_time_ns, (90 - 25) - 50);  // the copy (20..45) ends in op 4
  EXPECT_EQ(p.peak_before, 1100u);
}

TEST(CapuchinPlanner, TriggerWalksBackUntilTheCopyIsHidden) {
  TraceBuilder b(10);
  b.in.swap_ns_per_byte = 0.15;  // 100 bytes: 15 ns
  const TensorId a = b.tensor(100, 0, {}, true);
  b.accesses(a, {1, 9});
  const TensorId big = b.tensor(1000, 0, {}, true);
  b.live(big, 4, 6);
  b.in.budget = 1050;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kSwap);
  const auto& c = candidate(p, a);
  ASSERT_EQ(c.decision, CapuchinDecision::kSwap);
  // The copy out (20..35) ends in op 3: freed after it. A prefetch after op 6 starts at 70 and
  // ends at 85 <= 90; after op 7 it would end at 95.
  EXPECT_EQ(c.release_op, 3);
  EXPECT_EQ(c.trigger_op, 6);
  EXPECT_DOUBLE_EQ(c.swap_stall_ns, 0);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.peak_after, 1000u);
  const std::vector<Action> want = {{ActionKind::kSwapOut, a, 1, 3}, {ActionKind::kPrefetch, a, 6}};
  EXPECT_EQ(p.plan.actions, want) << p.plan.str();
  EXPECT_NE(p.plan.str().find("swap_out t1 after op 1, freed after op 3"), std::string::npos) << p.plan.str();
}

TEST(CapuchinPlanner, TriggerNeverEntersThePeakWindow) {
  TraceBuilder b(10);
  b.in.swap_ns_per_byte = 0.15;
  const TensorId a = b.tensor(100, 0, {}, true);
  b.accesses(a, {1, 9});
  const TensorId big = b.tensor(1000, 0, {}, true);
  b.live(big, 4, 7);  // over the budget up to op 7: the tensor may come back only after it
  b.in.budget = 1050;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kSwap);
  const auto& c = candidate(p, a);
  ASSERT_EQ(c.decision, CapuchinDecision::kSwap);
  EXPECT_EQ(c.trigger_op, 7);
  EXPECT_DOUBLE_EQ(c.swap_stall_ns, 80 + 15 - 90);  // the part of the copy that cannot hide
  for (int op = 4; op <= 7; ++op) EXPECT_LE(p.memory_after[static_cast<size_t>(op)], 1050u) << op;
}

TEST(CapuchinPlanner, OneCopyAtATimePerDirection) {
  TraceBuilder b(12);
  b.in.swap_ns_per_byte = 0.2;  // 100 bytes: 20 ns
  const TensorId a2 = b.tensor(100, 0, {}, true);
  b.accesses(a2, {0, 11});
  const TensorId a1 = b.tensor(100, 0, {}, true);
  b.accesses(a1, {1, 11});
  const TensorId big = b.tensor(1000, 0, {}, true);
  b.live(big, 5, 6);
  b.in.budget = 1000;  // both must go
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kSwap);
  const auto& c2 = candidate(p, a2);
  const auto& c1 = candidate(p, a1);
  ASSERT_EQ(c2.decision, CapuchinDecision::kSwap);
  ASSERT_EQ(c1.decision, CapuchinDecision::kSwap);
  EXPECT_LT(c2.order, c1.order) << "largest free time first";
  // a2's swap-out runs 10..30 (ends in op 2); a1's, issued after op 1 (20), waits for it and runs
  // 30..50: it ends in op 4, not in op 3 as it would alone, and its block counts until then.
  EXPECT_EQ(c2.release_op, 2);
  EXPECT_EQ(c1.release_op, 4);
  EXPECT_EQ(p.memory_after[4], 100u) << "a1 only";
  EXPECT_EQ(p.memory_after[5], 1000u);
  // a2's swap-in takes the h2d lane over [90, 110); a1's must end before it starts.
  EXPECT_EQ(c2.trigger_op, 8);
  EXPECT_DOUBLE_EQ(c2.prefetch_start_ns, 90);
  EXPECT_EQ(c1.trigger_op, 6);
  EXPECT_DOUBLE_EQ(c1.prefetch_start_ns, 70);
  EXPECT_LE(c1.prefetch_start_ns + c1.swap_ns, c2.prefetch_start_ns);
  EXPECT_DOUBLE_EQ(c1.swap_stall_ns, 0);
  EXPECT_TRUE(p.fits);
}

// The D2H queue in deadline order (PlannerInput::deadline_swap_outs, policy auto's plans): a
// swap-out whose gap closes soon goes ahead of a queued one that has not started and comes back
// much later; that one is issued after it, later than its own eviction. Capuchin's queue, in
// eviction order, cannot take the short gap.
TEST(CapuchinPlanner, ADeadlineOrderedQueueIssuesAShortGapFirst) {
  TraceBuilder b(30);
  b.in.swap_ns_per_byte = 0.1;  // 100 bytes: 10 ns
  const TensorId m = b.tensor(200, 0, {}, true);
  b.accesses(m, {0, 27});
  const TensorId l = b.tensor(800, 0, {}, true);
  b.accesses(l, {0, 25});
  const TensorId s = b.tensor(100, 0, {}, true);
  b.accesses(s, {1, 6});
  const TensorId big1 = b.tensor(250, 0, {}, true);
  b.live(big1, 4, 4);  // s must be off at op 4 (m too)
  const TensorId big2 = b.tensor(1000, 0, {}, true);
  b.live(big2, 14, 14);  // m and l must be off at op 14
  b.in.budget = 1100;
  // In eviction order: m runs 10..30, l 30..110, s behind them ends in op 11, after its back-access.
  const CapuchinPlan fifo = plan_capuchin(b.in, CapuchinMode::kSwap);
  EXPECT_EQ(candidate(fifo, m).decision, CapuchinDecision::kSwap);
  EXPECT_EQ(candidate(fifo, l).decision, CapuchinDecision::kSwap);
  EXPECT_EQ(candidate(fifo, s).decision, CapuchinDecision::kKeep);
  EXPECT_FALSE(fifo.fits);

  // In deadline order: m has started by s's eviction (20) and stays first; s goes ahead of l
  // (30..40, freed after op 3, back by a prefetch after op 4); l is issued after op 1 and runs
  // 40..120: freed after op 11, still off at op 14.
  b.in.deadline_swap_outs = true;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kSwap);
  const auto &cm = candidate(p, m), &cl = candidate(p, l), &cs = candidate(p, s);
  ASSERT_EQ(cs.decision, CapuchinDecision::kSwap);
  EXPECT_EQ(cm.swap_out_op, 0);
  EXPECT_EQ(cm.release_op, 2);
  EXPECT_EQ(cs.swap_out_op, 1);
  EXPECT_EQ(cs.release_op, 3);
  EXPECT_EQ(cs.trigger_op, 4);
  EXPECT_DOUBLE_EQ(cs.swap_stall_ns, 0);
  EXPECT_EQ(cl.evict_op, 0);
  EXPECT_EQ(cl.swap_out_op, 1);
  EXPECT_EQ(cl.release_op, 11);
  EXPECT_GT(cl.trigger_op, 14);
  EXPECT_EQ(p.plan.at(0), (std::vector<Action>{{ActionKind::kSwapOut, m, 0, 2}}));
  EXPECT_EQ(p.plan.at(1), (std::vector<Action>{{ActionKind::kSwapOut, s, 1, 3}, {ActionKind::kSwapOut, l, 1, 11}}));
  EXPECT_EQ(p.memory_after[4], 1050u) << "l and big1";
  EXPECT_EQ(p.memory_after[14], 1000u) << "big2 only";
  EXPECT_TRUE(p.fits);
}

// One op's prefetches in need order (PlannerInput::need_ordered_prefetches, policy auto's ",need"):
// x and y are both off over z's ops and both prefetched after op 13, the first op they may be back
// at. The lane model places each copy in a gap of its own; the stream copies in issue order, so y,
// needed first, is issued first. The rest of the plan is the same.
TEST(CapuchinPlanner, NeedOrderIssuesOneOpsPrefetchesInTheOrderTheyAreNeeded) {
  TraceBuilder b(30);
  b.in.swap_ns_per_byte = 0.1;
  const TensorId x = b.tensor(800, 0, {}, true);
  b.accesses(x, {0, 20});
  const TensorId y = b.tensor(300, 0, {}, true);
  b.accesses(y, {1, 16});
  const TensorId z = b.tensor(1100, 0, {}, true);
  b.live(z, 3, 13);
  b.in.budget = 1200;
  const CapuchinPlan plain = plan_capuchin(b.in, CapuchinMode::kSwap);
  b.in.need_ordered_prefetches = true;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kSwap);
  ASSERT_EQ(candidate(p, x).decision, CapuchinDecision::kSwap);
  ASSERT_EQ(candidate(p, y).decision, CapuchinDecision::kSwap);
  EXPECT_EQ(candidate(p, x).trigger_op, 13);
  EXPECT_EQ(candidate(p, y).trigger_op, 13);
  EXPECT_EQ(p.plan.at(13), (std::vector<Action>{{ActionKind::kPrefetch, y, 13}, {ActionKind::kPrefetch, x, 13}}));
  EXPECT_EQ(plain.plan.at(13), (std::vector<Action>{{ActionKind::kPrefetch, x, 13}, {ActionKind::kPrefetch, y, 13}}))
      << "chosen first, issued first";
  auto sorted = [](std::vector<Action> a) {
    std::sort(a.begin(), a.end(), [](const Action& l, const Action& r) { return std::tie(l.op, l.tensor, l.kind) < std::tie(r.op, r.tensor, r.kind); });
    return a;
  };
  EXPECT_EQ(sorted(p.plan.actions), sorted(plain.plan.actions));
  EXPECT_EQ(p.memory_after, plain.memory_after);
}

// The copy lane jumps over chains of touching intervals and skips blocks of narrow gaps, and the
// trigger walk bisects: both must give what the plain definitions give, on lanes with chains, gaps
// of every size (lanes of up to 120 intervals: several of the lane's blocks) and removals.
TEST(CapuchinPlanner, TheLaneAndTheTriggerWalkAnswerAsTheirDefinitions) {
  unsigned seed = 12345;
  auto next = [&](unsigned m) { return (seed = seed * 1103515245u + 12345u) / 65536u % m; };
  auto plain_fit = [](const std::vector<std::pair<double, double>>& busy, double t0, double dur) {
    double s = t0;
    for (const auto& iv : busy) {
      if (iv.second <= s) continue;
      if (iv.first >= s + dur) break;
      s = iv.second;
    }
    return s;
  };
  for (int round = 0; round < 50; ++round) {
    CopyLane lane;
    std::vector<std::pair<double, double>> added;
    const int copies = round % 2 ? 120 : 40;
    for (int k = 0; k < copies; ++k) {  // most copies queue behind the last one, as on a busy link
      const double dur = 1 + next(20);
      const double start = next(4) == 0 ? next(1000) : lane.earliest_fit(next(1000), dur);
      if (plain_fit(lane.busy(), start, dur) != start) continue;  // keep the intervals disjoint
      lane.add(start, dur);
      added.emplace_back(start, dur);
      if (next(8) == 0) {
        const auto gone = added[next(static_cast<unsigned>(added.size()))];
        ASSERT_TRUE(lane.remove(gone.first, gone.second));
        added.erase(std::find(added.begin(), added.end(), gone));
      }
      for (int q = 0; q < 20; ++q) {
        const double t0 = next(1100), dur_q = next(30);
        ASSERT_EQ(lane.earliest_fit(t0, dur_q), plain_fit(lane.busy(), t0, dur_q)) << "t0 " << t0 << " dur " << dur_q;
      }
    }
    EXPECT_FALSE(lane.remove(-5, 1));
    // The walk, against the op-by-op loop, on a curve with ops over the budget here and there.
    const int n = 60;
    std::vector<double> start(n + 1);
    for (int i = 0; i <= n; ++i) start[static_cast<size_t>(i)] = 17.0 * i;
    std::vector<size_t> mem(n);
    for (auto& m : mem) m = next(10) == 0 ? 200 : 50;
    for (int q = 0; q < 20; ++q) {
      const double dur = 1 + next(40);
      auto end = [&](int p) { return lane.earliest_fit(start[static_cast<size_t>(p) + 1], dur) + dur; };
      const int from = static_cast<int>(next(n)), lo = static_cast<int>(next(n));
      const double deadline = next(1100);
      int p = from;
      while (end(p) > deadline + 1e-3 && p - 1 >= lo && mem[static_cast<size_t>(p)] <= 100) --p;
      ASSERT_EQ(walk_back_trigger(from, lo, end, deadline, mem, 100), p) << "from " << from << " lo " << lo;
    }
  }
}

// The H2D queue in issue order (FifoLane, policy auto's ",fifo"): starts, the delay a new copy
// would add and removals must give what replaying the queue from scratch gives (copies in issue
// order, ties in add order, each starting at its issue or the previous one's end).
TEST(CapuchinPlanner, TheFifoLaneAnswersAsTheQueueReplayed) {
  unsigned seed = 4242;
  auto next = [&](unsigned m) { return (seed = seed * 1103515245u + 12345u) / 65536u % m; };
  struct C { double issue, dur, need; int key; };
  auto replay = [](const std::vector<C>& cs) {  // starts by key, and the stall summed
    std::vector<size_t> order(cs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cs[a].issue < cs[b].issue; });
    std::map<int, double> start;
    double end = -1e300, stall = 0;
    for (size_t i : order) {
      const double s = std::max(cs[i].issue, end);
      end = s + cs[i].dur;
      start[cs[i].key] = s;
      stall += std::max(0.0, end - cs[i].need);
    }
    return std::make_pair(start, stall);
  };
  for (int round = 0; round < 40; ++round) {
    FifoLane lane;
    std::vector<C> added;
    for (int k = 0; k < 60; ++k) {
      const C c{static_cast<double>(next(400)), 1.0 + next(25), static_cast<double>(next(500)), k};
      // Its start and the delay it adds, asked before it is queued.
      std::vector<C> with = added;
      with.push_back(c);
      const auto [before, stall0] = replay(added);
      const auto [after, stall1] = replay(with);
      double own = std::max(0.0, after.at(c.key) + c.dur - c.need);
      ASSERT_EQ(lane.start_if(c.issue), after.at(c.key));
      ASSERT_NEAR(lane.delay(c.issue, c.dur), stall1 - stall0 - own, 1e-6);
      ASSERT_EQ(lane.add(c.issue, c.dur, c.need, c.key), after.at(c.key));
      added.push_back(c);
      if (next(6) == 0) {
        const size_t gone = next(static_cast<unsigned>(added.size()));
        ASSERT_TRUE(lane.remove(added[gone].key));
        added.erase(added.begin() + static_cast<std::ptrdiff_t>(gone));
      }
      const auto [now, stall] = replay(added);
      for (const auto& [key, st] : now) ASSERT_EQ(lane.start_of(key), st) << "key " << key;
      ASSERT_EQ(lane.size(), added.size());
    }
    EXPECT_FALSE(lane.remove(-7));
    EXPECT_EQ(lane.start_of(-7), -1);
  }
}

// A plan made for the H2D queue in issue order (fifo_prefetches) predicts the starts the stream
// gives its prefetches: replayed from the plan alone (each issued at its trigger op's end, after
// its swap-out, which ends by its release op; each copy after the one before), the starts are the
// candidates' prefetch_start_ns. The lane model's plans do not always pass (checked: the replay
// proves something). Prefetches issued at one op are replayed in the plan's action order, the
// order the memory manager issues them in; a fifo plan orders them as the planner queued them
// (order_prefetches_as_queued), which the greedy's action order alone did not at some ops.
TEST(CapuchinPlanner, AFifoPlansPrefetchStartsAreTheStreamsReplayed) {
  unsigned seed = 977;
  auto next = [&](unsigned m) { return (seed = seed * 1103515245u + 12345u) / 65536u % m; };
  // The plan's prefetches replayed on one H2D stream: |predicted - replayed| at the worst, and how many.
  auto replay = [](const CapuchinPlan& p) {
    struct Q { double issue; size_t pos; double dur, predicted; };  // pos: its action's place in the plan
    std::vector<Q> q;
    for (const auto& c : p.candidates) {
      if (c.decision != CapuchinDecision::kSwap) continue;
      size_t pos = 0;
      while (pos < p.plan.actions.size() &&
             !(p.plan.actions[pos].kind == ActionKind::kPrefetch && p.plan.actions[pos].tensor == c.id && p.plan.actions[pos].op == c.trigger_op))
        ++pos;
      EXPECT_LT(pos, p.plan.actions.size()) << "no prefetch action for " << c.id;
      EXPECT_GT(c.trigger_op, c.release_op);  // the swap-out has ended: the issue is the trigger op's end
      q.push_back({p.op_start_ns[static_cast<size_t>(c.trigger_op) + 1], pos, c.swap_ns, c.prefetch_start_ns});
    }
    std::stable_sort(q.begin(), q.end(), [](const Q& a, const Q& b) { return a.issue != b.issue ? a.issue < b.issue : a.pos < b.pos; });
    double end = -1e300, worst = 0;
    for (const Q& x : q) {
      const double start = std::max(x.issue, end);
      end = start + x.dur;
      worst = std::max(worst, std::abs(start - x.predicted));
    }
    return std::make_pair(worst, q.size());
  };
  int swapped = 0, lane_off = 0;
  for (int round = 0; round < 60; ++round) {
    const int ops = 30 + static_cast<int>(next(30));
    TraceBuilder b(ops);
    b.in.swap_ns_per_byte = 0.002 + 0.001 * next(20);
    size_t peak = 0;
    for (int k = 0; k < 14; ++k) {
      const int first = static_cast<int>(next(static_cast<unsigned>(ops / 2)));
      const int last = first + 2 + static_cast<int>(next(static_cast<unsigned>(ops - first - 2)));
      const TensorId t = b.tensor(256 * (1 + next(40)), first, {}, false);
      b.accesses(t, {first, last});
      if (next(3) == 0) b.access(t, first + (last - first) / 2);
      peak += b.in.tensors[static_cast<size_t>(t)].bytes;
    }
    b.in.budget = peak / 2;
    b.in.fifo_prefetches = true;
    const auto [worst, n] = replay(plan_capuchin(b.in, CapuchinMode::kSwap));
    EXPECT_LT(worst, 1e-6) << "round " << round;
    swapped += n >= 2;
    b.in.fifo_prefetches = false;
    lane_off += replay(plan_capuchin(b.in, CapuchinMode::kSwap)).first > 1e-6;
  }
  EXPECT_GT(swapped, 20) << "too few plans queued two prefetches or more";
  EXPECT_GT(lane_off, 0) << "the lane model's starts were the replay's too: the check proves nothing";
}

// The planner's curve keeps its bytes over the budget and its count of ops over it as it
// changes: after any adds, marks, commits and rollbacks (nested), it must answer as the plain
// functions do on a plain vector given the same adds, and a rollback must restore it exactly.
TEST(CapuchinPlanner, TheCurveAnswersAsThePlainCurveThroughTrialsAndRollbacks) {
  unsigned seed = 777;
  auto next = [&](unsigned m) { return (seed = seed * 1103515245u + 12345u) / 65536u % m; };
  const int n = 12;  // short, so that the curve goes under the budget and back over
  const size_t budget = 1000;
  std::vector<size_t> plain(n);
  for (auto& m : plain) m = 600 + next(400);
  MemoryCurve curve(plain, budget);
  struct Trial {
    size_t mark;
    std::vector<size_t> before;
  };
  std::vector<Trial> open;
  int fitted = 0, over = 0;
  for (int step = 0; step < 2000; ++step) {
    const unsigned what = next(10);
    if (what == 0 && open.size() < 4) {
      open.push_back({curve.mark(), plain});
    } else if (what == 1 && !open.empty()) {
      curve.rollback(open.back().mark);
      plain = open.back().before;
      open.pop_back();
    } else if (what == 2 && !open.empty()) {
      curve.commit(open.back().mark);
      open.pop_back();
    } else {
      const int first = static_cast<int>(next(n + 4)) - 2, last = first + static_cast<int>(next(6));
      long long delta = static_cast<long long>(next(300)) - (curve.fits() ? 100 : 200);  // to the budget and over
      for (int i = std::max(first, 0); i <= last && i < n; ++i)  // never below zero
        delta = std::max(delta, -static_cast<long long>(plain[static_cast<size_t>(i)]));
      curve.add(first, last, delta);
      curve_add(plain, first, last, delta);
    }
    ASSERT_EQ(curve.values(), plain) << "step " << step;
    ASSERT_EQ(static_cast<double>(curve.excess()), curve_excess(plain, budget)) << "step " << step;
    ASSERT_EQ(curve.fits(), curve_peak(plain) <= budget) << "step " << step;
    (curve.fits() ? fitted : over) += 1;
    ASSERT_EQ(curve.peak(), curve_peak(plain));
    const int a = static_cast<int>(next(n)), b = a + static_cast<int>(next(8));
    ASSERT_EQ(curve.over(a, b), curve_over(plain, budget, a, b));
  }
  EXPECT_GT(fitted, 100);
  EXPECT_GT(over, 100);
}

TEST(CapuchinPlanner, RecomputeRanksByMspsAndUpdatesAfterEachChoice) {
  // a = data (op 0); b = f(a) (op 1); c = g(b) (op 2, 5 ns); c is read again at op 8, a and b at op 9.
  TraceBuilder t(10, {0, 10, 20, 25, 35, 45, 55, 65, 75, 85});
  const TensorId a = t.tensor(100, 0, {}, true);
  const TensorId b = t.tensor(400, 1, {a}, true);
  const TensorId c = t.tensor(100, 2, {b}, true);
  t.accesses(a, {0, 1, 9});
  t.accesses(b, {1, 2, 9});
  t.accesses(c, {2, 8});
  const TensorId big = t.tensor(1000, 3, {}, false);
  t.live(big, 3, 7);
  t.in.budget = 1000;
  const CapuchinPlan p = plan_capuchin(t.in, CapuchinMode::kRecompute);
  const auto &ca = candidate(p, a), &cb = candidate(p, b), &cc = candidate(p, c);
  ASSERT_EQ(ca.decision, CapuchinDecision::kRecompute);
  ASSERT_EQ(cb.decision, CapuchinDecision::kRecompute);
  ASSERT_EQ(cc.decision, CapuchinDecision::kRecompute);
  // Before any choice: b 400/10, c 100/5, a 100/10. Dropping b puts b's recomputation in c's
  // chain (100/15), so a goes before c; dropping a then lengthens c's chain again.
  EXPECT_EQ(cb.order, 0);
  EXPECT_EQ(ca.order, 1);
  EXPECT_EQ(cc.order, 2);
  EXPECT_DOUBLE_EQ(cb.recompute_ns, 10);
  EXPECT_DOUBLE_EQ(cb.msps, 400 / 10e-9);
  EXPECT_DOUBLE_EQ(ca.recompute_ns, 10);
  EXPECT_DOUBLE_EQ(cc.recompute_ns, 5 + 10 + 10);  // c, then b, then a: the chain reaches the data op
  EXPECT_DOUBLE_EQ(cc.msps, 100 / 25e-9);
  EXPECT_TRUE(p.fits);
  for (const Action& act : p.plan.actions) EXPECT_EQ(act.kind, ActionKind::kDrop);
}

TEST(CapuchinPlanner, RecomputeNeedsALiveSource) {
  // b = f(x) where x is not recomputable and released before b is needed again: b cannot be dropped.
  TraceBuilder t(10);
  const TensorId x = t.tensor(100, 0, {}, false);
  const TensorId b = t.tensor(400, 1, {x}, true);
  t.accesses(x, {0, 1});
  t.accesses(b, {1, 9});
  const TensorId big = t.tensor(1000, 3, {}, false);
  t.live(big, 3, 7);
  t.in.budget = 1000;
  const CapuchinPlan p = plan_capuchin(t.in, CapuchinMode::kRecompute);
  EXPECT_EQ(candidate(p, b).decision, CapuchinDecision::kKeep);
  EXPECT_FALSE(p.fits);
  EXPECT_TRUE(p.plan.actions.empty());
}

// A trace where the hybrid swaps p_ (long gap: its copy, 10 ns, hides) and recomputes q (short
// gap, slow copy, 40 ns; 10 ns to recompute) to fit `big` at op 6.
struct HybridTrace {
  TraceBuilder t{14};
  TensorId w, p_, q, big;
  HybridTrace() {
    t.in.swap_ns_per_byte = 0.1;
    w = t.tensor(8, -1, {}, false, true);
    p_ = t.tensor(100, 0, {}, true);
    q = t.tensor(400, 1, {w}, true);
    t.accesses(w, {1});
    t.accesses(p_, {0, 13});
    t.accesses(q, {1, 7});
    big = t.tensor(1000, 2, {}, false);
    t.live(big, 6, 6);
    t.in.budget = 1008;
  }
};

TEST(CapuchinPlanner, HybridTakesTheCheaperPerTensor) {
  HybridTrace ht;
  TraceBuilder& t = ht.t;
  const TensorId p_ = ht.p_, q = ht.q;
  const CapuchinPlan h = plan_capuchin(t.in, CapuchinMode::kHybrid);
  EXPECT_EQ(candidate(h, p_).decision, CapuchinDecision::kSwap);
  EXPECT_DOUBLE_EQ(candidate(h, p_).swap_stall_ns, 0);
  EXPECT_EQ(candidate(h, q).decision, CapuchinDecision::kRecompute);
  EXPECT_GT(candidate(h, q).swap_stall_ns, candidate(h, q).recompute_ns);
  EXPECT_TRUE(h.fits);
  // The same trace under swap only: q is swapped too, at the price of a stall.
  // q's copy out (20..60) ends in op 5: freed after it, prefetched after op 6 (70..110): 40 ns late.
  const CapuchinPlan s = plan_capuchin(t.in, CapuchinMode::kSwap);
  EXPECT_EQ(candidate(s, q).decision, CapuchinDecision::kSwap);
  EXPECT_EQ(candidate(s, q).release_op, 5);
  EXPECT_EQ(candidate(s, q).trigger_op, 6);
  EXPECT_DOUBLE_EQ(candidate(s, q).swap_stall_ns, 40);
  EXPECT_TRUE(s.fits);
}

// PlanPin (policy auto's per-gap search): a pinned decision is taken before the greedy, which
// plans the rest around it.
TEST(CapuchinPlanner, PinnedDecisionsComeFirstAndTheGreedyPlansAroundThem) {
  HybridTrace ht;
  TraceBuilder& t = ht.t;
  const TensorId p_ = ht.p_, q = ht.q;
  const CapuchinPlan free = plan_capuchin(t.in, CapuchinMode::kHybrid);
  ASSERT_EQ(candidate(free, q).decision, CapuchinDecision::kRecompute);
  ASSERT_EQ(candidate(free, p_).decision, CapuchinDecision::kSwap);

  // q swapped although its copy stalls; p_ still as the greedy chose.
  t.in.pins = {{q, 7, CapuchinDecision::kSwap}};
  const CapuchinPlan s = plan_capuchin(t.in, CapuchinMode::kHybrid);
  EXPECT_EQ(candidate(s, q).decision, CapuchinDecision::kSwap);
  EXPECT_TRUE(candidate(s, q).pinned);
  EXPECT_GT(candidate(s, q).swap_stall_ns, 0);
  EXPECT_EQ(candidate(s, p_).decision, CapuchinDecision::kSwap);
  EXPECT_FALSE(candidate(s, p_).pinned);
  EXPECT_TRUE(s.fits);
  // Its prefetch two ops earlier than the planner's in-trigger (never before the release).
  t.in.pins = {{q, 7, CapuchinDecision::kSwap, 2}};
  const CapuchinPlan s2 = plan_capuchin(t.in, CapuchinMode::kHybrid);
  EXPECT_EQ(candidate(s2, q).trigger_op, std::max(candidate(s, q).release_op + 1, candidate(s, q).trigger_op - 2));
  // Its prefetch no later than an absolute op (the LP's timed pins): earlier than the planner's
  // moves it, later leaves the planner's, before the release is clamped to it.
  for (const int at : {candidate(s, q).trigger_op - 1, candidate(s, q).trigger_op + 1, 0}) {
    SCOPED_TRACE(at);
    PlanPin timed{q, 7, CapuchinDecision::kSwap};
    timed.trigger_op = at;
    t.in.pins = {timed};
    const CapuchinPlan st = plan_capuchin(t.in, CapuchinMode::kHybrid);
    EXPECT_EQ(candidate(st, q).trigger_op, std::max(candidate(s, q).release_op + 1, std::min(candidate(s, q).trigger_op, at)));
    // A shift (the search's "prefetch earlier") counts from the earlier of the two.
    timed.trigger_shift = 1;
    t.in.pins = {timed};
    const CapuchinPlan sh = plan_capuchin(t.in, CapuchinMode::kHybrid);
    EXPECT_EQ(candidate(sh, q).trigger_op, std::max(candidate(s, q).release_op + 1, std::min(candidate(s, q).trigger_op, at) - 1));
  }

  // p_ kept: the greedy may not swap it, so the plan no longer fits (nothing else frees op 6).
  t.in.pins = {{p_, 13, CapuchinDecision::kKeep}};
  const CapuchinPlan k = plan_capuchin(t.in, CapuchinMode::kHybrid);
  EXPECT_EQ(candidate(k, p_).decision, CapuchinDecision::kKeep);
  EXPECT_EQ(candidate(k, q).decision, CapuchinDecision::kRecompute);
  for (const Action& a : k.plan.actions) EXPECT_NE(a.tensor, p_);
  EXPECT_FALSE(k.fits);

  // q recomputed ahead of its access, after op 5: a kRecompute action, and the curve holds q from op 6.
  t.in.pins = {{q, 7, CapuchinDecision::kRecompute, 0, 5}};
  const CapuchinPlan r = plan_capuchin(t.in, CapuchinMode::kHybrid);
  EXPECT_EQ(candidate(r, q).decision, CapuchinDecision::kRecompute);
  EXPECT_EQ(candidate(r, q).ahead_op, 5);
  EXPECT_EQ(r.plan.at(5), (std::vector<Action>{{ActionKind::kRecompute, q, 5}}));
  EXPECT_EQ(r.memory_after[6], free.memory_after[6] + 400);
  EXPECT_EQ(r.memory_after[4], free.memory_after[4]);

  // A pin that frees nothing over the budget is not taken: the greedy decides that gap.
  t.in.budget = 100000;
  t.in.pins = {{q, 7, CapuchinDecision::kSwap}};
  const CapuchinPlan none = plan_capuchin(t.in, CapuchinMode::kHybrid);
  EXPECT_TRUE(none.plan.actions.empty());
}

// A pinned compression: compressed after the gap opens, freed at the op the compression ends in,
// decompressed early enough to hide, its buffer counted over the gap only (per use).
TEST(CapuchinPlanner, APinnedCompressionHoldsItsBufferOverTheGap) {
  TraceBuilder t(10);
  const TensorId a = t.tensor(1000, 0, {}, true);
  t.accesses(a, {0, 9});
  const TensorId big = t.tensor(1000, 3, {}, false);
  t.live(big, 3, 6);
  t.in.budget = 1800;
  PlanPin pin{a, 9, CapuchinDecision::kCompress};
  pin.codec = Codec::kBitmask, pin.capacity = 300, pin.codec_ns = 1;
  t.in.pins = {pin};
  const CapuchinPlan p = plan_capuchin(t.in, CapuchinMode::kHybrid);
  const auto& c = candidate(p, a);
  ASSERT_EQ(c.decision, CapuchinDecision::kCompress);
  EXPECT_TRUE(c.pinned);
  EXPECT_EQ(c.release_op, 1);  // the compression (10..11) ends in op 1
  EXPECT_EQ(c.trigger_op, 7);  // a decompression after op 8 (90..91) would be 1 ns late
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.memory_after[1], 1300u);  // a and its buffer
  EXPECT_EQ(p.memory_after[4], 1300u);  // big and the buffer
  EXPECT_EQ(p.memory_after[8], 1300u);  // a back, the buffer until the access
  EXPECT_EQ(p.memory_after[9], 1000u);
  Action want{ActionKind::kCompress, a, 0, 1};
  want.codec = Codec::kBitmask, want.capacity = 300, want.per_use_buffer = true;
  EXPECT_EQ(p.plan.at(0), std::vector<Action>{want});
  EXPECT_EQ(p.plan.at(7), (std::vector<Action>{{ActionKind::kPrefetch, a, 7}}));
}

TEST(CapuchinPlanner, EachGapIsACandidateOfItsOwn) {
  TraceBuilder t(12);
  t.in.swap_ns_per_byte = 0.01;  // 1 ns per copy
  const TensorId a = t.tensor(100, 0, {}, true);
  t.accesses(a, {0, 5, 11});
  const TensorId f1 = t.tensor(1000, 1, {}, false);
  t.live(f1, 2, 3);
  const TensorId f2 = t.tensor(1000, 6, {}, false);
  t.live(f2, 7, 9);
  t.in.budget = 1000;
  const CapuchinPlan p = plan_capuchin(t.in, CapuchinMode::kSwap);
  std::vector<std::pair<int, int>> gaps;
  for (const auto& c : p.candidates)
    if (c.id == a) {
      EXPECT_EQ(c.decision, CapuchinDecision::kSwap);
      gaps.emplace_back(c.evict_op, c.back_op);
    }
  const std::vector<std::pair<int, int>> want = {{0, 5}, {5, 11}};
  EXPECT_EQ(gaps, want);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.plan.actions.size(), 4u) << p.plan.str();
}

TEST(CapuchinPlanner, NothingToDoWhenThePeakFits) {
  TraceBuilder t(10);
  const TensorId a = t.tensor(100, 0, {}, true);
  t.accesses(a, {0, 9});
  t.in.budget = 1000;
  const CapuchinPlan p = plan_capuchin(t.in, CapuchinMode::kHybrid);
  EXPECT_TRUE(p.fits);
  EXPECT_TRUE(p.candidates.empty());
  EXPECT_TRUE(p.plan.actions.empty());
}

}  // namespace

namespace {

// The measured iteration stalled 200 ns in op 1 and in op 7 (passive swaps): access times say
// there is room to hide a 100 ns copy both ways; the kernel times (10 ns per op) say there is not.
TEST(CapuchinPlanner, MeasuredKernelTimesNotStallsMakeTheFreeTime) {
  std::vector<double> start = {0, 10, 210, 220, 230, 240, 250, 260, 460, 470};
  TraceBuilder b(10, start);
  b.in.swap_ns_per_byte = 1;  // 100 bytes: 100 ns
  const TensorId a = b.tensor(100, 0, {}, false);
  b.accesses(a, {0, 9});
  const TensorId big = b.tensor(1000, 0, {}, true);
  b.live(big, 3, 5);
  b.in.budget = 1050;
  const CapuchinPlan from_accesses = plan_capuchin(b.in, CapuchinMode::kSwap);
  EXPECT_DOUBLE_EQ(candidate(from_accesses, a).free_time_ns, (470 - 100) - 210);  // freed after op 1
  EXPECT_EQ(candidate(from_accesses, a).decision, CapuchinDecision::kSwap);
  EXPECT_DOUBLE_EQ(candidate(from_accesses, a).swap_stall_ns, 0);
  b.in.op_ns.assign(10, 10.0);
  const CapuchinPlan from_kernels = plan_capuchin(b.in, CapuchinMode::kSwap);
  EXPECT_DOUBLE_EQ(candidate(from_kernels, a).free_time_ns, (90 - 100) - 100);  // never freed
  EXPECT_EQ(candidate(from_kernels, a).decision, CapuchinDecision::kKeep) << "the copy outlasts 100 ns of kernels";
}

// A replayed program may hold a tensor past its last access (DTR logs release names late): the
// predicted memory curve keeps it until then.
TEST(CapuchinPlanner, ATensorCountsUntilItsRelease) {
  TraceBuilder b(10);
  const TensorId a = b.tensor(100, 0, {}, true);
  b.accesses(a, {1, 2});
  b.in.budget = 1 << 20;
  EXPECT_EQ(plan_capuchin(b.in, CapuchinMode::kHybrid).memory_before[6], 0u);
  b.in.tensors[static_cast<size_t>(a)].release_after = 7;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kHybrid);
  EXPECT_EQ(p.memory_before[7], 100u);
  EXPECT_EQ(p.memory_before[8], 0u);
}

}  // namespace

TEST(CapuchinPlanner, ALongCopyIsFreedAfterTheOpItEndsIn) {
  // a's 25 ns copy out after op 0 (10..35) ends in op 3, not by op 2 (the memory manager's
  // default release): the plan frees it after op 3 and the curve holds it there, so op 3 stays
  // over the budget and ops 4-5 fit.
  TraceBuilder b(10);
  b.in.swap_ns_per_byte = 0.25;
  const TensorId a = b.tensor(100, 0, {}, true);
  b.accesses(a, {0, 9});
  const TensorId big = b.tensor(1000, 3, {}, false);
  b.live(big, 3, 5);
  b.in.budget = 1050;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kSwap);
  const auto& c = candidate(p, a);
  ASSERT_EQ(c.decision, CapuchinDecision::kSwap);
  EXPECT_EQ(c.release_op, 3);
  EXPECT_GT(c.release_op, c.evict_op + 2);
  EXPECT_GE(c.trigger_op, c.release_op + 1);
  ASSERT_FALSE(p.plan.actions.empty());
  EXPECT_EQ(p.plan.actions[0].kind, ActionKind::kSwapOut);
  EXPECT_EQ(p.plan.actions[0].free_after, 3);
  EXPECT_EQ(p.memory_after[2], 100u);
  EXPECT_EQ(p.memory_after[3], 1100u) << "still on the device: its copy is running";
  EXPECT_EQ(p.memory_after[4], 1000u);
  EXPECT_FALSE(p.fits);
  // Over the budget at op 3 only: a swap freed after op 3 relieves nothing and is not taken
  // (freed after op 2 it would have been).
  b.in.accesses.erase(std::remove_if(b.in.accesses.begin(), b.in.accesses.end(),
                                     [&](const TensorAccess& x) { return x.id == big && x.op_index > 3; }),
                      b.in.accesses.end());
  const CapuchinPlan q = plan_capuchin(b.in, CapuchinMode::kSwap);
  EXPECT_EQ(candidate(q, a).decision, CapuchinDecision::kKeep);
  EXPECT_TRUE(q.plan.actions.empty()) << q.plan.str();
}

TEST(CapuchinPlanner, ARecomputationHoldsTheInputsItBringsBack) {
  // y = f(x); both dropped over the peak (ops 2-4). Recomputing y at op 6 recomputes x, which
  // then stays on the device until its own back-access at op 8: the curve holds it at ops 6-7.
  TraceBuilder b(10);
  const TensorId x = b.tensor(100, 0, {}, true);
  const TensorId y = b.tensor(100, 1, {x}, true);
  b.accesses(x, {0, 1, 8});
  b.accesses(y, {1, 6});
  const TensorId big = b.tensor(1000, 2, {}, false);
  b.live(big, 2, 4);
  b.in.budget = 1000;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kRecompute);
  ASSERT_EQ(candidate(p, x).decision, CapuchinDecision::kRecompute);
  ASSERT_EQ(candidate(p, y).decision, CapuchinDecision::kRecompute);
  EXPECT_EQ(p.memory_after[5], 0u);
  EXPECT_EQ(p.memory_after[6], 200u) << "y and x, recomputed for it";
  EXPECT_EQ(p.memory_after[7], 100u) << "x, held until op 8";
  EXPECT_TRUE(p.fits);
}

TEST(CapuchinPlanner, ADropThatRaisesTheExcessIsUndone) {
  // x is dropped first (gap 1..8). Dropping y too would free it at op 2 only, and recomputing it
  // at op 3 would bring x back for ops 3-7, all over the budget: more bytes over than before.
  TraceBuilder b(10);
  const TensorId x = b.tensor(100, 0, {}, true);
  const TensorId y = b.tensor(100, 1, {x}, true);
  b.accesses(x, {0, 1, 8});
  b.accesses(y, {1, 3});
  const TensorId big = b.tensor(1000, 2, {}, false);
  b.live(big, 2, 6);
  b.in.budget = 1050;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kRecompute);
  EXPECT_EQ(candidate(p, x).decision, CapuchinDecision::kRecompute);
  EXPECT_EQ(candidate(p, y).decision, CapuchinDecision::kKeep);
  EXPECT_EQ(p.memory_after[3], 1100u);
  EXPECT_FALSE(p.fits);
}

// x (100 B, not recomputable) is used at ops 0, 1 and 18; y = f(x) at op 1 and again at
// y_back; 1000 B more over ops 4-8 put both over a 1000 B budget there. Copies take 10 ns.
struct SourceTrace {
  TraceBuilder b{20};
  TensorId x, y;
  explicit SourceTrace(int y_back) {
    b.in.swap_ns_per_byte = 0.1;
    x = b.tensor(100, 0, {}, false);
    y = b.tensor(100, 1, {x}, true);
    b.accesses(x, {0, 1, 18});
    b.accesses(y, {1, y_back});
    b.live(b.tensor(1000, 4, {}, false), 4, 8);
    b.in.budget = 1000;
  }
};

// x is swapped over ops 2-17 and y = f(x) recomputed at op 12: the chain
// reads x there, so x's prefetch is timed for op 12 rather than for its own access at op 18
// (its 10 ns copy issued after op 10), and y's recomputation costs its kernel alone. Both
// orders: the swap pinned first (its prefetch moved earlier for the recomputation), or the
// recomputation first (the swap's in-trigger walked back from op 12).
TEST(CapuchinPlanner, ASwapARecomputationReadsIsPrefetchedForIt) {
  SourceTrace t(12);
  TraceBuilder& b = t.b;
  const TensorId x = t.x, y = t.y;
  const PlanPin swap_x{x, 18, CapuchinDecision::kSwap}, drop_y{y, 12, CapuchinDecision::kRecompute};
  for (const auto& pins : {std::vector<PlanPin>{swap_x, drop_y}, std::vector<PlanPin>{drop_y, swap_x}}) {
    SCOPED_TRACE(pins.front().id == x ? "swap first" : "recompute first");
    b.in.pins = pins;
    const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kHybrid);
    ASSERT_EQ(candidate(p, x).decision, CapuchinDecision::kSwap);
    ASSERT_EQ(candidate(p, y).decision, CapuchinDecision::kRecompute);
    EXPECT_EQ(candidate(p, x).trigger_op, 10);
    EXPECT_DOUBLE_EQ(candidate(p, y).recompute_ns, 10);
    EXPECT_EQ(p.memory_after[10], 0u);
    EXPECT_EQ(p.memory_after[11], 100u) << "x is back for the recomputation";
    EXPECT_TRUE(p.fits);
    int prefetches = 0;
    for (const Action& a : p.plan.actions)
      if (a.kind == ActionKind::kPrefetch && a.tensor == x) {
        ++prefetches;
        EXPECT_EQ(a.op, 10);
      }
    EXPECT_EQ(prefetches, 1);
  }
}

// A recomputation at op 17 reads x, whose prefetch (issued after op 16, 170..180 ns) is still
// copying at op 17's start (170 ns): the chain waits for it, 10 ns on top of y's kernel. The
// prefetch cannot move earlier for it: with x back, op 16 would be over the budget.
TEST(CapuchinPlanner, ARecomputationWaitsForASourceStillCopyingBack) {
  SourceTrace t(17);
  TraceBuilder& b = t.b;
  const TensorId x = t.x, y = t.y;
  b.live(b.tensor(950, 15, {}, false), 15, 16);
  b.in.pins = {{x, 18, CapuchinDecision::kSwap}, {y, 17, CapuchinDecision::kRecompute}};
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kHybrid);
  ASSERT_EQ(candidate(p, x).decision, CapuchinDecision::kSwap);
  ASSERT_EQ(candidate(p, y).decision, CapuchinDecision::kRecompute);
  EXPECT_EQ(candidate(p, x).trigger_op, 16);
  EXPECT_DOUBLE_EQ(candidate(p, y).recompute_ns, 20);
  EXPECT_TRUE(p.fits);
}

TEST(CapuchinPlanner, ARecomputationNeverReadsATensorWhileItsSwapOutRuns) {
  // x (not recomputable) is swapped after op 1; its 40 ns copy runs 20..60, so it is freed after
  // op 5. y = f(x) is needed again at op 4: recomputing it there would read x mid-copy (the
  // memory manager would wait for the copy and cancel the swap), so y is not dropped.
  TraceBuilder b(12);
  b.in.swap_ns_per_byte = 0.1;
  const TensorId x = b.tensor(400, 0, {}, false);
  const TensorId y = b.tensor(100, 1, {x}, true);
  b.accesses(x, {0, 1, 11});
  b.accesses(y, {1, 4});
  const TensorId big1 = b.tensor(1000, 2, {}, false), big2 = b.tensor(1000, 7, {}, false);
  b.live(big1, 2, 3);
  b.live(big2, 7, 9);
  b.in.budget = 1350;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kHybrid);
  ASSERT_EQ(candidate(p, x).decision, CapuchinDecision::kSwap);
  EXPECT_EQ(candidate(p, x).release_op, 5);
  EXPECT_NE(candidate(p, y).decision, CapuchinDecision::kRecompute);
  EXPECT_LE(p.memory_after[8], 1350u) << "x is away over ops 6-9";
  EXPECT_FALSE(p.fits) << "ops 2-3 keep x and y";
  // Recompute only (no swap of x): y is dropped, its chain reads x on the device.
  EXPECT_EQ(candidate(plan_capuchin(b.in, CapuchinMode::kRecompute), y).decision, CapuchinDecision::kRecompute);
}

TEST(CapuchinPlanner, WorkspaceCountsInTheCurve) {
  // Tensors alone peak at 1100 (ops 4..6) under a 1150 budget: nothing to plan. Op 5's 100-byte
  // workspace puts it at 1200: the same trace now has a peak window and a candidate.
  TraceBuilder b(10);
  b.in.swap_ns_per_byte = 0.15;
  const TensorId a = b.tensor(100, 0, {}, true);
  b.accesses(a, {1, 9});
  const TensorId big = b.tensor(1000, 0, {}, true);
  b.live(big, 4, 6);
  b.in.budget = 1150;
  const CapuchinPlan without = plan_capuchin(b.in, CapuchinMode::kSwap);
  EXPECT_EQ(without.peak_before, 1100u);
  EXPECT_TRUE(without.fits);
  EXPECT_EQ(without.peak_window_first, -1);
  EXPECT_FALSE(has_candidate(without, a));

  b.in.workspace_bytes.assign(10, 0);
  b.in.workspace_bytes[5] = 100;
  const CapuchinPlan with = plan_capuchin(b.in, CapuchinMode::kSwap);
  EXPECT_EQ(with.peak_before, 1200u);
  EXPECT_EQ(with.memory_before[5], 1200u);
  EXPECT_EQ(with.memory_before[4], 1100u) << "a workspace lives during its op only";
  EXPECT_EQ(with.peak_window_first, 5);
  EXPECT_EQ(with.peak_window_last, 5);
  ASSERT_TRUE(has_candidate(with, a));
  EXPECT_EQ(candidate(with, a).decision, CapuchinDecision::kSwap);
  EXPECT_TRUE(with.fits);
  EXPECT_EQ(with.peak_after, 1100u);

  b.in.workspace_bytes.assign(3, 100);  // not one per op: ignored
  EXPECT_EQ(plan_capuchin(b.in, CapuchinMode::kSwap).peak_before, 1100u);
}

// Persistent tensors swapped across the iteration boundary (PlannerInput::wrap_persistent):
// 6 ops of 10 ns, 0.1 ns per byte; A (100 B) lives over ops 0-2, P (persistent, 100 B) is used at
// op `use` only, like momentum in the optimizer step; budget 150 B, so ops 0-2 are over.
CapuchinPlan wrap_plan(int use, bool wrap, std::vector<PlanPin> pins = {}) {
  TraceBuilder tb(6);
  tb.in.op_ns.assign(6, 10.0);
  tb.in.swap_ns_per_byte = 0.1;
  tb.in.budget = 150;
  tb.in.wrap_persistent = wrap;
  tb.in.pins = std::move(pins);
  const TensorId a = tb.tensor(100, 0, {}, false);
  tb.accesses(a, {0, 2});
  const TensorId pt = tb.tensor(100, -1, {}, false, true);
  tb.access(pt, use);
  return plan_capuchin(tb.in, CapuchinMode::kSwap);
}

TEST(CapuchinPlanner, WrapSwapsTakePersistentTensorsAcrossTheIterationBoundary) {
  // Used at op 4: out after it (10 ns, ends with op 5: freed there), back by a prefetch after op 2
  // (the latest that ends by op 4's start, 40 ns) : off over ops 0-2, and the plan fits.
  const CapuchinPlan p = wrap_plan(4, true);
  ASSERT_EQ(p.wrap_swaps.size(), 1u);
  const WrapSwap& w = p.wrap_swaps[0];
  EXPECT_EQ(w.evict_op, 4);
  EXPECT_EQ(w.release_op, 5);
  EXPECT_EQ(w.trigger_op, 2);
  EXPECT_EQ(w.back_op, 4);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.memory_after, (std::vector<size_t>{100, 100, 100, 100, 100, 100}));
  const std::vector<Action> expect{{ActionKind::kSwapOut, w.id, 4, 5}, {ActionKind::kPrefetch, w.id, 2}};
  for (const Action& x : expect) EXPECT_NE(std::find(p.plan.actions.begin(), p.plan.actions.end(), x), p.plan.actions.end());
  // Used at the last op: the copy out ends 10 ns into the next iteration, so the block is freed
  // after its op 0 (release 6 = 6 ops + 0) and it is off over ops 1-3; op 0 is left to the rest.
  const CapuchinPlan q = wrap_plan(5, true);
  ASSERT_EQ(q.wrap_swaps.size(), 1u);
  EXPECT_EQ(q.wrap_swaps[0].release_op, 6);
  EXPECT_EQ(q.wrap_swaps[0].trigger_op, 3);
  EXPECT_EQ(q.memory_after, (std::vector<size_t>{200, 100, 100, 0, 100, 100}));
  // Off by default (Capuchin's own planning stays within one iteration).
  EXPECT_TRUE(wrap_plan(4, false).wrap_swaps.empty());
}

// A pin on a persistent tensor's gap over the iteration's end (id, its first use): policy auto's
// search swaps it so where the plan kept it, keeps it where the plan swapped it, or prefetches it
// earlier. P is tensor 2 (after the trace's clock and A), used at op 4 (wrap_plan).
TEST(CapuchinPlanner, WrapSwapsFollowTheSearchsPins) {
  // Pinned without wrap_persistent: swapped as the greedy would (prefetch after op 2).
  const CapuchinPlan pinned = wrap_plan(4, false, {{2, 4, CapuchinDecision::kSwap}});
  ASSERT_EQ(pinned.wrap_swaps.size(), 1u);
  EXPECT_EQ(pinned.wrap_swaps[0].trigger_op, 2);
  EXPECT_TRUE(pinned.fits);
  // A pin on another op is not its gap: nothing swapped.
  EXPECT_TRUE(wrap_plan(4, false, {{2, 3, CapuchinDecision::kSwap}}).wrap_swaps.empty());
  // Kept: not swapped, and A alone cannot leave (its gap is one op), so the plan does not fit.
  const CapuchinPlan kept = wrap_plan(4, true, {{2, 4, CapuchinDecision::kKeep}});
  EXPECT_TRUE(kept.wrap_swaps.empty());
  EXPECT_FALSE(kept.fits);
  // Prefetched one op earlier: back over op 2, which is over the budget again.
  const CapuchinPlan early = wrap_plan(4, true, {{2, 4, CapuchinDecision::kSwap, 1}});
  ASSERT_EQ(early.wrap_swaps.size(), 1u);
  EXPECT_EQ(early.wrap_swaps[0].trigger_op, 1);
  EXPECT_EQ(early.memory_after, (std::vector<size_t>{100, 100, 200, 100, 100, 100}));
  EXPECT_FALSE(early.fits);
  // Eight ops earlier stops at the iteration's first op.
  EXPECT_EQ(wrap_plan(4, true, {{2, 4, CapuchinDecision::kSwap, 8}}).wrap_swaps.at(0).trigger_op, 0);
}

// PlannerInput::min_wrap_bytes: the greedy leaves a persistent tensor under it on the device
// (P is 100 B: a floor of 101 B keeps it, and the plan no longer fits; 100 B swaps it as before),
// while a pin still swaps it.
TEST(CapuchinPlanner, WrapSwapsLeaveTensorsUnderTheFloorUnlessPinned) {
  auto plan = [](size_t floor, std::vector<PlanPin> pins) {
    TraceBuilder tb(6);
    tb.in.op_ns.assign(6, 10.0);
    tb.in.swap_ns_per_byte = 0.1;
    tb.in.budget = 150;
    tb.in.wrap_persistent = true;
    tb.in.min_wrap_bytes = floor;
    tb.in.pins = std::move(pins);
    const TensorId a = tb.tensor(100, 0, {}, false);
    tb.accesses(a, {0, 2});
    const TensorId pt = tb.tensor(100, -1, {}, false, true);
    tb.access(pt, 4);
    return plan_capuchin(tb.in, CapuchinMode::kSwap);
  };
  const CapuchinPlan at = plan(100, {});
  ASSERT_EQ(at.wrap_swaps.size(), 1u);
  EXPECT_EQ(at.wrap_swaps[0].trigger_op, 2);
  EXPECT_TRUE(at.fits);
  const CapuchinPlan over = plan(101, {});
  EXPECT_TRUE(over.wrap_swaps.empty());
  EXPECT_FALSE(over.fits);
  const CapuchinPlan pinned = plan(101, {{2, 4, CapuchinDecision::kSwap}});
  ASSERT_EQ(pinned.wrap_swaps.size(), 1u);
  EXPECT_EQ(pinned.wrap_swaps[0].trigger_op, 2);
  EXPECT_TRUE(pinned.fits);
}
