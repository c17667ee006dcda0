// The vtensor command: train a model under a device-memory budget and report what it cost.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/planners.h"
#include "vtensor/models/models.h"
#include "vtensor/policy/policy.h"
#include "vtensor/train/trainer.h"

using namespace vtensor;

namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitOom = 3;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void check_output_path(const std::string& path, const char* what) {
  if (path.empty()) return;
  auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir))
    throw std::invalid_argument(std::string(what) + " '" + path + "': directory '" + dir.string() + "' does not exist");
}

int cmd_train(const TrainConfig& base, const std::string& budget_text, const std::string& report, bool quiet) {
  TrainConfig cfg = base;
  if (!budget_text.empty()) cfg.budget = parse_bytes(budget_text, "--budget");
  check_output_path(report, "--report");
  check_output_path(cfg.trace_path, "--trace");
  Trainer trainer(cfg);
  const auto& c = trainer.config();
  const auto& g = trainer.graph();
  const bool images = c.model.name.rfind("mlp", 0) != 0;
  const std::string input = images ? std::to_string(c.model.image_size) + "x" + std::to_string(c.model.image_size)
                                   : std::to_string(c.model.image_size) + " features";
  std::printf("vtensor train: model %s (batch %d, %s, width %d, %d classes), policy %s, backend %s, budget %s\n",
              c.model.name.c_str(), c.model.batch, input.c_str(), c.model.width, c.model.classes, c.policy.c_str(),
              c.backend.c_str(), format_bytes(c.budget).c_str());
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
  std::printf("done: loss %.5f -> %.5f, peak allocated %s, peak reserved %s (budget %s), mean iteration %.1f ms\n",
              static_cast<double>(r.iterations.front().loss), static_cast<double>(r.iterations.back().loss),
              format_bytes(peak_alloc).c_str(), format_bytes(peak_res).c_str(), format_bytes(c.budget).c_str(),
              ms / static_cast<double>(r.iterations.size()));
  if (!r.policy_summary.empty()) std::printf("policy %s: %s\n", c.policy.c_str(), r.policy_summary.c_str());
  if (const auto& a = r.allocator_report; a.is_object() && a.contains("lower_bound_bytes"))
    std::printf("allocator %s: arena %s, lower bound %s (x%.4f), last iteration\n", c.allocator.c_str(),
                format_bytes(a["arena_bytes"].get<size_t>()).c_str(), format_bytes(a["lower_bound_bytes"].get<size_t>()).c_str(),
                a["arena_over_lower_bound"].get<double>());
  if (!report.empty()) {
    write_report(r, report);
    std::printf("report written to %s\n", report.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vtensor: train deep-learning models whose working set does not fit in device memory"};
  app.require_subcommand(1);

  TrainConfig cfg;
  std::string budget_text, report;
  bool quiet = false;
  auto* train = app.add_subcommand("train", "train a model under a device-memory budget");
  train->add_option("--model", cfg.model.name, "model: " + join(model_names()))->required();
  train->add_option("--batch", cfg.model.batch, "batch size (default: the model's preset)");
  train->add_option("--image-size", cfg.model.image_size, "input height = width (features for mlp)");
  train->add_option("--width", cfg.model.width, "base channel count (hidden units for mlp)");
  train->add_option("--classes", cfg.model.classes, "number of classes");
  train->add_option("--budget", budget_text, "device memory budget, e.g. 512MiB (default: 8GiB on cpu)");
  train->add_option("--policy", cfg.policy, "memory policy: " + join(policy_names()));
  train->add_option("--backend", cfg.backend, "backend: cpu, cuda");
  train->add_option("--allocator", cfg.allocator, "device allocator: " + join(allocator_names()));
  train->add_option("--planner", cfg.planner, "planner for --allocator planned: " + join(planner_names()));
  train->add_option("--iters", cfg.iters, "training iterations (default 10)");
  train->add_option("--seed", cfg.seed, "weight-initialisation seed");
  train->add_option("--data-seed", cfg.model.seed, "data and dropout seed");
  train->add_option("--lr", cfg.optimizer.lr, "SGD learning rate");
  train->add_option("--momentum", cfg.optimizer.momentum, "SGD momentum");
  train->add_option("--report", report, "write a JSON report to this file");
  train->add_option("--trace", cfg.trace_path, "write the access trace (JSON lines) to this file");
  train->add_flag("--timeline", cfg.timeline, "put the last iteration's per-op memory timeline in the report");
  train->add_flag("--quiet", quiet, "no per-iteration lines");

  auto* models = app.add_subcommand("models", "list the models");
  auto* policies = app.add_subcommand("policies", "list the memory policies");

  if (argc > 1 && argv[1][0] != '-') {
    const std::string cmd = argv[1];
    if (cmd != "train" && cmd != "models" && cmd != "policies") {
      std::fprintf(stderr, "vtensor: unknown command '%s'; accepted: train, models, policies\n", cmd.c_str());
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

  try {
    if (models->parsed()) {
      std::printf("%-12s %6s %6s %6s %8s  %s\n", "model", "batch", "input", "width", "classes", "description");
      for (const auto& m : model_registry())
        std::printf("%-12s %6d %6d %6d %8d  %s\n", m.name.c_str(), m.batch, m.image_size, m.width, m.classes,
                    m.description.c_str());
      return 0;
    }
    if (policies->parsed()) {
      for (const auto& p : policy_registry()) std::printf("%-14s %s\n", p.name.c_str(), p.description.c_str());
      return 0;
    }
    return cmd_train(cfg, budget_text, report, quiet);
  } catch (const OutOfMemoryError& e) {
    std::fprintf(stderr, "vtensor: %s\n", e.what());
    return kExitOom;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "vtensor: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vtensor: internal error: %s\n", e.what());
    return 1;
  }
}
