// Op definitions: kinds, attributes, and what the memory manager and cost models need to
// know about each (FLOPs, workspace, whether a recomputation may repeat it). Kernels live in
// the backends; an Op here is only a description.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vtensor {

using TensorId = int32_t;
constexpr TensorId kNoTensor = -1;

enum class OpKind {
  kData,             // -> x, labels (synthetic, seeded by the iteration)
  kConv2d,           // x, w [, b] -> y
  kConv2dBwdData,    // dy, w -> dx
  kConv2dBwdFilter,  // dy, x -> dw [, db]
  kBatchNorm,        // x, gamma, beta, running_mean*, running_var* -> y, save_mean, save_invstd
  kBatchNormBwd,     // dy, x, gamma, save_mean, save_invstd -> dx, dgamma, dbeta
  kRelu,             // x -> y
  kReluBwd,          // dy, y -> dx
  kMaxPool,          // x -> y
  kMaxPoolBwd,       // dy, x -> dx
  kGlobalAvgPool,    // x -> y
  kGlobalAvgPoolBwd, // dy -> dx
  kLinear,           // x, w [, b] -> y
  kLinearBwd,        // dy, x, w -> [dx], dw [, db]
  kAdd,              // a, b -> y
  kFlatten,          // x -> y (a copy for now: storage sharing arrives with views)
  kReshapeBwd,       // dy -> dx (copy back to the input's shape)
  kDropout,          // x -> y
  kDropoutBwd,       // dy -> dx
  kSoftmaxCE,        // logits, labels -> loss[1]
  kSoftmaxCEBwd,     // logits, labels -> dlogits
  kSgdMomentum,      // w*, g, m* -> (in place)
  kReplay,           // an op of a replayed trace: opaque, takes its recorded time (sim backend only)
};
const char* to_string(OpKind k);

struct OpAttrs {
  int stride = 1, pad = 0, kernel = 1;  // conv / pool
  bool has_bias = false;                // conv, linear (and their backward: db output)
  bool has_dx = true;                   // linear backward: produce dx
  float p = 0.f;                        // dropout
  uint64_t seed = 0;                    // dropout, data
  float eps = 1e-5f, momentum = 0.1f;   // batch norm
  float lr = 0.f, sgd_momentum = 0.f, weight_decay = 0.f;  // sgd
  int num_classes = 0;                  // data
};

struct Op {
  int index = -1;
  OpKind kind;
  std::string name;
  int layer = -1;               // the model builder's layer this op belongs to
  bool backward = false;        // appended by autodiff
  bool optimizer = false;       // optimizer step
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  std::vector<TensorId> inplace;  // inputs the op writes (running stats, weights, momentum)
  OpAttrs attrs;
  size_t workspace_bytes = 0;   // scratch the kernel needs, allocated from the budget
  double flops = 0;             // for cost models and reports
  double recorded_ms = 0;       // kReplay: the op's recorded time
};

// A recomputation may repeat this op: it is a pure function of its inputs (in-place side
// effects such as running statistics are skipped when the kernel is told it recomputes).
bool is_recomputable(const Op& op);

}  // namespace vtensor
