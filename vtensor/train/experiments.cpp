#include "vtensor/policy/registry.h"
#include "vtensor/train/experiments.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"
#include "vtensor/core/output.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/trace_io.h"

namespace vtensor {
namespace {

// "Unlimited" on sim: the arena is never touched, so any size costs nothing.
constexpr size_t kSimUnlimitedBudget = size_t{1} << 40;

// FNV-1a over the bytes of every parameter, in graph order.
uint64_t digest(const std::vector<std::vector<float>>& params) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : params) {
    const auto* b = reinterpret_cast<const unsigned char*>(p.data());
    for (size_t i = 0; i < p.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

TrainResult replay_trace(const ReplayConfig& c, const std::function<void(const IterationStats&)>& on_iteration) {
  TrainConfig cfg;
  cfg.graph = std::make_shared<const Graph>(load_trace(c.trace));
  cfg.model.name = c.trace;
  cfg.backend = "sim";
  cfg.gpu = c.gpu;
  cfg.policy = c.policy;
  cfg.allocator = c.allocator;
  cfg.budget = c.budget;
  cfg.host_budget = c.host_budget;
  cfg.budget_above_gpu = c.budget_above_gpu;
  cfg.iters = c.iters;
  cfg.timeline = c.timeline;
  cfg.policy_options = c.policy_options;
  Trainer t(cfg);
  return t.run(on_iteration);
}

RunSummary summarise(const TrainResult& r) {
  RunSummary s;
  s.ok = true;
  double ms = 0;
  const size_t first = r.iterations.size() > 1 ? 1 : 0;
  for (size_t i = 0; i < r.iterations.size(); ++i) {
    const auto& it = r.iterations[i];
    s.peak_allocated = std::max(s.peak_allocated, it.peak_allocated);
    s.peak_reserved = std::max(s.peak_reserved, it.peak_reserved);
    s.peak_host = std::max(s.peak_host, it.peak_host);
    s.peak_device = std::max(s.peak_device, it.paged ? it.paging.peak_device_bytes : it.peak_allocated);
    if (i >= first) ms += it.time_ms;
    if (it.has_loss) s.losses.push_back(it.loss);
  }
  s.iteration_ms = r.iterations.empty() ? 0 : ms / static_cast<double>(r.iterations.size() - first);
  if (!r.iterations.empty()) {
    const auto& last = r.iterations.back().counters;
    s.swapped_out_bytes = last.swapped_out_bytes;
    s.swapped_in_bytes = last.swapped_in_bytes;
    s.recomputed_ops = last.recomputed_ops;
    s.stall_ms = last.stall_ms;
    if (const auto& it = r.iterations.back(); it.paged) {  // faults and page traffic
      s.swapped_out_bytes += it.paging.pages_out * it.page_bytes;
      s.swapped_in_bytes += it.paging.pages_in * it.page_bytes;
      s.stall_ms += it.paging.stall_ms;
    }
    s.recompute_ms = last.recompute_ms;
  }
  return s;
}

bool same_values(const RunSummary& a, const RunSummary& b) {
  return !a.losses.empty() && same_bits(a.losses, b.losses) && a.weights_digest == b.weights_digest;
}

RunSummary run_summary(const TrainConfig& cfg) {
  try {
    Trainer t(cfg);
    RunSummary s = summarise(t.run());
    if (!s.losses.empty()) s.weights_digest = digest(t.read_params());
    return s;
  } catch (const OutOfMemoryError& e) {
    RunSummary s;
    s.error = e.what();
    return s;
  }
}

MaxBatchResult search_max_batch(int max_limit, const std::function<RunSummary(int)>& run,
                                const std::function<void(int, const RunSummary&)>& on_probe) {
  if (max_limit < 1) throw std::invalid_argument("--max-batch must be at least 1");
  MaxBatchResult out;
  auto measure = [&](int batch) {
    RunSummary s = run(batch);
    out.probes.emplace_back(batch, s);
    if (on_probe) on_probe(batch, s);
    return s;
  };
  auto probe = [&](int batch) {
    RunSummary s = measure(batch);
    if (s.ok && batch > out.batch) {
      out.batch = batch;
      out.at_batch = s;
    }
    return s.ok;
  };
  if (!probe(1)) return out;
  int lo = 1, hi = 0;  // lo trains; hi (when > 0) does not
  while (hi == 0 && lo < max_limit) {
    const int next = static_cast<int>(std::min<int64_t>(int64_t{lo} * 2, max_limit));
    if (probe(next)) lo = next;
    else hi = next;
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    if (probe(mid)) lo = mid;
    else hi = mid;
  }
  // The monotonicity check: larger batches the search skipped (batch + 1 failed in the bisection,
  // or is above the limit).
  const int64_t b = out.batch;
  for (int64_t c : {(b * 5 + 3) / 4, (b * 3 + 1) / 2}) {  // x1.25 and x1.5, rounded up
    if (c <= b || c > max_limit) continue;
    const bool seen = std::any_of(out.probes.begin(), out.probes.end(), [&](const auto& p) { return p.first == c; });
    if (seen) continue;
    out.checked_above.push_back(static_cast<int>(c));
    if (measure(static_cast<int>(c)).ok) out.non_monotonic.push_back(static_cast<int>(c));
  }
  return out;
}

MaxBatchResult max_batch(const TrainConfig& base, int max_limit, const std::function<void(int, const RunSummary&)>& on_probe) {
  return search_max_batch(
      max_limit,
      [&](int batch) {
        TrainConfig cfg = base;
        cfg.model.batch = batch;
        return run_summary(cfg);
      },
      on_probe);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<SweepBudget> parse_budgets(const std::string& text, const std::string& what) {
  std::vector<SweepBudget> out;
  for (const auto& item : split_list(text)) {
    SweepBudget b{.label = item};
    if (item.back() == '%') {
      try {
        size_t used = 0;
        const double pct = std::stod(item.substr(0, item.size() - 1), &used);
        if (used != item.size() - 1 || !(pct > 0) || pct > 1000) throw std::invalid_argument(item);
        b.fraction = pct / 100.0;
      } catch (const std::exception&) {
        throw std::invalid_argument(what + ": '" + item + "' is not a percentage in (0, 1000]; accepted: "
                                    "percentages of the unmanaged peak (50%) or sizes (4GiB)");
      }
    } else {
      b.bytes = parse_bytes(item, what);
      if (b.bytes == 0) throw std::invalid_argument(what + ": budget '" + item + "' must be positive");
    }
    out.push_back(b);
  }
  if (out.empty()) throw std::invalid_argument(what + ": give at least one budget, e.g. 100%,50%,4GiB");
  return out;
}

std::vector<int> parse_batches(const std::string& text, const std::string& what) {
  std::vector<int> out;
  for (const auto& item : split_list(text)) {
    try {
      size_t used = 0;
      const int b = std::stoi(item, &used);
      if (used != item.size() || b <= 0) throw std::invalid_argument(item);
      out.push_back(b);
    } catch (const std::exception&) {
      throw std::invalid_argument(what + ": '" + item + "' is not a positive batch size; accepted: e.g. 32,64,128");
    }
  }
  return out;
}

std::vector<SweepRow> sweep(const TrainConfig& base, const std::vector<std::string>& policies,
                            const std::vector<SweepBudget>& budgets, const std::vector<int>& batches,
                            const std::function<void(const SweepRow&)>& on_row) {
  if (policies.empty()) throw std::invalid_argument("--policies: give at least one policy");
  check_policy_options(base.policy_options, policies);  // every name and option before any run
  std::vector<int> bs = batches;
  if (bs.empty()) bs.push_back(base.model.batch);  // 0: the preset's
  std::vector<SweepRow> rows;
  for (int batch : bs) {
    TrainConfig unmanaged = base;
    unmanaged.model.batch = batch;
    unmanaged.policy = "none";
    unmanaged.policy_options = base.policy_options.only({});
    unmanaged.densities_path.clear();
    unmanaged.budget = base.backend == "sim" ? kSimUnlimitedBudget : kDefaultCpuBudget;
    unmanaged.budget_above_gpu = base.backend == "sim";  // the unmanaged peak, whatever the GPU holds
    const RunSummary ref = run_summary(unmanaged);
    for (const auto& b : budgets) {
      for (const auto& policy : policies) {
        SweepRow row;
        row.model = base.model.name;
        row.policy = policy;
        row.batch = batch;
        row.budget_label = b.label;
        row.unmanaged_peak = ref.ok ? ref.peak_allocated : 0;
        row.unmanaged_ms = ref.ok ? ref.iteration_ms : 0;
        if (b.fraction > 0 && !ref.ok) {
          row.run.error = "the unmanaged run failed, so a fraction of its peak is unknown: " + ref.error;
        } else {
          row.budget = align_up(b.fraction > 0 ? static_cast<size_t>(static_cast<double>(ref.peak_allocated) * b.fraction)
                                               : b.bytes);
          TrainConfig cfg = base;
          cfg.model.batch = batch;
          cfg.policy = policy;
          cfg.policy_options = base.policy_options.only(find_policy(policy).options);  // its own flags
          // An input of the compress policies and of auto (its compression candidates) only.
          if (policy.rfind("compress", 0) != 0 && policy != "auto") cfg.densities_path.clear();
          cfg.budget = row.budget;
          // A fraction of the unmanaged peak compares policies at one pressure; it may exceed the GPU.
          if (b.fraction > 0 && base.backend == "sim") cfg.budget_above_gpu = true;
          row.run = run_summary(cfg);
          if (row.run.ok && ref.ok && ref.iteration_ms > 0) row.overhead = row.run.iteration_ms / ref.iteration_ms;
          if (row.run.ok && ref.ok && !ref.losses.empty())
            row.identical = same_values(row.run, ref) ? "yes" : "no";
        }
        if (on_row) on_row(row);
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

void write_sweep(const std::vector<SweepRow>& rows, const std::string& path) {
  const bool csv = path.size() >= 4 && path.substr(path.size() - 4) == ".csv";
  const bool json_out = path.size() >= 5 && path.substr(path.size() - 5) == ".json";
  if (!csv && !json_out) throw std::invalid_argument("--out '" + path + "': accepted extensions: .csv, .json");
  std::string text;
  if (csv) {
    text = "model,batch,policy,budget,budget_bytes,unmanaged_peak_bytes,status,peak_allocated_bytes,"
           "peak_reserved_bytes,iteration_ms,overhead,swapped_out_bytes,swapped_in_bytes,recomputed_ops,stall_ms,peak_host_bytes,"
           "bit_identical,unmanaged_ms,peak_device_bytes\n";
    for (const auto& r : rows) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "%s,%d,%s,%s,%zu,%zu,%s,%zu,%zu,%.3f,%.4f,%llu,%llu,%llu,%.3f,%zu,%s,%.3f,%zu\n", r.model.c_str(),
                    r.batch, r.policy.c_str(), r.budget_label.c_str(), r.budget, r.unmanaged_peak,
                    r.run.ok ? "ok" : "oom", r.run.peak_allocated, r.run.peak_reserved, r.run.iteration_ms, r.overhead,
                    static_cast<unsigned long long>(r.run.swapped_out_bytes),
                    static_cast<unsigned long long>(r.run.swapped_in_bytes),
                    static_cast<unsigned long long>(r.run.recomputed_ops), r.run.stall_ms, r.run.peak_host,
                    r.identical.c_str(), r.unmanaged_ms, r.run.peak_device);
      text += buf;
    }
  } else {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& r : rows) {
      nlohmann::json o = {{"model", r.model}, {"batch", r.batch}, {"policy", r.policy}, {"budget", r.budget_label},
                          {"budget_bytes", r.budget}, {"unmanaged_peak_bytes", r.unmanaged_peak},
                          {"status", r.run.ok ? "ok" : "oom"}, {"unmanaged_ms", r.unmanaged_ms}};
      if (r.run.ok) {
        o.update({{"peak_allocated_bytes", r.run.peak_allocated}, {"peak_reserved_bytes", r.run.peak_reserved},
                  {"iteration_ms", r.run.iteration_ms}, {"overhead", r.overhead},
                  {"swapped_out_bytes", r.run.swapped_out_bytes}, {"swapped_in_bytes", r.run.swapped_in_bytes},
                  {"recomputed_ops", r.run.recomputed_ops}, {"stall_ms", r.run.stall_ms},
                  {"peak_host_bytes", r.run.peak_host}, {"peak_device_bytes", r.run.peak_device}});
        o["bit_identical"] = r.identical.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.identical == "yes");
      } else {
        o["error"] = r.run.error;
      }
      a.push_back(o);
    }
    text = a.dump(2) + "\n";
  }
  write_output(path, "sweep", text);
}

}  // namespace vtensor
