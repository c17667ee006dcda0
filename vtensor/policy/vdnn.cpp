#include "vtensor/policy/vdnn.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <deque>

#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"

namespace vtensor {

const char* to_string(VdnnOffload o) {
  switch (o) {
    case VdnnOffload::kNone: return "none";
    case VdnnOffload::kConv: return "conv";
    case VdnnOffload::kAll: return "all";
  }
  return "?";
}

size_t VdnnPlan::offloaded_bytes() const {
  size_t b = 0;
  for (const auto& l : layers)
    if (l.offloaded) b += l.bytes;
  return b;
}

namespace {

bool is_forward(const Op& op) { return !op.backward && !op.optimizer; }
const char* kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::kConv: return "conv";
    case LayerKind::kLinear: return "linear";
    case LayerKind::kNorm: return "norm";
    case LayerKind::kActivation: return "activation";
    case LayerKind::kPool: return "pool";
    case LayerKind::kOther: return "other";
  }
  return "?";
}
bool is_conv(const Op& op) {
  return op.kind == OpKind::kConv2d || op.kind == OpKind::kConv2dBwdData || op.kind == OpKind::kConv2dBwdFilter;
}

// Per layer its first forward and backward ops; per tensor its last forward and first backward
// use, the layer that owns it as a feature map, and whether a conv reads it.
struct LayerUses {
  std::vector<int> first_fwd, first_bwd;
  std::vector<int> last_fwd_use, first_bwd_use, owner;
  std::vector<bool> conv_input;
};

LayerUses scan_layer_uses(const Graph& g) {
  const size_t nl = g.layers().size(), nt = g.num_tensors();
  LayerUses u{std::vector<int>(nl, INT_MAX), std::vector<int>(nl, INT_MAX), std::vector<int>(nt, -1),
              std::vector<int>(nt, INT_MAX), std::vector<int>(nt, -1), std::vector<bool>(nt, false)};
  for (const Op& op : g.ops()) {
    if (op.layer >= 0) {
      auto& f = is_forward(op) ? u.first_fwd : u.first_bwd;
      if (is_forward(op) || op.backward) f[static_cast<size_t>(op.layer)] = std::min(f[static_cast<size_t>(op.layer)], op.index);
    }
    for (TensorId in : op.inputs) {
      const auto i = static_cast<size_t>(in);
      if (is_forward(op)) {
        u.last_fwd_use[i] = op.index;
        // The layer of its first forward reader owns a feature map: it is that layer's X.
        if (u.owner[i] < 0 && op.layer >= 0 && g.tensor(in).producer >= 0) u.owner[i] = op.layer;
        if (op.kind == OpKind::kConv2d) u.conv_input[i] = true;
      } else if (op.backward) {
        u.first_bwd_use[i] = std::min(u.first_bwd_use[i], op.index);
      }
    }
  }
  return u;
}

// The layers in forward order, each with the feature maps it owns (conv inputs only under kConv).
void add_layers(const Graph& g, const LayerUses& u, VdnnOffload offload, VdnnPlan& out) {
  const size_t nl = g.layers().size();
  std::vector<int> pos(nl, -1);  // layer id -> index in out.layers
  std::vector<int> order;
  for (size_t l = 0; l < nl; ++l)
    if (u.first_fwd[l] != INT_MAX) order.push_back(static_cast<int>(l));
  std::sort(order.begin(), order.end(), [&](int a, int b) { return u.first_fwd[static_cast<size_t>(a)] < u.first_fwd[static_cast<size_t>(b)]; });
  for (int l : order) {
    const Layer& layer = g.layers()[static_cast<size_t>(l)];
    VdnnLayer v{.layer = l, .name = layer.name, .kind = layer.kind};
    v.first_backward_op = u.first_bwd[static_cast<size_t>(l)] == INT_MAX ? -1 : u.first_bwd[static_cast<size_t>(l)];
    pos[static_cast<size_t>(l)] = static_cast<int>(out.layers.size());
    out.layers.push_back(v);
  }
  for (const TensorInfo& t : g.tensors()) {
    const auto i = static_cast<size_t>(t.id);
    const bool feature_map = (t.kind == TensorKind::kActivation || t.kind == TensorKind::kData) && t.shape.rank() >= 2;
    if (!feature_map || u.owner[i] < 0 || pos[static_cast<size_t>(u.owner[i])] < 0 || u.first_bwd_use[i] == INT_MAX) continue;
    if (offload == VdnnOffload::kConv && !u.conv_input[i]) continue;
    VdnnLayer& v = out.layers[static_cast<size_t>(pos[static_cast<size_t>(u.owner[i])])];
    v.inputs.push_back(t.id);
    v.bytes += t.bytes();
  }
}

// Offloads every layer with inputs but the one whose backward runs first (it needs its input at
// once): each input swapped out after its last forward use.
void plan_swap_outs(const std::vector<int>& last_fwd_use, VdnnOffload offload, VdnnPlan& out) {
  int first_backward_layer = -1;
  for (size_t k = 0; k < out.layers.size(); ++k) {
    const int b = out.layers[k].first_backward_op;
    if (b >= 0 && (first_backward_layer < 0 || b < out.layers[static_cast<size_t>(first_backward_layer)].first_backward_op))
      first_backward_layer = static_cast<int>(k);
  }
  for (size_t k = 0; k < out.layers.size(); ++k) {
    VdnnLayer& v = out.layers[k];
    v.offloaded = offload != VdnnOffload::kNone && !v.inputs.empty() && static_cast<int>(k) != first_backward_layer;
    if (!v.offloaded) continue;
    for (TensorId t : v.inputs) out.plan.actions.push_back({ActionKind::kSwapOut, t, last_fwd_use[static_cast<size_t>(t)]});
  }
}

// Sliding window: at the start of layer n's backward, prefetch the nearest earlier offloaded
// layer not yet prefetched; the search stops at the previous conv layer.
void plan_prefetches(VdnnPlan& out) {
  std::vector<size_t> by_backward;
  for (size_t k = 0; k < out.layers.size(); ++k)
    if (out.layers[k].first_backward_op >= 0) by_backward.push_back(k);
  std::sort(by_backward.begin(), by_backward.end(),
            [&](size_t a, size_t b) { return out.layers[a].first_backward_op < out.layers[b].first_backward_op; });
  for (size_t n : by_backward) {
    const int at = out.layers[n].first_backward_op - 1;
    for (size_t m = n; m-- > 0;) {
      VdnnLayer& v = out.layers[m];
      if (v.offloaded && v.prefetch_after_op < 0) {
        v.prefetch_after_op = at;
        for (TensorId t : v.inputs) out.plan.actions.push_back({ActionKind::kPrefetch, t, at});
        break;
      }
      if (v.kind == LayerKind::kConv) break;
    }
  }
}

// The device bytes a plan leaves live after each op. Mirrors Executor::run_op and MemoryManager
// (access, allocate, workspace, release, after_op).
class MemorySim {
 public:
  MemorySim(const Graph& g, const Plan& plan)
      : g_(g), st_(g.num_tensors(), S::kNone), released_(g.num_tensors(), false), issued_(g.num_tensors(), 0),
        release_after_(g.num_ops()), actions_(g.num_ops()) {
    for (const TensorInfo& t : g_.tensors())
      if (t.persistent()) {
        alloc(size_of(t.id));
        st_[static_cast<size_t>(t.id)] = S::kResident;
      }
    find_release_points();
    for (const Action& a : plan.actions) actions_.at(static_cast<size_t>(a.op)).push_back(a);
  }

  PlannedMemory run(const std::vector<ConvAlgo>& algos) {
    uint64_t seq = 0;
    double sum = 0;
    for (const Op& op : g_.ops()) {
      op_index_ = op.index;
      access_inputs(op);
      for (TensorId o : op.outputs) {
        if (g_.tensor(o).view_of != kNoTensor) continue;
        alloc(size_of(o));
        st_[static_cast<size_t>(o)] = S::kResident;
      }
      const bool lean = static_cast<size_t>(op.index) < algos.size() && algos[static_cast<size_t>(op.index)] == ConvAlgo::kLean;
      if (const size_t ws = lean ? op.workspace_lean_bytes : op.workspace_bytes) {
        alloc(block(ws));
        live_ -= block(ws);
      }
      release(op);
      while (!swapping_out_.empty() && issued_[static_cast<size_t>(swapping_out_.front())] < seq) {
        complete(swapping_out_.front());
        swapping_out_.pop_front();
      }
      ++seq;
      apply_actions(op, seq);
      sum += static_cast<double>(live_);
    }
    return {peak_, g_.num_ops() ? sum / static_cast<double>(g_.num_ops()) : 0.0, peak_op_};
  }

 private:
  enum class S { kNone, kResident, kSwappingOut, kOnHost, kSwappingIn };

  static size_t block(size_t b) { return b == 0 ? kAllocAlignment : align_up(b); }
  size_t size_of(TensorId t) const { return block(g_.tensor(t).bytes()); }
  void alloc(size_t b) {
    if ((live_ += b) > peak_) {
      peak_ = live_;
      peak_op_ = op_index_;
    }
  }
  // Views (share_relu_gradients, reshape) have no block: they act on their base, which lives
  // until the last use of the base and of all its views.
  TensorId base(TensorId t) const {
    while (g_.tensor(t).view_of != kNoTensor) t = g_.tensor(t).view_of;
    return t;
  }

  void find_release_points() {
    std::vector<int> last_use(g_.num_tensors(), -1);
    for (const Op& op : g_.ops()) {
      for (TensorId in : op.inputs) last_use[static_cast<size_t>(base(in))] = op.index;
      for (TensorId o : op.outputs) last_use[static_cast<size_t>(base(o))] = std::max(last_use[static_cast<size_t>(base(o))], op.index);
    }
    for (const TensorInfo& t : g_.tensors())
      if (!t.persistent() && t.view_of == kNoTensor && last_use[static_cast<size_t>(t.id)] >= 0)
        release_after_[static_cast<size_t>(last_use[static_cast<size_t>(t.id)])].push_back(t.id);
  }

  void cancel(TensorId t) {
    swapping_out_.erase(std::find(swapping_out_.begin(), swapping_out_.end(), t));
    st_[static_cast<size_t>(t)] = S::kResident;
  }
  void complete(TensorId t) {
    live_ -= size_of(t);
    st_[static_cast<size_t>(t)] = released_[static_cast<size_t>(t)] ? S::kNone : S::kOnHost;
  }

  void access_inputs(const Op& op) {
    for (TensorId in : op.inputs) {
      in = base(in);
      S& s = st_[static_cast<size_t>(in)];
      if (s == S::kSwappingOut) cancel(in);
      else if (s == S::kOnHost) alloc(size_of(in));
      if (s != S::kNone) s = S::kResident;
    }
  }

  void release(const Op& op) {
    for (TensorId t : release_after_[static_cast<size_t>(op.index)]) {
      S& s = st_[static_cast<size_t>(t)];
      released_[static_cast<size_t>(t)] = true;
      if (s == S::kResident || s == S::kSwappingIn) live_ -= size_of(t);
      if (s != S::kSwappingOut) s = S::kNone;  // a swap-out in flight frees its block when it completes
    }
  }

  // The plan's actions after op, seq numbering its swap-outs.
  void apply_actions(const Op& op, uint64_t seq) {
    for (Action a : actions_[static_cast<size_t>(op.index)]) {
      a.tensor = base(a.tensor);
      S& s = st_[static_cast<size_t>(a.tensor)];
      if (a.kind == ActionKind::kSwapOut && s == S::kResident) {
        s = S::kSwappingOut;
        issued_[static_cast<size_t>(a.tensor)] = seq;
        swapping_out_.push_back(a.tensor);
      } else if (a.kind == ActionKind::kPrefetch && s == S::kSwappingOut) {
        cancel(a.tensor);
      } else if (a.kind == ActionKind::kPrefetch && s == S::kOnHost) {
        alloc(size_of(a.tensor));
        s = S::kSwappingIn;
      }
    }
  }

  const Graph& g_;
  std::vector<S> st_;
  std::vector<bool> released_;
  std::vector<uint64_t> issued_;
  std::deque<TensorId> swapping_out_;
  std::vector<std::vector<TensorId>> release_after_;
  std::vector<std::vector<Action>> actions_;
  size_t live_ = 0, peak_ = 0;
  int op_index_ = -1, peak_op_ = -1;
};

}  // namespace

VdnnPlan plan_vdnn(const Graph& g, VdnnOffload offload) {
  const LayerUses uses = scan_layer_uses(g);
  VdnnPlan out;
  add_layers(g, uses, offload, out);
  plan_swap_outs(uses.last_fwd_use, offload, out);
  plan_prefetches(out);
  std::stable_sort(out.plan.actions.begin(), out.plan.actions.end(), [](const Action& a, const Action& b) { return a.op < b.op; });
  return out;
}

std::vector<ConvAlgo> conv_algorithms_for(const Graph& g, ConvAlgo algo) {
  if (algo == ConvAlgo::kFast) return {};
  std::vector<ConvAlgo> out(g.num_ops(), ConvAlgo::kFast);
  for (const Op& op : g.ops())
    if (is_conv(op)) out[static_cast<size_t>(op.index)] = algo;
  return out;
}

size_t predict_peak(const Graph& g, const Plan& plan, const std::vector<ConvAlgo>& algos) {
  return predict_memory(g, plan, algos).peak;
}

PlannedMemory predict_memory(const Graph& g, const Plan& plan, const std::vector<ConvAlgo>& algos) {
  return MemorySim(g, plan).run(algos);
}

// ---------------------------------------------------------------- the policy

std::string VdnnPolicy::Config::str() const {
  const std::string o = offload == VdnnOffload::kNone ? "no offload" : std::string(to_string(offload)) + " offload";
  return o + ", " + to_string(algo) + " conv algorithms";
}

std::string VdnnPolicy::name() const {
  switch (variant_) {
    case Variant::kAll: return "vdnn-all";
    case Variant::kConv: return "vdnn-conv";
    case Variant::kDyn: return "vdnn-dyn";
  }
  return "?";
}

void VdnnPolicy::attach(const MemoryView& view) {
  const Graph& g = view.graph();
  budget_ = view.budget();
  switch (variant_) {
    case Variant::kAll: configs_ = {{VdnnOffload::kAll, ConvAlgo::kFast}}; break;
    case Variant::kConv: configs_ = {{VdnnOffload::kConv, ConvAlgo::kFast}}; break;
    case Variant::kDyn:
      configs_ = {{VdnnOffload::kNone, ConvAlgo::kFast}, {VdnnOffload::kConv, ConvAlgo::kFast},
                  {VdnnOffload::kAll, ConvAlgo::kFast}, {VdnnOffload::kConv, ConvAlgo::kLean},
                  {VdnnOffload::kAll, ConvAlgo::kLean}};
      break;
  }
  // vdnn-dyn's profiling pass: plan every rung of the ladder, take the first that fits (the last if none).
  chosen_ = configs_.size();
  for (size_t i = 0; i < configs_.size(); ++i) {
    Config& c = configs_[i];
    c.predicted_peak = predict_peak(g, plan_vdnn(g, c.offload).plan, conv_algorithms_for(g, c.algo));
    if (c.predicted_peak <= budget_ && chosen_ == configs_.size()) chosen_ = i;
  }
  if (chosen_ == configs_.size()) chosen_ = configs_.size() - 1;
  plan_ = plan_vdnn(g, chosen().offload);
  algos_ = conv_algorithms_for(g, chosen().algo);
  actions_.assign(g.num_ops(), {});
  for (const Action& a : plan_.plan.actions) actions_.at(static_cast<size_t>(a.op)).push_back(a);
  layer_of_input_.assign(g.num_tensors(), -1);
  for (size_t k = 0; k < plan_.layers.size(); ++k)
    for (TensorId t : plan_.layers[k].inputs) layer_of_input_[static_cast<size_t>(t)] = static_cast<int>(k);
}

std::vector<Action> VdnnPolicy::after_op(int op_index) {
  return static_cast<size_t>(op_index) < actions_.size() ? actions_[static_cast<size_t>(op_index)] : std::vector<Action>{};
}

std::vector<Victim> VdnnPolicy::choose_victims(size_t bytes, const MemoryView& view) {
  // vDNN evicts nothing on demand. When the memory is really used up (not merely scattered,
  // which compaction fixes) say what the plan needs.
  if (view.allocated() + align_up(bytes) <= view.budget()) return {};
  throw OutOfMemoryError(bytes, view.allocated(), view.budget(),
                         name() + " with " + chosen().str() + " needs a budget of at least " +
                             format_bytes(chosen().predicted_peak) + " (planned peak)" +
                             (variant_ == Variant::kDyn ? ", the leanest configuration it knows" : ""),
                         chosen().predicted_peak);
}

void VdnnPolicy::on_restore(TensorId id, int op_index, Residency from, double ms) {
  if (from == Residency::kDropped || ms <= 0) return;  // only waits for copies back from host
  const int k = static_cast<size_t>(id) < layer_of_input_.size() ? layer_of_input_[static_cast<size_t>(id)] : -1;
  if (k < 0) return;
  plan_.layers[static_cast<size_t>(k)].stall_ms += ms;
  ++plan_.layers[static_cast<size_t>(k)].stalls;
}

nlohmann::json VdnnPolicy::report() const {
  using nlohmann::json;
  json layers = json::array();
  double stall = 0;
  for (const auto& l : plan_.layers) {
    stall += l.stall_ms;
    layers.push_back({{"layer", l.name},
                      {"kind", kind_name(l.kind)},
                      {"offloaded", l.offloaded},
                      {"input_bytes", l.bytes},
                      {"offloaded_bytes", l.offloaded ? l.bytes : 0},
                      {"prefetch_after_op", l.prefetch_after_op},
                      {"prefetch_stall_ms", l.stall_ms},
                      {"prefetch_stalls", l.stalls}});
  }
  json configs = json::array();
  for (size_t i = 0; i < configs_.size(); ++i)
    configs.push_back({{"offload", to_string(configs_[i].offload)},
                       {"conv_algorithm", to_string(configs_[i].algo)},
                       {"predicted_peak_bytes", configs_[i].predicted_peak},
                       {"fits", configs_[i].predicted_peak <= budget_},
                       {"chosen", i == chosen_}});
  return {{"policy", name()},
          {"offload", to_string(chosen().offload)},
          {"conv_algorithm", to_string(chosen().algo)},
          {"predicted_peak_bytes", chosen().predicted_peak},
          {"budget_bytes", budget_},
          {"offloaded_bytes_per_iteration", plan_.offloaded_bytes()},
          {"iterations", iterations_},
          {"prefetch_stall_ms", stall},
          {"configurations", configs},
          {"layers", layers}};
}

std::string VdnnPolicy::summary() const {
  int offloaded = 0;
  double stall = 0;
  for (const auto& l : plan_.layers) {
    offloaded += l.offloaded;
    stall += l.stall_ms;
  }
  std::string s = variant_ == Variant::kDyn ? "chose '" + chosen().str() + "' (ladder rung " + std::to_string(chosen_ + 1) +
                                                  " of " + std::to_string(configs_.size()) + "), "
                                            : "";
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.2f", stall);
  s += "offloads the feature maps of " + std::to_string(offloaded) + " of " + std::to_string(plan_.layers.size()) +
       " layers, " + format_bytes(plan_.offloaded_bytes()) + " per iteration; planned peak " +
       format_bytes(chosen().predicted_peak) + " of budget " + format_bytes(budget_) + "; prefetch stalls " + ms +
       " ms over " + std::to_string(iterations_) + " iterations";
  if (chosen().predicted_peak > budget_) s += "; no configuration fits";
  return s;
}

}  // namespace vtensor
