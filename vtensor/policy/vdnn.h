// vDNN (Rhu et al., MICRO'16): layer-wise offload of feature maps, prefetch in backward.
//   vdnn-all / vdnn-conv: after the last forward use of a feature map that backward reads again
//   (any op's input / conv inputs only) swap it out on the d2h stream, freed when the copy is
//   done; when layer n starts its backward, prefetch the maps of the nearest earlier offloaded
//   layer, searching back no further than the previous conv (the sliding window).
//   vdnn-dyn: the first configuration whose planned peak fits: no offload with fast conv
//   algorithms, conv, all, then memory-lean algorithms with conv, then all.
// Deviations: windows are the model builder's layers (conv+bn+relu is one); vdnn-dyn plans
// peaks by replaying the allocation sequence instead of trial runs and chooses by memory only;
// ReLU is in place only with --inplace-relu-grad; no passive eviction (an OOM names the plan's
// smallest budget); an offload the host budget cannot take is skipped. Full notes: docs/design.md.
#pragma once
#include <string>
#include <vector>

#include "vtensor/memory/policy.h"

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
