// Reads the operator logs of DTR's artifact (Kirisame et al., ICLR'21; JSON lines: CONSTANT,
// CALL, MUTATE, COPY, COPY_FROM, ALIAS, RELEASE, MEMORY, ANNOTATE) into what a planner needs:
// one entry per storage (sizes, producer op and its inputs: the lineage) and an access trace
// whose times are the logged operator times laid end to end.
// Storages, not names: COPY gives a storage a second name, an ALIAS result is a view of its
// argument (no bytes of its own). A storage that is mutated in place, or computed from one
// that is, is not recomputable. CONSTANTs (weights, inputs) are persistent.
#pragma once
#include <string>
#include <vector>

#include "vtensor/memory/access_tracker.h"

namespace vtensor {

struct LoggedTensor {
  std::string name;  // the first name the log gave it
  size_t bytes = 0;
  int producer = -1;             // op index; -1 for constants
  std::vector<TensorId> inputs;  // the producer's arguments
  bool persistent = false;
  bool recomputable = false;
};

struct LoggedProgram {
  std::vector<LoggedTensor> tensors;  // indexed by TensorId
  std::vector<std::string> op_names;
  std::vector<int64_t> op_time_ns;
  AccessTrace trace;                  // reads and writes, at each op's start time
  int backward_start_op = -1;
  int64_t total_time_ns = 0;
};

// Throws std::invalid_argument naming the file and line when it cannot be read.
LoggedProgram read_dtr_log(const std::string& path);

}  // namespace vtensor
