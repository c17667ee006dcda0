// The Capuchin planner on hand-built access traces, no device: free time, in-trigger placement
// (walk back, one copy at a time per direction, not into the peak window), MSPS ranking and its
// update after each choice, and the hybrid's per-tensor choice.
#include <gtest/gtest.h>

#include "vtensor/policy/capuchin.h"

using namespace vtensor;

namespace {

// A trace builder: ops 0..n-1 start 10 ns apart unless told otherwise; a zero-byte clock tensor
// is read at every op so each op has a start time.
struct TraceBuilder {
  PlannerInput in;
  std::vector<double> start;
  explicit TraceBuilder(int ops, std::vector<double> starts = {}) {
    in.num_ops = ops;
    start = starts;
    if (start.empty())
      for (int i = 0; i < ops; ++i) start.push_back(10.0 * i);
    const TensorId clock = tensor(0, -1, {}, false);
    for (int i = 0; i < ops; ++i) access(clock, i);
  }
  TensorId tensor(size_t bytes, int producer, std::vector<TensorId> inputs, bool recomputable, bool persistent = false) {
    PlannerTensor t;
    t.bytes = bytes;
    t.producer = producer;
    t.inputs = std::move(inputs);
    t.recomputable = recomputable;
    t.persistent = persistent;
    in.tensors.push_back(t);
    return static_cast<TensorId>(in.tensors.size() - 1);
  }
  void access(TensorId id, int op) {
    in.accesses.push_back({id, op, AccessKind::kRead, static_cast<int64_t>(start[static_cast<size_t>(op)])});
  }
  void accesses(TensorId id, std::initializer_list<int> ops) {
    for (int op : ops) access(id, op);
  }
  void live(TensorId id, int first, int last) {
    for (int op = first; op <= last; ++op) access(id, op);
  }
};

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

TEST(CapuchinPlanner, FreeTimeIsBackMinusSwapMinusEvictEndPlusSwap) {
  const std::vector<double> start = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90};
  // Out after op 1 (starts at op 2's start, 20), back at op 8 (80): (80 - 5) - (20 + 5).
  EXPECT_DOUBLE_EQ(capuchin_free_time(start, 1, 8, 5), 50);
  EXPECT_DOUBLE_EQ(capuchin_free_time(start, 1, 8, 40), -20);  // the copy cannot hide

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
  EXPECT_DOUBLE_EQ(candidate(p, a).free_time_ns, (90 - 25) - (20 + 25));
  EXPECT_EQ(p.peak_before, 1100u);
}

TEST(CapuchinPlanner, TriggerWalksBackUntilTheCopyIsHidden) {
  TraceBuilder b(10);
  b.in.swap_ns_per_byte = 0.25;
  const TensorId a = b.tensor(100, 0, {}, true);
  b.accesses(a, {1, 9});
  const TensorId big = b.tensor(1000, 0, {}, true);
  b.live(big, 3, 5);
  b.in.budget = 1050;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kSwap);
  const auto& c = candidate(p, a);
  ASSERT_EQ(c.decision, CapuchinDecision::kSwap);
  // A prefetch after op 5 starts at 60 and ends at 85 <= 90; after op 6 it would end at 95.
  EXPECT_EQ(c.trigger_op, 5);
  EXPECT_DOUBLE_EQ(c.swap_stall_ns, 0);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.peak_after, 1000u);
  const std::vector<Action> want = {{ActionKind::kSwapOut, a, 1}, {ActionKind::kPrefetch, a, 5}};
  EXPECT_EQ(p.plan.actions, want) << p.plan.str();
}

TEST(CapuchinPlanner, TriggerNeverEntersThePeakWindow) {
  TraceBuilder b(10);
  b.in.swap_ns_per_byte = 0.25;
  const TensorId a = b.tensor(100, 0, {}, true);
  b.accesses(a, {1, 9});
  const TensorId big = b.tensor(1000, 0, {}, true);
  b.live(big, 3, 7);  // over the budget up to op 7: the tensor may come back only after it
  b.in.budget = 1050;
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kSwap);
  const auto& c = candidate(p, a);
  ASSERT_EQ(c.decision, CapuchinDecision::kSwap);
  EXPECT_EQ(c.trigger_op, 7);
  EXPECT_DOUBLE_EQ(c.swap_stall_ns, 80 + 25 - 90);  // the part of the copy that cannot hide
  for (int op = 3; op <= 7; ++op) EXPECT_LE(p.memory_after[static_cast<size_t>(op)], 1050u) << op;
}

TEST(CapuchinPlanner, OneCopyAtATimePerDirection) {
  TraceBuilder b(10);
  b.in.swap_ns_per_byte = 0.2;  // 100 bytes: 20 ns
  const TensorId a2 = b.tensor(100, 0, {}, true);
  b.accesses(a2, {0, 9});
  const TensorId a1 = b.tensor(100, 0, {}, true);
  b.accesses(a1, {1, 9});
  const TensorId big = b.tensor(1000, 0, {}, true);
  b.live(big, 3, 4);
  b.in.budget = 1000;  // both must go
  const CapuchinPlan p = plan_capuchin(b.in, CapuchinMode::kSwap);
  const auto& c2 = candidate(p, a2);
  const auto& c1 = candidate(p, a1);
  ASSERT_EQ(c2.decision, CapuchinDecision::kSwap);
  ASSERT_EQ(c1.decision, CapuchinDecision::kSwap);
  EXPECT_LT(c2.order, c1.order) << "largest free time first";
  // a2's swap-in takes the h2d lane over [70, 90); a1's must end before it starts.
  EXPECT_EQ(c2.trigger_op, 6);
  EXPECT_DOUBLE_EQ(c2.prefetch_start_ns, 70);
  EXPECT_EQ(c1.trigger_op, 4);
  EXPECT_DOUBLE_EQ(c1.prefetch_start_ns, 50);
  EXPECT_LE(c1.prefetch_start_ns + c1.swap_ns, c2.prefetch_start_ns);
  EXPECT_DOUBLE_EQ(c1.swap_stall_ns, 0);
  EXPECT_TRUE(p.fits);
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

TEST(CapuchinPlanner, HybridTakesTheCheaperPerTensor) {
  TraceBuilder t(10, {0, 10, 40, 50, 60, 70, 80, 90, 100, 110});  // op 1 is long enough for p_'s swap-out
  t.in.swap_ns_per_byte = 0.2;
  const TensorId w = t.tensor(8, -1, {}, false, true);
  const TensorId p_ = t.tensor(100, 0, {}, true);  // long gap: its copy hides
  const TensorId q = t.tensor(400, 1, {w}, true);  // short gap, slow copy, 10 ns to recompute
  t.accesses(w, {1});
  t.accesses(p_, {0, 9});
  t.accesses(q, {1, 5});
  const TensorId big = t.tensor(1000, 2, {}, false);
  t.live(big, 2, 4);
  t.in.budget = 1008;
  const CapuchinPlan h = plan_capuchin(t.in, CapuchinMode::kHybrid);
  EXPECT_EQ(candidate(h, p_).decision, CapuchinDecision::kSwap);
  EXPECT_DOUBLE_EQ(candidate(h, p_).swap_stall_ns, 0);
  EXPECT_EQ(candidate(h, q).decision, CapuchinDecision::kRecompute);
  EXPECT_GT(candidate(h, q).swap_stall_ns, candidate(h, q).recompute_ns);
  EXPECT_TRUE(h.fits);
  // The same trace under swap only: q is swapped too, at the price of a stall.
  const CapuchinPlan s = plan_capuchin(t.in, CapuchinMode::kSwap);
  EXPECT_EQ(candidate(s, q).decision, CapuchinDecision::kSwap);
  EXPECT_GT(candidate(s, q).swap_stall_ns, 0);
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

// The measured iteration stalled 500 ns before op 8 (a passive swap-in): access times say there
// is room to hide a 100 ns copy; the kernel times (10 ns per op) say there is not.
TEST(CapuchinPlanner, MeasuredKernelTimesNotStallsMakeTheFreeTime) {
  std::vector<double> start = {0, 10, 20, 30, 40, 50, 60, 70, 580, 590};
  TraceBuilder b(10, start);
  b.in.swap_ns_per_byte = 1;  // 100 bytes: 100 ns
  const TensorId a = b.tensor(100, 0, {}, false);
  b.accesses(a, {1, 9});
  const TensorId big = b.tensor(1000, 0, {}, true);
  b.live(big, 3, 5);
  b.in.budget = 1050;
  const CapuchinPlan from_accesses = plan_capuchin(b.in, CapuchinMode::kSwap);
  EXPECT_DOUBLE_EQ(candidate(from_accesses, a).free_time_ns, (590 - 100) - (20 + 100));
  EXPECT_DOUBLE_EQ(candidate(from_accesses, a).swap_stall_ns, 0);
  b.in.op_ns.assign(10, 10.0);
  const CapuchinPlan from_kernels = plan_capuchin(b.in, CapuchinMode::kSwap);
  EXPECT_DOUBLE_EQ(candidate(from_kernels, a).free_time_ns, (90 - 100) - (20 + 100));
  EXPECT_GT(candidate(from_kernels, a).swap_stall_ns, 0) << "the copy cannot hide in 70 ns of kernels";
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

TEST(CapuchinPlanner, HybridCountsTheSwapOutWaitAtTheNextOp) {
  // The memory manager completes a swap-out by the end of the op after its issue: a 25 ns copy
  // after op 0 holds compute 15 ns at the end of op 1, more than recomputing a (10 ns).
  TraceBuilder b(10);
  b.in.swap_ns_per_byte = 0.25;
  const TensorId a = b.tensor(100, 0, {}, true);
  b.accesses(a, {0, 9});
  const TensorId big = b.tensor(1000, 3, {}, false);
  b.live(big, 3, 5);
  b.in.budget = 1050;
  const CapuchinPlan h = plan_capuchin(b.in, CapuchinMode::kHybrid);
  EXPECT_EQ(candidate(h, a).decision, CapuchinDecision::kRecompute);
  EXPECT_DOUBLE_EQ(candidate(h, a).swap_out_stall_ns, 15);
  EXPECT_TRUE(h.fits);
  // Swap only: no alternative, the swap is taken.
  EXPECT_EQ(candidate(plan_capuchin(b.in, CapuchinMode::kSwap), a).decision, CapuchinDecision::kSwap);
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
