#include "vtensor/policy/registry.h"
#include "vtensor/train/trainer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "vtensor/backend/sim/gpu_specs.h"
#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"
#include "vtensor/core/output.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/policy/planning.h"
#include "vtensor/train/densities.h"
#include "vtensor/train/op_times.h"
#include "vtensor/train/rehearsal.h"
#include "vtensor/train/safetensors.h"
#include "vtensor/train/report_html.h"

namespace vtensor {

namespace {
constexpr const char* kStateFormat = "vtensor-state-1";
std::string state_path(const std::string& dir) { return (std::filesystem::path(dir) / "state.safetensors").string(); }
}  // namespace

namespace {
// The policies the compression flags apply to (for messages).
constexpr const char* kCompressPolicies = "compress, compress+swap or compress+capuchin";

// The options that do not go together, refused before any work.
void check_combinations(const TrainConfig& c, const CompressionOptions* compression, bool rehearsing) {
  if (!compression && !c.densities_out.empty())
    throw std::invalid_argument(std::string("--densities-out applies to --policy ") + kCompressPolicies + " only, got --policy " +
                                c.policy);
  // auto reads densities too: on sim they size its compression candidates' rehearsals.
  if (!compression && !rehearsing && !c.densities_path.empty())
    throw std::invalid_argument("--densities applies to --policy compress, compress+swap, compress+capuchin or auto "
                                "only, got --policy " + c.policy);
  if (compression && !c.densities_out.empty() && c.backend == "sim")
    throw std::invalid_argument("--densities-out needs a backend with data (cpu, cuda), got --backend sim");
  if (c.backend == "sim" && (!c.init_path.empty() || !c.save_path.empty() || !c.save_dir.empty() ||
                                !c.resume_dir.empty()))
    throw std::invalid_argument("--save, --init, --save-dir and --resume need a backend that holds values (cpu, cuda), "
                                "got --backend sim");
  if (c.save_every > 0 && c.save_dir.empty()) throw std::invalid_argument("--save-every needs --save-dir DIR");
  if (!c.save_dir.empty() && !std::filesystem::is_directory(c.save_dir))
    throw std::invalid_argument("--save-dir '" + c.save_dir + "': no such folder");
  if (!c.save_dir.empty()) check_output(state_path(c.save_dir), "--save-dir");
  if (!c.resume_dir.empty() && !c.init_path.empty())
    throw std::invalid_argument("--resume and --init both give the starting weights; accepted: one of them");
  if (!c.densities_path.empty() && c.backend != "sim")
    throw std::invalid_argument("--densities applies to --backend sim only (backend '" + c.backend +
                                "' measures its own tensors; --densities-out writes them)");
  if (!c.op_times_path.empty() && c.backend != "sim")
    throw std::invalid_argument("--op-times applies to --backend sim only (backend '" + c.backend +
                                "' times its own ops)");
}
}  // namespace

Trainer::Trainer(TrainConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.iters <= 0) throw std::invalid_argument("--iters must be positive, got " + std::to_string(cfg_.iters));
  if (!cfg_.graph) cfg_.model = resolve_model(cfg_.model);
  // cpu or sim without a GPU and no --budget: the default arena stands for "unlimited".
  cfg_.policy_options.budget_given = cfg_.budget != 0 || cfg_.backend == "cuda" || (cfg_.backend == "sim" && !cfg_.gpu.empty());
  auto policy = make_policy(cfg_.policy, cfg_.policy_options);  // names and values checked before any work
  RehearsingPolicy* rehearsing = policy->rehearsing();
  if (rehearsing) rehearsing->set_rehearser(rehearse);
  const CompressionOptions* compression = policy->compression();  // a compress policy's
  check_combinations(cfg_, compression, rehearsing != nullptr);
  std::shared_ptr<const DensityTable> densities;
  if (!cfg_.densities_path.empty()) densities = std::make_shared<const DensityTable>(load_densities(cfg_.densities_path));
  if (!cfg_.gpu.empty() && cfg_.backend != "sim")
    throw std::invalid_argument("--gpu applies to --backend sim only (backend is '" + cfg_.backend + "')");
  if (cfg_.budget == 0 && cfg_.backend != "cuda")  // cuda: the backend takes the free memory less a margin
    cfg_.budget = cfg_.backend == "sim" && !cfg_.gpu.empty() ? find_gpu(cfg_.gpu).memory_bytes : kDefaultCpuBudget;
  if (cfg_.budget_above_gpu && cfg_.backend != "sim")
    throw std::invalid_argument("--budget-above-gpu applies to --backend sim only (backend is '" + cfg_.backend + "')");
  if (cfg_.backend == "sim" && !cfg_.gpu.empty() && !cfg_.budget_above_gpu) {
    const GpuSpec& gpu = find_gpu(cfg_.gpu);
    if (cfg_.budget > gpu.memory_bytes)
      throw std::invalid_argument("--budget " + format_bytes(cfg_.budget) + " is above " + gpu.name + "'s memory (" +
                                  format_bytes(gpu.memory_bytes) + "); accepted: at most " +
                                  format_bytes(gpu.memory_bytes) + ", or --budget-above-gpu to model a device that holds it");
  }
  cfg_.budget = align_up(cfg_.budget);
  if (cfg_.graph) {
    graph_ = *cfg_.graph;
  } else {
    graph_ = build_model(cfg_.model);
    build_backward(graph_, cfg_.optimizer);
    if (cfg_.inplace_relu_grad) share_relu_gradients(graph_);
  }
  if (compression && cfg_.backend == "sim" && cfg_.densities_path.empty() && compression->bitmask) {
    bool sparse = false;  // ReLU or max-pool outputs: what the bitmask codec is for
    for (const Op& op : graph_.ops()) sparse = sparse || op.kind == OpKind::kRelu || op.kind == OpKind::kMaxPool;
    if (sparse)
      throw std::invalid_argument("--policy " + cfg_.policy + " on --backend sim needs --densities FILE for model " +
                                  cfg_.model.name +
                                  ": the non-zero counts a cpu run of the same model recorded with --densities-out "
                                  "(or --codecs sign, which needs none)");
  }
  if (densities) {  // recorded for this model: every ReLU / max-pool output has its count
    for (const Op& op : graph_.ops()) {
      if (op.kind != OpKind::kRelu && op.kind != OpKind::kMaxPool) continue;
      const TensorInfo& t = graph_.tensor(op.outputs[0]);
      if (!densities->tensors.count(density_key(t)))
        throw std::invalid_argument("--densities '" + cfg_.densities_path + "' (" + densities->source +
                                    ") has no entry for tensor '" + density_key(t) + "' of model " + cfg_.model.name +
                                    "; accepted: a file written by train --densities-out for the same model");
    }
  }
  if (!cfg_.planner.empty() && cfg_.allocator != "planned")
    throw std::invalid_argument("--planner applies to --allocator planned only, got --allocator " + cfg_.allocator);
  BackendOptions backend_options{.arena_bytes = cfg_.budget, .gpu = cfg_.gpu, .deterministic = cfg_.deterministic};
  if (!cfg_.op_times_path.empty()) backend_options.op_ms = load_op_times(cfg_.op_times_path, graph_);
  backend_ = make_backend(cfg_.backend, backend_options);
  cfg_.budget = backend_->arena_bytes();
  if (rehearsing) rehearsing->prepare(graph_, cfg_.budget, cfg_.backend == "sim" && !densities);
  if (densities) backend_->set_densities(densities);
  auto allocator = make_allocator(cfg_.allocator, cfg_.budget, cfg_.planner);
  mm_ = std::make_unique<MemoryManager>(*backend_, graph_, std::move(allocator), std::move(policy));
  mm_->set_timeline_enabled(cfg_.timeline);
  mm_->set_host_budget(cfg_.host_budget);
  exec_ = std::make_unique<Executor>(graph_, *backend_, *mm_);
  if (!cfg_.resume_dir.empty()) {
    resume();
  } else if (cfg_.init_path.empty()) {
    mm_->init_persistent(cfg_.seed);
  } else {
    const TensorFile init = read_safetensors(cfg_.init_path);
    mm_->init_persistent(cfg_.seed, &init_values(graph_, init, cfg_.init_path));
  }
}

// --save-dir: every persistent tensor (parameters, optimizer state, buffers) and the next
// iteration; the data batch, the dropout masks and Adam's step all follow from the iteration, so
// that is the whole state of the run. Renamed into place at once: a kill leaves the last one whole.
void Trainer::save_state() const {
  TensorFile f;
  for (const auto& t : graph_.tensors())
    if (t.persistent()) f[t.name] = {t.shape.dims(), const_cast<Trainer*>(this)->read(t.id)};
  write_safetensors(f, state_path(cfg_.save_dir),
                    {{"format", kStateFormat}, {"model", cfg_.model.name}, {"graph", fingerprint(graph_)},
                     {"iteration", std::to_string(iteration_)}, {"seed", std::to_string(cfg_.seed)}},
                    /*now=*/true);
}

// --resume: the state save_state wrote, for this model's graph and seed.
void Trainer::resume() {
  const std::string path = state_path(cfg_.resume_dir);
  const std::string where = "--resume '" + cfg_.resume_dir + "'";
  if (!std::filesystem::exists(path))
    throw std::invalid_argument(where + ": no state.safetensors in it; accepted: the --save-dir of an earlier run");
  const auto meta = read_safetensors_metadata(path, "--resume");
  const auto get = [&](const char* k) { return meta.count(k) ? meta.at(k) : std::string(); };
  if (get("format") != kStateFormat)
    throw std::invalid_argument(where + ": not a saved run's state (format '" + get("format") + "', accepted: " + kStateFormat + ")");
  if (get("model") != cfg_.model.name || get("graph") != fingerprint(graph_))
    throw std::invalid_argument(where + ": the state is of model " + get("model") +
                                " with another graph or shape; resume with the model options of the run that saved it");
  if (get("seed") != std::to_string(cfg_.seed))
    throw std::invalid_argument(where + ": the state was saved with --seed " + get("seed") + ", not " + std::to_string(cfg_.seed));
  int it = -1;
  try {
    it = std::stoi(get("iteration"));
  } catch (const std::exception&) {
  }
  if (it < 0) throw std::invalid_argument(where + ": the state names no iteration");
  if (it >= cfg_.iters)
    throw std::invalid_argument(where + ": the saved run already reached iteration " + std::to_string(it) + " of --iters " +
                                std::to_string(cfg_.iters) + "; accepted: a larger --iters");
  const TensorFile f = read_safetensors(path, "--resume");
  std::map<TensorId, const float*> values;
  for (const auto& t : graph_.tensors()) {
    if (!t.persistent()) continue;
    const auto x = f.find(t.name);
    if (x == f.end() || x->second.shape != t.shape.dims())
      throw std::invalid_argument(where + ": tensor '" + t.name + "' is missing from the state or has another shape");
    values[t.id] = x->second.values.data();
  }
  mm_->init_persistent(cfg_.seed, &values);
  iteration_ = resumed_from_ = it;
}

// --init: each parameter (and each buffer the file has) by its zoo name, with its shape.
const std::map<TensorId, const float*>& Trainer::init_values(const Graph& g, const TensorFile& f, const std::string& path) {
  init_values_.clear();
  std::vector<std::string> missing;
  size_t matched = 0;
  for (const auto& t : g.tensors()) {
    if (t.kind != TensorKind::kParam && t.kind != TensorKind::kBuffer) continue;
    const auto it = f.find(t.name);
    if (it == f.end()) {
      if (t.kind == TensorKind::kParam) missing.push_back(t.name);
      continue;
    }
    if (it->second.shape != t.shape.dims()) {
      const auto text = [](const std::vector<int64_t>& d) {
        std::string s = "[";
        for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
        return s + "]";
      };
      throw std::invalid_argument("--init '" + path + "': tensor '" + t.name + "' has shape " + text(t.shape.dims()) +
                                  " in model " + cfg_.model.name + ", " + text(it->second.shape) + " in the file");
    }
    init_values_[t.id] = it->second.values.data();
    ++matched;
  }
  if (!missing.empty())
    throw std::invalid_argument("--init '" + path + "': " + std::to_string(missing.size()) + " parameters of model " +
                                cfg_.model.name + " are not in the file, e.g. '" + missing.front() +
                                "'; accepted: a file train --save wrote for this model, or one with its names");
  if (matched != f.size()) {
    for (const auto& entry : f)
      if (std::none_of(g.tensors().begin(), g.tensors().end(), [&](const TensorInfo& t) { return t.name == entry.first; }))
        throw std::invalid_argument("--init '" + path + "': tensor '" + entry.first + "' is not a parameter or buffer of model " +
                                    cfg_.model.name);
  }
  return init_values_;
}

Trainer::~Trainer() = default;

IterationStats Trainer::step() {
  IterationStats s = exec_->run_iteration(iteration_++);
  if (!cfg_.trace_path.empty()) traces_.push_back(mm_->tracker().current());
  return s;
}

TrainResult Trainer::run(const std::function<void(const IterationStats&)>& on_iteration) {
  TrainResult r;
  r.config = cfg_;
  r.device = backend_->device_description();
  for (TensorId p : graph_.params) r.param_bytes += graph_.tensor(p).bytes();
  r.persistent_bytes = graph_.persistent_bytes();
  r.num_ops = graph_.num_ops();
  r.num_tensors = graph_.num_tensors();
  for (int i = resumed_from_; i < cfg_.iters; ++i) {
    r.iterations.push_back(step());
    if (on_iteration) on_iteration(r.iterations.back());
    if (cfg_.save_every > 0 && iteration_ % cfg_.save_every == 0 && iteration_ < cfg_.iters) save_state();
  }
  if (!cfg_.save_dir.empty()) save_state();
  r.timeline = mm_->timeline();
  r.timeline_ops = nlohmann::json::array();
  for (const auto& p : r.timeline) {
    const Op& op = graph_.op(p.op_index);
    nlohmann::json ins = nlohmann::json::array(), outs = nlohmann::json::array();
    for (TensorId t : op.inputs) ins.push_back(graph_.tensor(t).name);
    for (TensorId t : op.outputs) outs.push_back(graph_.tensor(t).name);
    r.timeline_ops.push_back({{"name", op.name}, {"kind", to_string(op.kind)}, {"inputs", ins}, {"outputs", outs}});
  }
  for (const auto& s : r.iterations) r.host_peak = std::max(r.host_peak, s.peak_host);
  r.policy_report = mm_->policy().report();
  r.policy_summary = mm_->policy().summary();
  r.allocator_report = mm_->allocator().report();
  r.compression = mm_->compression_stats();
  for (const auto& t : graph_.tensors()) r.tensor_names.push_back(t.name);
  if (!cfg_.densities_out.empty()) {
    DensityTable d = mm_->measured_densities();
    d.source = "model " + cfg_.model.name + ", batch " + std::to_string(cfg_.model.batch) + ", backend " + cfg_.backend +
               ", first iteration";
    if (d.tensors.empty())
      throw std::invalid_argument("--densities-out: the run measured no tensor (no ReLU or max-pool outputs in model " +
                                  cfg_.model.name + ")");
    write_densities(d, cfg_.densities_out);
  }
  if (!cfg_.trace_path.empty()) AccessTracker::write_jsonl(cfg_.trace_path, graph_, traces_);
  if (!cfg_.save_path.empty()) {
    TensorFile f;
    for (const auto& t : graph_.tensors())
      if (t.kind == TensorKind::kParam || t.kind == TensorKind::kBuffer) f[t.name] = {t.shape.dims(), read(t.id)};
    write_safetensors(f, cfg_.save_path,
                      {{"format", "vtensor-weights-1"}, {"model", cfg_.model.name}, {"iterations", std::to_string(iteration_)}});
  }
  return r;
}

std::vector<float> Trainer::read(TensorId id) {
  std::vector<float> out(static_cast<size_t>(graph_.tensor(id).shape.numel()));
  mm_->read(id, out.data());
  return out;
}

std::vector<std::vector<float>> Trainer::read_params() {
  std::vector<std::vector<float>> out;
  for (TensorId p : graph_.params) out.push_back(read(p));
  return out;
}

std::string format_paging(const PagingCounters& p) {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "um: faults %llu in %llu batches, pages in %llu out %llu, prefetched %llu (hit %llu, late %llu, "
                "useless %llu), pre-evicted %llu, invalidated %llu, stall %.1f ms, device peak %.2f MiB",
                static_cast<unsigned long long>(p.faults), static_cast<unsigned long long>(p.fault_batches),
                static_cast<unsigned long long>(p.pages_in), static_cast<unsigned long long>(p.pages_out),
                static_cast<unsigned long long>(p.prefetches), static_cast<unsigned long long>(p.prefetch_hits),
                static_cast<unsigned long long>(p.prefetch_late), static_cast<unsigned long long>(p.prefetch_useless),
                static_cast<unsigned long long>(p.pre_evictions), static_cast<unsigned long long>(p.invalidated), p.stall_ms,
                static_cast<double>(p.peak_device_bytes) / (1024.0 * 1024.0));
  return buf;
}

static nlohmann::json recompute_json(const IterationStats& s) {
  using nlohmann::json;
  json kinds = json::array();
  for (const RecomputeByKind& k : s.recompute_by_kind)
    kinds.push_back({{"kind", k.kind}, {"ops", k.count}, {"ms", k.ms}, {"restored_bytes", k.restored_bytes},
                     {"repeats", k.repeats}, {"repeat_ms", k.repeat_ms}});
  return kinds;
}

static nlohmann::json chains_json(const IterationStats& s) {
  nlohmann::json chains = nlohmann::json::array();
  for (const RecomputeChain& c : s.recompute_chains)
    chains.push_back({{"op", c.op}, {"op_name", c.op_name}, {"tensor", c.tensor}, {"ops", c.ops}, {"ms", c.ms},
                      {"restored_bytes", c.restored_bytes}});
  return chains;
}

std::string format_chain_line(const IterationStats& s) {
  const RecomputeChain* longest = nullptr;
  for (const RecomputeChain& c : s.recompute_chains)
    if (!longest || c.ops > longest->ops || (c.ops == longest->ops && c.ms > longest->ms)) longest = &c;
  if (!longest || longest->ops < 2) return "";
  char buf[128];
  std::snprintf(buf, sizeof buf, "longest recompute chain: %llu ops in %.2f ms (%s restored) at ",
                static_cast<unsigned long long>(longest->ops), longest->ms, format_bytes(longest->restored_bytes).c_str());
  return buf + longest->op_name + " for " + longest->tensor + "; " + std::to_string(s.recompute_chains.size()) +
         " chains in all";
}

std::string format_recompute_line(const IterationStats& s) {
  if (s.recompute_by_kind.empty()) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "recompute, last iteration: %llu ops re-run in %.2f ms:",
                static_cast<unsigned long long>(s.counters.recomputed_ops), s.counters.recompute_ms);
  std::string line = buf;
  uint64_t repeats = 0;
  double repeat_ms = 0;
  for (size_t i = 0; i < s.recompute_by_kind.size(); ++i) {
    const RecomputeByKind& k = s.recompute_by_kind[i];
    std::snprintf(buf, sizeof buf, " %llu (%.2f ms)", static_cast<unsigned long long>(k.count), k.ms);
    line += (i ? ", " : " ") + k.kind + buf;
    repeats += k.repeats, repeat_ms += k.repeat_ms;
  }
  if (repeats) {
    std::snprintf(buf, sizeof buf, "; %llu of them an op already re-run this iteration (%.2f ms)",
                  static_cast<unsigned long long>(repeats), repeat_ms);
    line += buf;
  }
  return line;
}

// The planning the iteration line names (a policy's end of iteration at least this long).
constexpr double kLongPlanMs = 100;

std::string format_iteration_line(const IterationStats& s, int total) {
  char buf[320], loss[32];
  const double mib = 1024.0 * 1024.0;
  if (s.has_loss) std::snprintf(loss, sizeof loss, "%.5f", static_cast<double>(s.loss));
  else std::snprintf(loss, sizeof loss, "n/a");  // no values on this backend
  std::snprintf(buf, sizeof buf,
                "iter %*d/%d  loss %s  time %8.1f ms  peak alloc %9.2f MiB  peak reserved %9.2f MiB  "
                "swap out %8.2f MiB  swap in %8.2f MiB  recomputed %4llu ops",
                static_cast<int>(std::to_string(total).size()), s.iteration + 1, total, loss,
                s.time_ms, static_cast<double>(s.peak_allocated) / mib, static_cast<double>(s.peak_reserved) / mib,
                static_cast<double>(s.counters.swapped_out_bytes) / mib,
                static_cast<double>(s.counters.swapped_in_bytes) / mib,
                static_cast<unsigned long long>(s.counters.recomputed_ops));
  std::string line = buf;
  if (s.counters.compressed_bytes > 0 || s.counters.compress_overflows > 0) {
    std::snprintf(buf, sizeof buf, "  compressed %8.2f MiB (ratio %.3f)", static_cast<double>(s.counters.compressed_bytes) / mib,
                  s.counters.compressed_bytes ? static_cast<double>(s.counters.compressed_to_bytes) /
                                                    static_cast<double>(s.counters.compressed_bytes)
                                              : 0.0);
    line += buf;
    if (s.counters.compress_overflows) line += " (" + std::to_string(s.counters.compress_overflows) + " overflowed)";
  }
  if (s.host_limited || s.peak_host > 0) {  // only where host memory is bounded or used
    std::snprintf(buf, sizeof buf, "  host %8.2f MiB", static_cast<double>(s.peak_host) / mib);
    line += buf;
    if (s.counters.host_skipped_swaps > 0) line += " (" + std::to_string(s.counters.host_skipped_swaps) + " swaps skipped)";
  }
  // A policy's end of iteration that took the host long (auto's planning after its measured
  // iteration): on cpu / cuda it is in this iteration's time; on sim it is not (the model's clock).
  if (s.host_plan_ms >= kLongPlanMs) {
    std::snprintf(buf, sizeof buf, "  planning %.1f s (host)", s.host_plan_ms / 1e3);
    line += buf;
  }
  if (s.paged) line += "\n    " + format_paging(s.paging);
  return line;
}

nlohmann::json paging_json(const PagingCounters& p) {
  const uint64_t used = p.prefetch_hits + p.prefetch_late;
  return {{"faults", p.faults},
          {"fault_batches", p.fault_batches},
          {"pages_in", p.pages_in},
          {"pages_out", p.pages_out},
          {"first_touch_pages", p.first_touch},
          {"dead_pages_out", p.dead_pages_out},
          {"evictions", p.evictions},
          {"prefetches", p.prefetches},
          {"prefetch_hits", p.prefetch_hits},
          {"prefetch_late", p.prefetch_late},
          {"prefetch_useless", p.prefetch_useless},
          {"prefetch_accuracy", p.prefetches ? nlohmann::json(static_cast<double>(used) / static_cast<double>(p.prefetches))
                                             : nlohmann::json(nullptr)},
          {"pre_evictions", p.pre_evictions},
          {"invalidated_pages", p.invalidated},
          {"invalidated_page_migrations", p.invalid_migrations},
          {"stall_ms", p.stall_ms},
          {"peak_device_bytes", p.peak_device_bytes}};
}

std::optional<double> replay_ratio(const TrainResult& r) {
  const auto& p = r.policy_report;
  if (!p.is_object() || !p.contains("predicted_time_ms") || !p["predicted_time_ms"].is_number() || r.iterations.size() < 2)
    return std::nullopt;
  const double predicted = p["predicted_time_ms"].get<double>();
  if (!(predicted > 0)) return std::nullopt;
  double sum = 0;
  for (size_t i = 1; i < r.iterations.size(); ++i) sum += r.iterations[i].time_ms;
  return sum / static_cast<double>(r.iterations.size() - 1) / predicted;
}

namespace {

// One iteration's figures in the report (host times null on sim, whose clock is the model's,
// unless its GPU models the host: then the modelled host's, and "host_model" says more).
nlohmann::json iteration_json(const IterationStats& s, const TrainConfig& c) {
  using nlohmann::json;
  const bool no_host = c.backend == "sim" && !s.host_modelled;
  json it = {{"iteration", s.iteration},
             {"loss", s.has_loss ? json(s.loss) : json(nullptr)},
             {"time_ms", s.time_ms},
             {"host_launch_ms", no_host ? json(nullptr) : json(s.host_launch_ms)},
             {"host_drain_ms", no_host ? json(nullptr) : json(s.host_drain_ms)},
             {"host_kernel_ms", no_host ? json(nullptr) : json(s.host_kernel_ms)},
             {"host_alloc_ms", no_host ? json(nullptr) : json(s.host_alloc_ms)},
             {"host_after_op_ms", no_host ? json(nullptr) : json(s.host_after_op_ms)},
             {"host_plan_ms", c.backend == "sim" ? json(nullptr) : json(s.host_plan_ms)},
             {"peak_allocated_bytes", s.peak_allocated},
             {"peak_reserved_bytes", s.peak_reserved},
             {"peak_host_bytes", s.peak_host},
             {"host_skipped_swaps", s.counters.host_skipped_swaps},
             {"fragmentation", s.fragmentation},
             {"swapped_out_bytes", s.counters.swapped_out_bytes},
             {"swapped_in_bytes", s.counters.swapped_in_bytes},
             {"swap_outs", s.counters.swap_outs},
             {"swap_ins", s.counters.swap_ins},
             {"prefetches", s.counters.prefetches},
             {"dropped", s.counters.dropped},
             {"recomputed_ops", s.counters.recomputed_ops},
             {"recompute_ms", s.counters.recompute_ms},
             {"recompute_by_kind", recompute_json(s)},
             {"recompute_chains", chains_json(s)},
             {"stall_ms", s.counters.stall_ms},
             {"evictions", s.counters.evictions},
             {"compactions", s.counters.compactions},
             {"compacted_bytes", s.counters.compacted_bytes},
             {"compacted_blocks", s.counters.compacted_blocks},
             {"compaction_ms", s.counters.compact_ms},
             {"compressed_bytes", s.counters.compressed_bytes},
             {"compressed_to_bytes", s.counters.compressed_to_bytes},
             {"compression_ratio", s.counters.compressed_bytes ? json(static_cast<double>(s.counters.compressed_to_bytes) /
                                                                      static_cast<double>(s.counters.compressed_bytes))
                                                               : json(nullptr)},
             {"compressions", s.counters.compressions},
             {"decompressions", s.counters.decompressions},
             {"on_demand_decompressions", s.counters.on_demand_decompressions},
             {"compress_overflows", s.counters.compress_overflows},
             {"compress_skipped", s.counters.compress_skipped},
             {"lean_conv_fallbacks", s.counters.lean_conv_fallbacks},
             {"op_times_on_device", s.op_times_on_device},
             {"compress_ms", s.counters.compress_ms},
             {"decompress_ms", s.counters.decompress_ms}};
  if (s.paged) it["unified_memory"] = paging_json(s.paging);
  if (s.host_modelled) {
    const auto& h = s.host_model;
    it["host_model"] = {{"wait_ms", h.wait_ms},         {"device_idle_ms", h.device_idle_ms}, {"launches", h.launches},
                        {"allocations", h.allocations}, {"actions", h.actions},               {"copies", h.copies},
                        {"events", h.events},           {"moved_blocks", h.moved_blocks}};
  }
  return it;
}

// The last iteration's per-op memory timeline: its columns and points.
nlohmann::json timeline_json(const TrainResult& r) {
  using nlohmann::json;
  json timeline = json::array();
  json timeline_columns = {"op_index", "allocated_bytes", "reserved_bytes"};
  for (size_t h = 0; h < kHeldByCount; ++h) timeline_columns.push_back(std::string("held: ") + to_string(static_cast<HeldBy>(h)));
  for (const char* e : {"swap_outs", "swap_ins", "prefetches", "dropped", "recomputed_ops", "stall_ms", "evictions",
                        "compressions", "decompressions", "device_page_bytes", "page_faults", "page_prefetches",
                        "compactions", "compacted_bytes"})
    timeline_columns.push_back(e);
  for (const auto& p : r.timeline) {
    json row = {p.op_index, p.allocated, p.reserved};
    for (size_t b : p.held) row.push_back(b);
    const MemoryCounters& e = p.events;
    for (json v : {json(e.swap_outs), json(e.swap_ins), json(e.prefetches), json(e.dropped), json(e.recomputed_ops),
                   json(e.stall_ms), json(e.evictions), json(e.compressions), json(e.decompressions),
                   json(p.device_page_bytes), json(p.page_faults), json(p.page_prefetches), json(e.compactions),
                   json(e.compacted_bytes)})
      row.push_back(v);
    timeline.push_back(row);
  }
  return json{{"columns", timeline_columns}, {"points", timeline}, {"ops", r.timeline_ops}};
}

nlohmann::json config_json(const TrainConfig& c) {
  using nlohmann::json;
  return json{{"model", c.model.name},
              {"batch", c.model.batch},
              {"image_size", c.model.image_size},
              {"width", c.model.width},
              {"classes", c.model.classes},
              {"policy", c.policy},
              {"lossy", c.policy_options.text("lossy") ? json(*c.policy_options.text("lossy")) : json(nullptr)},  // the math changes
              {"policy_options", c.policy_options.values()},  // as given
              {"backend", c.backend},
              {"gpu", c.gpu.empty() ? json(nullptr) : json(c.gpu)},
              {"allocator", c.allocator},
              {"planner", c.planner},
              {"budget_bytes", c.budget},
              {"host_budget_bytes", c.host_budget ? json(c.host_budget) : json(nullptr)},
              {"iters", c.iters},
              {"seed", c.seed},
              {"optimizer", to_string(c.optimizer.kind)},
              {"lr", c.optimizer.lr},
              {"weight_decay", c.optimizer.weight_decay},
              {"momentum", c.optimizer.momentum},
              {"step_in_backward", c.optimizer.in_backward},
              {"inplace_relu_grad", c.inplace_relu_grad}};
}

// The last iteration's compressed tensors.
nlohmann::json compression_json(const TrainResult& r) {
  using nlohmann::json;
  json comp = json::array();
  for (const auto& c : r.compression)
    comp.push_back({{"tensor", c.id},
                    {"name", static_cast<size_t>(c.id) < r.tensor_names.size() ? r.tensor_names[static_cast<size_t>(c.id)] : ""},
                    {"codec", to_string(c.codec)},
                    {"bytes_before", c.bytes_before},
                    {"bytes_after", c.bytes_after},
                    {"buffer_bytes", c.capacity},
                    {"compress_ms", c.compress_ms},
                    {"decompress_ms", c.decompress_ms},
                    {"stall_ms", c.stall_ms},
                    {"compressions", c.compressions},
                    {"overflows", c.overflows},
                    {"on_demand_decompressions", c.on_demand}});
  return comp;
}

}  // namespace

std::string report_json(const TrainResult& r) {
  using nlohmann::json;
  const auto& c = r.config;
  const std::optional<double> replay = replay_ratio(r);
  json iters = json::array();
  size_t peak_alloc = 0, peak_res = 0;
  double total_ms = 0;
  for (const auto& s : r.iterations) {
    peak_alloc = std::max(peak_alloc, s.peak_allocated);
    peak_res = std::max(peak_res, s.peak_reserved);
    total_ms += s.time_ms;
    iters.push_back(iteration_json(s, c));
  }
  json j = {
      {"config", config_json(c)},
      {"device", r.device},
      {"graph", {{"ops", r.num_ops}, {"tensors", r.num_tensors}, {"param_bytes", r.param_bytes},
                 {"persistent_bytes", r.persistent_bytes}}},
      {"summary",
       {{"peak_allocated_bytes", peak_alloc},
        {"peak_reserved_bytes", peak_res},
        {"budget_bytes", c.budget},
        {"peak_host_bytes", r.host_peak},
        {"host_budget_bytes", c.host_budget ? json(c.host_budget) : json(nullptr)},
        {"first_loss", r.iterations.empty() || !r.iterations.front().has_loss ? json(nullptr) : json(r.iterations.front().loss)},
        {"final_loss", r.iterations.empty() || !r.iterations.back().has_loss ? json(nullptr) : json(r.iterations.back().loss)},
        {"mean_iteration_ms", r.iterations.empty() ? 0.0 : total_ms / static_cast<double>(r.iterations.size())},
        {"replay_ratio", replay ? json(*replay) : json(nullptr)}}},
      {"iterations", iters},
  };
  if (!r.policy_report.is_null()) j["policy_report"] = r.policy_report;
  if (!r.allocator_report.is_null()) j["allocator_report"] = r.allocator_report;
  if (!r.compression.empty()) j["compression"] = compression_json(r);
  if (!r.timeline.empty()) j["memory_timeline"] = timeline_json(r);
  return j.dump(2);
}

void write_report(const TrainResult& r, const std::string& path) {
  const std::string text = report_json(r);
  write_output(path, "report", [&](std::ostream& out) { out << text << "\n"; });
}

}  // namespace vtensor
