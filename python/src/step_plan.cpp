#include "step_plan.h"

#include "vtensor/backend/sim/gpu_specs.h"
#include "vtensor/memory/trace_io.h"
#include "vtensor/train/trainer.h"

namespace vtensor::pyb {

StepPlan plan_step(const std::string& log_path, size_t budget, const std::string& policy, const std::string& gpu,
                   const std::string& gpu_file, int iters, const PolicyOptions& options) {
  if (iters < 2) throw std::invalid_argument("iters must be at least 2 (a measured iteration, then a guided one)");
  if (budget == 0) throw std::invalid_argument("budget must be a positive number of bytes");
  if (!gpu_file.empty()) load_gpu_file(gpu_file);
  TrainConfig cfg;
  cfg.graph = std::make_shared<const Graph>(load_trace(log_path));
  cfg.model.name = log_path;
  cfg.backend = "sim";
  cfg.gpu = gpu;
  cfg.policy = policy;
  cfg.budget = budget;
  cfg.budget_above_gpu = true;  // the budget is the step's, whatever the modelled GPU holds
  cfg.iters = iters;
  cfg.policy_options = options;
  Trainer t(cfg);
  t.memory().set_move_log_enabled(true);
  const TrainResult r = t.run();
  StepPlan p;
  const Graph& g = t.graph();
  p.num_ops = static_cast<int>(g.num_ops());
  for (const Move& m : t.memory().moves())
    p.moves.push_back({m.point, to_string(m.kind), g.tensor(m.id).name, m.planned});
  for (const IterationStats& s : r.iterations) {
    p.iteration_ms.push_back(s.time_ms);
    p.peak_bytes.push_back(s.peak_allocated);
  }
  p.summary = r.policy_summary;
  p.report = report_json(r);
  return p;
}

}  // namespace vtensor::pyb
