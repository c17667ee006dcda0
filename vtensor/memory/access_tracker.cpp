#include "vtensor/memory/access_tracker.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "vtensor/core/output.h"

namespace vtensor {

std::vector<std::pair<TensorId, int>> use_sequence(const AccessTrace& trace) {
  std::vector<std::pair<TensorId, int>> seq;
  for (const auto& a : trace.accesses)
    if (is_use(a.kind)) seq.emplace_back(a.id, a.op_index);
  return seq;
}

const char* to_string(AccessKind k) {
  switch (k) {
    case AccessKind::kRead: return "read";
    case AccessKind::kWrite: return "write";
    case AccessKind::kRecomputeRead: return "recompute_read";
    case AccessKind::kRecomputeWrite: return "recompute_write";
  }
  return "?";
}

void AccessTracker::begin_iteration(int iteration, double now_ms) {
  trace_.iteration = iteration;
  trace_.accesses.clear();
  trace_.op_ms.clear();
  trace_.op_ms_on_device = false;
  start_ms_ = now_ms;
}

void AccessTracker::record(TensorId id, int op_index, AccessKind kind, double now_ms) {
  if (!enabled_) return;
  trace_.accesses.push_back({id, op_index, kind, static_cast<int64_t>((now_ms - start_ms_) * 1e6)});
}

void AccessTracker::record_op(int op_index, double ms) {
  if (!enabled_) return;
  if (trace_.op_ms.size() <= static_cast<size_t>(op_index)) trace_.op_ms.resize(static_cast<size_t>(op_index) + 1, 0.0);
  trace_.op_ms[static_cast<size_t>(op_index)] = ms;
}

void AccessTracker::write_jsonl(const std::string& path, const Graph& g, const std::vector<AccessTrace>& traces) {
  write_output(path, "trace", [&](std::ostream& out) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : g.tensors()) {
      nlohmann::json inputs = nlohmann::json::array();
      if (t.producer >= 0)
        for (TensorId in : g.op(t.producer).inputs) inputs.push_back(in);
      tensors.push_back({{"id", t.id}, {"name", t.name}, {"bytes", t.bytes()}, {"shape", t.shape.dims()},
                         {"kind", to_string(t.kind)}, {"producer", t.producer}, {"inputs", inputs}});
      if (t.view_of != kNoTensor) tensors.back()["view_of"] = t.view_of;  // shares that tensor's storage
    }
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& op : g.ops())
      ops.push_back({{"index", op.index}, {"kind", to_string(op.kind)}, {"name", op.name}, {"inputs", op.inputs},
                     {"outputs", op.outputs}, {"inplace", op.inplace}, {"workspace", op.workspace_bytes},
                     {"flops", op.flops}, {"backward", op.backward}, {"optimizer", op.optimizer}});
    nlohmann::json op_times = nlohmann::json::array();
    for (const auto& tr : traces)
      op_times.push_back({{"iter", tr.iteration}, {"ms", tr.op_ms}, {"on_device", tr.op_ms_on_device}});
    out << nlohmann::json{{"type", "graph"}, {"format", "vtensor-trace"}, {"version", 2}, {"num_ops", g.num_ops()},
                          {"tensors", tensors}, {"ops", ops}, {"op_times", op_times}}
               .dump()
        << "\n";
    for (const auto& tr : traces)
      for (const auto& a : tr.accesses)
        out << nlohmann::json{{"type", "access"}, {"iter", tr.iteration}, {"id", a.id}, {"op", a.op_index},
                              {"kind", to_string(a.kind)}, {"t_ns", a.time_ns}}
                   .dump()
            << "\n";
  });
}

}  // namespace vtensor
