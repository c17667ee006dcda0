// Gradient checkpointing (Chen et al., "Training Deep Nets with Sublinear Memory Cost", arXiv
// 1604.06174): the sqrt(n) strategy, the baseline Capuchin's BERT figure is measured against,
// and its budget-driven greedy (section 4.1, Alg. 2) with the search over the threshold.
//   The forward pass is split into segments of consecutive units. A segment's checkpoints are
//   the tensors it produces that a later segment reads. Every other forward activation of the
//   segment is dropped after its last forward access and recomputed from its lineage when
//   backward reaches it (the memory manager's recompute-on-access), so each segment's forward
//   runs once more in backward: about one extra forward pass in all.
//   Segments: with --checkpoint-segments N, N byte-balanced segments of builder layers
//   (Graph::layers(); an op outside a layer joins the layer before it; a graph without layers,
//   a replayed trace, splits by op). Without it, a search: candidates are those balanced layer
//   plans for every N from 2 to L (at most 64, and round(sqrt(L))) and Chen's greedy over
//   single forward ops (walk the forward, accumulate the bytes backward reads, cut once they
//   reach b) for b on a geometric grid, each cut either after the op that reached b or, within
//   the open segment, after the op with the fewest bytes live across the cut (so a huge layer
//   output need not be a checkpoint). Rule with a budget (MemoryView::budget()): among the
//   candidates whose predicted peak (predict_drop_plan_peak, exact) fits it, "no drops at all"
//   (none's peak) included, the fewest recomputed FLOPs (the sum of Op::flops over the ops the
//   plan re-runs, known at attach), then the lower peak, then the earlier candidate; if none
//   fits, the lowest peak (the run then fails with the OOM naming it). Without a budget (cpu
//   with no --budget), or if none fits: the lowest peak, then the fewest recomputed ops, then
//   the earlier candidate. Deterministic; the report's "choice" names the rule that applied.
//   The plan is static, made from the graph in attach(); nothing is evicted on demand: when the
//   plan does not fit the budget the run ends with the usual OutOfMemoryError (as TensorFlow's
//   checkpointing does), which names the plan's peak (exact in allocated bytes) as the
//   smallest budget known to work.
// Deviations from the paper:
//   - Keeping the plan that fits the budget with the fewest recomputed FLOPs is ours: Chen
//     minimises memory for a given cost, frameworks take the user's segments.
//   - Chen picks b around sqrt(x * y) from estimated costs; we try the whole grid and judge
//     each plan by the executor's replayed peak. The cut at the smallest crossing is ours. The fixed count balances bytes backward reads
//     per segment, not layers: with equal counts VGG-16's first segment would hold over half of
//     all activations.
//   - The last segment is kept: its backward starts right after the forward, so recomputing it
//     would cost a segment's forward and lower no peak.
//   - Tensors the memory manager must keep stay: parameters, optimizer state, data (the first
//     segment's input) and anything whose producer may not be re-run.
//   - Recomputation is lazy, per tensor on its first backward access (Chen re-runs a whole
//     segment at its backward's start); a recomputed tensor stays until its last backward use
//     and an input kept for a later recomputation stays until then, so no op runs twice and
//     the count equals the plan's expected_recomputed_ops.
//   - A forward tensor backward does not read, but that a dropped tensor's recomputation needs,
//     is dropped too after its last forward use (otherwise the lineage reference would keep it).
#pragma once
#include <string>
#include <vector>

#include "vtensor/policy/policy.h"

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

}  // namespace vtensor
