// Capuchin's planner on DTR's operator logs (../shared/external/dtr-logs): for each budget,
// the plan each mode makes and the overhead it predicts, (logged time + predicted stalls +
// recompute time) / logged time. A prediction from the log's own operator times and an assumed
// PCIe bandwidth, not an execution (`vtensor replay --trace dtr:NAME --policy capuchin` runs it
// on the sim backend). The log is read by trace_io (the reader replay uses).
// Usage: vtensor_dtr_log_plan LOG|dtr:NAME [--gbps 12] [--fractions 0.9,0.7,0.5,0.3] [--budgets BYTES,...]
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "vtensor/memory/trace_io.h"
#include "vtensor/policy/capuchin.h"

using namespace vtensor;

static std::vector<double> split(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(std::stod(x));
  return out;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s LOG [--gbps 12] [--fractions 0.9,0.7,0.5,0.3] [--budgets BYTES,...]\n", argv[0]);
    return 2;
  }
  const std::string log = argv[1];
  double gbps = 12;  // PCIe 3.0 x16 as on the logs' Titan V: an assumption, the logs hold no copies
  std::vector<double> fractions = {0.9, 0.7, 0.5, 0.3}, budgets;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--gbps")) gbps = std::stod(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--fractions")) fractions = split(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--budgets")) budgets = split(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown argument %s; accepted: --gbps, --fractions, --budgets\n", argv[i]);
      return 2;
    }
  }
  const Graph g = load_trace(log);
  int overwritten = 0;  // forward results whose inputs are written in place before their last access
  for (const auto& t : g.tensors()) overwritten += t.producer >= 0 && !t.recomputable;
  std::fprintf(stderr, "%s: %d tensors not recomputable (inputs overwritten in place)\n", log.c_str(), overwritten);
  PlannerInput in = planner_input(g, recorded_access_trace(g), ~size_t{0});
  in.swap_ns_per_byte = 1.0 / gbps;
  const size_t peak = plan_capuchin(in, CapuchinMode::kHybrid).peak_before;
  for (double f : fractions) budgets.push_back(static_cast<double>(peak) * f);
  const double total_ms = recorded_total_ms(g);
  std::printf("log,ops,storages,unmanaged_peak_bytes,mode,budget_bytes,budget_fraction,predicted_peak_bytes,fits,"
              "swap_bytes,recompute_bytes,predicted_stall_ms,predicted_recompute_ms,logged_ms,predicted_overhead\n");
  for (double b : budgets) {
    in.budget = static_cast<size_t>(b);
    for (auto mode : {CapuchinMode::kSwap, CapuchinMode::kRecompute, CapuchinMode::kHybrid}) {
      const CapuchinPlan plan = plan_capuchin(in, mode);
      size_t sb = 0, rb = 0;
      double stall = 0, rec = 0;
      for (const auto& c : plan.candidates) {
        if (c.decision == CapuchinDecision::kSwap) sb += c.bytes, stall += c.swap_stall_ns;
        if (c.decision == CapuchinDecision::kRecompute) rb += c.bytes, rec += c.recompute_ns;
      }
      const char* name = mode == CapuchinMode::kSwap ? "capuchin-swap" : mode == CapuchinMode::kRecompute ? "capuchin-recompute" : "capuchin";
      std::printf("%s,%d,%zu,%zu,%s,%zu,%.3f,%zu,%d,%zu,%zu,%.3f,%.3f,%.3f,%.4f\n", log.substr(log.rfind('/') + 1).c_str(),
                  in.num_ops, in.tensors.size(), peak, name, in.budget, static_cast<double>(in.budget) / static_cast<double>(peak),
                  plan.peak_after, plan.fits ? 1 : 0, sb, rb, stall * 1e-6, rec * 1e-6, total_ms,
                  (total_ms + (stall + rec) * 1e-6) / total_ms);
    }
  }
  return 0;
}
