// FreeLunch (Patel, Liu, Guan, MCHPC'21): keep feature maps on the device in compressed form
// instead of swapping or recomputing them. Policies `compress`, `compress+swap`, `compress+capuchin`.
//   Measured execution: the first iteration runs passive (LRU swap on OOM) and measures, after
//   each ReLU and max-pool op, how many of its output's elements are non-zero (the backend's
//   count; on sim the densities a cpu run recorded), while the tracker records the accesses.
//   Planning (plan_compress, no device): each gap between two accesses of such an output that
//   spans ops over the budget is a candidate. Codec per gap from the graph: kSign when every later
//   reader is a ReLU backward reading it as y (it needs y > 0 only), else kBitmask. Largest saving
//   first: compress after the gap's first op on the compression lane (one codec at a time, time =
//   bytes read + written at the element-wise rate the measured ReLU ops ran at), free the original
//   at the op the compression ends in (Action::free_after, as Capuchin's swaps), decompress after an
//   in-trigger found by walking back from the back-access until the decompression hides, never
//   into ops where the tensor back would exceed the budget; keep a choice only if it lowers the
//   bytes over the budget; stop once the predicted peak fits. Passive eviction is the last resort.
//   The rest (CompressPlanInput::rest): Capuchin's planner (capuchin_planner.h) run on the curve the
//   compression plan leaves, the compressed tensors excluded: compress+swap in swap mode,
//   compress+capuchin in hybrid mode (swap or recompute per tensor; with a plan that fits, a
//   request within the budget is compacted, as in Capuchin, not swapped). set_plan_fraction plans
//   both parts for a fraction of the budget (policy auto's search), as Capuchin's does.
// Buffers and workspace (FreeLunch's two optimisations) are the memory manager's
// (CompressionOptions); the plan counts them on its curve: persistent buffers over the whole
// iteration, per-use buffers over their gap; the sliding workspace over the whole iteration, a
// per-compression one until the release.
// Deviations: the paper compresses every ReLU output; we stop when the predicted peak fits, as
// Capuchin does, so a budget that needs less compression pays less. Buffers are sized from the
// measured iteration with kValueSlack headroom; a tensor grown denser than that stays resident
// (counted as an overflow). Max-pool argmax packing is not done: our max-pool backward reads its
// input, so there is no argmax tensor. kSign is ours (the 1 bit per element). Lossy codecs
// (--lossy bf16|fp16|int8, never by default) take forward activations no lossless codec fits,
// only in gaps whose later readers are all backward ops. compress+capuchin is ours (the paper's
// hybrid swaps only).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vtensor/policy/capuchin.h"
#include "vtensor/memory/policy.h"
#include "vtensor/policy/options.h"
#include "vtensor/policy/measured.h"

namespace vtensor {

// Extra room for the packed values of a bitmask buffer over the measured count.
constexpr double kValueSlack = 0.10;
// A codec is used only where it at least saves this fraction of the bytes.
constexpr double kMinSaving = 0.10;

struct CompressCandidate {
  TensorId id = kNoTensor;
  size_t bytes = 0, compressed = 0, capacity = 0;  // measured size, planned buffer
  Codec codec = Codec::kNone;
  int evict_op = -1, back_op = -1, release_op = -1, trigger_op = -1;
  double compress_ns = 0, decompress_ns = 0, stall_ns = 0;  // predicted
  bool chosen = false;
  int order = -1;
};

struct CompressPlanInput {
  PlannerInput base;                    // the trace as Capuchin's planner reads it
  std::vector<std::optional<size_t>> nonzeros;  // per tensor, measured (nullopt: not measured)
  CompressionOptions options;
  // What plans the rest after compression: nullopt (compress), CapuchinMode::kSwap (compress+swap),
  // CapuchinMode::kHybrid (compress+capuchin).
  std::optional<CapuchinMode> rest;
};

struct CompressPlan {
  Plan plan;
  std::vector<CompressCandidate> candidates;
  std::vector<size_t> memory_before, memory_after;  // predicted bytes per op
  size_t peak_before = 0, peak_after = 0;  // after compression (and the rest's plan)
  size_t peak_after_compress = 0;
  size_t workspace_bytes = 0;      // the sliding workspace the plan counts
  double element_ns_per_byte = 0;  // the measured element-wise rate the codec times come from
  bool fits = false;
  CapuchinPlan swaps;  // the rest's plan (compress+swap, compress+capuchin)
};

// Outputs FreeLunch compresses losslessly, whose non-zeros the measured iteration counts: ReLU and
// max-pool outputs (mostly zeros after a ReLU).
bool compressible(const Graph& g, TensorId id);

// A lossless codec for one access gap of a compressible tensor, as the compression planner
// chooses it: kSign when every later reader (`later_ops`) is a ReLU backward reading it as y,
// else kBitmask sized from the measured non-zero count with kValueSlack; nullopt when neither
// saves kMinSaving of the bytes. Times: bytes read + written at `element_ns_per_byte`.
struct GapCodec {
  Codec codec = Codec::kNone;
  size_t compressed = 0, capacity = 0;  // measured size; the buffer (aligned)
  double codec_ns = 0;                  // one compression (a decompression costs the same)
};
std::optional<GapCodec> gap_codec(const Graph& g, TensorId id, const std::vector<int>& later_ops,
                                  std::optional<size_t> nonzeros, const CompressionOptions& o, double element_ns_per_byte);
// The element-wise rate of a backend from the ReLU ops of a measured iteration (each reads and
// writes its tensor once): the codecs' rate. 0 when op_ns does not cover the graph.
double element_ns_per_byte(const Graph& g, const std::vector<double>& op_ns);

CompressPlan plan_compress(const Graph& g, const CompressPlanInput& in);

// The compress policies' options (--codecs, --lossy, the ablation switches) and the registry's
// maker; rest as CompressPolicy's.
const std::vector<PolicyOption>& compress_options();
std::unique_ptr<Policy> make_compress_policy(std::optional<CapuchinMode> rest, const PolicyOptions& options);

class CompressPolicy final : public Policy {
 public:
  // rest: what plans what compression leaves over the budget (CompressPlanInput::rest).
  explicit CompressPolicy(std::optional<CapuchinMode> rest = std::nullopt) : rest_(rest) {}
  std::string name() const override;
  void set_options(const CompressionOptions& o) { options_ = o; }
  const CompressionOptions* compression() const override { return &options_; }
  // Plan (compression and the rest) for this fraction of the budget; 1 by default. The passive
  // fallback and the feedback still use the whole budget.
  void set_plan_fraction(double f) { plan_fraction_ = f; }
  // The non-zero counts of a measured iteration another policy ran (auto's), per tensor: used
  // when this policy plans from a trace it did not measure itself.
  void set_measured_nonzeros(std::vector<std::optional<size_t>> n) { nonzeros_ = std::move(n); }
  bool lossless() const override { return codec_lossless(options_.lossy); }
  void attach(const MemoryView& view) override { view_ = &view; }
  std::vector<Action> after_op(int op_index) override;
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) override;
  void end_iteration(const AccessTrace& trace) override;
  void on_restore(TensorId id, int op_index, Residency from, double waited_ms) override;
  bool iteration_repeats() const override { return cycle_.repeats(); }
  bool measuring() const override { return !cycle_.guided(); }
  nlohmann::json report() const override;
  std::string summary() const override;

  bool guided() const { return cycle_.guided(); }
  const CompressPlan& plan() const { return plan_; }

 private:
  void index_plan();
  std::optional<CapuchinMode> rest_;
  double plan_fraction_ = 1.0;
  CompressionOptions options_;
  const MemoryView* view_ = nullptr;
  MeasuredCycle cycle_;
  int trigger_moves_ = 0;
  CompressPlan plan_;
  std::vector<std::optional<size_t>> nonzeros_;
  std::vector<char> late_;  // per candidate, this iteration
};

}  // namespace vtensor
