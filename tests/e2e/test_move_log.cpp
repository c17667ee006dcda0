// The memory manager's move log: an iteration's swap-outs, prefetches and drops, each at the op
// boundary it happened at, planned or evicted; what a runtime outside vtensor follows
// (vtensor.torch.auto). It counts what the counters count, on every policy that moves.
#include <gtest/gtest.h>

#include <algorithm>

#include "vtensor/memory/allocator.h"
#include "vtensor/models/models.h"
#include "vtensor/train/trainer.h"

using namespace vtensor;

namespace {

struct Logged {
  std::vector<Move> moves;
  MemoryCounters counters;
  size_t ops = 0;
};

Logged run_logged(const std::string& policy, double budget_fraction, bool log = true) {
  TrainConfig cfg;
  cfg.model.name = "resnet-tiny";
  cfg.backend = "sim";
  cfg.gpu = "p100-16g";
  cfg.iters = 1;
  size_t peak = Trainer(cfg).run().iterations[0].peak_allocated;
  cfg.policy = policy;
  cfg.budget = align_up(static_cast<size_t>(static_cast<double>(peak) * budget_fraction));
  cfg.iters = 3;
  Trainer t(cfg);
  t.memory().set_move_log_enabled(log);
  const TrainResult r = t.run();
  return {t.memory().moves(), r.iterations.back().counters, t.graph().num_ops()};
}

size_t count(const Logged& l, Move::Kind k) {
  return static_cast<size_t>(std::count_if(l.moves.begin(), l.moves.end(), [&](const Move& m) { return m.kind == k; }));
}

TEST(MoveLog, CountsWhatTheCountersCountAtOpBoundaries) {
  for (const std::string policy : {"lru", "lru-recompute", "capuchin", "dtr"}) {
    SCOPED_TRACE(policy);
    const Logged l = run_logged(policy, 0.5);
    ASSERT_FALSE(l.moves.empty());
    EXPECT_EQ(count(l, Move::Kind::kSwapOut), l.counters.swap_outs);
    EXPECT_EQ(count(l, Move::Kind::kDrop), l.counters.dropped);
    EXPECT_GE(count(l, Move::Kind::kPrefetch), l.counters.swap_ins);  // and swap-outs undone on the device
    for (const Move& m : l.moves) {
      EXPECT_GE(m.point, 0);
      EXPECT_LE(m.point, static_cast<int>(l.ops));
    }
    EXPECT_TRUE(std::is_sorted(l.moves.begin(), l.moves.end(), [](const Move& a, const Move& b) { return a.point < b.point; }));
  }
}

TEST(MoveLog, TellsAPlanFromTheLaddersEvictions) {
  const Logged lru = run_logged("lru", 0.5);
  EXPECT_TRUE(std::none_of(lru.moves.begin(), lru.moves.end(), [](const Move& m) { return m.planned; }));
  const Logged cap = run_logged("capuchin", 0.5);  // its guided iterations follow a plan
  EXPECT_TRUE(std::any_of(cap.moves.begin(), cap.moves.end(), [](const Move& m) { return m.planned; }));
}

TEST(MoveLog, IsEmptyWhereNothingMovesOrNothingIsLogged) {
  EXPECT_TRUE(run_logged("none", 1.0).moves.empty());
  EXPECT_TRUE(run_logged("lru", 0.5, false).moves.empty());
}

}  // namespace

namespace {

// A pinned tensor (TensorInfo::pinned: a PyTorch step's tensors autograd does not save) never
// moves, under any policy: the moves fall on the others only.
TEST(MoveLog, APinnedTensorNeverMoves) {
  TrainConfig cfg;
  cfg.model.name = "resnet-tiny";
  cfg.backend = "sim";
  cfg.gpu = "p100-16g";
  cfg.iters = 1;
  const size_t peak = Trainer(cfg).run().iterations[0].peak_allocated;
  auto g = std::make_shared<Graph>(build_model(resolve_model(cfg.model)));
  build_backward(*g, cfg.optimizer);
  size_t pinned = 0;
  for (size_t i = 0; i < g->num_tensors(); i += 2)  // every other activation
    if (!g->tensor(static_cast<TensorId>(i)).persistent()) g->tensor(static_cast<TensorId>(i)).pinned = true, ++pinned;
  ASSERT_GT(pinned, 0u);
  for (const std::string policy : {"lru", "lru-recompute", "capuchin", "dtr"}) {
    SCOPED_TRACE(policy);
    TrainConfig c = cfg;
    c.graph = g;
    c.policy = policy;
    c.budget = align_up(peak * 3 / 4);
    c.iters = 3;
    Trainer t(c);
    t.memory().set_move_log_enabled(true);
    t.run();
    ASSERT_FALSE(t.memory().moves().empty());
    for (const Move& m : t.memory().moves()) EXPECT_FALSE(g->tensor(m.id).pinned) << g->tensor(m.id).name << " moved";
  }
}

}  // namespace
