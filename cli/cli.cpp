// The vtensor command: train a model under a device-memory budget and report what it cost.
#include "cli/cli.h"
#include "cli/validators.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "vtensor/backend/sim/cost_model.h"
#include "vtensor/backend/sim/gpu_specs.h"
#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"
#include "vtensor/core/output.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/planners.h"
#include "vtensor/memory/policy.h"
#include "vtensor/memory/trace_io.h"
#include "vtensor/models/models.h"
#include "vtensor/policy/registry.h"
#include "vtensor/train/experiments.h"
#include "vtensor/train/report_html.h"
#include "vtensor/train/trainer.h"

using namespace vtensor;
using vtensor::cli::kFinite;
using vtensor::cli::kPositive;

namespace {

constexpr int kExitBadInput = 2;

constexpr int kExitOom = 3;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// ---- the policies' own options (PolicyInfo::options: --checkpoint-segments, --um-*, --auto-*),
// each registered once on every command that runs a policy; the policy checks and reads them.
struct PolicyArgs {
  std::map<std::string, std::string> text;
  std::vector<std::pair<std::string, CLI::Option*>> options;
  PolicyOptions given() const {
    PolicyOptions o;
    for (const auto& [flag, opt] : options)
      if (opt->count() > 0) o.set(flag, text.at(flag));
    return o;
  }
};

void add_policy_options(CLI::App* c, PolicyArgs& a) {
  for (const PolicyOption& o : policy_options()) {
    if (o.is_switch) {  // no value: given reads as "true"
      a.text[o.flag] = "true";
      a.options.emplace_back(o.flag, c->add_flag("--" + o.flag, o.help));
    } else {
      a.options.emplace_back(o.flag, c->add_option("--" + o.flag, a.text[o.flag], o.help));
    }
  }
}

// The files the given policy options name (--auto-plan): inputs no output may overwrite.
std::vector<std::string> policy_inputs(const PolicyOptions& given) {
  std::vector<std::string> files;
  for (const PolicyOption& o : policy_options())
    if (o.input_file && given.given(o.flag)) files.push_back(*given.text(o.flag));
  return files;
}

constexpr const char* kHostBudgetHelp = "pinned host memory for swaps, e.g. 64GB (default: unlimited)";

// --host-budget: empty keeps the default, unlimited (0).
size_t parse_host_budget(const std::string& text) { return text.empty() ? 0 : parse_bytes(text, "--host-budget"); }

std::string host_budget_suffix(size_t bytes) { return bytes ? ", host budget " + format_bytes(bytes) : ""; }

void check_output_path(const std::string& path, const char* what) {
  if (!path.empty()) check_output(path, what);
}

// The memory-timeline page of a finished run (--html).
void write_html(const TrainResult& r, const std::string& path) {
  write_file_atomically(timeline_html(nlohmann::json::parse(report_json(r))), path, "page");
  std::printf("memory timeline written to %s\n", path.c_str());
}

int cmd_train(const TrainConfig& base, const std::string& budget_text, const std::string& host_budget_text_arg,
              const std::string& report, const std::string& html, bool quiet, const std::string& optimizer, bool lr_given) {
  TrainConfig cfg = base;
  check_output_path(html, "--html");
  if (!html.empty()) cfg.timeline = true;
  cfg.optimizer.kind = parse_optimizer(optimizer);
  if (cfg.optimizer.kind != OptimizerKind::kSgd && !lr_given) cfg.optimizer.lr = 1e-3f;  // Adam's usual rate
  if (!budget_text.empty()) cfg.budget = parse_bytes(budget_text, "--budget");
  cfg.host_budget = parse_host_budget(host_budget_text_arg);
  check_output_path(report, "--report");
  check_output_path(cfg.trace_path, "--trace");
  // Checked before the run: no output overwrites another or an input.
  std::vector<std::string> inputs = policy_inputs(cfg.policy_options);
  inputs.push_back(cfg.densities_path), inputs.push_back(cfg.init_path), inputs.push_back(cfg.op_times_path);
  check_distinct({{"--report", report}, {"--html", html}, {"--trace", cfg.trace_path}, {"--densities-out", cfg.densities_out},
                  {"--save", cfg.save_path}},
                 inputs);
  Trainer trainer(cfg);
  const auto& c = trainer.config();
  const auto& g = trainer.graph();
  const bool images = c.model.name.rfind("mlp", 0) != 0;
  const bool tokens = c.model.name.rfind("gpt", 0) == 0 || c.model.name.rfind("bert", 0) == 0;
  const std::string input = tokens ? "seq " + std::to_string(c.model.image_size)
                            : images ? std::to_string(c.model.image_size) + "x" + std::to_string(c.model.image_size)
                                   : std::to_string(c.model.image_size) + " features";
  std::printf("vtensor train: model %s (batch %d, %s, width %d, %d classes), policy %s, backend %s, budget %s%s\n",
              c.model.name.c_str(), c.model.batch, input.c_str(), c.model.width, c.model.classes, c.policy.c_str(),
              c.backend.c_str(), format_bytes(c.budget).c_str(), host_budget_suffix(c.host_budget).c_str());
  std::printf("graph: %zu ops, %zu tensors, %zu parameters (%s), persistent %s\n", g.num_ops(), g.num_tensors(),
              g.param_count(), format_bytes(g.param_count() * 4).c_str(), format_bytes(g.persistent_bytes()).c_str());
  std::fflush(stdout);
  TrainResult r = trainer.run([&](const IterationStats& s) {
    if (!quiet) {
      std::printf("%s\n", format_iteration_line(s, c.iters).c_str());
      std::fflush(stdout);
    }
  });
  size_t peak_alloc = 0, peak_res = 0;
  double ms = 0;
  for (const auto& s : r.iterations) {
    peak_alloc = std::max(peak_alloc, s.peak_allocated);
    peak_res = std::max(peak_res, s.peak_reserved);
    ms += s.time_ms;
  }
  const auto loss_text = [](const IterationStats& s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.5f", static_cast<double>(s.loss));
    return std::string(b);
  };
  const std::string losses = r.iterations.front().has_loss
                                 ? "loss " + loss_text(r.iterations.front()) + " -> " + loss_text(r.iterations.back())
                                 : "loss n/a (the " + c.backend + " backend holds no values)";
  // The first iteration warms up, and under a planned policy it also measures and plans (auto for
  // seconds): the mean after it is the steady time.
  std::string after_first;
  if (r.iterations.size() > 1) {
    char b[96];
    std::snprintf(b, sizeof b, " (%.1f ms after the first)",
                  (ms - r.iterations.front().time_ms) / static_cast<double>(r.iterations.size() - 1));
    after_first = b;
  }
  std::printf("done: %s, peak allocated %s, peak reserved %s (budget %s), mean iteration %.1f ms%s\n",
              losses.c_str(), format_bytes(peak_alloc).c_str(), format_bytes(peak_res).c_str(), format_bytes(c.budget).c_str(),
              ms / static_cast<double>(r.iterations.size()), after_first.c_str());
  if (c.host_budget || r.host_peak)
    std::printf("host: peak %s held for swaps (budget %s)\n", format_bytes(r.host_peak).c_str(),
                c.host_budget ? format_bytes(c.host_budget).c_str() : "unlimited");
  if (const std::string rec = format_recompute_line(r.iterations.back()); !rec.empty()) std::printf("%s\n", rec.c_str());
  if (const std::string ch = format_chain_line(r.iterations.back()); !ch.empty()) std::printf("%s\n", ch.c_str());
  if (!r.policy_summary.empty()) std::printf("policy %s: %s\n", c.policy.c_str(), r.policy_summary.c_str());
  if (const auto ratio = replay_ratio(r); ratio && *ratio > kReplayWarnRatio)
    std::fprintf(stderr,
                 "vtensor: warning: policy %s's guided iterations ran %.1fx the time its rehearsal predicted (%.1f ms against "
                 "%.1f ms): the plan does not replay on this %s backend as rehearsed (the report's summary.replay_ratio)\n",
                 c.policy.c_str(), *ratio, *ratio * r.policy_report["predicted_time_ms"].get<double>(),
                 r.policy_report["predicted_time_ms"].get<double>(), c.backend.c_str());
  if (const auto& a = r.allocator_report; a.is_object() && a.contains("lower_bound_bytes"))
    std::printf("allocator %s: arena %s, lower bound %s (x%.4f), last iteration\n", c.allocator.c_str(),
                format_bytes(a["arena_bytes"].get<size_t>()).c_str(), format_bytes(a["lower_bound_bytes"].get<size_t>()).c_str(),
                a["arena_over_lower_bound"].get<double>());
  if (!report.empty()) {
    write_report(r, report);
    std::printf("report written to %s\n", report.c_str());
    if (!c.policy_options.given("auto-plan") && r.policy_report.is_object() && r.policy_report.contains("saved_plan") &&
        r.policy_report["saved_plan"].is_object())
      std::printf("auto's plan is in it (policy_report.saved_plan): --auto-plan %s runs it again without the search\n",
                  report.c_str());
  }
  if (!html.empty()) write_html(r, html);
  return 0;
}

int cmd_view(const std::string& input, const std::string& out) {
  check_output_path(out, "-o");
  check_distinct({{"-o", out}}, {input});
  const std::string text = view_html(read_json_file(input), input);
  write_file_atomically(text, out, "page");
  std::printf("%s written from %s\n", out.c_str(), input.c_str());
  return 0;
}

// ---- sim experiments: replay, maxbatch, sweep (vtensor/train/experiments.h)

double mib(size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

constexpr const char* kBudgetAboveGpuHelp =
    "sim: accept a --budget above the GPU's memory (models a device that holds it; refused otherwise)";

struct ReplayArgs {
  ReplayConfig cfg;
  std::string budget_text, host_budget_text, report, html;
  bool quiet = false;
  PolicyArgs policy;
};

CLI::App* add_replay(CLI::App& app, ReplayArgs& a) {
  auto* c = app.add_subcommand("replay", "replay a recorded access trace or a DTR operator log on the sim backend");
  c->add_option("--trace", a.cfg.trace, "trace file (vtensor --trace JSON lines or a DTR log), or dtr:NAME")->required();
  c->add_option("--gpu", a.cfg.gpu, "the GPU to model: " + join(gpu_names()))->required();
  c->add_option("--budget", a.budget_text, "device memory budget (default: the GPU's memory)");
  c->add_flag("--budget-above-gpu", a.cfg.budget_above_gpu, kBudgetAboveGpuHelp);
  c->add_option("--host-budget", a.host_budget_text, kHostBudgetHelp);
  c->add_option("--policy", a.cfg.policy, "memory policy: " + join(policy_names()));
  c->add_option("--allocator", a.cfg.allocator, "device allocator: " + join(allocator_names()));
  c->add_option("--iters", a.cfg.iters, "iterations to replay (default 3)");
  c->add_option("--report", a.report, "write a JSON report to this file");
  c->add_option("--html", a.html, "write the last iteration's memory timeline as an HTML page");
  c->add_flag("--timeline", a.cfg.timeline, "put the last iteration's per-op memory timeline in the report");
  c->add_flag("--quiet", a.quiet, "no per-iteration lines");
  add_policy_options(c, a.policy);
  return c;
}

int cmd_replay(ReplayArgs a) {
  a.cfg.policy_options = a.policy.given();
  make_policy(a.cfg.policy, a.cfg.policy_options);  // its options checked before the trace is read
  if (!a.budget_text.empty()) a.cfg.budget = parse_bytes(a.budget_text, "--budget");
  a.cfg.host_budget = parse_host_budget(a.host_budget_text);
  check_output_path(a.report, "--report");
  check_output_path(a.html, "--html");
  std::vector<std::string> inputs = policy_inputs(a.cfg.policy_options);
  inputs.push_back(a.cfg.trace.rfind("dtr:", 0) == 0 ? std::string() : a.cfg.trace);
  check_distinct({{"--report", a.report}, {"--html", a.html}}, inputs);
  if (!a.html.empty()) a.cfg.timeline = true;
  std::printf("vtensor replay: %s on %s, policy %s%s\n", a.cfg.trace.c_str(), a.cfg.gpu.c_str(), a.cfg.policy.c_str(),
              host_budget_suffix(a.cfg.host_budget).c_str());
  std::fflush(stdout);
  // The whole trace is read and checked before the first iteration: a malformed line reports nothing.
  TrainResult r = replay_trace(a.cfg, [&](const IterationStats& s) {
    if (!a.quiet) std::printf("%s\n", format_iteration_line(s, a.cfg.iters).c_str());
  });
  const RunSummary s = summarise(r);
  std::printf("done: %zu ops, %zu tensors, budget %s, peak allocated %s, peak reserved %s, iteration %.2f ms "
              "(recorded op time %.2f ms)\n",
              r.num_ops, r.num_tensors, format_bytes(r.config.budget).c_str(), format_bytes(s.peak_allocated).c_str(),
              format_bytes(s.peak_reserved).c_str(), s.iteration_ms, recorded_total_ms(*r.config.graph));
  if (const std::string rec = format_recompute_line(r.iterations.back()); !rec.empty()) std::printf("%s\n", rec.c_str());
  if (const std::string ch = format_chain_line(r.iterations.back()); !ch.empty()) std::printf("%s\n", ch.c_str());
  if (!a.report.empty()) {
    write_report(r, a.report);
    std::printf("report written to %s\n", a.report.c_str());
  }
  if (!a.html.empty()) write_html(r, a.html);
  return 0;
}

struct ExperimentArgs {
  TrainConfig cfg;
  std::string budget_text, host_budget_text, budgets_text = "100%,75%,50%,25%", batches_text,
      policies_text = "none,lru,lru-recompute";
  std::string out, report, trace, optimizer = "sgd";
  int max_limit = 1 << 20;
  PolicyArgs policy;
};

constexpr const char* kStepInBackwardHelp =
    "run each parameter's optimizer step as soon as its gradient is complete, inside the backward, so the gradient dies "
    "there (PyTorch's optimizer step in backward; the same bits)";

// --optimizer: the kind only (learning rates do not change memory or predicted time).
void apply_optimizer(ExperimentArgs& a) { a.cfg.optimizer.kind = parse_optimizer(a.optimizer); }

void add_experiment_model_options(CLI::App* c, ExperimentArgs& a, bool model_required = true, bool gpu_required = true) {
  auto* model = c->add_option("--model", a.cfg.model.name, "model: " + join(model_names()));
  if (model_required) model->required();
  auto* gpu = c->add_option("--gpu", a.cfg.gpu, "the GPU to model: " + join(gpu_names()));
  if (gpu_required) gpu->required();
  c->add_option("--image-size", a.cfg.model.image_size, "input height = width (features for mlp)")->check(kPositive);
  c->add_option("--seq", a.cfg.model.image_size, "sequence length (gpt, bert; the same field as --image-size)")->check(kPositive);
  c->add_option("--width", a.cfg.model.width, "base channel count (hidden units for mlp)")->check(kPositive);
  c->add_option("--classes", a.cfg.model.classes, "number of classes")->check(kPositive);
  c->add_option("--optimizer", a.optimizer, "optimizer: sgd, adam, adamw (default sgd)");
  c->add_option("--allocator", a.cfg.allocator, "device allocator: " + join(allocator_names()));
  c->add_option("--iters", a.cfg.iters, "iterations per run (default 3: policies that measure need more than one)");
  c->add_option("--host-budget", a.host_budget_text, kHostBudgetHelp);
  c->add_flag("--inplace-relu-grad", a.cfg.inplace_relu_grad, "relu backward writes dx over dy where dy dies");
  c->add_flag("--step-in-backward", a.cfg.optimizer.in_backward, kStepInBackwardHelp);
  add_policy_options(c, a.policy);
}

CLI::App* add_maxbatch(CLI::App& app, ExperimentArgs& a) {
  auto* c = app.add_subcommand("maxbatch", "the largest batch that trains, searched on the sim backend");
  add_experiment_model_options(c, a);
  c->add_option("--policy", a.cfg.policy, "memory policy: " + join(policy_names()));
  c->add_option("--budget", a.budget_text, "device memory budget (default: the GPU's memory)");
  c->add_flag("--budget-above-gpu", a.cfg.budget_above_gpu, kBudgetAboveGpuHelp);
  c->add_option("--max-batch", a.max_limit, "stop the search here");
  c->add_option("--densities", a.cfg.densities_path, "compress policies and auto: non-zero counts recorded by a cpu run (train --densities-out)");
  c->add_option("--report", a.report, "write the search as JSON to this file");
  return c;
}

int cmd_maxbatch(ExperimentArgs a) {
  apply_optimizer(a);
  a.cfg.backend = "sim";
  if (!a.budget_text.empty()) a.cfg.budget = parse_bytes(a.budget_text, "--budget");
  a.cfg.host_budget = parse_host_budget(a.host_budget_text);
  check_output_path(a.report, "--report");
  a.cfg.policy_options = a.policy.given();
  make_policy(a.cfg.policy, a.cfg.policy_options);  // the name and its options, before any probe
  const size_t budget = a.cfg.budget ? a.cfg.budget : find_gpu(a.cfg.gpu).memory_bytes;
  std::printf("vtensor maxbatch: model %s, policy %s, %s, budget %s%s, %d iterations per probe\n",
              a.cfg.model.name.c_str(), a.cfg.policy.c_str(), a.cfg.gpu.c_str(), format_bytes(budget).c_str(),
              host_budget_suffix(a.cfg.host_budget).c_str(), a.cfg.iters);
  std::fflush(stdout);
  MaxBatchResult r = max_batch(a.cfg, a.max_limit, [](int batch, const RunSummary& s) {
    char host[48] = "";
    if (s.peak_host) std::snprintf(host, sizeof host, "  host %10.1f MiB", mib(s.peak_host));
    if (s.ok)
      std::printf("  batch %7d  trains  peak %10.1f MiB  iteration %10.2f ms%s\n", batch, mib(s.peak_allocated),
                  s.iteration_ms, host);
    else
      std::printf("  batch %7d  out of memory%s\n", batch, s.error.rfind("out of host", 0) == 0 ? " (host)" : "");
    std::fflush(stdout);
  });
  if (r.batch == 0) {
    std::printf("max batch: none: batch 1 does not fit\n");
  } else {
    std::printf("max batch %d: peak allocated %s, peak reserved %s, predicted iteration %.2f ms (%.1f samples/s)%s%s\n",
                r.batch, format_bytes(r.at_batch.peak_allocated).c_str(), format_bytes(r.at_batch.peak_reserved).c_str(),
                r.at_batch.iteration_ms, r.at_batch.iteration_ms > 0 ? 1e3 * r.batch / r.at_batch.iteration_ms : 0.0,
                r.batch >= a.max_limit ? " (the --max-batch limit)" : "",
                r.at_batch.peak_host ? ("; peak host " + format_bytes(r.at_batch.peak_host)).c_str() : "");
    for (int b : r.non_monotonic)
      std::printf("non-monotonic: batch %d also trains (the search assumes a batch that fails makes every larger one fail)\n", b);
  }
  if (!a.report.empty()) {
    nlohmann::json probes = nlohmann::json::array();
    for (const auto& [b, s] : r.probes)
      probes.push_back({{"batch", b}, {"status", s.ok ? "ok" : "oom"}, {"peak_allocated_bytes", s.peak_allocated},
                        {"peak_host_bytes", s.peak_host}, {"iteration_ms", s.iteration_ms}});
    nlohmann::json j = {{"model", a.cfg.model.name}, {"policy", a.cfg.policy}, {"gpu", a.cfg.gpu},
                        {"budget_bytes", budget},
                        {"host_budget_bytes", a.cfg.host_budget ? nlohmann::json(a.cfg.host_budget) : nlohmann::json(nullptr)},
                        {"iters", a.cfg.iters}, {"max_batch", r.batch},
                        {"peak_allocated_bytes", r.at_batch.peak_allocated},
                        {"peak_reserved_bytes", r.at_batch.peak_reserved},
                        {"peak_host_bytes", r.at_batch.peak_host},
                        {"iteration_ms", r.at_batch.iteration_ms}, {"probes", probes},
                        {"checked_above", r.checked_above}, {"non_monotonic", r.non_monotonic}};
    write_output(a.report, "report", j.dump(2) + "\n");
    std::printf("report written to %s\n", a.report.c_str());
  }
  return 0;
}

CLI::App* add_sweep(CLI::App& app, ExperimentArgs& a) {
  auto* c = app.add_subcommand("sweep", "a policy x budget (x batch) grid, as CSV or JSON: on sim, or on cpu with "
                                         "each run's losses and weights compared to the unmanaged run's");
  add_experiment_model_options(c, a, false, false);
  c->add_option("--backend", a.cfg.backend, "backend: sim (default; needs --gpu) or cpu (real training, bit-identity checked)");
  c->add_option("--trace", a.trace, "instead of --model: a recorded trace or DTR log (dtr:NAME), replayed");
  c->add_option("--batch", a.cfg.model.batch, "batch size (default: the model's preset)")->check(kPositive);
  c->add_option("--policies", a.policies_text, "comma-separated policies (default none,lru,lru-recompute)");
  c->add_option("--budgets", a.budgets_text, "comma-separated budgets: % of the unmanaged peak or sizes (default 100%,75%,50%,25%); a % may exceed the GPU's memory, a size may not without --budget-above-gpu");
  c->add_flag("--budget-above-gpu", a.cfg.budget_above_gpu, kBudgetAboveGpuHelp);
  c->add_option("--batches", a.batches_text, "comma-separated batch sizes (overrides --batch)");
  c->add_option("--densities", a.cfg.densities_path, "runs of the compress policies and auto: non-zero counts recorded by a cpu run (train --densities-out)");
  c->add_option("--out", a.out, "output file, .csv or .json")->required();
  return c;
}

int cmd_sweep(ExperimentArgs a) {
  const auto policies = split_list(a.policies_text);
  a.cfg.policy_options = a.policy.given();
  check_policy_options(a.cfg.policy_options, policies);  // an unknown name or option fails first
  apply_optimizer(a);
  if (a.cfg.backend != "sim" && a.cfg.backend != "cpu")
    throw std::invalid_argument("sweep --backend '" + a.cfg.backend + "': accepted: sim, cpu");
  const bool sim = a.cfg.backend == "sim";
  if (sim && a.cfg.gpu.empty()) throw std::invalid_argument("sweep --backend sim needs --gpu: " + join(gpu_names()));
  if (!sim && !a.cfg.gpu.empty()) throw std::invalid_argument("--gpu applies to --backend sim only");
  a.cfg.host_budget = parse_host_budget(a.host_budget_text);
  check_output_path(a.out, "--out");
  check_distinct({{"--out", a.out}}, {a.trace.rfind("dtr:", 0) == 0 ? std::string() : a.trace,
                                      a.cfg.densities_path});
  if (a.out.size() < 5 || (a.out.substr(a.out.size() - 4) != ".csv" && a.out.substr(a.out.size() - 5) != ".json"))
    throw std::invalid_argument("--out '" + a.out + "': accepted extensions: .csv, .json");
  const auto budgets = parse_budgets(a.budgets_text, "--budgets");
  const auto batches = parse_batches(a.batches_text, "--batches");
  if (sim) find_gpu(a.cfg.gpu);
  if (sim && !a.cfg.budget_above_gpu)  // a size the GPU cannot hold; a % of the unmanaged peak compares policies
    for (const auto& b : budgets)
      if (b.fraction == 0 && b.bytes > find_gpu(a.cfg.gpu).memory_bytes)
        throw std::invalid_argument("--budgets " + b.label + " is above " + a.cfg.gpu + "'s memory (" +
                                    format_bytes(find_gpu(a.cfg.gpu).memory_bytes) +
                                    "); accepted: at most that, a % of the unmanaged peak, or --budget-above-gpu");
  if (a.trace.empty() == a.cfg.model.name.empty())
    throw std::invalid_argument("sweep: give either --model or --trace");
  if (!a.trace.empty()) {
    if (!sim) throw std::invalid_argument("sweep --trace replays on --backend sim only: a trace holds no values");
    if (!batches.empty()) throw std::invalid_argument("--batches: a trace has a fixed batch");
    if (a.cfg.inplace_relu_grad)
      throw std::invalid_argument("--inplace-relu-grad applies to --model only: a trace keeps the views it was recorded with");
    if (a.cfg.optimizer.in_backward)
      throw std::invalid_argument("--step-in-backward applies to --model only: a trace keeps the op order it was recorded with");
    a.cfg.graph = std::make_shared<const Graph>(load_trace(a.trace));
    a.cfg.model.name = a.trace;
  } else {
    a.cfg.model = resolve_model(a.cfg.model);  // the preset's batch in every row
  }
  std::printf("vtensor sweep: model %s on %s, policies %s, budgets %s%s\n", a.cfg.model.name.c_str(),
              sim ? a.cfg.gpu.c_str() : "cpu", a.policies_text.c_str(), a.budgets_text.c_str(),
              host_budget_suffix(a.cfg.host_budget).c_str());
  std::printf("%-6s %-24s %-7s %10s %7s %10s %9s %8s %10s %10s %9s\n", "batch", "policy", "budget", "budget MiB", "status",
              "peak MiB", "iter ms", "vs none", "MiB moved", "recomputed", "identical");
  // peak: device bytes (under unified memory the device pages in use); moved: to and from host.
  std::fflush(stdout);
  int last_batch = -1;
  auto rows = sweep(a.cfg, policies, budgets, batches, [&](const SweepRow& r) {
    const std::string batch = r.batch > 0 ? std::to_string(r.batch) : "trace";  // a trace's batch is fixed
    if (r.batch != last_batch) {
      last_batch = r.batch;
      std::printf("%-6s %-24s %-7s %10s %7s %10.2f %9.2f %7.2fx %10.1f %10d %9s\n", batch.c_str(), "none (unmanaged)",
                  "-", "-", r.unmanaged_peak ? "ok" : "oom", mib(r.unmanaged_peak), r.unmanaged_ms, 1.0, 0.0, 0, "-");
    }
    if (!r.run.ok) {
      std::printf("%-6s %-24s %-7s %10.2f %7s   %s\n", batch.c_str(), r.policy.c_str(), r.budget_label.c_str(),
                  mib(r.budget), "oom", r.run.error.substr(0, r.run.error.find(" (")).c_str());
    } else {
      std::printf("%-6s %-24s %-7s %10.2f %7s %10.2f %9.2f %7.2fx %10.1f %10llu %9s\n", batch.c_str(), r.policy.c_str(),
                  r.budget_label.c_str(), mib(r.budget), "ok", mib(r.run.peak_device), r.run.iteration_ms,
                  r.overhead, mib(r.run.swapped_out_bytes + r.run.swapped_in_bytes),
                  static_cast<unsigned long long>(r.run.recomputed_ops), r.identical.empty() ? "n/a" : r.identical.c_str());
    }
    std::fflush(stdout);
  });
  write_sweep(rows, a.out);
  std::printf("%zu rows written to %s\n", rows.size(), a.out.c_str());
  return 0;
}

// ---- per-op cost predictions (to check the cost model against measured kernels)

CLI::App* add_costs(CLI::App& app, ExperimentArgs& a) {
  auto* c = app.add_subcommand("costs", "the sim cost model's prediction for every op of a model's training step");
  add_experiment_model_options(c, a);
  c->add_option("--batch", a.cfg.model.batch, "batch size (default: the model's preset)")->check(kPositive);
  c->add_option("--out", a.out, "write the table as CSV to this file instead of printing it");
  return c;
}

int cmd_costs(ExperimentArgs a) {
  apply_optimizer(a);
  check_output_path(a.out, "--out");
  const GpuSpec gpu = find_gpu(a.cfg.gpu);
  Graph g = build_model(resolve_model(a.cfg.model));
  build_backward(g, a.cfg.optimizer);
  if (a.cfg.inplace_relu_grad) share_relu_gradients(g);
  std::string text = "op,name,kind,flops,bytes,compute_ms,memory_ms,launch_ms,total_ms,bound\n";
  double total = 0;
  for (const Op& op : g.ops()) {
    const OpCost c = predict_op(gpu, g, op);
    total += c.total_ms;
    char buf[512];
    std::snprintf(buf, sizeof buf, "%d,%s,%s,%.0f,%.0f,%.6f,%.6f,%.6f,%.6f,%s\n", op.index, op.name.c_str(),
                  to_string(op.kind), c.flops, c.bytes, c.compute_ms, c.memory_ms, c.launch_ms, c.total_ms, c.bound());
    text += buf;
  }
  if (a.out.empty()) {
    std::fputs(text.c_str(), stdout);
  } else {
    write_output(a.out, "cost table", text);
  }
  std::fprintf(a.out.empty() ? stderr : stdout, "%zu ops on %s: %.3f ms of predicted compute per iteration\n",
               g.num_ops(), gpu.name.c_str(), total);
  return 0;
}

}  // namespace

int vtensor::run_cli(int argc, char** argv, CliMode mode) {
  CLI::App app{"vtensor: train deep-learning models whose working set does not fit in device memory"};
  app.require_subcommand(1);

  TrainConfig cfg;
  std::string budget_text, host_budget_arg, report;
  bool quiet = false;
  std::string optimizer = "sgd";
  auto* train = app.add_subcommand("train", "train a model under a device-memory budget");
  train->add_option("--model", cfg.model.name, "model: " + join(model_names()))->required();
  train->add_option("--batch", cfg.model.batch, "batch size (default: the model's preset)")->check(kPositive);
  train->add_option("--image-size", cfg.model.image_size, "input height = width (features for mlp)")->check(kPositive);
  train->add_option("--seq", cfg.model.image_size, "sequence length (gpt, bert; the same field as --image-size)")->check(kPositive);
  train->add_option("--width", cfg.model.width, "base channel count (hidden units for mlp)")->check(kPositive);
  train->add_option("--classes", cfg.model.classes, "number of classes")->check(kPositive);
  train->add_option("--budget", budget_text, "device memory budget, e.g. 512MiB (default: 8GiB on cpu, the free memory less a margin on cuda)");
  train->add_flag("--budget-above-gpu", cfg.budget_above_gpu, kBudgetAboveGpuHelp);
  train->add_option("--host-budget", host_budget_arg, kHostBudgetHelp);
  train->add_option("--policy", cfg.policy, "memory policy: " + join(policy_names()));
  train->add_option("--backend", cfg.backend, "backend: " + join(backend_names()));
  std::string gpu_file;
  train->add_option("--gpu", cfg.gpu, "sim backend: the GPU to model: " + join(gpu_names()));
  train->add_option("--gpu-file", gpu_file, "JSON file with more GPUs for --gpu (gpu_specs.h has the fields)");
  train->add_option("--op-times", cfg.op_times_path,
                    "sim backend: charge each op the time a GPU run measured (the per-op CSV of bench/sim_vs_device.py --ops-out)");
  train->add_option("--allocator", cfg.allocator, "device allocator: " + join(allocator_names()));
  train->add_option("--planner", cfg.planner, "planner for --allocator planned: " + join(planner_names()));
  train->add_option("--iters", cfg.iters, "training iterations (default 10)");
  train->add_option("--seed", cfg.seed, "weight-initialisation seed");
  train->add_option("--data-seed", cfg.model.seed, "data and dropout seed");
  auto* lr = train->add_option("--lr", cfg.optimizer.lr, "learning rate (default 0.05 for sgd, 0.001 for adam / adamw)")->check(kFinite);
  train->add_option("--optimizer", optimizer, "optimizer: sgd, adam, adamw (default sgd)");
  train->add_option("--momentum", cfg.optimizer.momentum, "SGD momentum")->check(kFinite);
  train->add_flag("--inplace-relu-grad", cfg.inplace_relu_grad, "relu backward writes dx over dy where dy dies (cuDNN's in-place ReLU, as in vDNN)");
  train->add_flag("--step-in-backward", cfg.optimizer.in_backward, kStepInBackwardHelp);
  train->add_option("--weight-decay", cfg.optimizer.weight_decay, "weight decay (L2 for sgd and adam, decoupled for adamw)")->check(kFinite);
  train->add_option("--report", report, "write a JSON report to this file");
  train->add_option("--trace", cfg.trace_path, "write the access trace (JSON lines) to this file");
  train->add_option("--save", cfg.save_path,
                    "write the final parameters and buffers to this file (safetensors, F32, the zoo's names; cpu, cuda)");
  train->add_option("--init", cfg.init_path,
                    "start from the parameters (and any buffers) in this safetensors file, e.g. one --save wrote");
  train->add_option("--save-dir", cfg.save_dir,
                    "save the run's state (parameters, optimizer state, buffers, iteration) as DIR/state.safetensors at the end");
  train->add_option("--save-every", cfg.save_every, "with --save-dir: also after every N iterations")->check(kPositive);
  train->add_option("--resume", cfg.resume_dir,
                    "go on from the state in DIR (an earlier --save-dir) up to --iters iterations in all, bit for bit");
  train->add_flag("--deterministic", cfg.deterministic,
                  "cuda: deterministic cuDNN algorithms only, the lean one per convolution (bit-identical reruns at any budget)");
  train->add_flag("--timeline", cfg.timeline, "put the last iteration's per-op memory timeline in the report");
  std::string html;
  train->add_option("--html", html, "write the last iteration's memory timeline as an HTML page (implies --timeline)");
  train->add_flag("--quiet", quiet, "no per-iteration lines");
  PolicyArgs train_policy;
  add_policy_options(train, train_policy);
  train->add_option("--densities", cfg.densities_path, "compress policies and auto on sim: non-zero counts recorded by a cpu run (--densities-out)");
  train->add_option("--densities-out", cfg.densities_out, "compress policies on cpu / cuda: write the measured non-zero counts to this file");

  ReplayArgs replay_args;
  ExperimentArgs maxbatch_args, sweep_args;
  maxbatch_args.cfg.iters = sweep_args.cfg.iters = 3;
  sweep_args.cfg.backend = "sim";  // --backend cpu runs the grid for real
  auto* replay = add_replay(app, replay_args);
  auto* maxbatch = add_maxbatch(app, maxbatch_args);
  auto* sweep_cmd = add_sweep(app, sweep_args);
  ExperimentArgs costs_args;
  auto* costs = add_costs(app, costs_args);
  for (auto* c : {replay, maxbatch, sweep_cmd, costs})
    c->add_option("--gpu-file", gpu_file, "JSON file with more GPUs for --gpu (gpu_specs.h has the fields)");

  std::string view_in, view_out;
  auto* view = app.add_subcommand("view", "an HTML page from a report with a memory timeline, or from a sweep's JSON");
  view->add_option("input", view_in, "train / replay --report JSON (with --timeline), or sweep --out JSON")->required();
  view->add_option("-o,--out", view_out, "the HTML file to write")->required();
  auto* models = app.add_subcommand("models", "list the models");
  auto* policies = app.add_subcommand("policies", "list the memory policies");

  if (argc > 1 && argv[1][0] != '-') {
    const std::string cmd = argv[1];
    if (cmd != "train" && cmd != "models" && cmd != "policies" && cmd != "replay" && cmd != "maxbatch" &&
        cmd != "sweep" && cmd != "costs" && cmd != "view") {
      std::fprintf(stderr, "vtensor: unknown command '%s'; accepted: train, replay, maxbatch, sweep, costs, view, models, policies\n",
                   cmd.c_str());
      return kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }
  if (mode == CliMode::kParseOnly) return 0;
  install_output_signal_handlers();  // an interrupted run leaves no temporary file behind
  // The command's outputs are renamed onto their paths together when it succeeds, or not at all.
  OutputTransaction outputs;
  const auto done = [&](int rc) {
    if (rc == 0) outputs.commit();
    return rc;
  };

  try {
    fault::check_env();
    if (models->parsed()) {
      std::printf("%-12s %6s %6s %6s %8s  %s\n", "model", "batch", "input", "width", "classes", "description");
      for (const auto& m : model_registry())
        std::printf("%-12s %6d %6d %6d %8d  %s\n", m.name.c_str(), m.batch, m.image_size, m.width, m.classes,
                    m.description.c_str());
      return 0;
    }
    if (policies->parsed()) {
      size_t w = 0;
      for (const auto& p : policy_registry()) w = std::max(w, p.name.size());
      for (const auto& p : policy_registry())
        std::printf("%-*s  %s\n", static_cast<int>(w), p.name.c_str(), p.description.c_str());
      return 0;
    }
    if (!gpu_file.empty()) load_gpu_file(gpu_file);
    if (replay->parsed()) return done(cmd_replay(replay_args));
    if (maxbatch->parsed()) return done(cmd_maxbatch(maxbatch_args));
    if (sweep_cmd->parsed()) return done(cmd_sweep(sweep_args));
    if (costs->parsed()) return done(cmd_costs(costs_args));
    if (view->parsed()) return done(cmd_view(view_in, view_out));
    check_output_path(cfg.densities_out, "--densities-out");
    cfg.policy_options = train_policy.given();
    return done(cmd_train(cfg, budget_text, host_budget_arg, report, html, quiet, optimizer, lr->count() > 0));
  } catch (const OutOfMemoryError& e) {
    std::fprintf(stderr, "vtensor: %s\n", e.what());
    return kExitOom;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "vtensor: %s\n", e.what());
    return kExitBadInput;
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type in a file the user gave
    std::fprintf(stderr, "vtensor: malformed input: %s\n", e.what());
    return kExitBadInput;
  } catch (const DeviceError& e) {
    std::fprintf(stderr, "vtensor: device error: %s\n", e.what());
    return 1;
  } catch (const IoError& e) {
    std::fprintf(stderr, "vtensor: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vtensor: internal error: %s\n", e.what());
    return 1;
  }
}
