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
  kFlatten,          // x -> y (a copy; kReshape is the view, flatten kept as is so CNN figures stay put)
  kReshapeBwd,       // dy -> dx (copy back to the input's shape)
  kDropout,          // x -> y
  kDropoutBwd,       // dy -> dx
  kSoftmaxCE,        // logits, labels -> loss[1]
  kSoftmaxCEBwd,     // logits, labels -> dlogits
  kSgdMomentum,      // w*, g, m* -> (in place)
  // transformers
  kTokenData,        // -> tokens[B*T], targets[B*T] (synthetic token sequences)
  kEmbedding,        // table [, ids] -> y[N, C] (no ids: row n reads table[n % period])
  kEmbeddingBwd,     // dy [, ids] [, acc] -> dtable (= acc + scattered dy when attrs.accumulate)
  kLayerNorm,        // x, gamma, beta -> y, save_mean, save_invstd
  kLayerNormBwd,     // dy, x, gamma, save_mean, save_invstd -> dx, dgamma, dbeta
  kGelu,             // x -> y
  kGeluBwd,          // dy, x -> dx
  kBatchedMatmul,    // a[..,M,K], b[..,K,N] (or [..,N,K] when trans_b) -> alpha * a op(b)
  kBatchedMatmulBwd, // dc, a, b -> da, db
  kSoftmax,          // x -> y (over the last dim; causal masks columns after the row's position)
  kSoftmaxBwd,       // dy, y -> dx
  kReshape,          // x -> y: a view, y shares x's storage (TensorInfo::view_of)
  kTranspose,        // x[A,B,C,D] -> y[A,C,B,D] (a copy)
  kAdam,             // w*, g, m*, v* -> (in place); attrs.decoupled_wd: AdamW
  kReplay,           // an op of a replayed trace: opaque, takes its recorded time (sim backend only)
};
const char* to_string(OpKind k);

// The family an op kind's kernels come in: what a backend's launch dispatches on, so that a new
// kind is classified once, here, and every backend's dispatch stays exhaustive over families.
enum class OpFamily { kData, kConv, kNorm, kPool, kLinear, kMatmul, kElementwise, kLayout, kSoftmax, kEmbedding,
                      kOptimizer, kReplay };
OpFamily op_family(OpKind k);

// Convolution algorithm (ops kConv2d, kConv2dBwdData, kConv2dBwdFilter). Both give the same
// bits; kLean needs less workspace (vDNN's memory-optimal choice), kFast may run faster.
enum class ConvAlgo { kFast, kLean };
const char* to_string(ConvAlgo a);

struct OpAttrs {
  int stride = 1, pad = 0, kernel = 1;  // conv / pool
  bool has_bias = false;                // conv, linear (and their backward: db output)
  bool has_dx = true;                   // linear backward: produce dx
  float p = 0.f;                        // dropout
  uint64_t seed = 0;                    // dropout, data
  float eps = 1e-5f, momentum = 0.1f;   // batch norm
  float lr = 0.f, sgd_momentum = 0.f, weight_decay = 0.f;  // sgd
  int num_classes = 0;                  // data (vocabulary for token data)
  int period = 0;                       // token data: sequence length; embedding without ids: positions
  bool mlm = false;                     // token data: mask some inputs (BERT), targets are the originals
  bool trans_b = false, causal = false;  // batched matmul, softmax
  float alpha = 1.f;                    // batched matmul scale
  float beta1 = 0.9f, beta2 = 0.999f, adam_eps = 1e-8f;  // adam
  bool decoupled_wd = false;            // adamw
  bool accumulate = false;              // embedding backward: last input is a gradient to add to (tied weights)
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
  size_t workspace_lean_bytes = 0;  // scratch under ConvAlgo::kLean (conv ops)
  double flops = 0;             // for cost models and reports
  double recorded_ms = 0;       // kReplay: the op's recorded time
};

// A recomputation may repeat this op: it is a pure function of its inputs (in-place side
// effects such as running statistics are skipped when the kernel is told it recomputes).
bool is_recomputable(const Op& op);

}  // namespace vtensor
