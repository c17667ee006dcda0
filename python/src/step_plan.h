// A recorded PyTorch step planned by a C++ policy: the step's operator log (vtensor.torch.record)
// replayed on the sim backend under the policy and a budget, with the memory manager's move log
// on. The last iteration's moves (swap out, prefetch, drop, compress, each at the op boundary it
// happens at, vtensor/memory/memory_manager.h's Move) are the executed plan the Python side
// follows (vtensor.torch.auto): whatever the policy planned and whatever the OOM ladder evicted.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "vtensor/policy/options.h"

namespace vtensor::pyb {

struct StepMove {
  int point;          // the op before which it is done (num_ops: after the last)
  std::string kind;   // swap_out, prefetch, drop, compress
  std::string tensor; // the log's name of the storage's tensor
  bool planned;       // a policy action; false: an eviction or an on-demand restore
};

struct StepPlan {
  std::vector<StepMove> moves;        // the last iteration's
  std::vector<double> iteration_ms;   // every iteration's time on the sim's clock
  std::vector<size_t> peak_bytes;     // every iteration's peak allocated bytes
  int num_ops = 0;
  std::string summary;                // Policy::summary()
  std::string report;                 // the run's JSON report (report_json)
};

// Throws OutOfMemoryError where the budget cannot hold the step under the policy, and
// std::invalid_argument for a malformed log, an unknown policy or GPU, or a bad option.
StepPlan plan_step(const std::string& log_path, size_t budget, const std::string& policy, const std::string& gpu,
                   const std::string& gpu_file, int iters, const PolicyOptions& options);

}  // namespace vtensor::pyb
