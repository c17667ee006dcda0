// MemoryManager mechanisms under real training on tiny models (cpu backend): planned swap-out /
// prefetch, drop + (recursive) recompute, passive lru policies through the Trainer, and planned
// compression. The OOM ladder, compaction, the MemoryView and the access tracker are in
// test_memory_manager_ladder.cpp; the manager on device-like backends in test_memory_manager_device.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/memory_manager_rig.h"
#include "vtensor/backend/backend.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/memory_manager.h"
#include "vtensor/memory/plan.h"
#include "vtensor/memory/planning_hooks.h"
#include "vtensor/memory/policy.h"
#include "vtensor/models/models.h"
#include "vtensor/train/executor.h"
#include "vtensor/train/trainer.h"

namespace vtensor {
namespace {

using namespace vtensor::test;  // the rig: tests/support/memory_manager_rig.h

// ---------------------------------------------------------------- scripted swap-out / prefetch

// The policy's high placement reaches the device allocator at each iteration's start: the large
// blocks go to the top of the arena (its address space in use is all of it, where without it the
// blocks pack low) and the math is the same bits.
TEST(ScriptedPolicy, HighPlacementPutsTheLargeBlocksAtTheTopAndKeepsTheBits) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  size_t largest = 0;
  for (const auto& t : g.tensors()) largest = std::max(largest, t.bytes());
  const size_t budget = size_t{64} << 20;
  std::vector<RunOut> runs;
  for (const size_t high : {size_t{0}, largest / 2}) {
    auto rig = make_rig(model, Plan{}, budget);
    rig->policy->high_placement = high;
    runs.push_back(run(*rig));
    for (const auto& st : runs.back().stats) {
      SCOPED_TRACE("iteration " + std::to_string(st.iteration));
      if (high) EXPECT_EQ(st.peak_reserved, budget);
      else EXPECT_LT(st.peak_reserved, budget / 4);
    }
  }
  expect_identical(runs[1], runs[0]);
}

TEST(ScriptedPolicy, SwapOutThenPrefetchIsBitIdentical) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  const RunOut ref = baseline(model);

  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  // Forward activations used again in backward, with a long gap: swap out after the last
  // forward use (a swap-out right after the producer would be undone by the next forward
  // reader), prefetch three ops before the first backward use.
  Plan plan;
  std::vector<TensorId> chosen;
  size_t bytes = 0;
  for (const auto& t : g.tensors()) {
    if (!is_forward_activation(g, t.id) || t.bytes() < 1024) continue;
    const Uses u = uses_of(g, t.id);
    if (u.first_backward < 0 || u.first_backward - u.last_forward < 20) continue;
    plan.actions.push_back({ActionKind::kSwapOut, t.id, u.last_forward});
    plan.actions.push_back({ActionKind::kPrefetch, t.id, u.first_backward - 3});
    chosen.push_back(t.id);
    bytes += t.bytes();
    if (chosen.size() == 4) break;
  }
  ASSERT_EQ(chosen.size(), 4u) << "resnet-tiny should have forward activations used in backward";

  auto rig = make_rig(model, plan);
  // Drain the copy streams one op before each prefetch: the swap-out has then certainly
  // completed (under CPU load the d2h worker may lag, and a prefetch of a tensor still
  // swapping out is skipped, which would make the counters below timing-dependent).
  rig->policy->set_probe([&](int, int op) {
    for (const Action& a : plan.actions)
      if (a.kind == ActionKind::kPrefetch && a.op == op + 1) rig->backend->synchronize();
  });
  const RunOut got = run(*rig);
  expect_identical(got, ref);

  for (const auto& s : got.stats) {
    SCOPED_TRACE("iteration " + std::to_string(s.iteration));
    EXPECT_EQ(s.counters.swapped_out_bytes, bytes);
    EXPECT_EQ(s.counters.swapped_in_bytes, bytes);
    EXPECT_EQ(s.counters.swap_outs, chosen.size());
    EXPECT_EQ(s.counters.swap_ins, chosen.size());
    EXPECT_EQ(s.counters.prefetches, chosen.size());
    EXPECT_EQ(s.counters.dropped, 0u);
    EXPECT_EQ(s.counters.recomputed_ops, 0u);
  }
  // Each tensor was resident when its swap-out was handed out and on host at its prefetch.
  size_t outs = 0, ins = 0;
  for (const auto& s : rig->policy->seen()) {
    SCOPED_TRACE(rig->graph.tensor(s.action.tensor).name + " iteration " + std::to_string(s.iteration));
    if (s.action.kind == ActionKind::kSwapOut) {
      ++outs;
      EXPECT_EQ(s.residency, Residency::kResident) << to_string(s.residency);
    } else {
      ++ins;
      EXPECT_EQ(s.residency, Residency::kOnHost) << to_string(s.residency);
    }
  }
  EXPECT_EQ(outs, chosen.size() * kIters);
  EXPECT_EQ(ins, chosen.size() * kIters);
  for (TensorId id : chosen) EXPECT_EQ(rig->mm->residency(id), Residency::kUnallocated);
  EXPECT_GE(rig->mm->host_pool().peak_held(), bytes);
}

TEST(ScriptedPolicy, SwapOutRightAfterProducerIsBitIdentical) {
  // The next forward reader brings the tensor back from swapping_out or on_host, whichever the
  // copy has reached: no prefetch planned, results must not depend on the race.
  const ModelConfig model = tiny("resnet-tiny", 8);
  const RunOut ref = baseline(model);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  Plan plan;
  for (TensorId id : activations_named(g, "relu_out"))
    plan.actions.push_back({ActionKind::kSwapOut, id, g.tensor(id).producer});
  ASSERT_FALSE(plan.actions.empty());

  auto rig = make_rig(model, plan);
  const RunOut got = run(*rig);
  expect_identical(got, ref);
  for (const auto& s : got.stats) {
    EXPECT_EQ(s.counters.swap_outs, plan.actions.size());
    EXPECT_LE(s.counters.swapped_in_bytes, s.counters.swapped_out_bytes);
    EXPECT_EQ(s.counters.prefetches, 0u);
  }
}

// A planned swap-out may name the op after which its block is freed (Action::free_after): the
// block stays (swapping_out) until exactly the end of that op, however fast the copy ran, and
// release points out of issue order work (a later swap-out freed before an earlier one).
TEST(ScriptedPolicy, SwapOutKeepsItsBlockUntilItsReleaseOp) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  std::vector<char> has_view(g.num_tensors(), 0);
  for (const auto& t : g.tensors())
    if (t.view_of != kNoTensor) has_view[static_cast<size_t>(t.view_of)] = 1;
  // A: the first activation idle for 20+ ops between forward and backward; B: one whose last
  // forward use comes 1-3 ops after A's, also idle long enough.
  TensorId a = kNoTensor, b = kNoTensor;
  Uses ua, ub;
  for (const auto& t : g.tensors()) {
    if (!is_forward_activation(g, t.id) || t.view_of != kNoTensor || has_view[static_cast<size_t>(t.id)]) continue;
    const Uses u = uses_of(g, t.id);
    if (u.first_backward - u.last_forward < 20) continue;
    if (a == kNoTensor) {
      a = t.id;
      ua = u;
    } else if (b == kNoTensor && u.last_forward > ua.last_forward && u.last_forward <= ua.last_forward + 3) {
      b = t.id;
      ub = u;
    }
  }
  ASSERT_NE(a, kNoTensor);
  ASSERT_NE(b, kNoTensor) << "no second activation idle right after the first";
  // B is issued after A but freed first.
  const int release_a = ua.last_forward + 9, release_b = ua.last_forward + 5;
  const int prefetch_a = ua.first_backward - 2, prefetch_b = ub.first_backward - 2;
  ASSERT_GT(release_b, ub.last_forward);
  ASSERT_GT(prefetch_a, release_a);
  ASSERT_GT(prefetch_b, release_b);
  Plan plan;
  plan.actions.push_back({ActionKind::kSwapOut, a, ua.last_forward, release_a});
  plan.actions.push_back({ActionKind::kSwapOut, b, ub.last_forward, release_b});
  plan.actions.push_back({ActionKind::kPrefetch, a, prefetch_a});
  plan.actions.push_back({ActionKind::kPrefetch, b, prefetch_b});

  auto base = make_rig(model, Plan{});
  auto rig = make_rig(model, plan);
  base->mm->set_timeline_enabled(true);
  rig->mm->set_timeline_enabled(true);
  // Residency of A and B when the policy is asked for op k's actions (after the manager has
  // completed the swap-outs due at op k, before this op's actions run).
  std::vector<std::pair<Residency, Residency>> seen;
  rig->policy->set_probe([&](int, int op) {
    if (static_cast<size_t>(op) >= seen.size()) seen.resize(static_cast<size_t>(op) + 1);
    seen[static_cast<size_t>(op)] = {rig->mm->residency(a), rig->mm->residency(b)};
  });
  auto expected = [](int op, int swap_after, int release, int prefetch) {
    if (op <= swap_after) return Residency::kResident;
    return op < release ? Residency::kSwappingOut : Residency::kOnHost;  // up to the prefetch's op
  };
  const int64_t bytes_a = static_cast<int64_t>(align_up(g.tensor(a).bytes()));
  const int64_t bytes_b = static_cast<int64_t>(align_up(g.tensor(b).bytes()));
  std::vector<IterationStats> ref, got;
  for (int it = 0; it < kIters; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    ref.push_back(base->exec->run_iteration(it));
    seen.clear();
    got.push_back(rig->exec->run_iteration(it));
    EXPECT_EQ(got.back().counters.swap_outs, 2u);
    EXPECT_EQ(got.back().counters.prefetches, 2u);
    const auto &tb = base->mm->timeline(), &tr = rig->mm->timeline();
    ASSERT_EQ(tb.size(), tr.size());
    for (size_t k = 0; k < tr.size(); ++k) {
      const int op = tr[k].op_index;
      SCOPED_TRACE("op " + std::to_string(op));
      if (ua.last_forward <= op && op <= prefetch_a)
        EXPECT_EQ(seen.at(static_cast<size_t>(op)).first, expected(op, ua.last_forward, release_a, prefetch_a));
      if (ub.last_forward <= op && op <= prefetch_b)
        EXPECT_EQ(seen.at(static_cast<size_t>(op)).second, expected(op, ub.last_forward, release_b, prefetch_b));
      // Bytes after op k: the base run's, less each block between its release and its prefetch.
      int64_t want = static_cast<int64_t>(tb[k].allocated);
      if (release_a <= op && op < prefetch_a) want -= bytes_a;
      if (release_b <= op && op < prefetch_b) want -= bytes_b;
      EXPECT_EQ(static_cast<int64_t>(tr[k].allocated), want);
    }
  }
  expect_same_losses(got, ref);
}

TEST(ScriptedPolicy, ReleasePointNotAfterTheSwapOutIsRejected) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  const std::vector<TensorId> relu = activations_named(g, "relu_out");
  ASSERT_FALSE(relu.empty());
  const int op = g.tensor(relu.front()).producer;
  Plan plan;
  plan.actions.push_back({ActionKind::kSwapOut, relu.front(), op, op});
  auto rig = make_rig(model, plan);
  EXPECT_THROW(rig->exec->run_iteration(0), std::logic_error);
}

// ---------------------------------------------------------------- scripted drop / recompute

TEST(ScriptedPolicy, DropDropoutOutputsInMlpIsBitIdentical) {
  const ModelConfig model = tiny("mlp-tiny", 16);
  const RunOut ref = baseline(model);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  Plan plan;
  // Dropout outputs right after their producer (recomputed by the next linear, same mask),
  // relu outputs after their last forward use (recomputed in backward from a released fc_out).
  const auto drops = activations_named(g, "dropout_out"), relus = activations_named(g, "relu_out");
  ASSERT_EQ(drops.size(), 2u);
  ASSERT_EQ(relus.size(), 2u);
  for (TensorId id : drops) plan.actions.push_back({ActionKind::kDrop, id, g.tensor(id).producer});
  for (TensorId id : relus) plan.actions.push_back({ActionKind::kDrop, id, uses_of(g, id).last_forward});

  auto rig = make_rig(model, plan);
  const RunOut got = run(*rig);
  expect_identical(got, ref);
  for (const auto& s : got.stats) {
    SCOPED_TRACE("iteration " + std::to_string(s.iteration));
    EXPECT_EQ(s.counters.dropped, plan.actions.size());
    EXPECT_GE(s.counters.recomputed_ops, plan.actions.size());
    EXPECT_EQ(s.counters.swap_outs, 0u);
  }
  for (const auto& s : rig->policy->seen()) EXPECT_EQ(s.residency, Residency::kResident);
}

// kRecompute: a dropped tensor is recomputed after the given op, ahead of its backward access,
// which then finds it resident; the run stays bit-identical.
TEST(ScriptedPolicy, RecomputeAheadOfTheAccessIsBitIdentical) {
  const ModelConfig model = tiny("mlp-tiny", 16);
  const RunOut ref = baseline(model);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  Plan plan;
  const auto relus = activations_named(g, "relu_out");
  ASSERT_EQ(relus.size(), 2u);
  std::vector<int> ahead;
  for (TensorId id : relus) {
    const Uses u = uses_of(g, id);
    ASSERT_GT(u.first_backward, u.last_forward + 1);
    plan.actions.push_back({ActionKind::kDrop, id, u.last_forward});
    plan.actions.push_back({ActionKind::kRecompute, id, u.first_backward - 1});
    ahead.push_back(u.first_backward - 1);
  }
  sort_actions(plan);
  auto rig = make_rig(model, plan);
  const RunOut got = run(*rig);
  expect_identical(got, ref);
  for (const auto& s : got.stats) {
    SCOPED_TRACE("iteration " + std::to_string(s.iteration));
    EXPECT_EQ(s.counters.dropped, relus.size());
    EXPECT_GE(s.counters.recomputed_ops, relus.size());
  }
  for (const auto& r : rig->policy->restores())  // each access found it resident: recomputed ahead
    for (TensorId id : relus) EXPECT_NE(r.id, id) << "restored on access at op " << r.op;
  for (const auto& s : rig->policy->seen())
    if (s.action.kind == ActionKind::kRecompute) EXPECT_EQ(s.residency, Residency::kDropped);
}

TEST(ScriptedPolicy, DropBatchNormOutputsKeepsRunningStats) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  const RunOut ref = baseline(model);
  ASSERT_FALSE(ref.buffers.empty());
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  Plan plan;
  // Every bn_out right after the batch norm (recomputed by its forward reader), and the first
  // relu outputs after their last forward use: recomputed in backward through their released
  // bn_out, i.e. the batch norm runs again and must not update the running statistics.
  for (TensorId id : activations_named(g, "bn_out"))
    plan.actions.push_back({ActionKind::kDrop, id, g.tensor(id).producer});
  const size_t bn_drops = plan.actions.size();
  ASSERT_GE(bn_drops, 8u);
  auto relus = activations_named(g, "relu_out");
  relus.resize(3);
  for (TensorId id : relus) plan.actions.push_back({ActionKind::kDrop, id, uses_of(g, id).last_forward});

  auto rig = make_rig(model, plan);
  const RunOut got = run(*rig);
  expect_identical(got, ref);  // buffers included: running_mean / running_var bit-identical
  for (const auto& s : got.stats) {
    SCOPED_TRACE("iteration " + std::to_string(s.iteration));
    EXPECT_EQ(s.counters.dropped, plan.actions.size());
    // bn_out: one each; relu_out: the relu and its batch norm.
    EXPECT_GE(s.counters.recomputed_ops, bn_drops + 2 * relus.size());
  }
  // Recomputations are traced with the producer's op index.
  size_t recompute_writes = 0;
  for (const auto& a : rig->mm->tracker().current().accesses)
    if (a.kind == AccessKind::kRecomputeWrite) {
      ++recompute_writes;
      EXPECT_EQ(a.op_index, rig->graph.tensor(a.id).producer);
    }
  EXPECT_GE(recompute_writes, bn_drops + 2 * relus.size());
}

TEST(ScriptedPolicy, RecursiveRecomputeOfConvBnChain) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  const RunOut ref = baseline(model);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  // The first two conv -> bn pairs: after the batch norm drop conv_out, then bn_out. The next
  // reader of bn_out recomputes the batch norm, which first recomputes the conv.
  Plan plan;
  std::vector<TensorId> convs;
  for (TensorId bn : activations_named(g, "bn_out")) {
    const Op& bn_op = g.op(g.tensor(bn).producer);
    const TensorId conv = bn_op.inputs[0];
    ASSERT_EQ(g.op(g.tensor(conv).producer).kind, OpKind::kConv2d);
    plan.actions.push_back({ActionKind::kDrop, conv, bn_op.index});
    plan.actions.push_back({ActionKind::kDrop, bn, bn_op.index});
    convs.push_back(conv);
    if (convs.size() == 2) break;
  }

  auto rig = make_rig(model, plan);
  const RunOut got = run(*rig);
  expect_identical(got, ref);
  for (const auto& s : got.stats) {
    SCOPED_TRACE("iteration " + std::to_string(s.iteration));
    EXPECT_EQ(s.counters.dropped, 4u);
    EXPECT_GE(s.counters.recomputed_ops, 4u);
  }
  // Both conv outputs were rebuilt by a recomputation (they are read by batch-norm backward).
  const auto& acc = rig->mm->tracker().current().accesses;
  for (TensorId c : convs)
    EXPECT_TRUE(std::any_of(acc.begin(), acc.end(), [&](const TensorAccess& a) {
      return a.id == c && a.kind == AccessKind::kRecomputeWrite;
    })) << g.tensor(c).name;
}

TEST(ScriptedPolicy, DropOfGradientIsIgnored) {
  // Gradients cannot be recomputed: after_op must skip the planned drop, not throw.
  const ModelConfig model = tiny("mlp-tiny", 16);
  const RunOut ref = baseline(model);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  Plan plan;
  for (const auto& t : g.tensors())
    if (t.kind == TensorKind::kGradient) plan.actions.push_back({ActionKind::kDrop, t.id, t.producer});
  ASSERT_FALSE(plan.actions.empty());
  auto rig = make_rig(model, plan);
  const RunOut got = run(*rig);
  expect_identical(got, ref);
  for (const auto& s : got.stats) EXPECT_EQ(s.counters.dropped, 0u);
}

// ---------------------------------------------------------------- passive policies via Trainer

TEST(MemoryManagerTrainer, LruPoliciesAtHalfPeakAreBitIdentical) {
  const TrainerOut none = train(trainer_config("none", 0));
  const size_t peak = max_peak(none.result);
  ASSERT_GT(peak, 0u);
  const size_t budget = align_up(peak / 2);

  for (const std::string policy : {"lru", "lru-recompute"}) {
    SCOPED_TRACE(policy);
    const TrainerOut got = train(trainer_config(policy, budget));
    EXPECT_EQ(got.result.config.budget, budget);
    expect_same_losses(got.result.iterations, none.result.iterations);
    expect_same_tensors(got.params, none.params, "param");
    uint64_t swapped = 0, recomputed = 0;
    for (const auto& s : got.result.iterations) {
      SCOPED_TRACE("iteration " + std::to_string(s.iteration));
      EXPECT_LE(s.peak_allocated, budget);
      EXPECT_GT(s.counters.evictions, 0u);
      swapped += s.counters.swapped_out_bytes;
      recomputed += s.counters.recomputed_ops;
    }
    if (policy == "lru") {
      EXPECT_GT(swapped, 0u);
      EXPECT_EQ(recomputed, 0u);
    } else {
      EXPECT_GT(recomputed, 0u);
    }
  }
}

// ---------------------------------------------------------------- scripted compression

// Every ReLU output with a long gap compressed (bitmask, buffers sized for the worst case) after
// its last forward use. Half of them are decompressed by a planned prefetch, the other half on
// demand at their backward access: both restore the bits, the original block is gone in between,
// and the on-demand ones are counted.
TEST(ScriptedPolicy, CompressThenDecompressIsBitIdentical) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  const RunOut ref = baseline(model);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  Plan plan;
  std::vector<TensorId> chosen;
  for (TensorId id : long_gap_relu_maps(g)) {
    plan.actions.push_back(bitmask_after_forward(g, id));
    if (chosen.size() % 2 == 0) plan.actions.push_back({ActionKind::kPrefetch, id, uses_of(g, id).first_backward - 2});
    chosen.push_back(id);
  }
  ASSERT_GE(chosen.size(), 2u);
  auto rig = make_rig(model, plan);
  std::vector<Residency> in_gap;
  rig->policy->set_probe([&](int iteration, int op) {
    const Uses u = uses_of(g, chosen[1]);
    if (iteration == 1 && op == (u.last_forward + u.first_backward) / 2 + 1) in_gap.push_back(rig->mm->residency(chosen[1]));
  });
  const RunOut got = run(*rig);
  expect_identical(got, ref);
  ASSERT_EQ(in_gap.size(), 1u);
  EXPECT_EQ(in_gap[0], Residency::kCompressed);
  for (const auto& s : got.stats) {
    EXPECT_EQ(s.counters.compressions, chosen.size());
    EXPECT_EQ(s.counters.decompressions, chosen.size());
    EXPECT_EQ(s.counters.on_demand_decompressions, chosen.size() / 2);
    EXPECT_GT(s.counters.compressed_bytes, s.counters.compressed_to_bytes);  // ReLU outputs: about half zeros
  }
  const auto stats = rig->mm->compression_stats();
  ASSERT_EQ(stats.size(), chosen.size());
  for (const auto& c : stats) {
    EXPECT_EQ(c.codec, Codec::kBitmask);
    EXPECT_LT(c.bytes_after, c.bytes_before);
    EXPECT_EQ(c.compressions, 1);
  }
}

// Action::per_use_buffer (a planner's one-gap compression, policy auto's search): the buffer is
// freed once the tensor is back, although the memory manager keeps buffers by default.
TEST(ScriptedPolicy, PerUseCompressionBuffersAreFreedWhenTheTensorIsBack) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  const RunOut ref = baseline(model);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  auto plan_with = [&](bool per_use, size_t* buffers) {
    Plan plan;
    *buffers = 0;
    for (TensorId id : long_gap_relu_maps(g)) {
      const Uses u = uses_of(g, id);
      Action a = bitmask_after_forward(g, id);
      a.per_use_buffer = per_use;
      plan.actions.push_back(a);
      plan.actions.push_back({ActionKind::kPrefetch, id, u.first_backward - 2});
      *buffers += align_up(a.capacity);
    }
    return plan;
  };
  size_t buffers = 0;
  auto kept = make_rig(model, plan_with(false, &buffers));
  const RunOut got_kept = run(*kept);
  auto freed = make_rig(model, plan_with(true, &buffers));
  const RunOut got_freed = run(*freed);
  ASSERT_GT(buffers, 0u);
  expect_identical(got_kept, ref);
  expect_identical(got_freed, ref);
  EXPECT_EQ(kept->mm->allocated() - freed->mm->allocated(), buffers) << "the persistent buffers outlive the iteration";
  for (const auto& s : got_freed.stats) EXPECT_GT(s.counters.compressions, 0u);
}

// The OOM ladder's last resort drops a compressed tensor (its buffer goes) when it can be
// recomputed: its next access recomputes it, bits unchanged. Dropped here by hand mid-gap.
TEST(ScriptedPolicy, DroppedCompressedTensorIsRecomputed) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  const RunOut ref = baseline(model);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  Plan plan;
  std::vector<TensorId> chosen;
  for (TensorId id : long_gap_relu_maps(g)) {
    plan.actions.push_back(bitmask_after_forward(g, id));
    chosen.push_back(id);
  }
  ASSERT_FALSE(chosen.empty());
  auto rig = make_rig(model, plan);
  int dropped = 0;
  rig->policy->set_probe([&](int, int op) {
    for (TensorId id : chosen) {
      const Uses u = uses_of(g, id);
      if (op == u.first_backward - 1 && rig->mm->residency(id) == Residency::kCompressed && rig->mm->can_recompute(id)) {
        rig->mm->drop(id);
        ++dropped;
      }
    }
  });
  const RunOut got = run(*rig);
  expect_identical(got, ref);
  EXPECT_GT(dropped, 0);
}

// A buffer too small for the data (denser than planned): the tensor stays resident, training is
// unchanged and the overflow is counted.
TEST(ScriptedPolicy, CompressionOverflowKeepsTheTensor) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  const RunOut ref = baseline(model);
  Graph g = build_model(model);
  build_backward(g, OptimizerConfig{});
  Plan plan;
  for (TensorId id : long_gap_relu_maps(g)) {
    Action a = bitmask_after_forward(g, id);
    a.capacity = codec_mask_bytes(static_cast<size_t>(g.tensor(id).shape.numel()));  // room for the mask only
    plan.actions.push_back(a);
  }
  ASSERT_FALSE(plan.actions.empty());
  auto rig = make_rig(model, plan);
  const RunOut got = run(*rig);
  expect_identical(got, ref);
  for (const auto& s : got.stats) {
    EXPECT_EQ(s.counters.compressions, 0u);
    EXPECT_EQ(s.counters.compress_overflows, plan.actions.size());
  }
}

}  // namespace
}  // namespace vtensor
