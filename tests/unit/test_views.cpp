// Views in the memory manager (reshape shares its input's storage): a view has no block of its
// own, accessing it makes its base resident, the base lives until the last use of the base and
// all its views, drop / swap act on the base, and a view is never a victim on its own. Checked
// on gpt-tiny, whose attention reshapes are views, with scripted plans on the cpu backend.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>

#include "vtensor/backend/backend.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/memory_manager.h"
#include "vtensor/models/models.h"
#include "vtensor/memory/plan.h"
#include "vtensor/memory/policy.h"
#include "vtensor/train/executor.h"
#include "vtensor/train/trainer.h"

namespace vtensor {
namespace {

constexpr int kIters = 3;

class Scripted : public Policy {
 public:
  explicit Scripted(Plan plan) : plan_(std::move(plan)) {}
  std::string name() const override { return "scripted"; }
  std::vector<Action> after_op(int op) override {
    if (probe) probe(op);
    return plan_.at(op);
  }
  std::vector<Victim> choose_victims(size_t, const MemoryView&) override { return {}; }
  std::function<void(int)> probe;

 private:
  Plan plan_;
};

struct Rig {
  Graph graph;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<MemoryManager> mm;
  std::unique_ptr<Executor> exec;
  Scripted* policy = nullptr;
};

Graph gpt_tiny() {
  ModelConfig m;
  m.name = "gpt-tiny";
  m.batch = 2;
  Graph g = build_model(m);
  build_backward(g, OptimizerConfig{.kind = OptimizerKind::kAdam, .lr = 1e-3f});
  return g;
}

std::unique_ptr<Rig> make_rig(Plan plan) {
  auto rig = std::make_unique<Rig>();
  rig->graph = gpt_tiny();
  auto policy = std::make_unique<Scripted>(std::move(plan));
  rig->policy = policy.get();
  rig->backend = make_cpu_backend({.arena_bytes = kDefaultCpuBudget});
  rig->mm = std::make_unique<MemoryManager>(*rig->backend, rig->graph, make_allocator("caching", kDefaultCpuBudget),
                                            std::move(policy));
  rig->exec = std::make_unique<Executor>(rig->graph, *rig->backend, *rig->mm);
  rig->mm->init_persistent(1);
  return rig;
}

struct Out {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
  uint64_t recomputed = 0, swapped_out = 0;
};

Out run(Rig& rig) {
  Out o;
  for (int i = 0; i < kIters; ++i) {
    IterationStats s = rig.exec->run_iteration(i);
    o.losses.push_back(s.loss);
    o.recomputed += s.counters.recomputed_ops;
    o.swapped_out += s.counters.swapped_out_bytes;
  }
  for (TensorId p : rig.graph.params) {
    std::vector<float> v(static_cast<size_t>(rig.graph.tensor(p).shape.numel()));
    rig.mm->read(p, v.data());
    o.params.push_back(std::move(v));
  }
  return o;
}

void expect_identical(const Out& a, const Out& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  EXPECT_EQ(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(float)), 0);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_EQ(std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * sizeof(float)), 0)
        << "parameter " << i;
}

// Last op reading `id` (-1 if none).
int last_use(const Graph& g, TensorId id) {
  int last = -1;
  for (const Op& op : g.ops())
    for (TensorId in : op.inputs)
      if (in == id) last = op.index;
  return last;
}

// Forward views (reshape outputs) and their bases.
std::vector<TensorId> forward_views(const Graph& g) {
  std::vector<TensorId> out;
  for (const auto& t : g.tensors())
    if (t.view_of != kNoTensor && !g.op(t.producer).backward) out.push_back(t.id);
  return out;
}

TEST(Views, GraphMarksReshapesAsViewsOfTheSameSize) {
  Graph g = gpt_tiny();
  int forward = 0, backward = 0;
  for (const auto& t : g.tensors()) {
    if (t.view_of == kNoTensor) continue;
    EXPECT_EQ(g.op(t.producer).kind, OpKind::kReshape);
    EXPECT_EQ(g.op(t.producer).inputs.at(0), t.view_of);
    EXPECT_EQ(t.bytes(), g.tensor(t.view_of).bytes());
    (g.op(t.producer).backward ? backward : forward)++;
  }
  EXPECT_EQ(forward, 2 * 4);  // per layer: q, k, v heads and the merged heads
  EXPECT_EQ(backward, forward);
}

TEST(Views, ShareStorageAndKeepTheirBaseAlive) {
  auto rig = make_rig(Plan{});
  const Graph& g = rig->graph;
  MemoryManager& mm = *rig->mm;
  int extended = 0, checks = 0;
  for (const auto& t : g.tensors())
    if (t.view_of != kNoTensor && last_use(g, t.id) > last_use(g, t.view_of)) ++extended;
  ASSERT_GT(extended, 0) << "no view outlives its base's own last use: the lifetime check would be vacuous";
  rig->policy->probe = [&](int op) {
    for (const auto& t : g.tensors()) {
      if (t.view_of == kNoTensor) continue;
      const TensorId base = mm.storage_of(t.id);
      EXPECT_EQ(g.tensor(base).view_of, kNoTensor);
      EXPECT_EQ(mm.residency(t.id), mm.residency(base));
      EXPECT_FALSE(mm.can_recompute(t.id)) << "a view is never a victim on its own";
      if (t.producer <= op && op < last_use(g, t.id)) {
        ++checks;
        ASSERT_EQ(mm.residency(base), Residency::kResident) << t.name << " after op " << op;
        EXPECT_EQ(mm.device_ptr(t.id), mm.device_ptr(base));
      }
    }
    for (TensorId id : mm.evictable()) EXPECT_EQ(g.tensor(id).view_of, kNoTensor);
  };
  run(*rig);
  EXPECT_GT(checks, 0);
  for (const auto& t : g.tensors())
    if (!t.persistent()) {
      EXPECT_EQ(mm.residency(t.id), Residency::kUnallocated) << t.name;
    }
}

// Drop the base between its own last use and its view's: the view's reader recomputes the base.
// Naming the view in the plan acts on the base.
TEST(Views, DroppedBaseIsRecomputedWhenItsViewIsRead) {
  auto ref_rig = make_rig(Plan{});
  const Out ref = run(*ref_rig);
  for (bool name_the_view : {false, true}) {
    SCOPED_TRACE(name_the_view ? "plan names the view" : "plan names the base");
    Graph g = gpt_tiny();
    Plan plan;
    for (TensorId v : forward_views(g)) {
      const TensorId base = g.tensor(v).view_of;
      const int own_last = last_use(g, base);
      // q, k, v heads: the base is a linear output whose inputs are still alive (one recompute each).
      if (last_use(g, v) > own_last && g.op(g.tensor(base).producer).kind == OpKind::kLinear)
        plan.actions.push_back({ActionKind::kDrop, name_the_view ? v : base, own_last});
    }
    ASSERT_EQ(plan.actions.size(), 2u * 3u);
    auto rig = make_rig(plan);
    const Out got = run(*rig);
    expect_identical(got, ref);
    EXPECT_EQ(got.recomputed, plan.actions.size() * kIters);
  }
}

// A dropped tensor read from a view (the transposed heads) holds a lineage reference on the
// view's base: the base, released at its last use, comes back as dropped, and backward
// recomputes both (the linear, then the transpose through the view).
TEST(Views, LineageThroughAViewReachesTheBase) {
  auto ref_rig = make_rig(Plan{});
  const Out ref = run(*ref_rig);
  Graph g = gpt_tiny();
  Plan plan;
  for (const Op& op : g.ops()) {
    if (op.backward || op.kind != OpKind::kTranspose || g.tensor(op.inputs[0]).view_of == kNoTensor) continue;
    int last_forward = op.index;
    for (const Op& r : g.ops())
      for (TensorId in : r.inputs)
        if (in == op.outputs[0] && !r.backward) last_forward = std::max(last_forward, r.index);
    plan.actions.push_back({ActionKind::kDrop, op.outputs[0], last_forward});
  }
  ASSERT_EQ(plan.actions.size(), 2u * 3u);  // q, k, v heads of both layers
  auto rig = make_rig(plan);
  const Out got = run(*rig);
  expect_identical(got, ref);
  EXPECT_EQ(got.recomputed, 2 * plan.actions.size() * kIters);
}

// Swapping a view swaps its base (the next reader, the view's, cancels the copy and keeps the bytes).
TEST(Views, SwapOutThroughAViewActsOnTheBase) {
  auto ref_rig = make_rig(Plan{});
  const Out ref = run(*ref_rig);
  Graph g = gpt_tiny();
  Plan plan;
  size_t bytes = 0;
  for (TensorId v : forward_views(g)) {
    const int own_last = last_use(g, g.tensor(v).view_of);
    if (last_use(g, v) > own_last) {
      plan.actions.push_back({ActionKind::kSwapOut, v, own_last});
      bytes += g.tensor(v).bytes();
    }
  }
  ASSERT_FALSE(plan.actions.empty());
  auto rig = make_rig(plan);
  const Out got = run(*rig);
  expect_identical(got, ref);
  EXPECT_EQ(got.swapped_out, bytes * kIters);
}

}  // namespace
}  // namespace vtensor
