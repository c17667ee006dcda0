// Op times measured on a device, for the sim to charge instead of its cost model (`--op-times
// FILE`): the per-op CSV `bench/sim_vs_device.py --ops-out` writes on a GPU machine (columns
// op, name, kind, flops, bytes, measured_ms, predicted_ms; docs/gpu-runs/*/sim_vs_device_ops_*.csv).
// Only "op" and "measured_ms" are needed; "kind" and "flops", where given, must be the op's in the
// graph, so a file recorded for another model or batch is refused.
#pragma once
#include <string>
#include <vector>

#include "vtensor/core/graph.h"

namespace vtensor {

// Per op index, the measured time in ms. Throws std::invalid_argument naming the file, the row and
// what was wrong (a missing column, an op missing or twice, another kind or FLOPs, a bad time).
std::vector<double> load_op_times(const std::string& path, const Graph& g);
// The same from the file's text; `path` names it in the messages.
std::vector<double> read_op_times(const std::string& text, const std::string& path, const Graph& g);

}  // namespace vtensor
