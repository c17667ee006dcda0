// Hand-built access traces for the planners' unit tests (Capuchin's planner, the bound, the LP).
#pragma once

#include <initializer_list>
#include <utility>
#include <vector>

#include "vtensor/policy/capuchin_planner.h"

namespace vtensor {

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

}  // namespace vtensor
