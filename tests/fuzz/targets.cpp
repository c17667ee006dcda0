#include "tests/fuzz/targets.h"

#include <sstream>
#include <stdexcept>
#include <string>

#include "cli/cli.h"
#include "vtensor/backend/codec.h"
#include "vtensor/backend/sim/gpu_specs.h"
#include "vtensor/core/errors.h"
#include "vtensor/core/input.h"
#include "vtensor/memory/page_policy.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/memory_manager.h"
#include "vtensor/memory/trace_io.h"
#include "vtensor/models/models.h"
#include "vtensor/policy/auto/auto.h"
#include "vtensor/train/executor.h"
#include "vtensor/train/densities.h"
#include "vtensor/train/experiments.h"
#include "vtensor/train/report_html.h"
#include "vtensor/train/safetensors.h"

namespace vtensor::fuzz {
namespace {

std::string text_of(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

// Runs f; bad input must fail with std::invalid_argument, which is swallowed. Anything else escapes
// (libFuzzer reports an uncaught exception as a crash; the corpus test as a failure).
template <class F>
void rejecting(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument&) {
  }
}

// A graph the reader accepted must be one the rest of vtensor can walk: every id in range.
void check_graph(const Graph& g) {
  for (const Op& op : g.ops())
    for (const auto* ids : {&op.inputs, &op.outputs, &op.inplace})
      for (TensorId id : *ids)
        if (id < 0 || static_cast<size_t>(id) >= g.num_tensors()) throw std::logic_error("an op names a tensor the graph lacks");
  for (const auto& t : g.tensors())
    if (t.view_of != kNoTensor && (t.view_of < 0 || static_cast<size_t>(t.view_of) >= g.num_tensors()))
      throw std::logic_error("a view of a tensor the graph lacks");
  const AccessTrace at = recorded_access_trace(g);
  if (at.op_ms.size() != g.num_ops()) throw std::logic_error("recorded_access_trace: one time per op");
  recorded_total_ms(g);
}

}  // namespace

void trace(const uint8_t* data, size_t size) {
  rejecting([&] {
    std::istringstream in(text_of(data, size));
    check_graph(read_vtensor_trace(in, "fuzz"));
  });
}

void dtr_log(const uint8_t* data, size_t size) {
  rejecting([&] {
    std::istringstream in(text_of(data, size));
    Graph g = read_dtr_log(in, "fuzz");
    check_graph(g);
    mark_overwritten_inputs(g);  // again, on the finished graph: idempotent, and must not throw
  });
}

void gpu_file(const uint8_t* data, size_t size) {
  rejecting([&] {
    std::istringstream in(text_of(data, size));
    for (const GpuSpec& g : read_gpu_specs(in, "fuzz")) check_gpu_spec(g, "fuzz");
  });
}

// Every size-like flag's parser on the same text: --budget / --host-budget / --um-page-size
// (parse_bytes, check_page_bytes), --budgets, --batches, --policies (split_list), --optimizer,
// --codecs, --lossy.
void sizes(const uint8_t* data, size_t size) {
  const std::string text = text_of(data, size);
  rejecting([&] {
    const size_t b = parse_bytes(text, "--budget");
    if (b == 0) throw std::logic_error("parse_bytes accepted a zero size");
    check_page_bytes(b);
  });
  rejecting([&] { parse_budgets(text, "--budgets"); });
  rejecting([&] { parse_batches(text, "--batches"); });
  rejecting([&] { parse_optimizer(text); });
  rejecting([&] { parse_lossy(text); });
  rejecting([&] {
    for (const auto& c : split_list(text)) parse_codec(c);
  });
}

// argv[0] is "vtensor"; each line of the input is one argument (so an argument holds no newline).
void cli(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"vtensor"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty()) args.push_back(cur);
  if (args.size() > 64) return;  // long command lines find nothing new, only slow the run
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = run_cli(static_cast<int>(args.size()), argv.data(), CliMode::kParseOnly);
  if (rc != 0 && rc != 2) throw std::logic_error("the parse ended with status " + std::to_string(rc));
}

// A plan load_plan accepts for resnet-tiny at 1 MiB must run: three iterations on sim end or run
// out of memory (a plan that does not fit), nothing else. The seeds hold a plan an auto run saved.
void plan(const uint8_t* data, size_t size) {
  const Graph& g = plan_graph();
  constexpr size_t kBudget = kPlanBudget;
  rejecting([&] {
    const nlohmann::json j = parse_json(text_of(data, size), "fuzz");  // as --auto-plan reads it
    auto policy = std::make_unique<AutoPolicy>();
    policy->load_plan(j, g, kBudget, "fuzz");
    auto backend = make_sim_backend({.arena_bytes = kBudget, .gpu = "p100-16g"});
    MemoryManager mm(*backend, g, make_allocator("caching", backend->arena_bytes(), ""), std::move(policy));
    Executor exec(g, *backend, mm);
    mm.init_persistent(1);
    try {
      for (int i = 0; i < 3; ++i) exec.run_iteration(i);
    } catch (const OutOfMemoryError&) {
    }
    mm.policy().report().dump();  // what the report and the summary repeat of the plan
    mm.policy().summary();
  });
}

void densities(const uint8_t* data, size_t size) {
  rejecting([&] { read_densities(text_of(data, size), "fuzz"); });
}

void view(const uint8_t* data, size_t size) {
  rejecting([&] { view_html(parse_json(text_of(data, size), "fuzz"), "fuzz"); });
}

void weights(const uint8_t* data, size_t size) {
  rejecting([&] {
    for (const auto& [name, t] : parse_safetensors(text_of(data, size), "fuzz")) {
      size_t n = 1;
      for (int64_t d : t.shape) n *= static_cast<size_t>(d);
      if (n != t.values.size()) throw std::logic_error("a tensor's values do not match its shape");
    }
  });
}

const Graph& plan_graph() {
  static const Graph g = [] {
    ModelConfig m;
    m.name = "resnet-tiny";
    Graph x = build_model(resolve_model(m));
    build_backward(x, {});
    return x;
  }();
  return g;
}

const std::vector<Target>& targets() {
  static const std::vector<Target> t{{"trace", trace}, {"dtr_log", dtr_log}, {"gpu_file", gpu_file},
                                     {"sizes", sizes},  {"cli", cli},         {"plan", plan},
                                     {"densities", densities}, {"view", view}, {"weights", weights}};
  return t;
}

}  // namespace vtensor::fuzz
