// The static training graph: forward ops from a model builder, then backward and optimizer
// ops appended by autodiff. The executor runs the same op sequence every iteration, so a
// TensorId (its index here) names the same tensor in every iteration.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "vtensor/core/dtype.h"
#include "vtensor/core/shape.h"
#include "vtensor/ops/op.h"

namespace vtensor {

enum class TensorKind {
  kParam,           // persistent, learned
  kOptimizerState,  // persistent (momentum)
  kBuffer,          // persistent, not learned (batch-norm running statistics)
  kData,            // produced by the data op each iteration
  kActivation,      // forward output
  kGradient,        // backward output
};
const char* to_string(TensorKind k);

enum class Init { kZeros, kOnes, kHeNormal, kUniformFanIn };

struct TensorInfo {
  TensorId id = kNoTensor;
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
  TensorKind kind = TensorKind::kActivation;
  int producer = -1;  // op index; -1 for persistent tensors
  int slot = 0;       // output slot in the producer
  bool requires_grad = false;
  Init init = Init::kZeros;
  TensorId view_of = kNoTensor;  // a view: shares this tensor's storage (no block of its own)
  int release_after = -1;  // replay: the op after which the program released it (-1: its last use)
  bool recomputable = true;  // false: its producer's inputs are overwritten while it may be recomputed (DTR logs)
  // The runtime that recorded the graph cannot move it (a PyTorch step's tensors that autograd does
  // not save): never evicted, swapped, dropped or compressed; it may still be recomputed as an input.
  bool pinned = false;
  size_t bytes() const { return static_cast<size_t>(shape.numel()) * dtype_size(dtype); }
  bool persistent() const {
    return kind == TensorKind::kParam || kind == TensorKind::kOptimizerState || kind == TensorKind::kBuffer;
  }
};

enum class LayerKind { kConv, kLinear, kNorm, kActivation, kPool, kOther };

struct Layer {
  std::string name;
  LayerKind kind;
};

class Graph {
 public:
  TensorId add_tensor(TensorInfo info);
  int add_op(Op op);  // assigns op.index, sets producers of its outputs
  int add_layer(std::string name, LayerKind kind);

  const TensorInfo& tensor(TensorId id) const { return tensors_.at(static_cast<size_t>(id)); }
  TensorInfo& tensor(TensorId id) { return tensors_.at(static_cast<size_t>(id)); }
  const Op& op(int i) const { return ops_.at(static_cast<size_t>(i)); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<Layer>& layers() const { return layers_; }
  size_t num_tensors() const { return tensors_.size(); }
  size_t num_ops() const { return ops_.size(); }

  TensorId loss = kNoTensor;  // kNoTensor in replayed graphs
  std::vector<TensorId> params;  // in creation order

  size_t persistent_bytes() const;
  size_t param_count() const;  // scalars in kParam tensors
  // Throws std::logic_error when the graph is inconsistent (an op reads a tensor no earlier op makes, ...).
  void validate() const;

 private:
  std::vector<TensorInfo> tensors_;
  std::vector<Op> ops_;
  std::vector<Layer> layers_;
};

// Unique names for a model's tensors and ops: `base` the first time, then base_2, base_3, ... (a
// ResNet block makes three convolutions and their weights in one layer, a tensor read twice two
// partial gradients and a sum of them).
class UniqueNamer {
 public:
  std::string operator()(const std::string& base) {
    const int k = ++uses_[base];
    return k == 1 ? base : base + "_" + std::to_string(k);
  }

 private:
  std::map<std::string, int> uses_;
};

// 16 hex digits naming the graph's ops (kind, name, inputs, outputs, in-place inputs, workspace)
// and tensors (name, kind, shape, dtype, view): a plan made for one graph (policy auto's saved
// plan) runs only on a graph with the same fingerprint. FNV-1a.
std::string fingerprint(const Graph& g);

enum class OptimizerKind { kSgd, kAdam, kAdamW };
// "sgd", "adam", "adamw"; throws std::invalid_argument naming the accepted values.
OptimizerKind parse_optimizer(const std::string& name);
const char* to_string(OptimizerKind k);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.05f;  // SGD's default; Adam wants ~1e-3 (the CLI picks that when --lr is not given)
  float momentum = 0.9f;
  float weight_decay = 0.f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam / adamw
  // Each parameter's step right after the backward op that completes its gradient, instead of
  // all steps after the backward: the gradient dies there. Same bits (the steps are per tensor).
  bool in_backward = false;
};

// Appends backward ops for `graph.loss` and one optimizer op per parameter (SGD with its
// momentum tensor, or Adam with m and v), after the backward or, with opt.in_backward, inside it. Gradients of tensors used twice are summed with add ops.
void build_backward(Graph& graph, const OptimizerConfig& opt);
// vDNN's in-place ReLU backward (cuDNN writes dX over dY): each relu backward whose dy storage
// dies at that op writes dx over it (dx becomes a view of dy). Same bits; returns the ops changed.
int share_relu_gradients(Graph& graph);

}  // namespace vtensor
