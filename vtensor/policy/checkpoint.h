// Gradient checkpointing (Chen et al., arXiv 1604.06174): the sqrt(n) strategy and its
// budget-driven greedy, the baseline of Capuchin's BERT figure.
//   The forward is split into segments; a segment's outputs that later segments read are kept
//   (checkpoints), its other activations are dropped after their last forward use and
//   recomputed from lineage on their first backward access: about one extra forward pass.
//   Segments: --checkpoint-segments N gives N byte-balanced segments of builder layers;
//   otherwise a search over balanced plans for N = 2..L (at most 64) and Chen's greedy over
//   single ops on a geometric grid of thresholds, each plan judged by its exact replayed peak.
//   With a budget: the plan that fits with the fewest recomputed FLOPs (no drops included);
//   otherwise the lowest peak. Static plan made in attach(); nothing is evicted on demand, so a
//   plan over the budget ends in OutOfMemoryError naming its peak.
// Deviations: the fewest-FLOPs rule and the cut at the smallest crossing are ours; fixed counts
// balance bytes, not layers; the last segment is kept; recomputation is lazy per tensor (Chen
// re-runs whole segments). Full notes: docs/design.md.
#pragma once
#include <string>
#include <vector>

#include "vtensor/memory/policy.h"
#include <memory>

#include "vtensor/policy/options.h"

namespace vtensor {

struct CheckpointSegment {
  int first_layer = -1, last_layer = -1;  // positions among the forward layers, in order
  std::string first_name, last_name;      // their names
  int first_op = -1, last_op = -1;        // forward ops of the segment
  std::vector<TensorId> checkpoints;      // produced here, read by a later segment
  size_t checkpoint_bytes = 0;
  size_t saved_bytes = 0;                 // bytes backward reads that this segment produces
  size_t dropped_bytes = 0;
  int dropped = 0;
};

struct CheckpointPlan {
  int layers = 0;                         // units: forward layers, or forward ops (the greedy, a graph without layers)
  std::vector<CheckpointSegment> segments;
  Plan plan;                              // one kDrop per dropped tensor, after its last forward access
  size_t dropped_bytes = 0;               // per iteration
  int expected_recomputed_ops = 0;        // producers re-run in backward, each once
  double expected_recompute_flops = 0;    // their FLOPs (Op::flops), the search's cost under a budget
  // Chen's count: each segment but the last re-runs its forward from its input checkpoints,
  // every op but those that only make checkpoints or data (our count is at most this).
  int segment_recompute_ops = 0;
  int forward_ops = 0;
  std::string rule;                       // how the boundaries were chosen (see the header)
  size_t threshold_bytes = 0;             // the greedy's b (0: a fixed count)
  int candidates = 0;                     // plans the search compared (0: no search)
  std::string choice;                     // the search's rule that kept this plan (see the header)
};

// The plan for `segments` byte-balanced segments of layers (0: round(sqrt(L))), from the graph alone.
CheckpointPlan plan_checkpoint(const Graph& g, int segments = 0);
// The searched plan (see the header), its predicted peak written to *peak when given. budget 0:
// the lowest peak; else the fewest recomputed FLOPs among the plans that fit it.
CheckpointPlan plan_checkpoint_search(const Graph& g, size_t* peak = nullptr, size_t budget = 0);
// Peak allocated bytes of an iteration that carries out a plan of drops with no eviction,
// replaying the executor's allocations, releases and recomputations on access (workspaces by
// the ops' own figures; cuDNN's may differ).
size_t predict_drop_plan_peak(const Graph& g, const Plan& plan);

class CheckpointPolicy final : public Policy {
 public:
  explicit CheckpointPolicy(int segments = 0) : segments_(segments) {}
  std::string name() const override { return "checkpoint"; }
  // Before attach (--checkpoint-segments): the segment count, 0 for the search.
  void set_segments(int segments) { segments_ = segments; }
  // Before attach: false when the run has no budget (cpu without --budget): the lowest peak.
  void set_budget_aware(bool aware) { budget_aware_ = aware; }
  void attach(const MemoryView& view) override;
  void begin_iteration(int iteration) override { ++iterations_; }
  std::vector<Action> after_op(int op_index) override;
  // Nothing is evicted on demand: the memory manager throws its usual OutOfMemoryError.
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) override { return {}; }
  std::optional<size_t> smallest_working_budget() const override { return planned_peak_; }
  void on_restore(TensorId id, int op_index, Residency from, double waited_ms) override;
  nlohmann::json report() const override;
  std::string summary() const override;
  const CheckpointPlan& plan() const { return plan_; }
  size_t planned_peak() const { return planned_peak_; }

 private:
  int segments_;
  bool budget_aware_ = true;
  const Graph* graph_ = nullptr;
  CheckpointPlan plan_;
  size_t planned_peak_ = 0;
  size_t sqrt_plan_peak_ = 0;                 // the round(sqrt(L)) plan's, when searching
  std::vector<std::vector<Action>> actions_;  // per op
  int iterations_ = 0;
  uint64_t restores_ = 0;                     // backward accesses that found a tensor dropped
  double recompute_ms_ = 0;                   // their recomputation chains, summed over iterations
};

// Its options (--checkpoint-segments) and the registry's maker.
const std::vector<PolicyOption>& checkpoint_options();
std::unique_ptr<Policy> make_checkpoint_policy(const PolicyOptions& options);

}  // namespace vtensor
