// DTR's eviction heuristic on a hand-built graph and a fake memory view, no device:
// h = cost / (bytes * staleness), cost summed over the evicted neighbourhood.
#include <gtest/gtest.h>

#include <map>

#include "vtensor/policy/dtr.h"

using namespace vtensor;

namespace {

// x = data(); a = relu(x); b = relu(a); c = relu(b); w is a parameter.
struct Chain : MemoryView {
  Graph g;
  TensorId w, x, a, b, c;
  std::map<TensorId, Residency> res;
  std::map<TensorId, uint64_t> last;
  Chain() {
    auto tensor = [&](const char* name, int64_t n, TensorKind kind) {
      TensorInfo t;
      t.name = name;
      t.shape = Shape{n};
      t.kind = kind;
      return g.add_tensor(t);
    };
    w = tensor("w", 64, TensorKind::kParam);
    x = tensor("x", 256, TensorKind::kData);
    a = tensor("a", 256, TensorKind::kActivation);
    b = tensor("b", 256, TensorKind::kActivation);
    c = tensor("c", 256, TensorKind::kActivation);
    auto op = [&](OpKind k, std::vector<TensorId> in, TensorId out) {
      Op o;
      o.kind = k;
      o.name = to_string(k);
      o.inputs = std::move(in);
      o.outputs = {out};
      g.add_op(o);
    };
    op(OpKind::kData, {}, x);
    op(OpKind::kRelu, {x}, a);
    op(OpKind::kRelu, {a}, b);
    op(OpKind::kRelu, {b}, c);
    for (TensorId t : {w, x, a, b, c}) res[t] = Residency::kResident;
    last = {{w, 1}, {x, 2}, {a, 3}, {b, 4}, {c, 5}};
  }
  const Graph& graph() const override { return g; }
  TensorView view(TensorId id) const override {
    const auto& t = g.tensor(id);
    return {id, t.bytes(), res.at(id), false, t.persistent(), last.at(id), 0};
  }
  std::vector<TensorId> evictable() const override {
    std::vector<TensorId> out;
    for (const auto& [id, r] : res)
      if (r == Residency::kResident) out.push_back(id);
    return out;
  }
  bool can_recompute(TensorId id) const override { return !g.tensor(id).persistent(); }
  size_t budget() const override { return 1 << 20; }
  size_t allocated() const override { return 0; }
};

TEST(Dtr, CostSumsTheEvictedNeighbourhood) {
  Chain m;
  DtrPolicy dtr;
  const std::vector<char> none(m.g.num_tensors(), 0);
  const double relu = dtr_op_cost(m.g, m.g.op(1));
  const uint64_t now = 6;
  const double bytes = 1024.0;
  // Nothing evicted: c's cost is its own producer.
  EXPECT_DOUBLE_EQ(dtr.heuristic(m.c, m, now, none), relu / (bytes * (now - 5 + 1)));
  // b dropped: recomputing c re-runs b's producer too (ancestor) ...
  m.res[m.b] = Residency::kDropped;
  EXPECT_DOUBLE_EQ(dtr.heuristic(m.c, m, now, none), 2 * relu / (bytes * (now - 5 + 1)));
  // ... and evicting a would make b's recomputation need a again (descendant).
  EXPECT_DOUBLE_EQ(dtr.heuristic(m.a, m, now, none), 2 * relu / (bytes * (now - 3 + 1)));
  // Chosen earlier in the same round counts as evicted.
  m.res[m.b] = Residency::kResident;
  std::vector<char> chosen = none;
  chosen[static_cast<size_t>(m.b)] = 1;
  EXPECT_DOUBLE_EQ(dtr.heuristic(m.c, m, now, chosen), 2 * relu / (bytes * (now - 5 + 1)));
}

TEST(Dtr, EvictsTheStalestCheapestFirstAndNeverDropsParameters) {
  Chain m;
  DtrPolicy dtr;
  // Equal sizes and op costs: the stalest recomputable tensor goes first (x, last access 2; the
  // data op is cheap), never the parameter w although it is the stalest.
  auto v = dtr.choose_victims(1, m);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].id, m.x);
  EXPECT_EQ(v[0].action, EvictAction::kDrop);
  // Only the parameter left: it is swapped, not dropped.
  for (TensorId t : {m.x, m.a, m.b, m.c}) m.res[t] = Residency::kDropped;
  v = dtr.choose_victims(1, m);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].id, m.w);
  EXPECT_EQ(v[0].action, EvictAction::kSwap);
}

}  // namespace

namespace {

// A replayed op (a DTR log's CALL) costs its recorded time, whatever the sizes it touches.
TEST(Dtr, AReplayedOpCostsItsRecordedTime) {
  Graph g;
  const TensorId t = g.add_tensor({.name = "t", .shape = Shape{1 << 20}, .kind = TensorKind::kActivation});
  Op slow{.kind = OpKind::kReplay, .name = "slow"};
  slow.outputs = {t};
  slow.recorded_ms = 2.5;
  Op fast = slow;
  fast.recorded_ms = 0.5;
  EXPECT_DOUBLE_EQ(dtr_op_cost(g, slow), 2.5e6 + 1);
  EXPECT_DOUBLE_EQ(dtr_op_cost(g, fast), 0.5e6 + 1);
}

}  // namespace
