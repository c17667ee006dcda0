#include "vtensor/core/graph.h"

#include <cstdint>
#include <cstdio>
#include <stdexcept>

namespace vtensor {

const char* to_string(TensorKind k) {
  switch (k) {
    case TensorKind::kParam: return "param";
    case TensorKind::kOptimizerState: return "optimizer_state";
    case TensorKind::kBuffer: return "buffer";
    case TensorKind::kData: return "data";
    case TensorKind::kActivation: return "activation";
    case TensorKind::kGradient: return "gradient";
  }
  return "?";
}

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  throw std::invalid_argument("unknown optimizer '" + name + "'; accepted: sgd, adam, adamw");
}

const char* to_string(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "?";
}

TensorId Graph::add_tensor(TensorInfo info) {
  info.id = static_cast<TensorId>(tensors_.size());
  tensors_.push_back(std::move(info));
  return tensors_.back().id;
}

int Graph::add_op(Op op) {
  op.index = static_cast<int>(ops_.size());
  for (size_t s = 0; s < op.outputs.size(); ++s) {
    TensorInfo& t = tensor(op.outputs[s]);
    if (t.producer != -1) throw std::logic_error("tensor " + t.name + " produced twice");
    t.producer = op.index;
    t.slot = static_cast<int>(s);
  }
  ops_.push_back(std::move(op));
  return ops_.back().index;
}

int Graph::add_layer(std::string name, LayerKind kind) {
  layers_.push_back({std::move(name), kind});
  return static_cast<int>(layers_.size()) - 1;
}

std::string fingerprint(const Graph& g) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  auto text = [&](const std::string& s) {
    mix(s.size());
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  auto ids = [&](const std::vector<TensorId>& v) {
    mix(v.size());
    for (TensorId t : v) mix(static_cast<uint64_t>(t));
  };
  for (const TensorInfo& t : g.tensors()) {
    text(t.name);
    mix(static_cast<uint64_t>(t.kind)), mix(static_cast<uint64_t>(t.dtype)), mix(static_cast<uint64_t>(t.view_of));
    mix(t.shape.rank());
    for (int64_t d : t.shape.dims()) mix(static_cast<uint64_t>(d));
  }
  for (const Op& op : g.ops()) {
    mix(static_cast<uint64_t>(op.kind));
    text(op.name);
    ids(op.inputs), ids(op.outputs), ids(op.inplace);
    mix(op.workspace_bytes), mix(op.workspace_lean_bytes);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

size_t Graph::persistent_bytes() const {
  size_t b = 0;
  for (const auto& t : tensors_)
    if (t.persistent()) b += t.bytes();
  return b;
}

size_t Graph::param_count() const {
  size_t n = 0;
  for (const auto& t : tensors_)
    if (t.kind == TensorKind::kParam) n += static_cast<size_t>(t.shape.numel());
  return n;
}

void Graph::validate() const {
  std::vector<bool> ready(tensors_.size(), false);
  for (const auto& t : tensors_)
    if (t.persistent()) ready[static_cast<size_t>(t.id)] = true;
  for (const auto& op : ops_) {
    for (TensorId in : op.inputs)
      if (in < 0 || static_cast<size_t>(in) >= tensors_.size() || !ready[static_cast<size_t>(in)])
        throw std::logic_error("op " + op.name + " reads a tensor no earlier op produces");
    for (TensorId out : op.outputs) ready[static_cast<size_t>(out)] = true;
  }
  if (loss == kNoTensor) throw std::logic_error("graph has no loss");
}

}  // namespace vtensor
