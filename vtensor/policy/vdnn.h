// vDNN (Rhu et al., "vDNN: Virtualized Deep Neural Networks for Scalable, Memory-Efficient
// Neural Network Design", MICRO'16): layer-wise offload of feature maps, prefetch in backward.
//   vdnn-all / vdnn-conv: after the last forward use of a feature map that backward reads again
//     (any op's input / conv ops' inputs only), swap it out on the d2h stream; the memory manager
//     frees the device block when the copy completes. When layer n starts its backward, prefetch
//     the maps of the nearest earlier offloaded layer not yet prefetched, searching back no
//     further than the previous conv layer (the paper's sliding window), so the copy overlaps
//     layer n's compute. The layer whose backward runs first keeps its maps: it needs them at once.
//   vdnn-dyn: plans the peak of each configuration and takes the first that fits the budget:
//     no offload with fast conv algorithms, conv offload, all offload, then the memory-lean conv
//     algorithms (less workspace) with conv, then all offload.
// Deviations from the paper:
//   - The paper's layers are cuDNN calls (conv, activation, pool, ...) and each offloads its
//     input X. Ours: a map is offloaded after its last forward reader (any op: the X of that op,
//     which is the paper's layer), but prefetch windows and the report use the model builder's
//     layers (conv+bn+relu, or a whole ResNet block, is one layer), so a window brings back all
//     of a builder layer's maps at once.
//   - vdnn-dyn's profiling pass is a plan, not trial runs: predict_peak() replays the executor's
//     allocation sequence (outputs, workspaces, releases, swap-out completion points, prefetches)
//     over the graph, exact in allocated bytes when the allocator does not fragment and an upper
//     bound otherwise. It chooses by memory only; the paper also times the conv algorithms.
//   - cuDNN's ReLU is in place; ours is not unless --inplace-relu-grad (share_relu_gradients)
//     makes relu backward write dx over a dying dy. Without it VGG-16 at 256 needs 13.94 GiB
//     under vdnn-all, with it 11.50 GiB (fits the paper's 12 GiB Titan X). Off by default.
//   - No passive eviction: when the chosen configuration does not fit, the run stops with an
//     OutOfMemoryError that names the smallest budget the plan needs.
//   - Host budget (not in the paper): an offload the host cannot take is skipped by the memory
//     manager and the feature map stays on the device; the plan does not account for it.
#pragma once
#include <string>
#include <vector>

#include "vtensor/policy/policy.h"

namespace vtensor {

enum class VdnnOffload { kNone, kConv, kAll };
const char* to_string(VdnnOffload o);

struct VdnnLayer {
  int layer = -1;
  std::string name;
  LayerKind kind = LayerKind::kOther;
  std::vector<TensorId> inputs;  // feature maps first read in this layer's forward that backward reads again
  size_t bytes = 0;
  int first_backward_op = -1;    // -1: the layer has no backward op
  bool offloaded = false;
  int prefetch_after_op = -1;    // -1: never prefetched (restored on access)
  double stall_ms = 0;           // compute waited for these inputs, summed over iterations
  uint64_t stalls = 0;
};

struct VdnnPlan {
  std::vector<VdnnLayer> layers;  // forward order
  Plan plan;                      // swap-outs after last forward uses, prefetches at layer starts
  size_t offloaded_bytes() const;
};

// The plan for one offload mode, from the graph alone.
VdnnPlan plan_vdnn(const Graph& g, VdnnOffload offload);
// Per-op algorithm vector: `algo` for the conv ops, kFast elsewhere.
std::vector<ConvAlgo> conv_algorithms_for(const Graph& g, ConvAlgo algo);
// Peak allocated bytes of an iteration that carries out `plan` with these conv algorithms,
// replaying the executor's and memory manager's allocation sequence (persistent tensors included).
size_t predict_peak(const Graph& g, const Plan& plan, const std::vector<ConvAlgo>& algos);
struct PlannedMemory {
  size_t peak = 0;    // allocated bytes, highest point of the iteration
  double mean = 0;    // allocated bytes after each op, averaged over the ops (vDNN's "average usage")
  int peak_op = -1;   // the op during which the peak is reached
};
PlannedMemory predict_memory(const Graph& g, const Plan& plan, const std::vector<ConvAlgo>& algos);

class VdnnPolicy final : public Policy {
 public:
  enum class Variant { kAll, kConv, kDyn };
  explicit VdnnPolicy(Variant v) : variant_(v) {}
  std::string name() const override;
  void attach(const MemoryView& view) override;
  void begin_iteration(int iteration) override { ++iterations_; }
  std::vector<ConvAlgo> conv_algorithms() const override { return algos_; }
  std::vector<Action> after_op(int op_index) override;
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) override;
  void on_restore(TensorId id, int op_index, Residency from, double waited_ms) override;
  nlohmann::json report() const override;
  std::string summary() const override;

  struct Config {
    VdnnOffload offload;
    ConvAlgo algo;
    size_t predicted_peak = 0;
    std::string str() const;
  };
  const Config& chosen() const { return configs_.at(chosen_); }
  const std::vector<Config>& configurations() const { return configs_; }
  const VdnnPlan& plan() const { return plan_; }

 private:
  Variant variant_;
  size_t budget_ = 0;
  std::vector<Config> configs_;  // tried in order (one for all / conv)
  size_t chosen_ = 0;
  VdnnPlan plan_;
  std::vector<ConvAlgo> algos_;
  std::vector<std::vector<Action>> actions_;  // per op
  std::vector<int> layer_of_input_;           // per tensor: index into plan_.layers, -1 none
  int iterations_ = 0;
};

}  // namespace vtensor
