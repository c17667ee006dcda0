// MemoryManager mechanisms under real training on tiny models (cpu backend): planned swap-out /
// prefetch, drop + (recursive) recompute, passive lru policies through the Trainer, the OOM
// ladder, the MemoryView a policy sees, and the access tracker.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "vtensor/backend/backend.h"
#include "vtensor/backend/sim/sim_backend.h"
#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/memory_manager.h"
#include "vtensor/models/models.h"
#include "vtensor/memory/plan.h"
#include "vtensor/memory/planning_hooks.h"
#include "vtensor/memory/policy.h"
#include "vtensor/policy/auto/auto.h"
#include "vtensor/policy/registry.h"
#include "vtensor/train/executor.h"
#include "vtensor/train/rehearsal.h"
#include "vtensor/train/trainer.h"

namespace vtensor {
namespace {

constexpr int kIters = 3;

// Returns a fixed plan's actions and never offers victims. Records the residency of every
// planned tensor at the moment its action is handed out (before the manager carries it out).
class ScriptedPolicy : public Policy, public PlanningHooks {
 public:
  struct Seen {
    int iteration;
    Action action;
    Residency residency;
  };

  explicit ScriptedPolicy(Plan plan) : plan_(std::move(plan)) {}
  std::string name() const override { return "scripted"; }
  PlanningHooks* planning() override { return this; }
  void attach(MemoryManager* mm) { mm_ = mm; }
  void set_probe(std::function<void(int iteration, int op)> probe) { probe_ = std::move(probe); }

  void begin_iteration(int iteration) override { iteration_ = iteration; }
  std::vector<Action> after_op(int op) override {
    if (probe_) probe_(iteration_, op);
    std::vector<Action> out = plan_.at(op);
    if (mm_)
      for (const Action& a : out) seen_.push_back({iteration_, a, mm_->residency(a.tensor)});
    return out;
  }
  std::vector<Victim> choose_victims(size_t, const MemoryView&) override { return {}; }
  size_t high_placement_bytes() const override { return high_placement; }
  size_t high_placement = 0;  // PlanningHooks::high_placement_bytes
  void on_restore(TensorId id, int op, Residency from, double) override { restores_.push_back({id, op, from}); }

  struct Restore {
    TensorId id;
    int op;
    Residency from;
  };
  const std::vector<Seen>& seen() const { return seen_; }
  const std::vector<Restore>& restores() const { return restores_; }

 private:
  Plan plan_;
  MemoryManager* mm_ = nullptr;
  int iteration_ = -1;
  std::function<void(int, int)> probe_;
  std::vector<Seen> seen_;
  std::vector<Restore> restores_;
};

// The pieces Trainer's constructor builds, with a policy of our own. Not movable: the manager
// keeps references to the graph and the backend. Members die in reverse order (exec, mm, backend).
struct Rig {
  Graph graph;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<MemoryManager> mm;
  std::unique_ptr<Executor> exec;
  ScriptedPolicy* policy = nullptr;
};

ModelConfig tiny(const std::string& name, int batch) {
  ModelConfig m;
  m.name = name;
  m.batch = batch;
  return resolve_model(m);
}

std::unique_ptr<Rig> make_rig(const ModelConfig& model, Plan plan, size_t budget = kDefaultCpuBudget) {
  auto rig = std::make_unique<Rig>();
  rig->graph = build_model(model);
  build_backward(rig->graph, OptimizerConfig{});
  auto policy = std::make_unique<ScriptedPolicy>(std::move(plan));
  rig->policy = policy.get();
  rig->backend = make_cpu_backend({.arena_bytes = budget});
  rig->mm = std::make_unique<MemoryManager>(*rig->backend, rig->graph, make_allocator("caching", budget),
                                            std::move(policy));
  rig->policy->attach(rig->mm.get());
  rig->exec = std::make_unique<Executor>(rig->graph, *rig->backend, *rig->mm);
  rig->mm->init_persistent(1);
  return rig;
}

std::vector<float> read_tensor(MemoryManager& mm, const Graph& g, TensorId id) {
  std::vector<float> v(static_cast<size_t>(g.tensor(id).shape.numel()));
  mm.read(id, v.data());
  return v;
}

struct RunOut {
  std::vector<IterationStats> stats;
  std::vector<std::vector<float>> params, buffers;  // buffers: batch-norm running statistics
};

RunOut run(Rig& rig, int iters = kIters) {
  RunOut out;
  for (int i = 0; i < iters; ++i) out.stats.push_back(rig.exec->run_iteration(i));
  for (TensorId p : rig.graph.params) out.params.push_back(read_tensor(*rig.mm, rig.graph, p));
  for (const auto& t : rig.graph.tensors())
    if (t.kind == TensorKind::kBuffer) out.buffers.push_back(read_tensor(*rig.mm, rig.graph, t.id));
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_same_losses(const std::vector<IterationStats>& a, const std::vector<IterationStats>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(&a[i].loss, &b[i].loss, sizeof(float)), 0)
        << "iteration " << i << ": loss " << a[i].loss << " vs " << b[i].loss;
}

void expect_same_tensors(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                         const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i], b[i])) << what << " #" << i << " differs";
}

void expect_identical(const RunOut& got, const RunOut& ref) {
  expect_same_losses(got.stats, ref.stats);
  expect_same_tensors(got.params, ref.params, "param");
  expect_same_tensors(got.buffers, ref.buffers, "buffer");
}

// Forward / backward uses of a forward-produced tensor.
struct Uses {
  int producer = -1, last_forward = -1, first_backward = -1;
};

Uses uses_of(const Graph& g, TensorId id) {
  Uses u;
  u.producer = u.last_forward = g.tensor(id).producer;
  for (const Op& op : g.ops())
    for (TensorId in : op.inputs) {
      if (in != id) continue;
      if (op.backward) {
        if (u.first_backward < 0) u.first_backward = op.index;
      } else if (!op.optimizer) {
        u.last_forward = std::max(u.last_forward, op.index);
      }
    }
  return u;
}

bool is_forward_activation(const Graph& g, TensorId id) {
  const TensorInfo& t = g.tensor(id);
  return t.kind == TensorKind::kActivation && t.producer >= 0 && !g.op(t.producer).backward &&
         !g.op(t.producer).optimizer;
}

// Forward activations whose name contains `part`, in id order.
std::vector<TensorId> activations_named(const Graph& g, const std::string& part) {
  std::vector<TensorId> out;
  for (const auto& t : g.tensors())
    if (is_forward_activation(g, t.id) && t.name.find(part) != std::string::npos) out.push_back(t.id);
  return out;
}

// Forward ReLU maps whose gap between the last forward and the first backward use is 6 ops or
// more: room to compress and bring them back in between.
std::vector<TensorId> long_gap_relu_maps(const Graph& g) {
  std::vector<TensorId> out;
  for (const auto& t : g.tensors()) {
    if (!is_forward_activation(g, t.id) || g.op(t.producer).kind != OpKind::kRelu) continue;
    const Uses u = uses_of(g, t.id);
    if (u.first_backward >= 0 && u.first_backward - u.last_forward >= 6) out.push_back(t.id);
  }
  return out;
}

// A bitmask compression after the map's last forward use, freed two ops later, into a buffer
// as large as the codec can need.
Action bitmask_after_forward(const Graph& g, TensorId id) {
  Action a{ActionKind::kCompress, id, uses_of(g, id).last_forward, uses_of(g, id).last_forward + 2};
  a.codec = Codec::kBitmask;
  a.capacity = codec_bound(Codec::kBitmask, static_cast<size_t>(g.tensor(id).shape.numel()));
  return a;
}

RunOut baseline(const ModelConfig& model) {
  auto rig = make_rig(model, Plan{});
  return run(*rig);
}

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

TrainConfig trainer_config(const std::string& policy, size_t budget) {
  TrainConfig c;
  c.model.name = "resnet-tiny";
  c.model.batch = 8;
  c.policy = policy;
  c.budget = budget;
  c.iters = kIters;
  return c;
}

struct TrainerOut {
  TrainResult result;
  std::vector<std::vector<float>> params;
};

TrainerOut train(const TrainConfig& c) {
  Trainer t(c);
  TrainerOut out;
  out.result = t.run();
  out.params = t.read_params();
  return out;
}

size_t max_peak(const TrainResult& r) {
  size_t p = 0;
  for (const auto& s : r.iterations) p = std::max(p, s.peak_allocated);
  return p;
}

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

// ---------------------------------------------------------------- move_to_layout

// Asks, at every iteration's end, for the live blocks in the reverse of their order, packed from
// offset 0: most blocks go where others are, and blocks of one size trade places (a cycle that
// only a gap breaks). On cpu a batch's staged moves are gathered and then scattered as on cuda,
// so a batch that reads a block an earlier move of it wrote fails the check (mutation tried).
class ReversingPolicy : public ScriptedPolicy {
 public:
  ReversingPolicy() : ScriptedPolicy(Plan{}) {}
  void attach_manager(MemoryManager* mm) { mm_ = mm; }
  bool compact_at_iteration_end() const override { return true; }
  std::vector<LayoutBlock> take_start_layout() override {
    std::vector<LayoutBlock> blocks = mm_->live_device_blocks();
    std::vector<size_t> by_offset(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) by_offset[i] = i;
    std::sort(by_offset.begin(), by_offset.end(), [&](size_t a, size_t b) { return blocks[a].offset > blocks[b].offset; });
    size_t at = 0;
    for (size_t i : by_offset) blocks[i].offset = at, at += blocks[i].size;
    asked_.push_back(blocks);
    return blocks;
  }
  std::vector<std::vector<LayoutBlock>> asked_;

 private:
  MemoryManager* mm_ = nullptr;
};

TEST(MoveToLayout, ReversedLayoutsThroughCyclesAreBitIdentical) {
  const ModelConfig model = tiny("resnet-tiny", 4);
  const RunOut ref = baseline(model);
  auto rig = std::make_unique<Rig>();
  rig->graph = build_model(model);
  build_backward(rig->graph, OptimizerConfig{});
  auto policy = std::make_unique<ReversingPolicy>();
  ReversingPolicy* p = policy.get();
  rig->backend = make_cpu_backend({.arena_bytes = kDefaultCpuBudget});
  rig->mm = std::make_unique<MemoryManager>(*rig->backend, rig->graph, make_allocator("caching", kDefaultCpuBudget),
                                            std::move(policy));
  p->attach_manager(rig->mm.get());
  rig->exec = std::make_unique<Executor>(rig->graph, *rig->backend, *rig->mm);
  rig->mm->init_persistent(1);
  std::vector<LayoutBlock> before = rig->mm->live_device_blocks();
  RunOut got;
  for (int i = 0; i < kIters; ++i) {
    got.stats.push_back(rig->exec->run_iteration(i));
    ASSERT_EQ(p->asked_.size(), static_cast<size_t>(i + 1));
    const std::vector<LayoutBlock>& asked = p->asked_.back();
    EXPECT_EQ(rig->mm->live_device_blocks(), asked) << "iteration " << i << " did not end in the layout asked for";
    size_t displaced = 0;  // blocks not where the iteration found them
    for (size_t k = 0; k < asked.size(); ++k) displaced += asked[k].offset != before[k].offset;
    EXPECT_GT(displaced, asked.size() / 2);
    // A block moves once, or twice where it breaks a cycle (into a gap, then to its place).
    EXPECT_GT(got.stats.back().counters.compacted_blocks, displaced) << "no cycle was broken: the check proves less";
    before = asked;
  }
  for (TensorId id : rig->graph.params) got.params.push_back(read_tensor(*rig->mm, rig->graph, id));
  for (const auto& t : rig->graph.tensors())
    if (t.kind == TensorKind::kBuffer) got.buffers.push_back(read_tensor(*rig->mm, rig->graph, t.id));
  expect_identical(got, ref);
}

// ---------------------------------------------------------------- OOM ladder

size_t none_peak() { return max_peak(train(trainer_config("none", 0)).result); }

TEST(OomLadder, NonePolicyThrowsWithDetails) {
  const size_t budget = align_up(none_peak() / 2);
  Trainer t(trainer_config("none", budget));  // the persistent tensors fit
  try {
    t.step();
    FAIL() << "expected OutOfMemoryError at half the peak";
  } catch (const OutOfMemoryError& e) {
    EXPECT_GT(e.requested(), 0u);
    EXPECT_LE(e.in_use(), e.budget());
    EXPECT_GT(align_up(e.requested()), t.memory().allocator().stats().largest_free_block);  // it did not fit
    EXPECT_EQ(e.budget(), budget);
    const std::string what = e.what();
    EXPECT_NE(what.find("requested"), std::string::npos) << what;
    EXPECT_NE(what.find("budget"), std::string::npos) << what;
    EXPECT_NE(what.find("none"), std::string::npos) << what;  // names the policy
  }
}

TEST(OomLadder, LruBelowLargestTensorThrowsAtInit) {
  // 64 KiB: smaller than the largest parameter (a 64x64x3x3 conv weight, 144 KiB).
  const size_t budget = 64 << 10;
  try {
    Trainer t(trainer_config("lru", budget));
    FAIL() << "expected OutOfMemoryError while allocating the persistent tensors";
  } catch (const OutOfMemoryError& e) {
    EXPECT_GT(e.requested(), budget);
    EXPECT_LE(e.in_use(), e.budget());
    EXPECT_EQ(e.budget(), budget);
  }
}

TEST(OomLadder, LruBelowPersistentBytesThrowsInStep) {
  // Below the persistent bytes lru swaps parameters out while initialising them; but the
  // update of the largest weight needs weight, gradient and momentum (3 x 144 KiB) at once.
  const size_t budget = align_up(300000);
  Trainer t(trainer_config("lru", budget));
  ASSERT_LT(budget, t.graph().persistent_bytes());
  EXPECT_GT(t.memory().host_pool().peak_held(), 0u) << "some persistent tensors must be on host";
  EXPECT_LE(t.memory().allocated(), budget);
  try {
    for (int i = 0; i < kIters; ++i) t.step();
    FAIL() << "expected OutOfMemoryError below the working set of one op";
  } catch (const OutOfMemoryError& e) {
    EXPECT_GT(e.requested(), 0u);
    EXPECT_LE(e.in_use(), e.budget());
    EXPECT_EQ(e.budget(), budget);
    EXPECT_NE(std::string(e.what()).find("lru"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- MemoryView

TEST(MemoryView, EvictableAfterInitIsThePersistentTensorsUnlessLocked) {
  auto rig = make_rig(tiny("mlp-tiny", 16), Plan{});
  MemoryManager& mm = *rig->mm;
  std::vector<TensorId> persistent;
  for (const auto& t : rig->graph.tensors())
    if (t.persistent()) persistent.push_back(t.id);
  EXPECT_EQ(mm.evictable(), persistent);
  const TensorId p = rig->graph.params.front();
  mm.lock(p);
  const auto ev = mm.evictable();
  EXPECT_EQ(std::count(ev.begin(), ev.end(), p), 0);
  EXPECT_EQ(ev.size(), persistent.size() - 1);
  EXPECT_TRUE(mm.view(p).locked);
  mm.unlock(p);
  EXPECT_EQ(mm.evictable(), persistent);
  EXPECT_FALSE(mm.view(p).locked);
  EXPECT_THROW(mm.unlock(p), std::logic_error);
  for (TensorId id : persistent) {
    EXPECT_FALSE(mm.can_recompute(id)) << rig->graph.tensor(id).name;
    EXPECT_TRUE(mm.view(id).persistent);
  }
}

TEST(MemoryView, MidIterationRecomputabilityAndLocks) {
  const ModelConfig model = tiny("resnet-tiny", 8);
  auto rig = make_rig(model, Plan{});
  const Graph& g = rig->graph;
  MemoryManager& mm = *rig->mm;
  const TensorId bn = activations_named(g, "bn_out").front();        // stem.bn_out
  const TensorId relu = activations_named(g, "relu_out").front();    // stem.relu_out
  const int relu_op = g.tensor(relu).producer;
  const TensorId later = activations_named(g, "add_out").front();    // not produced yet
  const int loss_bwd = g.tensor(g.loss).producer + 1;
  const TensorId grad = g.op(loss_bwd).outputs.front();
  ASSERT_EQ(g.tensor(grad).kind, TensorKind::kGradient);
  int probes = 0;
  rig->policy->set_probe([&](int, int op) {
    auto evictable_has = [&](TensorId id) {
      const auto ev = mm.evictable();
      return std::find(ev.begin(), ev.end(), id) != ev.end();
    };
    if (op == relu_op) {
      ++probes;
      // bn_out's last use has passed: gone, but recomputable, so relu_out is recomputable.
      EXPECT_EQ(mm.residency(bn), Residency::kUnallocated);
      EXPECT_EQ(mm.residency(relu), Residency::kResident);
      EXPECT_TRUE(mm.can_recompute(relu));
      EXPECT_FALSE(mm.can_recompute(later));
      EXPECT_FALSE(mm.can_recompute(g.params.front()));
      EXPECT_TRUE(evictable_has(relu));
      EXPECT_FALSE(evictable_has(bn));
      mm.lock(relu);
      EXPECT_FALSE(evictable_has(relu));
      EXPECT_TRUE(mm.view(relu).locked);
      mm.unlock(relu);
      EXPECT_TRUE(evictable_has(relu));
      EXPECT_EQ(mm.view(relu).last_access_op, relu_op);
    }
    if (op == loss_bwd) {
      ++probes;
      EXPECT_EQ(mm.residency(grad), Residency::kResident);
      EXPECT_FALSE(mm.can_recompute(grad));
      EXPECT_TRUE(evictable_has(grad));
    }
  });
  rig->exec->run_iteration(0);
  EXPECT_EQ(probes, 2);
}

// ---------------------------------------------------------------- access tracker

TEST(AccessTracker, IterationTraceCoversEveryOp) {
  auto rig = make_rig(tiny("resnet-tiny", 8), Plan{});
  rig->exec->run_iteration(0);
  const Graph& g = rig->graph;
  const AccessTrace& tr = rig->mm->tracker().current();
  EXPECT_EQ(tr.iteration, 0);
  ASSERT_FALSE(tr.accesses.empty());
  int last = -1;
  std::vector<std::vector<std::pair<TensorId, AccessKind>>> per_op(g.num_ops());
  for (const auto& a : tr.accesses) {
    ASSERT_TRUE(a.kind == AccessKind::kRead || a.kind == AccessKind::kWrite) << "no recompute without a plan";
    EXPECT_GE(a.op_index, last);
    last = a.op_index;
    ASSERT_GE(a.op_index, 0);
    ASSERT_LT(static_cast<size_t>(a.op_index), g.num_ops());
    EXPECT_GE(a.time_ns, 0);
    per_op[static_cast<size_t>(a.op_index)].push_back({a.id, a.kind});
  }
  for (const Op& op : g.ops()) {
    const auto& seen = per_op[static_cast<size_t>(op.index)];
    auto has = [&](TensorId id, AccessKind k) {
      return std::count(seen.begin(), seen.end(), std::pair{id, k}) > 0;
    };
    for (TensorId in : op.inputs) {
      const bool inplace = std::find(op.inplace.begin(), op.inplace.end(), in) != op.inplace.end();
      EXPECT_TRUE(has(in, inplace ? AccessKind::kWrite : AccessKind::kRead))
          << op.name << " input " << g.tensor(in).name;
    }
    for (TensorId out : op.outputs)
      EXPECT_TRUE(has(out, AccessKind::kWrite)) << op.name << " output " << g.tensor(out).name;
    EXPECT_EQ(seen.size(), op.inputs.size() + op.outputs.size()) << op.name;
  }
  // A new iteration starts a new trace.
  const size_t n = tr.accesses.size();
  rig->exec->run_iteration(1);
  EXPECT_EQ(rig->mm->tracker().current().iteration, 1);
  EXPECT_EQ(rig->mm->tracker().current().accesses.size(), n);
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(AccessTracker, WriteJsonlHasGraphHeaderThenAccesses) {
  auto rig = make_rig(tiny("mlp-tiny", 16), Plan{});
  std::vector<AccessTrace> traces;
  for (int i = 0; i < 2; ++i) {
    rig->exec->run_iteration(i);
    traces.push_back(rig->mm->tracker().current());
  }
  const std::string path = testing::TempDir() + "vtensor_mm_trace.jsonl";
  AccessTracker::write_jsonl(path, rig->graph, traces);
  const auto lines = read_jsonl(path);
  std::filesystem::remove(path);
  ASSERT_EQ(lines.size(), 1 + traces[0].accesses.size() + traces[1].accesses.size());
  const auto& head = lines.front();
  EXPECT_EQ(head.at("type"), "graph");
  EXPECT_EQ(head.at("num_ops").get<size_t>(), rig->graph.num_ops());
  ASSERT_EQ(head.at("tensors").size(), rig->graph.num_tensors());
  const auto& t1 = head.at("tensors").at(1);
  EXPECT_EQ(t1.at("id"), 1);
  EXPECT_EQ(t1.at("name"), rig->graph.tensor(1).name);
  EXPECT_EQ(t1.at("bytes").get<size_t>(), rig->graph.tensor(1).bytes());
  size_t i = 1;
  for (const auto& tr : traces)
    for (const auto& a : tr.accesses) {
      const auto& l = lines.at(i++);
      EXPECT_EQ(l.at("type"), "access");
      EXPECT_EQ(l.at("iter").get<int>(), tr.iteration);
      EXPECT_EQ(l.at("id").get<TensorId>(), a.id);
      EXPECT_EQ(l.at("op").get<int>(), a.op_index);
      EXPECT_EQ(l.at("kind"), to_string(a.kind));
    }
}

TEST(AccessTracker, TrainerWritesTraceOfEveryIteration) {
  TrainConfig c = trainer_config("none", 0);
  c.model.name = "mlp-tiny";
  c.model.batch = 16;
  c.trace_path = testing::TempDir() + "vtensor_mm_trainer_trace.jsonl";
  Trainer t(c);
  t.run();
  const auto lines = read_jsonl(c.trace_path);
  std::filesystem::remove(c.trace_path);
  ASSERT_GT(lines.size(), 1u);
  EXPECT_EQ(lines.front().at("type"), "graph");
  std::vector<int> iters;
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].at("type"), "access");
    const int it = lines[i].at("iter").get<int>();
    if (iters.empty() || iters.back() != it) iters.push_back(it);
  }
  EXPECT_EQ(iters, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(lines.size() - 1, kIters * t.memory().tracker().current().accesses.size());
}

}  // namespace
}  // namespace vtensor

// ---------------------------------------------------------------- scripted compression

namespace vtensor {
namespace {

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

// The cpu backend behind another name: every call forwarded, for test backends that change a few.
class CpuWrapper : public Backend {
 public:
  explicit CpuWrapper(size_t budget) : cpu_(make_cpu_backend({.arena_bytes = budget})) {}
  std::string device_description() const override { return cpu_->device_description(); }
  void* arena_base() override { return cpu_->arena_base(); }
  size_t arena_bytes() const override { return cpu_->arena_bytes(); }
  void* host_alloc(size_t bytes) override { return cpu_->host_alloc(bytes); }
  void host_free(void* p, size_t bytes) override { cpu_->host_free(p, bytes); }
  void copy_async(Stream s, void* dst, const void* src, size_t bytes) override { cpu_->copy_async(s, dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { cpu_->copy_to_host(dst, src, bytes); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { cpu_->copy_to_device(dst, src, bytes); }
  void move_device(void* dst, const void* src, size_t bytes) override { cpu_->move_device(dst, src, bytes); }
  Event record(Stream s) override { return cpu_->record(s); }
  void stream_wait(Stream s, const Event& e) override { cpu_->stream_wait(s, e); }
  void synchronize() override { cpu_->synchronize(); }
  void launch(const Graph& g, const Op& op, const KernelArgs& args) override { cpu_->launch(g, op, args); }
  size_t workspace_bytes(const Graph& g, const Op& op, ConvAlgo algo) override { return cpu_->workspace_bytes(g, op, algo); }
  std::optional<size_t> count_nonzeros(const TensorInfo& t, const void* dev) override { return cpu_->count_nonzeros(t, dev); }
  void compress_async(Stream s, Codec c, const TensorInfo& t, const void* src, void* dst, size_t capacity, void* ws,
                      size_t ws_bytes, CodecResult* r) override {
    cpu_->compress_async(s, c, t, src, dst, capacity, ws, ws_bytes, r);
  }
  void decompress_async(Stream s, Codec c, const TensorInfo& t, const void* src, size_t src_bytes, void* dst,
                        CodecResult* r) override {
    cpu_->decompress_async(s, c, t, src, src_bytes, dst, r);
  }
  void init_tensor(const TensorInfo& t, void* dev, uint64_t seed) override { cpu_->init_tensor(t, dev, seed); }
  double now_ms() override { return cpu_->now_ms(); }

 protected:
  std::unique_ptr<Backend> cpu_;
};

// A cpu backend that says it times ops on the device, as cuda does with CUPTI: each op's "device
// time" is 1 + op index / 1000 ms, so the trace shows whether the manager took them.
// Its clock is its own, so that a run's choices never depend on the machine's speed: an op takes
// 0.5 ms, a copy 1 ms per MB (the manager's link calibration reads it), and copies end before
// copy_async returns, so no copy is ever waited for.
class DeviceTimedCpu final : public CpuWrapper {
 public:
  explicit DeviceTimedCpu(size_t budget, size_t workspace_scale = 1) : CpuWrapper(budget), workspace_scale_(workspace_scale) {}
  int begun = 0, ended = 0;
  bool begin_op_timing() override {
    ++begun;
    return true;
  }
  std::vector<double> end_op_timing(size_t num_ops) override {
    ++ended;
    std::vector<double> ms(num_ops);
    for (size_t k = 0; k < num_ops; ++k) ms[k] = 1.0 + static_cast<double>(k) / 1000.0;
    return ms;
  }
  std::string name() const override { return "device-timed cpu"; }
  void copy_async(Stream s, void* dst, const void* src, size_t bytes) override {
    cpu_->copy_async(s, dst, src, bytes);
    cpu_->record(s)->wait();
    clock_ms_ += static_cast<double>(bytes) * 1e-6;
  }
  void launch(const Graph& g, const Op& op, const KernelArgs& args) override {
    cpu_->launch(g, op, args);
    clock_ms_ += 0.5;
  }
  // The fast algorithm's scratch workspace_scale times the cpu's, as cuDNN's exceeds the op's own
  // figure on cuda (the kernels still get at least what they need).
  size_t workspace_bytes(const Graph& g, const Op& op, ConvAlgo algo) override {
    const size_t ws = cpu_->workspace_bytes(g, op, algo);
    return algo == ConvAlgo::kFast ? ws * workspace_scale_ : ws;
  }
  double now_ms() override { return clock_ms_; }

 private:
  size_t workspace_scale_ = 1;
  double clock_ms_ = 0;
};

// Off sim, auto rehearses on a sim of the measurement: the device's op times, its link, and its
// workspaces (cuDNN's on cuda, far above the op's own figures). With the workspaces the rehearsal
// is the run in memory: its predicted peak and evictions are those of the guided iterations.
// Before the rehearsal took the device's workspaces, its plans fitted the op's own figures:
// VGG-16 under auto at 50% on an H100 planned 1.39 GB of swaps and swapped 6.17 GB, with 66
// evictions by the passive fallback (docs/benchmarks.md).
TEST(DeviceWorkspaces, AutosRehearsalPlansForTheDevicesWorkspaces) {
  Graph g = build_model(tiny("resnet-tiny", 8));
  build_backward(g, OptimizerConfig{});
  const size_t scale = 4;
  auto run = [&](const std::string& policy, size_t budget, std::vector<IterationStats>& stats) {
    DeviceTimedCpu backend(budget, scale);
    std::unique_ptr<Policy> p = make_policy(policy);
    if (auto* a = dynamic_cast<AutoPolicy*>(p.get())) a->set_rehearser(rehearse);  // as the Trainer does
    MemoryManager mm(backend, g, make_allocator("caching", budget), std::move(p));
    Executor exec(g, backend, mm);
    mm.init_persistent(1);
    for (int it = 0; it < 4; ++it) stats.push_back(exec.run_iteration(it));
    return mm.policy().report();
  };
  std::vector<IterationStats> none;
  run("none", size_t{64} << 20, none);
  size_t peak = 0;
  for (const auto& s : none) peak = std::max(peak, s.peak_allocated);
  const size_t budget = align_up(peak / 2);
  std::vector<IterationStats> got;
  const nlohmann::json rep = run("auto", budget, got);
  ASSERT_TRUE(rep.contains("predicted_peak_bytes")) << rep.dump();
  size_t guided_peak = 0;
  uint64_t evictions = 0;
  for (size_t i = 1; i < got.size(); ++i) guided_peak = std::max(guided_peak, got[i].peak_allocated), evictions += got[i].counters.evictions;
  EXPECT_LE(guided_peak, budget);
  EXPECT_EQ(rep["predicted_peak_bytes"].get<size_t>(), guided_peak) << rep["chosen"];
  EXPECT_EQ(rep["predicted_evictions"].get<uint64_t>(), evictions / (got.size() - 1)) << rep["chosen"];
}

// A measured iteration (Policy::measuring) takes its op times from a backend that times ops on the
// device; a guided iteration and a policy that never measures do not ask for them.
TEST(DeviceOpTimes, TheMeasuredIterationTakesTheDevicesOpTimes) {
  for (const std::string name : {"capuchin", "none"}) {
    SCOPED_TRACE(name);
    Graph g = build_model(tiny("resnet-tiny", 8));
    build_backward(g, OptimizerConfig{});
    const size_t budget = size_t{64} << 20;
    DeviceTimedCpu backend(budget);
    MemoryManager mm(backend, g, make_allocator("caching", budget), make_policy(name));
    Executor exec(g, backend, mm);
    mm.init_persistent(1);
    for (int it = 0; it < 3; ++it) {
      const IterationStats s = exec.run_iteration(it);
      const AccessTrace& tr = mm.tracker().current();
      const bool measured = name == "capuchin" && it == 0;
      EXPECT_EQ(s.op_times_on_device, measured) << "iteration " << it;
      EXPECT_EQ(tr.op_ms_on_device, measured) << "iteration " << it;
      ASSERT_EQ(tr.op_ms.size(), g.num_ops());
      if (measured)
        for (size_t k = 0; k < g.num_ops(); ++k) EXPECT_DOUBLE_EQ(tr.op_ms[k], 1.0 + static_cast<double>(k) / 1000.0);
      else
        EXPECT_NE(tr.op_ms[g.num_ops() - 1], 1.0 + static_cast<double>(g.num_ops() - 1) / 1000.0);
    }
    EXPECT_EQ(backend.begun, name == "capuchin" ? 1 : 0);
    EXPECT_EQ(backend.ended, backend.begun);
  }
}

// A copy's event that reads as still running the first time it is asked, as a copy the host got
// ahead of does on cuda: the manager's wait for it is then always taken.
class LateOnceEvent final : public EventImpl {
 public:
  explicit LateOnceEvent(Event inner) : inner_(std::move(inner)) {}
  bool query() override { return std::exchange(asked_, true) && inner_->query(); }
  void wait() override { inner_->wait(); }

 private:
  Event inner_;
  bool asked_ = false;
};

// A backend that waits for swap copies "on the device" (Backend::compute_wait), as cuda does by
// default: each such wait is counted, and take_device_wait_ms() reports 0.25 ms
// for each since the last call. The cpu underneath still waits, so the values are the cpu's.
class DeviceWaitingCpu final : public CpuWrapper {
 public:
  explicit DeviceWaitingCpu(size_t budget) : CpuWrapper(budget) {}
  int compute_waits = 0, takes = 0, pending = 0;
  void compute_wait(const Event& e) override {
    ++compute_waits, ++pending;
    cpu_->stream_wait(Stream::kCompute, e);
  }
  bool waits_on_device() const override { return true; }
  double take_device_wait_ms() override {
    ++takes;
    return 0.25 * std::exchange(pending, 0);
  }
  Event record(Stream s) override {
    Event e = cpu_->record(s);
    return s == Stream::kD2H || s == Stream::kH2D ? std::make_shared<LateOnceEvent>(std::move(e)) : e;
  }
  std::string name() const override { return "device-waiting cpu"; }
};

// Swap copies are waited for through Backend::compute_wait, and the device's wait time (not the
// host's in the call) is the iteration's stall, added after its synchronize
// (MemoryManager::collect_device_waits); the losses are those of the same run on the plain cpu
// backend.
TEST(DeviceWaits, SwapWaitsAreTheDevicesAndCountAsStall) {
  Graph g = build_model(tiny("resnet-tiny", 8));
  build_backward(g, OptimizerConfig{});
  auto losses = [&](Backend& backend, size_t budget, std::vector<IterationStats>* stats) {
    MemoryManager mm(backend, g, make_allocator("caching", budget), make_policy("lru"));
    Executor exec(g, backend, mm);
    mm.init_persistent(1);
    std::vector<float> out;
    for (int it = 0; it < 3; ++it) {
      const IterationStats s = exec.run_iteration(it);
      out.push_back(s.loss);
      if (stats) stats->push_back(s);
    }
    return out;
  };
  const size_t full = size_t{64} << 20;
  auto cpu_full = make_cpu_backend({.arena_bytes = full});
  std::vector<IterationStats> unlimited;
  losses(*cpu_full, full, &unlimited);
  size_t peak = 0;
  for (const auto& s : unlimited) peak = std::max(peak, s.peak_allocated);
  const size_t budget = align_up(peak / 2);
  auto cpu = make_cpu_backend({.arena_bytes = budget});
  const std::vector<float> ref = losses(*cpu, budget, nullptr);
  DeviceWaitingCpu backend(budget);
  std::vector<IterationStats> stats;
  const std::vector<float> got = losses(backend, budget, &stats);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(0, std::memcmp(&got[i], &ref[i], sizeof(float))) << "iteration " << i;
  EXPECT_GT(backend.compute_waits, 0) << "lru at half the peak swaps, and each copy is late once";
  EXPECT_EQ(backend.takes, 3) << "one collection per iteration";
  double stall = 0;
  for (const auto& s : stats) {
    EXPECT_GT(s.counters.swapped_out_bytes, 0u);
    stall += s.counters.stall_ms;
  }
  // The host's time in the call is not a stall: the device's waits alone.
  EXPECT_DOUBLE_EQ(stall, 0.25 * backend.compute_waits);
}

// Another policy, with the waits the manager tells it summed: the restores' and the swap-outs'.
class WaitCounting : public Policy {
 public:
  explicit WaitCounting(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  void attach(const MemoryView& v) override { inner_->attach(v); }
  void begin_iteration(int i) override { inner_->begin_iteration(i); }
  std::vector<Action> after_op(int op) override { return inner_->after_op(op); }
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& v) override { return inner_->choose_victims(bytes, v); }
  void end_iteration(const AccessTrace& t) override { inner_->end_iteration(t); }
  void on_restore(TensorId id, int op, Residency from, double ms) override {
    restores_ms += ms;
    inner_->on_restore(id, op, from, ms);
  }
  void on_swap_out_wait(TensorId id, double ms) override {
    swap_outs_ms += ms;
    inner_->on_swap_out_wait(id, ms);
  }
  double restores_ms = 0, swap_outs_ms = 0;

 private:
  std::unique_ptr<Policy> inner_;
};

// The copy calibration (MemoryManager::calibrate_copies) on a sim backend whose copies each cost
// a fixed amount beyond their bytes: a lone copy's latency and a queued copy's cost are both that
// amount, and the rate per byte is the link's. Without it, a queued copy adds nothing.
TEST(CopyCalibration, AQueuedCopysCostIsWhatEachAddsBehindOthers) {
  Graph g = build_model(tiny("resnet-tiny", 2));
  build_backward(g, OptimizerConfig{});
  for (const double queued : {0.0, 0.003}) {
    SCOPED_TRACE(queued);
    auto backend = make_sim_backend({.arena_bytes = size_t{64} << 20, .gpu = "p100-16g", .link_ms_per_byte = 2e-7,
                                     .copy_queued_ms = queued});
    MemoryManager mm(*backend, g, make_allocator("caching", size_t{64} << 20), make_policy("lru"));
    EXPECT_NEAR(mm.copy_ms_per_byte(), 2e-7, 1e-12);
    EXPECT_NEAR(mm.copy_latency_ms(), queued + 2e-7 * kAllocAlignment, 1e-9);
    EXPECT_NEAR(mm.copy_queued_ms(), queued, 1e-9);
  }
}

// Each millisecond the compute stream waited is told to the policy once: a restore that had to
// wait for another tensor's swap-out (to have its block) is told its own wait, and the swap-out
// its. Charged to both, the search's per-gap costs (policy auto) counted that wait twice.
TEST(DeviceWaits, ASwapOutWaitInsideARestoreIsToldOnce) {
  Graph g = build_model(tiny("resnet-tiny", 8));
  build_backward(g, OptimizerConfig{});
  struct Out {
    size_t peak = 0;
    double waited = 0, restores_ms = 0, swap_outs_ms = 0;
  };
  auto run = [&](size_t budget) {
    auto backend = make_sim_backend({.arena_bytes = budget, .gpu = "p100-16g"});
    auto policy = std::make_unique<WaitCounting>(make_policy("lru"));
    const WaitCounting& counting = *policy;  // lives as long as mm
    MemoryManager mm(*backend, g, make_allocator("caching", budget), std::move(policy));
    Executor exec(g, *backend, mm);
    mm.init_persistent(1);
    Out out;
    for (int it = 0; it < 3; ++it) {
      const IterationStats s = exec.run_iteration(it);
      out.peak = std::max(out.peak, s.peak_allocated);
      out.waited += s.counters.stall_ms + s.counters.recompute_ms;
    }
    out.restores_ms = counting.restores_ms, out.swap_outs_ms = counting.swap_outs_ms;
    return out;
  };
  const Out got = run(align_up(run(size_t{256} << 20).peak * 2 / 5));
  EXPECT_GT(got.restores_ms, 0);
  EXPECT_GT(got.swap_outs_ms, 0);
  EXPECT_LE(got.restores_ms + got.swap_outs_ms, got.waited * (1 + 1e-9));
}

}  // namespace
}  // namespace vtensor
