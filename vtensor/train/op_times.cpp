#include "vtensor/train/op_times.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "vtensor/core/input.h"

namespace vtensor {
namespace {

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::string f;
  std::istringstream in(line);
  while (std::getline(in, f, ',')) out.push_back(f);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

int column(const std::vector<std::string>& header, const std::string& name) {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int>(i);
  return -1;
}

}  // namespace

std::vector<double> load_op_times(const std::string& path, const Graph& g) {
  return read_op_times(read_input(path, "--op-times '" + path + "'"), path, g);
}

std::vector<double> read_op_times(const std::string& text, const std::string& path, const Graph& g) {
  const std::string where = "--op-times '" + path + "'";
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) throw std::invalid_argument(where + ": empty; accepted: a CSV with columns op, measured_ms");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const auto header = fields(line);
  const int op_col = column(header, "op"), ms_col = column(header, "measured_ms");
  const int kind_col = column(header, "kind"), flops_col = column(header, "flops");
  if (op_col < 0 || ms_col < 0)
    throw std::invalid_argument(where + ": the header has no 'op' or no 'measured_ms' column; accepted: a CSV with "
                                "columns op, measured_ms (and name), as bench/sim_vs_device.py --ops-out writes");
  std::vector<double> ms(g.num_ops(), -1);
  size_t row = 1;
  while (std::getline(in, line)) {
    ++row;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const auto f = fields(line);
    const std::string at = where + " row " + std::to_string(row);
    if (f.size() != header.size())
      throw std::invalid_argument(at + ": " + std::to_string(f.size()) + " fields, the header has " + std::to_string(header.size()));
    size_t used = 0;
    long op = -1;
    try {
      op = std::stol(f[static_cast<size_t>(op_col)], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (!used || used != f[static_cast<size_t>(op_col)].size() || op < 0 || static_cast<size_t>(op) >= g.num_ops())
      throw std::invalid_argument(at + ": op '" + f[static_cast<size_t>(op_col)] + "' is not an op index of this graph (0 to " +
                                  std::to_string(g.num_ops() - 1) + ")");
    const Op& o = g.op(static_cast<int>(op));
    // The op's kind and FLOPs say it is the same op (names are not kept from one version to the next).
    const bool same_kind = kind_col < 0 || f[static_cast<size_t>(kind_col)] == to_string(o.kind);
    const bool same_flops = flops_col < 0 || std::abs(std::strtod(f[static_cast<size_t>(flops_col)].c_str(), nullptr) - o.flops) <=
                                                 1e-9 * std::max(1.0, std::abs(o.flops));
    if (!same_kind || !same_flops)
      throw std::invalid_argument(at + ": op " + std::to_string(op) + " is a " + (kind_col < 0 ? "?" : f[static_cast<size_t>(kind_col)]) +
                                  " of " + (flops_col < 0 ? "?" : f[static_cast<size_t>(flops_col)]) + " FLOPs there and '" +
                                  o.name + "', a " + to_string(o.kind) + " of " + std::to_string(static_cast<uint64_t>(o.flops)) +
                                  " FLOPs, in this graph; accepted: times recorded for the same model and batch");
    double v = -1;
    try {
      v = std::stod(f[static_cast<size_t>(ms_col)], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (!used || !std::isfinite(v) || v < 0)
      throw std::invalid_argument(at + ": measured_ms '" + f[static_cast<size_t>(ms_col)] + "' must be a time >= 0");
    if (ms[static_cast<size_t>(op)] >= 0) throw std::invalid_argument(at + ": op " + std::to_string(op) + " is given twice");
    ms[static_cast<size_t>(op)] = v;
  }
  for (size_t k = 0; k < ms.size(); ++k)
    if (ms[k] < 0)
      throw std::invalid_argument(where + ": no time for op " + std::to_string(k) + " ('" + g.op(static_cast<int>(k)).name +
                                  "'); accepted: one row per op of the graph (" + std::to_string(g.num_ops()) + ")");
  return ms;
}

}  // namespace vtensor
