// Records every tensor access of an iteration: (tensor id, op index, kind, time). Capuchin's
// measured execution plans from it; traces written as JSON lines replay anywhere.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "vtensor/core/graph.h"

namespace vtensor {

enum class AccessKind { kRead, kWrite, kRecomputeRead, kRecomputeWrite };
const char* to_string(AccessKind k);

struct TensorAccess {
  TensorId id;
  int op_index;
  AccessKind kind;
  int64_t time_ns;  // since the start of the iteration, on the backend's clock
};

struct AccessTrace {
  int iteration = 0;
  std::vector<TensorAccess> accesses;
  double swap_ns_per_byte = 0;  // measured host<->device copy time per byte; 0: unknown
  std::vector<double> op_ms;  // per op index: its kernel's time on the backend's clock (replay needs it)
  bool op_ms_on_device = false;  // op_ms are the device's times (Backend::end_op_timing), not clock readings
};

// A tensor's reads and writes, the accesses a measured plan is made from (not allocations or frees).
inline bool is_use(AccessKind k) { return k == AccessKind::kRead || k == AccessKind::kWrite; }
// The (tensor, op) sequence of an iteration's reads and writes: a guided iteration whose sequence
// differs from the measured one (new shapes, a new graph) goes back to measuring.
std::vector<std::pair<TensorId, int>> use_sequence(const AccessTrace& trace);

class AccessTracker {
 public:
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  void begin_iteration(int iteration, double now_ms);
  void record(TensorId id, int op_index, AccessKind kind, double now_ms);
  void record_op(int op_index, double ms);
  // Replaces the iteration's op times with the device's (one per op).
  void set_device_op_times(std::vector<double> ms) {
    trace_.op_ms = std::move(ms);
    trace_.op_ms_on_device = true;
  }
  const AccessTrace& current() const { return trace_; }
  void set_swap_ns_per_byte(double v) { trace_.swap_ns_per_byte = v; }

  // One header line with the graph's tensors (id, name, bytes, shape, kind, producer op and its
  // inputs: the lineage), ops (inputs, outputs, in-place inputs, workspace, FLOPs, phase) and
  // each iteration's op times; then one line per access.
  static void write_jsonl(const std::string& path, const Graph& g, const std::vector<AccessTrace>& traces);

 private:
  bool enabled_ = true;
  double start_ms_ = 0;
  AccessTrace trace_;
};

}  // namespace vtensor
