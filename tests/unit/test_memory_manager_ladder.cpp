// MemoryManager under pressure and as policies see it (cpu backend): the OOM ladder's errors,
// compaction to a layout (move_to_layout), the MemoryView a policy sees, and the access tracker.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/memory_manager_rig.h"
#include "vtensor/backend/backend.h"
#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/memory_manager.h"
#include "vtensor/memory/plan.h"
#include "vtensor/memory/policy.h"
#include "vtensor/models/models.h"
#include "vtensor/train/executor.h"
#include "vtensor/train/trainer.h"

namespace vtensor {
namespace {

using namespace vtensor::test;  // the rig: tests/support/memory_manager_rig.h

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
