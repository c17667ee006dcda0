// Published figures of the GPUs the sim backend models, by name, and a loader for more from a
// JSON file (--gpu-file). Only vendor figures here; how much of them real kernels reach is the
// cost model's business (cost_model.h), unless a loaded GPU carries a calibration (kind_scale:
// per op kind, the measured time over the cost model's, fitted by bench/calibrate_gpu.py) or a
// host model (HostModel, fitted by bench/fit_host.py).
#pragma once
#include <cstddef>
#include <istream>
#include <string>
#include <vector>

#include "vtensor/ops/op.h"

namespace vtensor {

// The host that issues the device's work, as the sim models it where a loaded GPU gives one
// ("host" in a --gpu-file entry). The host runs ahead of the device streams: each op, allocation,
// copy, event, moved block and policy action costs it the time below, a kernel starts no earlier
// than the host issued it, and the host waits where the runtime waits (the loss read back, a
// host wait on a copy). Off (the built-in GPUs): the device never waits for the host.
struct HostModel {
  bool on = false;
  std::vector<double> op_us;  // per OpKind (indexed by its value): issuing one op's kernels
  double alloc_us = 0;        // per device allocation by the memory manager (outputs, scratch)
  double copy_us = 0;         // per host<->device copy issued
  double event_us = 0;        // per event recorded
  double move_us = 0;         // per block a compaction moves
  double action_us = 0;       // per policy action (swap-out, prefetch, drop, compression)
  // What a copy adds on the device when it is queued behind another on its stream (the memory
  // manager's calibration measures it on cuda: the report's link.queued_copy_ms).
  double queued_copy_us = 0;
  bool loss_sync = true;  // the host reads the loss back: it waits at the loss op for the device
};

struct GpuSpec {
  std::string name;
  std::string description;
  size_t memory_bytes = 0;   // device memory
  double fp32_tflops = 0;    // peak FP32 (no tensor cores: the models train in FP32)
  double hbm_gbps = 0;       // device memory bandwidth, GB/s (1e9 bytes)
  double h2d_gbps = 0;       // host link, host to device, GB/s (theoretical)
  double d2h_gbps = 0;       // host link, device to host, GB/s (theoretical)
  double launch_us = 5;      // kernel launch overhead
  // A calibration: per OpKind (indexed by its value), the factor the cost model multiplies its
  // prediction of that kind's ops by. Empty: none (the built-in GPUs).
  std::vector<double> kind_scale;
  // The fraction of h2d_gbps / d2h_gbps a pinned copy reaches; 0: the cost model's kLinkEfficiency.
  // A calibration gives the link's measured figures with 1.
  double link_efficiency = 0;
  HostModel host;
};

const std::vector<GpuSpec>& gpu_table();
std::vector<std::string> gpu_names();
// A built-in GPU by name, or one of those loaded with load_gpu_file(). Throws
// std::invalid_argument naming the accepted names.
const GpuSpec& find_gpu(const std::string& name);
// Reads {"name": ..., "memory": "16GiB" | bytes, "fp32_tflops": ..., "hbm_gbps": ...,
// "h2d_gbps": ..., "d2h_gbps": ..., "launch_us": ...} (one object or an array of them) and makes
// the GPUs findable by name. An entry with "base": NAME starts from that GPU's figures (built in
// or loaded before), and the fields it gives replace them. "kind_scale": {"conv2d": 1.3, ...}
// (op kind names as `vtensor costs` writes them, factors > 0) calibrates the cost model per op
// kind, and "link_efficiency" (in (0, 1]) the host link. "host": {"op_us": {"default": 8,
// "conv2d": 40, ...}, "alloc_us", "copy_us", "event_us", "move_us", "action_us",
// "queued_copy_us" (each >= 0), "loss_sync": true} turns the host model on (HostModel). Throws
// std::invalid_argument naming the file and the bad field.
std::vector<std::string> load_gpu_file(const std::string& path);
// The parse and checks of load_gpu_file without registering anything; `path` names the input in
// the messages.
std::vector<GpuSpec> read_gpu_specs(std::istream& in, const std::string& path);
// Validates a spec (positive figures); throws std::invalid_argument naming the field.
void check_gpu_spec(const GpuSpec& g, const std::string& where);

}  // namespace vtensor
