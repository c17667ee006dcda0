// The memory manager's unit tests' rig (tests/unit/test_memory_manager*.cpp): a policy that
// hands out a fixed plan, the pieces Trainer builds around it, runs compared bit for bit, the
// tensors the plans name, and training through the Trainer.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vtensor/backend/backend.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/memory_manager.h"
#include "vtensor/memory/plan.h"
#include "vtensor/memory/planning_hooks.h"
#include "vtensor/memory/policy.h"
#include "vtensor/models/models.h"
#include "vtensor/train/executor.h"
#include "vtensor/train/trainer.h"

namespace vtensor::test {

inline constexpr int kIters = 3;

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

inline ModelConfig tiny(const std::string& name, int batch) {
  ModelConfig m;
  m.name = name;
  m.batch = batch;
  return resolve_model(m);
}

inline std::unique_ptr<Rig> make_rig(const ModelConfig& model, Plan plan, size_t budget = kDefaultCpuBudget) {
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

inline std::vector<float> read_tensor(MemoryManager& mm, const Graph& g, TensorId id) {
  std::vector<float> v(static_cast<size_t>(g.tensor(id).shape.numel()));
  mm.read(id, v.data());
  return v;
}

struct RunOut {
  std::vector<IterationStats> stats;
  std::vector<std::vector<float>> params, buffers;  // buffers: batch-norm running statistics
};

inline RunOut run(Rig& rig, int iters = kIters) {
  RunOut out;
  for (int i = 0; i < iters; ++i) out.stats.push_back(rig.exec->run_iteration(i));
  for (TensorId p : rig.graph.params) out.params.push_back(read_tensor(*rig.mm, rig.graph, p));
  for (const auto& t : rig.graph.tensors())
    if (t.kind == TensorKind::kBuffer) out.buffers.push_back(read_tensor(*rig.mm, rig.graph, t.id));
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline void expect_same_losses(const std::vector<IterationStats>& a, const std::vector<IterationStats>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(&a[i].loss, &b[i].loss, sizeof(float)), 0)
        << "iteration " << i << ": loss " << a[i].loss << " vs " << b[i].loss;
}

inline void expect_same_tensors(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                                const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i], b[i])) << what << " #" << i << " differs";
}

inline void expect_identical(const RunOut& got, const RunOut& ref) {
  expect_same_losses(got.stats, ref.stats);
  expect_same_tensors(got.params, ref.params, "param");
  expect_same_tensors(got.buffers, ref.buffers, "buffer");
}

// Forward / backward uses of a forward-produced tensor.
struct Uses {
  int producer = -1, last_forward = -1, first_backward = -1;
};

inline Uses uses_of(const Graph& g, TensorId id) {
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

inline bool is_forward_activation(const Graph& g, TensorId id) {
  const TensorInfo& t = g.tensor(id);
  return t.kind == TensorKind::kActivation && t.producer >= 0 && !g.op(t.producer).backward &&
         !g.op(t.producer).optimizer;
}

// Forward activations whose name contains `part`, in id order.
inline std::vector<TensorId> activations_named(const Graph& g, const std::string& part) {
  std::vector<TensorId> out;
  for (const auto& t : g.tensors())
    if (is_forward_activation(g, t.id) && t.name.find(part) != std::string::npos) out.push_back(t.id);
  return out;
}

// Forward ReLU maps whose gap between the last forward and the first backward use is 6 ops or
// more: room to compress and bring them back in between.
inline std::vector<TensorId> long_gap_relu_maps(const Graph& g) {
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
inline Action bitmask_after_forward(const Graph& g, TensorId id) {
  Action a{ActionKind::kCompress, id, uses_of(g, id).last_forward, uses_of(g, id).last_forward + 2};
  a.codec = Codec::kBitmask;
  a.capacity = codec_bound(Codec::kBitmask, static_cast<size_t>(g.tensor(id).shape.numel()));
  return a;
}

inline RunOut baseline(const ModelConfig& model) {
  auto rig = make_rig(model, Plan{});
  return run(*rig);
}

inline TrainConfig trainer_config(const std::string& policy, size_t budget) {
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

inline TrainerOut train(const TrainConfig& c) {
  Trainer t(c);
  TrainerOut out;
  out.result = t.run();
  out.params = t.read_params();
  return out;
}

inline size_t max_peak(const TrainResult& r) {
  size_t p = 0;
  for (const auto& s : r.iterations) p = std::max(p, s.peak_allocated);
  return p;
}
}  // namespace vtensor::test
