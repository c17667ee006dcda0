// Reverse-mode autodiff over the static graph: walks the forward ops backwards and appends
// one backward op (or two for conv) per forward op whose output has a gradient, then the
// optimizer step (or, with in_backward, each parameter's step once its gradient is complete). Gradients reaching a tensor twice (residual connections) are summed.
#include <algorithm>
#include <map>
#include <stdexcept>

#include "vtensor/core/graph.h"

namespace vtensor {
namespace {

class Autodiff {
 public:
  explicit Autodiff(Graph& g) : g_(g) {}

  void run(const OptimizerConfig& opt) {
    const int num_forward = static_cast<int>(g_.num_ops());
    // in_backward: a parameter's gradient is complete once the backward of its first reader has
    // run (backward walks the forward ops in reverse, and only readers add to it).
    std::vector<std::vector<TensorId>> steps_after(static_cast<size_t>(num_forward));
    if (opt.in_backward) {
      std::vector<int> first_reader(g_.num_tensors(), -1);
      for (int i = num_forward - 1; i >= 0; --i)
        for (TensorId t : g_.op(i).inputs) first_reader[static_cast<size_t>(t)] = i;
      for (TensorId p : g_.params)
        if (first_reader[static_cast<size_t>(p)] >= 0) steps_after[static_cast<size_t>(first_reader[static_cast<size_t>(p)])].push_back(p);
    }
    for (int i = num_forward - 1; i >= 0; --i) {
      backward_of(Op(g_.op(i)));  // a copy: add_op reallocates
      for (TensorId p : steps_after[static_cast<size_t>(i)]) step(p, opt);
    }
    if (!opt.in_backward)
      for (TensorId p : g_.params) step(p, opt);
  }

 private:
  // The optimizer op of parameter p (none when its gradient does not reach the loss).
  void step(TensorId p, const OptimizerConfig& opt) {
    auto it = grad_.find(p);
    if (it == grad_.end()) return;  // parameter does not reach the loss
    const TensorInfo pt = g_.tensor(p);
    auto state = [&](const char* what) {
      return g_.add_tensor({.name = pt.name + "." + what, .shape = pt.shape, .kind = TensorKind::kOptimizerState});
    };
    Op op{.name = (opt.kind == OptimizerKind::kSgd ? "sgd." : "adam.") + pt.name, .layer = layer_of(p), .optimizer = true};
    op.attrs.lr = opt.lr;
    op.attrs.weight_decay = opt.weight_decay;
    if (opt.kind == OptimizerKind::kSgd) {
      TensorId mid = state("momentum");
      op.kind = OpKind::kSgdMomentum;
      op.inputs = {p, it->second, mid};
      op.inplace = {p, mid};
      op.attrs.sgd_momentum = opt.momentum;
      op.flops = 4.0 * static_cast<double>(pt.shape.numel());
    } else {
      TensorId m = state("adam_m"), v = state("adam_v");
      op.kind = OpKind::kAdam;
      op.inputs = {p, it->second, m, v};
      op.inplace = {p, m, v};
      op.attrs.beta1 = opt.beta1;
      op.attrs.beta2 = opt.beta2;
      op.attrs.adam_eps = opt.eps;
      op.attrs.decoupled_wd = opt.kind == OptimizerKind::kAdamW;
      op.flops = 12.0 * static_cast<double>(pt.shape.numel());
    }
    g_.add_op(op);
  }

  int layer_of(TensorId p) {
    for (const auto& op : g_.ops())
      for (TensorId in : op.inputs)
        if (in == p) return op.layer;
    return -1;
  }

  TensorId new_grad(TensorId like, const std::string& suffix = "") {
    const TensorInfo& t = g_.tensor(like);
    return g_.add_tensor({.name = grad_names_("grad." + t.name + suffix), .shape = t.shape, .kind = TensorKind::kGradient});
  }

  void accumulate(TensorId t, TensorId g, int layer) {
    if (!g_.tensor(t).requires_grad) return;
    auto it = grad_.find(t);
    if (it == grad_.end()) {
      grad_[t] = g;
      return;
    }
    TensorId sum = new_grad(t, ".sum" + std::to_string(sums_++));
    const double n = static_cast<double>(g_.tensor(t).shape.numel());
    g_.add_op({.kind = OpKind::kAdd, .name = op_names_("grad_sum." + g_.tensor(t).name), .layer = layer, .backward = true,
               .inputs = {it->second, g}, .outputs = {sum}, .flops = n});
    it->second = sum;
  }

  Op bwd(const Op& f, OpKind kind, const std::string& suffix) {
    Op op{.kind = kind, .name = f.name + suffix, .layer = f.layer, .backward = true};
    op.attrs = f.attrs;
    return op;
  }

  // A backward op whose one output is the gradient of f's first input.
  void unary_bwd(const Op& f, OpKind kind, std::vector<TensorId> inputs, double flops) {
    Op op = bwd(f, kind, ".bwd");
    TensorId dx = new_grad(f.inputs[0]);
    op.inputs = std::move(inputs);
    op.outputs = {dx};
    op.flops = flops;
    g_.add_op(op);
    accumulate(f.inputs[0], dx, f.layer);
  }

  void backward_of(const Op& f) {
    if (f.kind == OpKind::kData || f.kind == OpKind::kTokenData || f.optimizer || f.backward) return;
    TensorId y = f.outputs.at(0);
    const TensorInfo yt = g_.tensor(y);
    if (!yt.requires_grad) return;
    TensorId dy = kNoTensor;
    if (f.kind != OpKind::kSoftmaxCE) {
      auto it = grad_.find(y);
      if (it == grad_.end()) return;  // output does not reach the loss
      dy = it->second;
    }
    switch (f.kind) {
      case OpKind::kConv2d: return conv_backward(f, dy);
      case OpKind::kBatchNorm:
      case OpKind::kLayerNorm: return norm_backward(f, dy);
      case OpKind::kRelu: return unary_bwd(f, OpKind::kReluBwd, {dy, y}, f.flops);
      case OpKind::kMaxPool: return unary_bwd(f, OpKind::kMaxPoolBwd, {dy, f.inputs[0]}, 2 * f.flops);
      case OpKind::kGlobalAvgPool: return unary_bwd(f, OpKind::kGlobalAvgPoolBwd, {dy}, f.flops);
      case OpKind::kFlatten: return unary_bwd(f, OpKind::kReshapeBwd, {dy}, f.flops);
      case OpKind::kDropout: return unary_bwd(f, OpKind::kDropoutBwd, {dy}, f.flops);
      case OpKind::kLinear: return linear_backward(f, dy);
      case OpKind::kAdd:
        accumulate(f.inputs[0], dy, f.layer);
        accumulate(f.inputs[1], dy, f.layer);
        return;
      case OpKind::kSoftmaxCE: return unary_bwd(f, OpKind::kSoftmaxCEBwd, {f.inputs[0], f.inputs[1]}, f.flops);
      case OpKind::kEmbedding: return embedding_backward(f, dy);
      case OpKind::kGelu: return unary_bwd(f, OpKind::kGeluBwd, {dy, f.inputs[0]}, 2 * f.flops);
      case OpKind::kBatchedMatmul: return matmul_backward(f, dy);
      case OpKind::kSoftmax: return unary_bwd(f, OpKind::kSoftmaxBwd, {dy, y}, f.flops);
      case OpKind::kReshape: return view_backward(f, dy);
      case OpKind::kTranspose:  // swapping the middle dims twice is the identity
        return unary_bwd(f, OpKind::kTranspose, {dy}, f.flops);
      default:
        throw std::logic_error(std::string("autodiff: no backward for ") + to_string(f.kind));
    }
  }

  void conv_backward(const Op& f, TensorId dy) {
    TensorId x = f.inputs[0], w = f.inputs[1];
    if (g_.tensor(x).requires_grad) {
      Op op = bwd(f, OpKind::kConv2dBwdData, ".bwd_data");
      TensorId dx = new_grad(x);
      op.inputs = {dy, w};
      op.outputs = {dx};
      op.workspace_bytes = f.workspace_bytes;
      op.workspace_lean_bytes = f.workspace_lean_bytes;
      op.flops = f.flops;
      g_.add_op(op);
      accumulate(x, dx, f.layer);
    }
    Op op = bwd(f, OpKind::kConv2dBwdFilter, ".bwd_filter");
    TensorId dw = new_grad(w);
    op.inputs = {dy, x};
    op.outputs = {dw};
    TensorId db = kNoTensor;
    if (f.attrs.has_bias) op.outputs.push_back(db = new_grad(f.inputs[2]));
    op.workspace_bytes = f.workspace_bytes;
    op.workspace_lean_bytes = f.workspace_lean_bytes;
    op.flops = f.flops;
    g_.add_op(op);
    accumulate(w, dw, f.layer);
    if (db != kNoTensor) accumulate(f.inputs[2], db, f.layer);
  }

  // Batch and layer norm both save (y, mean, rstd); backward reads dy, x, gamma and the statistics.
  void norm_backward(const Op& f, TensorId dy) {
    TensorId x = f.inputs[0], gamma = f.inputs[1], beta = f.inputs[2];
    Op op = bwd(f, f.kind == OpKind::kBatchNorm ? OpKind::kBatchNormBwd : OpKind::kLayerNormBwd, ".bwd");
    TensorId dx = new_grad(x), dg = new_grad(gamma), db = new_grad(beta);
    op.inputs = {dy, x, gamma, f.outputs[1], f.outputs[2]};
    op.outputs = {dx, dg, db};
    op.flops = 2 * f.flops;
    g_.add_op(op);
    accumulate(x, dx, f.layer);
    accumulate(gamma, dg, f.layer);
    accumulate(beta, db, f.layer);
  }

  void linear_backward(const Op& f, TensorId dy) {
    TensorId x = f.inputs[0], w = f.inputs[1];
    Op op = bwd(f, OpKind::kLinearBwd, ".bwd");
    op.attrs.has_dx = g_.tensor(x).requires_grad;
    op.inputs = {dy, x, w};
    TensorId dx = kNoTensor, db = kNoTensor;
    if (op.attrs.has_dx) op.outputs.push_back(dx = new_grad(x));
    TensorId dw = new_grad(w);
    op.outputs.push_back(dw);
    if (f.attrs.has_bias) op.outputs.push_back(db = new_grad(f.inputs[2]));
    op.flops = 2 * f.flops;
    g_.add_op(op);
    if (dx != kNoTensor) accumulate(x, dx, f.layer);
    accumulate(w, dw, f.layer);
    if (db != kNoTensor) accumulate(f.inputs[2], db, f.layer);
  }

  void embedding_backward(const Op& f, TensorId dy) {
    // inputs: table [, ids]; the ids carry no gradient. A table that already has a gradient
    // (tied LM head) is added into by the kernel: two [V, C] tensors alive, not three.
    TensorId table = f.inputs[0];
    Op op = bwd(f, OpKind::kEmbeddingBwd, ".bwd");
    TensorId dt = new_grad(table, grad_.count(table) ? ".sum" + std::to_string(sums_++) : "");
    op.inputs = {dy};
    if (f.inputs.size() > 1) op.inputs.push_back(f.inputs[1]);
    op.attrs.accumulate = grad_.count(table) > 0;
    if (op.attrs.accumulate) op.inputs.push_back(grad_[table]);
    op.outputs = {dt};
    op.flops = f.flops;
    g_.add_op(op);
    if (op.attrs.accumulate) grad_[table] = dt;
    else accumulate(table, dt, f.layer);
  }

  void matmul_backward(const Op& f, TensorId dy) {
    TensorId a = f.inputs[0], b = f.inputs[1];
    Op op = bwd(f, OpKind::kBatchedMatmulBwd, ".bwd");
    TensorId da = new_grad(a), db = new_grad(b);
    op.inputs = {dy, a, b};
    op.outputs = {da, db};
    op.flops = 2 * f.flops;
    g_.add_op(op);
    accumulate(a, da, f.layer);
    accumulate(b, db, f.layer);
  }

  // The gradient of a view is a view of the incoming gradient in the input's shape.
  void view_backward(const Op& f, TensorId dy) {
    Op op = bwd(f, OpKind::kReshape, ".bwd");
    TensorId dx = new_grad(f.inputs[0]);
    TensorInfo& dxt = g_.tensor(dx);
    dxt.view_of = dy;
    op.inputs = {dy};
    op.outputs = {dx};
    g_.add_op(op);
    accumulate(f.inputs[0], dx, f.layer);
  }

  Graph& g_;
  std::map<TensorId, TensorId> grad_;
  int sums_ = 0;
  UniqueNamer grad_names_;  // a tensor read twice gets two partial gradients
  UniqueNamer op_names_;    // and read three times, two sums of them
};

}  // namespace

void build_backward(Graph& graph, const OptimizerConfig& opt) {
  if (graph.loss == kNoTensor) throw std::logic_error("build_backward: graph has no loss");
  Autodiff(graph).run(opt);
  graph.validate();
}

int share_relu_gradients(Graph& graph) {
  auto base = [&](TensorId t) {
    while (graph.tensor(t).view_of != kNoTensor) t = graph.tensor(t).view_of;
    return t;
  };
  // Last op that reads or writes each storage (a base and all its views).
  std::vector<int> last_use(graph.num_tensors(), -1);
  auto touch = [&](TensorId t, int op) { last_use[static_cast<size_t>(base(t))] = std::max(last_use[static_cast<size_t>(base(t))], op); };
  for (const Op& op : graph.ops()) {
    for (TensorId t : op.inputs) touch(t, op.index);
    for (TensorId t : op.outputs) touch(t, op.index);
  }
  int changed = 0;
  for (const Op& op : graph.ops()) {
    if (op.kind != OpKind::kReluBwd) continue;
    const TensorId dy = op.inputs[0], y = op.inputs[1], dx = op.outputs[0];
    const TensorId b = base(dy);
    const TensorInfo& bt = graph.tensor(b);
    if (bt.persistent() || bt.release_after > op.index || last_use[static_cast<size_t>(b)] != op.index ||
        base(y) == b || graph.tensor(dx).view_of != kNoTensor || graph.tensor(dx).bytes() != graph.tensor(dy).bytes())
      continue;
    graph.tensor(dx).view_of = dy;  // the kernel reads dy[i] before writing dx[i]: safe in place
    const size_t lb = static_cast<size_t>(b), ld = static_cast<size_t>(dx);
    last_use[lb] = std::max(last_use[lb], last_use[ld]);  // the storage now lives as long as dx
    ++changed;
  }
  graph.validate();
  return changed;
}

}  // namespace vtensor
