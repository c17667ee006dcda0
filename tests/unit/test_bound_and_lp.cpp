// The lower bound (bound.h) and the linear program over the whole iteration (lp.h) on hand-built
// access traces small enough to solve by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/trace_builder.h"
#include "vtensor/policy/bound.h"
#include "vtensor/policy/capuchin.h"
#include "vtensor/policy/lp.h"

using namespace vtensor;

// The lower bound on swap / recompute plans (bound.h), on traces small enough to solve by hand.
// Ops 10 ns each; A (100 B, made by op 0, needed again at op `back`) is the only tensor that can
// leave the device while B (50 B) lives at op `at`; budget 100 B, so 50 B of A must be off there.
namespace {
OverheadBound bound_of(int ops, int at, int back, bool recomputable, double ns_per_byte, size_t budget = 100) {
  TraceBuilder tb(ops);
  tb.in.op_ns.assign(static_cast<size_t>(ops), 10.0);
  tb.in.swap_ns_per_byte = ns_per_byte;
  tb.in.budget = budget;
  const TensorId a = tb.tensor(100, 0, {}, recomputable);
  tb.accesses(a, {0, back});
  const TensorId b = tb.tensor(50, at, {}, false);
  tb.access(b, at);
  return overhead_bound(tb.in);
}
}  // namespace

TEST(OverheadBound, TheLinkAndTheCheapestRecomputationShareTheBytesOverTheBudget) {
  // Op 1 over by 50 B; A's windows around it are empty, so the link moves O bytes in O ns (1 ns
  // per byte) and recomputing costs op 0's 10 ns per 100 B: O = 0.1 (50 - O), O = 50 / 11 ns.
  const OverheadBound both = bound_of(3, 1, 2, true, 1.0);
  ASSERT_TRUE(both.feasible);
  EXPECT_EQ(both.op, 1);
  EXPECT_EQ(both.over_bytes, 50u);
  EXPECT_NEAR(both.overhead_ms * 1e6, 50.0 / 11.0, 1e-6);
  EXPECT_NEAR(both.compute_ms * 1e6, 30.0, 1e-9);
  EXPECT_EQ(both.binds, "link and recompute");
  // A cannot be recomputed: the link alone, 50 ns.
  const OverheadBound link = bound_of(3, 1, 2, false, 1.0);
  EXPECT_NEAR(link.overhead_ms * 1e6, 50.0, 1e-6);
  EXPECT_EQ(link.binds, "link");
  // An unknown link is infinitely fast: nothing to add.
  EXPECT_EQ(bound_of(3, 1, 2, false, 0.0).overhead_ms, 0.0);
}

TEST(OverheadBound, TheWindowsAroundTheOpCarryBytesForFree) {
  // B at op 2 of 5; A's gap is 0 -> 4: 10 ns to copy out after op 0 and 10 ns to copy back before
  // op 4 carry 10 B at no cost, the link the other 40 B in 40 ns.
  const OverheadBound b = bound_of(5, 2, 4, false, 1.0);
  EXPECT_EQ(b.op, 2);
  EXPECT_NEAR(b.overhead_ms * 1e6, 40.0, 1e-6);
  EXPECT_EQ(b.swap_bytes, 50u);
}

TEST(OverheadBound, MoreThanTheOpsOwnTensorsCanLeaveIsTheWorkingSet) {
  // Budget 40 B: op 0 holds A (100 B) and uses it; nothing can leave.
  const OverheadBound b = bound_of(3, 1, 2, true, 1.0, 40);
  EXPECT_FALSE(b.feasible);
  EXPECT_EQ(b.binds, "working set");
  // Within the budget everywhere: nothing binds.
  const OverheadBound none = bound_of(3, 1, 2, true, 1.0, 1000);
  EXPECT_TRUE(none.feasible);
  EXPECT_EQ(none.overhead_ms, 0.0);
  EXPECT_EQ(none.binds, "nothing");
}

// The linear program over the whole iteration (lp.h), on traces solved by hand. Ops of 1 ms;
// sizes in MiB so the solver works on numbers near one.
namespace {
constexpr size_t kMiB = 1024 * 1024;
TraceBuilder lp_trace(int ops, double mib_per_ms) {
  TraceBuilder tb(ops);
  tb.in.op_ns.assign(static_cast<size_t>(ops), 1e6);
  tb.in.swap_ns_per_byte = mib_per_ms > 0 ? 1e6 / (mib_per_ms * kMiB) : 0;
  return tb;
}
// A (100 MiB, made by op 0, needed again at op 2; recomputable or not) and B (50 MiB at op 1),
// budget 100 MiB, three ops of 1 ms, 10 MiB/ms each way.
TraceBuilder a_and_b(bool recomputable, TensorId* a = nullptr) {
  TraceBuilder tb = lp_trace(3, 10);
  tb.in.budget = 100 * kMiB;
  const TensorId t = tb.tensor(100 * kMiB, 0, {}, recomputable);
  tb.accesses(t, {0, 2});
  tb.access(tb.tensor(50 * kMiB, 1, {}, false), 1);
  if (a) *a = t;
  return tb;
}
}  // namespace

TEST(LinearProgram, TheLinkAndARecomputationShareTheBytesOverTheBudget) {
  // A (100 MiB, made by op 0, needed again at op 2) and B (50 MiB at op 1), budget 100 MiB: 50 MiB
  // of A off the device at op 1. Op 1 is A's whole gap: its 1 ms (+ E) carries 10 (1 + E) MiB
  // each way at 10 MiB/ms; recomputing a fraction y of A costs op 0's 1 ms per 100 MiB, and run
  // ahead of the access, in op 1's segment, it lengthens that segment for the link too: with
  // E = y, 10 (1 + y) + 100 y = 50, y = 4/11 ms.
  TensorId a = kNoTensor;
  const TraceBuilder tb = a_and_b(true, &a);
  const LpResult r = solve_lp(tb.in);
  ASSERT_EQ(r.status, "optimal");
  ASSERT_TRUE(r.bound);
  EXPECT_NEAR(r.compute_ms, 3.0, 1e-9);
  EXPECT_NEAR(r.overhead_ms, 4.0 / 11, 1e-6);
  EXPECT_NEAR(r.recompute_ms, 4.0 / 11, 1e-6);
  EXPECT_NEAR(r.swapped_bytes / kMiB, 10.0 * 15 / 11, 1e-4);
  EXPECT_NEAR(r.recomputed_bytes / kMiB, 400.0 / 11, 1e-4);
  ASSERT_EQ(r.gaps.size(), 1u);
  EXPECT_EQ(r.gaps[0].id, a);
  EXPECT_EQ(r.gaps[0].evict_op, 0);
  EXPECT_EQ(r.gaps[0].back_op, 2);
  // Rounded: half of A leaves, more of it recomputed than swapped.
  const auto pins = lp_pins(r);
  ASSERT_EQ(pins.size(), 1u);
  EXPECT_EQ(pins[0], (PlanPin{a, 2, CapuchinDecision::kRecompute}));
  // Not recomputable: the link alone, 40 MiB past the free 10: 4 ms.
  const TraceBuilder tl = a_and_b(false);
  const LpResult link = solve_lp(tl.in);
  EXPECT_NEAR(link.overhead_ms, 4.0, 1e-6);
  EXPECT_NEAR(link.swapped_bytes / kMiB, 50.0, 1e-4);
  EXPECT_EQ(lp_pins(link), (std::vector<PlanPin>{{0 + 1, 2, CapuchinDecision::kSwap}}));
  // Its recomputations alone ("lp-rec"): A's recomputation stays pinned; the swap is left to the planner.
  EXPECT_EQ(lp_pins(r, 0.5, LpTiming::kPlanner, false, true), pins);
  EXPECT_TRUE(lp_pins(link, 0.5, LpTiming::kPlanner, false, true).empty());
}

// The LP's limit counts simplex iterations (the same answer on every machine, however loaded):
// the trace above needs more than one, so a limit of one stops it, with no bound and no pins.
TEST(LinearProgram, TheIterationLimitStopsTheSolverWithNoBound) {
  const TraceBuilder tb = a_and_b(true);
  const LpResult full = solve_lp(tb.in);
  ASSERT_EQ(full.status, "optimal");
  ASSERT_GT(full.iterations, 1);
  LpOptions o;
  o.max_iterations = 1;
  o.time_limit_s = 0;  // no wall net
  const LpResult cut = solve_lp(tb.in, o);
  EXPECT_EQ(cut.status, "iteration limit");
  EXPECT_FALSE(cut.bound);
  EXPECT_LE(cut.iterations, 1);
  EXPECT_TRUE(lp_pins(cut).empty());
}

// With a copy's bytes on the device while in flight (LpOptions::in_flight_on_device), a gap
// within one segment frees nothing by a swap: on the trace above A's gap is op 1 alone, so half of
// A is recomputed, op 0's 1 ms per 100 MiB: 0.5 ms, above the bound's 4/11; the result is no
// bound. Not recomputable, nothing covers op 1: infeasible, and no working-set claim.
TEST(LinearProgram, CopiesInFlightOnTheDeviceFreeNothingWithinTheirSegment) {
  LpOptions o;
  o.in_flight_on_device = true;
  TensorId a = kNoTensor;
  const TraceBuilder tb = a_and_b(true, &a);
  const LpResult r = solve_lp(tb.in, o);
  ASSERT_EQ(r.status, "optimal");
  EXPECT_FALSE(r.bound);
  EXPECT_NEAR(r.overhead_ms, 0.5, 1e-6);
  EXPECT_GT(r.overhead_ms, solve_lp(tb.in).overhead_ms + 0.1);
  EXPECT_NEAR(r.swapped_bytes, 0.0, 1e-3);
  EXPECT_NEAR(r.recomputed_bytes / kMiB, 50.0, 1e-4);
  EXPECT_EQ(lp_pins(r), (std::vector<PlanPin>{{a, 2, CapuchinDecision::kRecompute}}));
  const TraceBuilder tl = a_and_b(false);
  const LpResult link = solve_lp(tl.in, o);
  EXPECT_EQ(link.status, "infeasible");
  EXPECT_FALSE(link.bound);
  EXPECT_EQ(solve_lp(tl.in).status, "optimal") << "the bound's model swaps it in flight";
}

// The integer program (LpOptions::integer_time_limit_s; Cbc): each gap the LP moves in part is
// swapped or recomputed whole. On the trace above: recomputing all of A costs op 0's 1 ms;
// swapping all of it moves 100 MiB each way within op 1's segment, 9 ms past its own 1 ms at
// 10 MiB/ms; the LP's 4/11 ms mixed both. Not recomputable, A must be swapped whole: 9 ms where
// the LP's half swap cost 4. A gap the LP moves whole stays so (the neighbourhood): nothing to decide.
TEST(LinearProgram, TheIntegerProgramMovesEachGapWhole) {
  LpOptions o;
  o.integer_time_limit_s = 10;
  TensorId a = kNoTensor;
  const TraceBuilder tb = a_and_b(true, &a);
  const LpResult r = solve_lp(tb.in, o);
  EXPECT_NEAR(r.overhead_ms, 4.0 / 11, 1e-6) << "the LP's own optimum is unchanged";
  ASSERT_EQ(r.integer.status, "optimal");
  EXPECT_NEAR(r.integer.overhead_ms, 1.0, 1e-6);
  EXPECT_NEAR(r.integer.bound_ms, 1.0, 1e-6);
  EXPECT_EQ(r.integer.integer_columns, 2);
  EXPECT_EQ(r.integer.fixed_gaps, 0);
  ASSERT_EQ(r.integer.gaps.size(), 1u);
  EXPECT_EQ(r.integer.gaps[0].id, a);
  EXPECT_NEAR(r.integer.gaps[0].recompute, 1.0, 1e-9);
  EXPECT_NEAR(r.integer.gaps[0].swap, 0.0, 1e-9);
  LpResult ir = r;
  ir.gaps = r.integer.gaps;
  EXPECT_EQ(lp_pins(ir), (std::vector<PlanPin>{{a, 2, CapuchinDecision::kRecompute}}));

  const TraceBuilder tl = a_and_b(false);
  const LpResult link = solve_lp(tl.in, o);
  EXPECT_NEAR(link.overhead_ms, 4.0, 1e-6);
  ASSERT_EQ(link.integer.status, "optimal");
  EXPECT_NEAR(link.integer.overhead_ms, 9.0, 1e-6);
  ASSERT_EQ(link.integer.gaps.size(), 1u);
  EXPECT_NEAR(link.integer.gaps[0].swap, 1.0, 1e-9);
  // Off by default: the LP alone.
  EXPECT_EQ(solve_lp(tl.in).integer.status, "not run");

  // A swapped whole by the LP (A 100 MiB back at op 6, B 100 MiB at ops 2-3): fixed, the same plan.
  TraceBuilder tw = lp_trace(7, 50);
  tw.in.budget = 100 * kMiB;
  const TensorId w = tw.tensor(100 * kMiB, 0, {}, false);
  tw.accesses(w, {0, 6});
  tw.live(tw.tensor(100 * kMiB, 2, {}, false), 2, 3);
  const LpResult whole = solve_lp(tw.in, o);
  ASSERT_EQ(whole.integer.status, "optimal");
  EXPECT_EQ(whole.integer.integer_columns, 0);
  EXPECT_EQ(whole.integer.fixed_gaps, 1);
  EXPECT_NEAR(whole.integer.overhead_ms, 0.0, 1e-6);
  ASSERT_EQ(whole.integer.gaps.size(), 1u);
  EXPECT_NEAR(whole.integer.gaps[0].swap, 1.0, 1e-9);
  // Without the neighbourhood every gap is decided, to the same optimum here.
  o.integer_neighbourhood = false;
  const LpResult all = solve_lp(tw.in, o);
  EXPECT_EQ(all.integer.fixed_gaps, 0);
  EXPECT_EQ(all.integer.integer_columns, 2);
  EXPECT_NEAR(all.integer.overhead_ms, 0.0, 1e-6);
}

// With a codec for A's gap (LpOptions::codec) a fraction w of A is kept compressed: its bytes
// less the buffer off the device over the gap, the compression and the decompression on the codec
// lane in op 1's segment. A not recomputable, 50 MiB over at op 1, the link's 10 MiB free:
// - a 40 MiB buffer (60 MiB saved) and a 0.1 ms codec: w >= 2/3 covers the rest at no cost;
// - a 1 ms codec, the lane binds too: 2 w <= 1 + E, 100 x <= 10 (1 + E), 60 w + 100 x >= 50,
//   so 40 (1 + E) >= 50: E = 1/4 ms (w = 5/8, x = 1/8), where the link alone costs 4 ms.
// The result is no bound on keep / swap / recompute plans; rounded, A is compressed with that codec.
TEST(LinearProgram, ACodecKeepsAFractionCompressedOnTheDevice) {
  TensorId a = kNoTensor;
  const TraceBuilder tl = a_and_b(false, &a);
  LpOptions o;
  LpCodec codec{Codec::kBitmask, 40 * kMiB, 0.1e6};
  std::vector<std::pair<TensorId, int>> asked;
  o.codec = [&](TensorId id, int evict_op) -> std::optional<LpCodec> {
    asked.push_back({id, evict_op});
    return codec;
  };
  const LpResult r = solve_lp(tl.in, o);
  ASSERT_EQ(r.status, "optimal");
  EXPECT_FALSE(r.bound);
  EXPECT_NEAR(r.overhead_ms, 0.0, 1e-6);
  EXPECT_EQ(asked, (std::vector<std::pair<TensorId, int>>{{a, 0}})) << "A's one gap, opened after op 0";
  ASSERT_EQ(r.gaps.size(), 1u);
  EXPECT_GE(r.gaps[0].compress, 2.0 / 3 - 1e-6);
  EXPECT_EQ(r.gaps[0].codec, codec);
  EXPECT_NEAR(r.compressed_bytes, r.gaps[0].compress * 100 * kMiB, 1e-3 * kMiB);
  PlanPin pin{a, 2, CapuchinDecision::kCompress};
  pin.codec = Codec::kBitmask, pin.capacity = 40 * kMiB, pin.codec_ns = 0.1e6;
  EXPECT_EQ(lp_pins(r), std::vector<PlanPin>{pin});
  EXPECT_EQ(lp_pins(r, 0.5, LpTiming::kPlanner, false, true), std::vector<PlanPin>{pin}) << "kept with the recomputations";

  codec.codec_ns = 1e6;
  const LpResult lane = solve_lp(tl.in, o);
  ASSERT_EQ(lane.status, "optimal");
  EXPECT_NEAR(lane.overhead_ms, 0.25, 1e-6);
  EXPECT_NEAR(lane.compressed_bytes / kMiB, 62.5, 1e-3);
  EXPECT_NEAR(lane.swapped_bytes / kMiB, 12.5, 1e-3);
  EXPECT_NEAR(solve_lp(tl.in).overhead_ms, 4.0, 1e-6) << "without the codec";
  // A buffer no smaller than the tensor saves nothing: no compressed fraction.
  codec.capacity = 100 * kMiB;
  const LpResult none = solve_lp(tl.in, o);
  EXPECT_NEAR(none.overhead_ms, 4.0, 1e-6);
  EXPECT_EQ(none.compressed_bytes, 0.0);
}

namespace {
// A (100 MiB, made by op 0, read again at op `back`, not recomputable) and B (`b_mib`,
// alive at ops b_from..b_to), budget 100 MiB, `ops` ops of 1 ms: the LP's optimum, no overhead.
LpResult one_swap_lp(int ops, double mib_per_ms, int back, size_t b_mib, int b_from, int b_to, TensorId* a) {
  TraceBuilder tb = lp_trace(ops, mib_per_ms);
  tb.in.budget = 100 * kMiB;
  *a = tb.tensor(100 * kMiB, 0, {}, false);
  tb.accesses(*a, {0, back});
  tb.live(tb.tensor(b_mib * kMiB, b_from, {}, false), b_from, b_to);
  LpResult r = solve_lp(tb.in);
  EXPECT_EQ(r.status, "optimal");
  EXPECT_NEAR(r.overhead_ms, 0.0, 1e-6);
  return r;
}
}  // namespace

TEST(LinearProgram, TheTimedPinsPrefetchWhenTheOptimumCopiesBack) {
  // A (100 MiB, op 0, needed again at op 6), B (100 MiB) alive at ops 2-3, budget 100 MiB: all of
  // A off the device at ops 2 and 3. At 50 MiB/ms it leaves during ops 1-2 and comes back at no
  // cost within ops 3-5 (a copy in op 3's own segment counts as off there: the relaxation), not
  // earlier: the optimum's copy back starts after op 2, 3 or 4. The timed pin prefetches after
  // that op at the latest; the untimed one leaves the trigger to the planner.
  TensorId a = kNoTensor;
  const LpResult r = one_swap_lp(7, 50, 6, 100, 2, 3, &a);
  ASSERT_EQ(r.gaps.size(), 1u);
  EXPECT_NEAR(r.gaps[0].swap, 1.0, 1e-6);
  EXPECT_GE(r.gaps[0].in_after_op, 2);
  EXPECT_LE(r.gaps[0].in_after_op, 4);
  EXPECT_EQ(lp_pins(r), (std::vector<PlanPin>{{a, 6, CapuchinDecision::kSwap}}));
  PlanPin timed{a, 6, CapuchinDecision::kSwap};
  timed.trigger_op = r.gaps[0].in_after_op;
  EXPECT_EQ(lp_pins(r, 0.5, LpTiming::kLp), std::vector<PlanPin>{timed});
  EXPECT_EQ(lp_pins(r, 0.5, LpTiming::kLp, true), std::vector<PlanPin>{timed}) << "all of A moves: within the cap";
}

TEST(LinearProgram, TheWholeTimedPinsPrefetchEarlyEnoughForTheWholeTensor) {
  // A (100 MiB, op 0, needed again at op 11, not recomputable), B (50 MiB) alive at ops 2-8,
  // budget 100 MiB: half of A off the device at ops 2-8. At 25 MiB/ms the optimum copies that
  // half back in 2 ms, from op 7 or 8; rounded, all of A is swapped, and its 4 ms copy back must
  // start after op 6 at the latest to end by op 11.
  TensorId a = kNoTensor;
  const LpResult r = one_swap_lp(12, 25, 11, 50, 2, 8, &a);
  ASSERT_EQ(r.gaps.size(), 1u);
  EXPECT_NEAR(r.gaps[0].swap, 0.5, 1e-6);
  EXPECT_GE(r.gaps[0].in_after_op, 7);
  EXPECT_EQ(r.gaps[0].whole_in_after_op, 6);
  PlanPin whole{a, 11, CapuchinDecision::kSwap};
  whole.trigger_op = 6;
  EXPECT_EQ(lp_pins(r, 0.3, LpTiming::kWhole), std::vector<PlanPin>{whole});
  PlanPin timed = whole;
  timed.trigger_op = r.gaps[0].in_after_op;
  EXPECT_EQ(lp_pins(r, 0.3, LpTiming::kLp), std::vector<PlanPin>{timed});
  // Capped: the whole of A (100 MiB) is more than the optimum moves (50 MiB): left to the planner.
  EXPECT_TRUE(lp_pins(r, 0.3, LpTiming::kWhole, true).empty());
}

TEST(LinearProgram, ARecomputationRerunsTheAncestorsReleasedBeforeTheDrop) {
  // P (10 MiB, op 0) -> C (100 MiB, op 1); P is last read at op 1, C again at op 4; B (140 MiB)
  // lives at ops 2-3, budget 140 MiB: all of C must be off there. The link is all but closed, so
  // C is recomputed, and with it P, released before C's drop: ops 1 and 0, 2 ms. With P alive
  // till op 5 (the budget 10 MiB larger for it) only op 1 re-runs: 1 ms.
  for (const bool p_alive : {false, true}) {
    SCOPED_TRACE(p_alive);
    TraceBuilder tb = lp_trace(6, 1e-9);
    tb.in.budget = (p_alive ? 150 : 140) * kMiB;
    const TensorId p = tb.tensor(10 * kMiB, 0, {}, true);
    tb.accesses(p, {0, 1});
    if (p_alive) tb.access(p, 5);
    const TensorId c = tb.tensor(100 * kMiB, 1, {p}, true);
    tb.accesses(c, {1, 4});
    tb.live(tb.tensor(140 * kMiB, 2, {}, false), 2, 3);
    const LpResult r = solve_lp(tb.in);
    ASSERT_EQ(r.status, "optimal");
    EXPECT_NEAR(r.overhead_ms, p_alive ? 1.0 : 2.0, 1e-3);
  }
}

TEST(LinearProgram, MoreThanCanLeaveIsTheWorkingSetAndWithinTheBudgetNothingBinds) {
  TraceBuilder tb = lp_trace(3, 10);
  tb.accesses(tb.tensor(100 * kMiB, 0, {}, true), {0, 2});
  tb.access(tb.tensor(50 * kMiB, 1, {}, false), 1);
  tb.in.budget = 40 * kMiB;  // B alone is over it at op 1
  const LpResult ws = solve_lp(tb.in);
  EXPECT_EQ(ws.status, "working set");
  EXPECT_TRUE(ws.bound);
  EXPECT_TRUE(std::isinf(ws.overhead_ms));
  EXPECT_TRUE(lp_pins(ws).empty());
  tb.in.budget = 1000 * kMiB;
  const LpResult none = solve_lp(tb.in);
  EXPECT_EQ(none.status, "nothing over the budget");
  EXPECT_EQ(none.overhead_ms, 0.0);
  EXPECT_TRUE(lp_pins(none).empty());
}

// A persistent tensor last used by the iteration's last op (the optimizer step of the first
// layer under --step-in-backward): its gap over the iteration's end lies wholly in the next
// iteration. P (60 MiB, ops 1 and 2) must be 40 MiB off at op 0, where A (80 MiB) lives, in a
// 100 MiB budget; the wrap gap (2, 1) is the only way, and the LP sizes it without reading past
// its segments (ASan caught that read in the sanitizer job).
TEST(LinearProgram, AWrapGapAfterTheLastOpLiesInTheNextIteration) {
  TraceBuilder tb = lp_trace(3, 100);
  tb.in.budget = 100 * kMiB;
  const TensorId p = tb.tensor(60 * kMiB, -1, {}, false, true);
  tb.accesses(p, {1, 2});
  tb.access(tb.tensor(80 * kMiB, 0, {}, false), 0);
  const LpResult r = solve_lp(tb.in);
  ASSERT_EQ(r.status, "optimal");
  ASSERT_EQ(r.gaps.size(), 1u);
  EXPECT_EQ(r.gaps[0].id, p);
  EXPECT_EQ(r.gaps[0].evict_op, 2);
  EXPECT_EQ(r.gaps[0].back_op, 1);
  EXPECT_NEAR(r.swapped_bytes / kMiB, 40.0, 1e-4);
  EXPECT_GE(r.overhead_ms, 0.0);
}
