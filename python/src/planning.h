// Planning for the PyTorch hooks, on the C++ planners (no device, no torch):
//   choose_checkpoints: which measured modules to wrap in torch.utils.checkpoint. The module
//     chain becomes a vtensor Graph (one layer and one forward op per module; the op makes the
//     bytes the module saves for backward and its output, reads the outputs of the modules that
//     feed it; backward ops read what each module saved), and a choice is judged by the
//     checkpoint policy's exact peak replay (predict_drop_plan_peak) with the checkpoint search's
//     rule: among the choices that fit the budget the least recompute, else the lowest peak.
//     Deviation from the checkpoint policy's search: it cuts the forward into segments, each
//     re-run as a whole; torch.utils.checkpoint wraps one module at a time (a segment of several
//     modules would need the parent's forward rewritten), so the search here is over subsets of
//     modules: greedy by bytes freed per second of recompute (Capuchin's MSPS), then every chosen
//     module whose removal still fits is removed, the costliest first.
//   plan_capuchin_swap: Capuchin's planner (plan_capuchin, swap mode) on the trace the saved-tensor
//     hooks measured: each pack and unpack is an "op", each saved storage a tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vtensor/policy/capuchin.h"

namespace vtensor::pyb {

struct ModuleUnit {
  std::string name;
  size_t saved_bytes = 0;          // saved for backward, apart from its inputs and output
  size_t out_bytes = 0;            // its output's bytes (views of its input: 0)
  std::vector<int> inputs;         // units whose outputs it reads (-1: from outside the chain)
  std::vector<int> saves;          // units whose outputs it saves for backward (its own: its index)
  double cost_ns = 0;              // measured forward time: the recomputation's cost
};

struct CheckpointChoice {
  std::vector<int> chosen;         // unit indices, ascending
  size_t peak = 0, peak_none = 0;  // predicted, with the choice and with nothing checkpointed
  double recompute_ns = 0;
  bool fits = false;
  int evaluated = 0;               // choices replayed
  std::string rule;
};

// Predicted peak bytes (saved tensors and module outputs) when `chosen` are checkpointed.
size_t predict_checkpoint_peak(const std::vector<ModuleUnit>& units, const std::vector<int>& chosen);
CheckpointChoice choose_checkpoints(const std::vector<ModuleUnit>& units, size_t budget);

}  // namespace vtensor::pyb
