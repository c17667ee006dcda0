// A training run from a config: model graph + autodiff, backend, allocator, policy, memory
// manager, executor; N iterations with a progress callback; a report.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vtensor/backend/backend.h"
#include "vtensor/memory/memory_manager.h"
#include "vtensor/models/models.h"
#include "vtensor/train/executor.h"
#include "vtensor/policy/options.h"
#include "vtensor/train/safetensors.h"

namespace vtensor {

constexpr size_t kDefaultCpuBudget = size_t{8} << 30;  // "unlimited": mapped lazily, costs only what is touched

struct TrainConfig {
  ModelConfig model;
  std::string policy = "none";
  std::string backend = "cpu";
  std::string allocator = "caching";
  std::string gpu;    // sim: the GPU to model (gpu_specs.h)
  std::string planner;  // --allocator planned: the planner (empty: greedy-size)
  size_t budget = 0;  // 0: the backend's default (kDefaultCpuBudget on cpu, the GPU's memory on sim, free memory on cuda)
  size_t host_budget = 0;  // pinned host memory for swaps (--host-budget); 0: unlimited
  bool budget_above_gpu = false;  // sim: accept a budget larger than the GPU's memory (--budget-above-gpu)
  bool deterministic = false;  // cuda: deterministic cuDNN algorithms only
  int iters = 10;
  uint64_t seed = 1;  // weight init
  OptimizerConfig optimizer;
  bool inplace_relu_grad = false;  // share_relu_gradients(): relu backward writes dx over a dying dy
  // The policy's own options (--checkpoint-segments, --um-*, --auto-*: PolicyInfo::options), as
  // given; the policy reads them as it is made (registry.h).
  PolicyOptions policy_options;
  // The densities a sim run sizes compressed tensors by (compress policies, auto), and where a
  // compress policy's run with data writes its own.
  std::string densities_path, densities_out;
  std::string op_times_path;  // sim: per-op times measured on a device, charged instead of the cost model's (op_times.h)
  bool timeline = false;    // per-op allocated / reserved bytes of the last iteration
  std::string trace_path;   // access trace as JSON lines
  std::string init_path;    // --init: parameters and buffers from this safetensors file (safetensors.h)
  std::string save_path;    // --save: the final parameters and buffers to this safetensors file
  std::string save_dir;     // --save-dir: the run's state (every persistent tensor, the iteration) as DIR/state.safetensors
  int save_every = 0;       // --save-every: that state after every N iterations (and at the end); 0: at the end only
  std::string resume_dir;   // --resume: go on from DIR/state.safetensors up to `iters` iterations in all
  std::shared_ptr<const Graph> graph;  // prebuilt (trace replay): used instead of model + autodiff
};

struct TrainResult {
  TrainConfig config;
  std::string device;
  size_t param_bytes = 0, persistent_bytes = 0;
  size_t num_ops = 0, num_tensors = 0;
  std::vector<IterationStats> iterations;
  std::vector<TimelinePoint> timeline;
  nlohmann::json timeline_ops;  // per timeline point: the op's name, kind, input and output tensor names
  size_t host_peak = 0;  // host pool bytes held (in use + cached), peak over the iterations
  nlohmann::json policy_report;     // Policy::report(): null when the policy has nothing to say
  std::string policy_summary;       // Policy::summary()
  nlohmann::json allocator_report;  // DeviceAllocator::report()
  std::vector<CompressionStat> compression;  // the last iteration's, per compressed tensor
  std::vector<std::string> tensor_names;     // by id, for the report
};

class Trainer {
 public:
  explicit Trainer(TrainConfig cfg);
  ~Trainer();
  IterationStats step();  // one iteration
  TrainResult run(const std::function<void(const IterationStats&)>& on_iteration = {});

  // Current values of a tensor (weights after training, for comparisons).
  std::vector<float> read(TensorId id);
  std::vector<std::vector<float>> read_params();
  const Graph& graph() const { return graph_; }
  MemoryManager& memory() { return *mm_; }
  const TrainConfig& config() const { return cfg_; }

 private:
  TrainConfig cfg_;
  Graph graph_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<MemoryManager> mm_;
  std::unique_ptr<Executor> exec_;
  std::vector<AccessTrace> traces_;  // each iteration's, kept when trace_path is set
  const std::map<TensorId, const float*>& init_values(const Graph& g, const TensorFile& f, const std::string& path);
  std::map<TensorId, const float*> init_values_;  // --init: into the file read below, for init_persistent
  void save_state() const;                         // --save-dir
  void resume();                                   // --resume
  int resumed_from_ = 0;                           // --resume: the iteration the saved state reached
  int iteration_ = 0;
};

// The JSON report (PyTorch's vocabulary: peak allocated / reserved bytes).
std::string report_json(const TrainResult& r);
// A planned policy's guided iterations (all but the first, measured one) against the time its
// rehearsal predicted (the report's policy_report.predicted_time_ms): their mean over it; nullopt
// without a prediction or a guided iteration. Far above 1: the plan does not replay on this device.
std::optional<double> replay_ratio(const TrainResult& r);
// Above this the CLI warns that the plan runs slower than it rehearsed.
constexpr double kReplayWarnRatio = 2.0;
// Writes atomically: a failed run leaves no half-written report.
void write_report(const TrainResult& r, const std::string& path);
std::string format_iteration_line(const IterationStats& s, int total);
// What the iteration recomputed, by op kind (time first), and how much re-ran an op already
// re-run in it; "" where nothing was recomputed.
std::string format_recompute_line(const IterationStats& s);
// The iteration's longest recomputation chain (most ops re-run for one restore), where it ran and
// for which tensor; "" where no chain re-ran more than one op.
std::string format_chain_line(const IterationStats& s);
// Unified memory (policies um, um-prefetch): the report's object and the console line.
nlohmann::json paging_json(const PagingCounters& p);
std::string format_paging(const PagingCounters& p);

}  // namespace vtensor
