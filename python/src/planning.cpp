#include "planning.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "vtensor/core/graph.h"
#include "vtensor/policy/checkpoint.h"

namespace vtensor::pyb {
namespace {

struct UnitGraph {
  Graph g;
  std::vector<TensorId> saved, out;  // per unit
  std::vector<int> fwd_op;
};

TensorId add(Graph& g, const std::string& name, size_t bytes, TensorKind kind) {
  TensorInfo t;
  t.name = name;
  t.shape = Shape{static_cast<int64_t>((bytes + 3) / 4)};  // f32 elements: bytes rounded up to 4
  t.kind = kind;
  return g.add_tensor(t);
}

// The chain as a graph for one choice: a chosen module's backward also reads its inputs (the
// checkpoint saves them), and a module output has bytes only where something saves it (the
// figure is saved bytes, so an output only passed on to the next module counts nothing).
UnitGraph build(const std::vector<ModuleUnit>& units, const std::vector<int>& chosen) {
  UnitGraph u;
  Graph& g = u.g;
  const int n = static_cast<int>(units.size());
  const TensorId data = add(g, "input", 0, TensorKind::kData);
  Op d;
  d.kind = OpKind::kData;
  d.name = "input";
  d.outputs = {data};
  g.add_op(d);
  for (int i = 0; i < n; ++i) {
    const ModuleUnit& m = units[static_cast<size_t>(i)];
    g.add_layer(m.name, LayerKind::kOther);
    u.saved.push_back(add(g, m.name + ".saved", m.saved_bytes, TensorKind::kActivation));
    bool kept = false;
    for (int k = 0; k < n; ++k) {
      const ModuleUnit& o = units[static_cast<size_t>(k)];
      kept |= std::find(o.saves.begin(), o.saves.end(), i) != o.saves.end();
      kept |= std::find(chosen.begin(), chosen.end(), k) != chosen.end() &&
              std::find(o.inputs.begin(), o.inputs.end(), i) != o.inputs.end();
    }
    u.out.push_back(add(g, m.name + ".out", kept ? m.out_bytes : 0, TensorKind::kActivation));
    Op f;
    f.kind = OpKind::kReplay;
    f.name = m.name;
    f.layer = i;
    f.flops = m.cost_ns;
    for (int j : m.inputs) {
      if (j >= i) throw std::invalid_argument("module '" + m.name + "' reads the output of a later module");
      f.inputs.push_back(j < 0 ? data : u.out[static_cast<size_t>(j)]);
    }
    if (f.inputs.empty()) f.inputs.push_back(data);
    f.outputs = {u.saved.back(), u.out.back()};
    u.fwd_op.push_back(g.add_op(f));
  }
  TensorId grad = kNoTensor;
  for (int i = n - 1; i >= 0; --i) {
    const ModuleUnit& m = units[static_cast<size_t>(i)];
    Op b;
    b.kind = OpKind::kReplay;
    b.name = m.name + ".backward";
    b.backward = true;
    b.inputs.push_back(u.saved[static_cast<size_t>(i)]);
    for (int j : m.saves)
      if (j >= 0 && j <= i) b.inputs.push_back(u.out[static_cast<size_t>(j)]);
    if (std::find(chosen.begin(), chosen.end(), i) != chosen.end())
      for (int j : m.inputs)
        if (j >= 0) b.inputs.push_back(u.out[static_cast<size_t>(j)]);
    if (grad != kNoTensor) b.inputs.push_back(grad);
    grad = add(g, m.name + ".grad", 0, TensorKind::kGradient);
    b.outputs = {grad};
    g.add_op(b);
  }
  return u;
}

// Drops that carry out "checkpoint these modules": what each saved apart from its inputs (kept by
// the checkpoint, as torch's does), and its output when only its own backward reads it.
Plan checkpoint_plan(const UnitGraph& u, const std::vector<ModuleUnit>& units, const std::vector<int>& chosen) {
  Plan p;
  const int n = static_cast<int>(units.size());
  std::vector<char> is_chosen(static_cast<size_t>(n), 0);
  for (int c : chosen) is_chosen.at(static_cast<size_t>(c)) = 1;
  for (int i : chosen) {
    p.actions.push_back({ActionKind::kDrop, u.saved[static_cast<size_t>(i)], u.fwd_op[static_cast<size_t>(i)]});
    bool others = false;  // another module keeps this output for its backward, or as a checkpoint input
    int last_fwd = u.fwd_op[static_cast<size_t>(i)];
    bool own = false;
    for (int k = 0; k < n; ++k) {
      const ModuleUnit& m = units[static_cast<size_t>(k)];
      const bool reads = std::find(m.inputs.begin(), m.inputs.end(), i) != m.inputs.end();
      if (reads) last_fwd = std::max(last_fwd, u.fwd_op[static_cast<size_t>(k)]);
      const bool saves = std::find(m.saves.begin(), m.saves.end(), i) != m.saves.end();
      if (k == i) own = saves;
      else if (saves || (reads && is_chosen[static_cast<size_t>(k)])) others = true;
    }
    if (own && !others) p.actions.push_back({ActionKind::kDrop, u.out[static_cast<size_t>(i)], last_fwd});
  }
  std::stable_sort(p.actions.begin(), p.actions.end(), [](const Action& a, const Action& b) { return a.op < b.op; });
  return p;
}

}  // namespace

size_t predict_checkpoint_peak(const std::vector<ModuleUnit>& units, const std::vector<int>& chosen) {
  const UnitGraph u = build(units, chosen);
  return predict_drop_plan_peak(u.g, checkpoint_plan(u, units, chosen));
}

CheckpointChoice choose_checkpoints(const std::vector<ModuleUnit>& units, size_t budget) {
  const int n = static_cast<int>(units.size());
  CheckpointChoice out;
  auto peak_of = [&](std::vector<int> c) {
    std::sort(c.begin(), c.end());
    ++out.evaluated;
    return predict_checkpoint_peak(units, c);
  };
  auto cost_of = [&](const std::vector<int>& c) {
    double s = 0;
    for (int i : c) s += units[static_cast<size_t>(i)].cost_ns;
    return s;
  };
  out.peak_none = peak_of({});
  std::vector<int> chosen;
  size_t peak = out.peak_none;
  // Greedy by bytes freed per second of recompute (a module that saves nothing frees nothing).
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Bytes a checkpoint of module i frees: what it saves apart from its inputs, and its output when
  // only its own backward keeps it.
  auto freed = [&](int i) {
    const ModuleUnit& m = units[static_cast<size_t>(i)];
    double b = static_cast<double>(m.saved_bytes);
    bool own = std::find(m.saves.begin(), m.saves.end(), i) != m.saves.end(), others = false;
    for (int k = 0; k < n; ++k)
      if (k != i) {
        const auto& s = units[static_cast<size_t>(k)].saves;
        others |= std::find(s.begin(), s.end(), i) != s.end();
      }
    return own && !others ? b + static_cast<double>(m.out_bytes) : b;
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return freed(a) / std::max(units[static_cast<size_t>(a)].cost_ns, 1.0) >
           freed(b) / std::max(units[static_cast<size_t>(b)].cost_ns, 1.0);
  });
  size_t lowest = peak;
  std::vector<int> lowest_choice;
  for (int i : order) {
    if (budget > 0 && peak <= budget) break;
    if (freed(i) <= 0) continue;
    chosen.push_back(i);
    peak = peak_of(chosen);
    if (peak < lowest) {
      lowest = peak;
      lowest_choice = chosen;
    }
  }
  if (budget > 0 && peak <= budget) {
    // Prune: drop the costliest chosen modules whose removal still fits.
    std::vector<int> by_cost = chosen;
    std::stable_sort(by_cost.begin(), by_cost.end(), [&](int a, int b) {
      return units[static_cast<size_t>(a)].cost_ns > units[static_cast<size_t>(b)].cost_ns;
    });
    for (int i : by_cost) {
      std::vector<int> trial;
      for (int c : chosen)
        if (c != i) trial.push_back(c);
      const size_t pk = peak_of(trial);
      if (pk <= budget) {
        chosen = trial;
        peak = pk;
      }
    }
    out.fits = true;
    out.rule = chosen.empty() ? "nothing to checkpoint: the unmanaged peak fits the budget"
                              : "least recompute within the budget";
  } else {
    chosen = lowest_choice;
    peak = lowest;
    out.fits = budget == 0;
    out.rule = budget > 0 ? "lowest peak (no choice fits the budget)" : "lowest peak";
  }
  std::sort(chosen.begin(), chosen.end());
  out.chosen = chosen;
  out.peak = peak;
  out.recompute_ns = cost_of(chosen);
  return out;
}

}  // namespace vtensor::pyb
