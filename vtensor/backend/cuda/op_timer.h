// Device time per op, from CUPTI's activity records: the kernels, copies and memsets that one op's
// launch enqueued, each attributed to the op through an external correlation id pushed around the
// launch, their GPU start-to-end times summed. Neither the host's launch time nor the GPU's idle
// time while the host prepares (cuDNN's algorithm queries, lazy kernel loading in the first
// iteration) counts, which the host clock around an asynchronous launch gets wrong both ways.
// Used for a policy's measured iteration only (Backend::begin_op_timing); work enqueued outside a
// timed launch (swaps, codecs, recomputation) is not attributed to any op.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace vtensor::cuda {

class OpTimer {
 public:
  // Enables the activity records; false (with why()) where CUPTI cannot trace here.
  bool start();
  bool active() const { return active_; }
  // Attributes what this thread enqueues until pop() to op `op_index`.
  void push(int op_index);
  void pop();
  // Flushes the records (the caller has synchronized the device), disables them and returns per
  // op index the summed device time in ms (num_ops entries; 0 where an op enqueued nothing).
  std::vector<double> stop(size_t num_ops);
  const std::string& why() const { return why_; }

 private:
  bool active_ = false;
  std::string why_;
};

}  // namespace vtensor::cuda
