// Trace replay on the sim backend: a recorded cpu run replays to the same memory figures, the
// DTR operator logs import and replay to their recorded op time, malformed traces are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/trace_io.h"
#include "vtensor/train/experiments.h"

using namespace vtensor;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("vtensor_replay_" + std::to_string(getpid()) + "_" + name)).string();
}

TEST(Replay, ACpuRunReplaysToTheSamePeakAndSwapVolumes) {
  size_t unmanaged = 0;
  {
    TrainConfig cfg;
    cfg.model.name = "resnet-tiny";
    cfg.iters = 1;
    unmanaged = Trainer(cfg).run().iterations[0].peak_allocated;
  }
  for (const std::string policy : {"none", "lru", "lru-recompute"}) {
    SCOPED_TRACE(policy);
    const std::string trace = temp_path(policy + ".jsonl");
    TrainConfig cfg;
    cfg.model.name = "resnet-tiny";
    cfg.policy = policy;
    cfg.budget = align_up(policy == "none" ? unmanaged : unmanaged / 2);
    cfg.iters = 3;
    cfg.trace_path = trace;
    const TrainResult cpu = Trainer(cfg).run();
    const TrainResult sim = replay_trace({.trace = trace, .policy = policy, .gpu = "p100-16g", .budget = cfg.budget, .iters = 3});
    ASSERT_EQ(cpu.iterations.size(), sim.iterations.size());
    uint64_t moved = 0;
    for (size_t i = 0; i < cpu.iterations.size(); ++i) {
      const auto &a = cpu.iterations[i], &b = sim.iterations[i];
      EXPECT_EQ(a.peak_allocated, b.peak_allocated) << "iteration " << i;
      EXPECT_EQ(a.peak_reserved, b.peak_reserved) << "iteration " << i;
      EXPECT_EQ(a.counters.swapped_out_bytes, b.counters.swapped_out_bytes) << "iteration " << i;
      EXPECT_EQ(a.counters.swapped_in_bytes, b.counters.swapped_in_bytes) << "iteration " << i;
      EXPECT_EQ(a.counters.recomputed_ops, b.counters.recomputed_ops) << "iteration " << i;
      moved += b.counters.swapped_out_bytes + b.counters.recomputed_ops;
    }
    if (policy != "none") EXPECT_GT(moved, 0u);
    // The replayed ops take the times recorded on the cpu.
    EXPECT_EQ(sim.num_ops, cpu.num_ops);
    EXPECT_GT(recorded_total_ms(*sim.config.graph), 0.0);
    std::filesystem::remove(trace);
  }
}

TEST(Replay, TheCpuBackendCannotRunAReplayedGraph) {
  const std::string trace = temp_path("cpu.jsonl");
  TrainConfig cfg;
  cfg.model.name = "mlp-tiny";
  cfg.iters = 1;
  cfg.trace_path = trace;
  Trainer(cfg).run();
  TrainConfig r;
  r.graph = std::make_shared<const Graph>(load_trace(trace));
  r.iters = 1;
  try {
    Trainer(r).run();
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--backend sim"), std::string::npos) << e.what();
  }
  std::filesystem::remove(trace);
}

// A copy of `src` with line `n` (1-based) replaced.
std::string corrupt(const std::string& src, size_t n, const std::string& text, const std::string& name) {
  std::ifstream in(src);
  const std::string dst = temp_path(name);
  std::ofstream out(dst);
  std::string l;
  for (size_t i = 1; std::getline(in, l); ++i) out << (i == n ? text : l) << "\n";
  return dst;
}

void expect_line_error(const std::string& path, size_t line) {
  try {
    load_trace(path);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("line " + std::to_string(line) + ":"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
}

TEST(Replay, MalformedVtensorTraceLinesNameTheLine) {
  const std::string trace = temp_path("good.jsonl");
  TrainConfig cfg;
  cfg.model.name = "mlp-tiny";
  cfg.iters = 2;
  cfg.trace_path = trace;
  Trainer(cfg).run();
  const std::string a = corrupt(trace, 7, "{not json", "bad1.jsonl");
  expect_line_error(a, 7);
  const std::string b = corrupt(trace, 9, R"({"type":"access","iter":0,"id":99999,"op":0,"kind":"read","t_ns":0})", "bad2.jsonl");
  expect_line_error(b, 9);
  const std::string c = corrupt(trace, 1, R"({"type":"graph","tensors":[]})", "bad3.jsonl");
  expect_line_error(c, 1);
  for (const auto& p : {trace, a, b, c}) std::filesystem::remove(p);
}

bool have_dtr_logs() { return !dtr_logs_dir().empty(); }

TEST(DtrLogs, MalformedLinesNameTheLine) {
  if (!have_dtr_logs()) GTEST_SKIP() << "the DTR logs are not here (../shared/external/dtr-logs absent at configure time)";
  const std::string log = dtr_log_path("resnet32");
  expect_line_error(corrupt(log, 40, R"({"INSTRUCTION":"CALL","NAME":"relu","ARGS":["nope"],"RESULT":["y"],"TIME":"5"})", "dtr1.log"), 40);
  expect_line_error(corrupt(log, 41, R"({"INSTRUCTION":"TELEPORT"})", "dtr2.log"), 41);
  expect_line_error(corrupt(log, 42, "]]", "dtr3.log"), 42);
  for (const char* n : {"dtr1.log", "dtr2.log", "dtr3.log"}) std::filesystem::remove(temp_path(n));
}

// Every log imports, and replayed under `none` with an unlimited budget an iteration takes the
// sum of the log's TIME fields: nothing stalls and nothing is recomputed.
TEST(DtrLogs, AllImportAndReplayToTheSumOfTheirOpTimes) {
  if (!have_dtr_logs()) GTEST_SKIP() << "the DTR logs are not here (../shared/external/dtr-logs absent at configure time)";
  const auto names = dtr_log_names();
  EXPECT_EQ(names.size(), 8u);
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    double sum_ns = 0;
    std::ifstream in(dtr_log_path(name));
    std::string l;
    while (std::getline(in, l)) {
      auto j = nlohmann::json::parse(l);
      if (j.contains("TIME")) sum_ns += std::stod(j["TIME"].get<std::string>());
    }
    // How many forward results the importer found with an input written in place before their
    // last access (mark_overwritten_inputs); ResNet-32's log writes nothing in place.
    const Graph g = load_trace("dtr:" + name);
    int overwritten = 0;
    for (const auto& t : g.tensors()) overwritten += t.producer >= 0 && !t.recomputable;
    std::printf("%-12s %4d tensors not recomputable (inputs overwritten in place)\n", name.c_str(), overwritten);
    if (name == "resnet32") EXPECT_EQ(overwritten, 0);
    const TrainResult r = replay_trace({.trace = "dtr:" + name, .gpu = "titan-v-12g", .budget = size_t{1} << 40, .budget_above_gpu = true, .iters = 2});
    ASSERT_EQ(r.iterations.size(), 2u);
    for (const auto& it : r.iterations) {
      EXPECT_NEAR(it.time_ms, sum_ns * 1e-6, sum_ns * 1e-6 * 1e-9);
      EXPECT_GT(it.peak_allocated, 0u);
      EXPECT_EQ(it.counters.swapped_out_bytes, 0u);
      EXPECT_EQ(it.counters.recomputed_ops, 0u);
    }
  }
}

// A replayed op is counted under the kind its trace recorded: a vtensor trace's bracketed kind,
// a DTR log's op name; a model's op under its OpKind.
TEST(Replay, ARecomputedOpIsCountedUnderItsRecordedKind) {
  EXPECT_EQ(recompute_kind(Op{.kind = OpKind::kReplay, .name = "layer1.0.conv2d_2 [conv2d]"}), "conv2d");
  EXPECT_EQ(recompute_kind(Op{.kind = OpKind::kReplay, .name = "cudnn_convolution"}), "cudnn_convolution");
  EXPECT_EQ(recompute_kind(Op{.kind = OpKind::kReplay, .name = "odd []"}), "odd []");
  EXPECT_EQ(recompute_kind(Op{.kind = OpKind::kBatchNorm, .name = "layer1.0.batchnorm"}), "batchnorm");
}

// Deep lineages with shared ancestors (a transformer's residual and attention fan-in): dropping
// and recomputing under half the unmanaged peak must take well under a second, not minutes.
TEST(DtrLogs, TransformerRecomputesUnderHalfItsPeak) {
  if (!have_dtr_logs()) GTEST_SKIP() << "the DTR logs are not here (../shared/external/dtr-logs absent at configure time)";
  const TrainResult full = replay_trace({.trace = "dtr:transformer", .gpu = "titan-v-12g", .budget = size_t{1} << 40, .budget_above_gpu = true, .iters = 1});
  const size_t budget = align_up(full.iterations[0].peak_allocated / 2);
  const TrainResult r = replay_trace({.trace = "dtr:transformer", .policy = "lru-recompute", .gpu = "titan-v-12g", .budget = budget, .iters = 2});
  for (const auto& it : r.iterations) {
    EXPECT_LE(it.peak_allocated, budget);
    EXPECT_GT(it.counters.recomputed_ops, 0u);
    EXPECT_GT(it.time_ms, full.iterations[0].time_ms);  // recomputation costs time
  }
  // What was re-run is counted under the log's own op names, not as 'replay'.
  ASSERT_FALSE(r.iterations.back().recompute_by_kind.empty());
  for (const auto& k : r.iterations.back().recompute_by_kind) EXPECT_NE(k.kind, "replay");
}

// t = g(a) is released after u = h(t) reads it; u is read again at op 5. An in-place write to a
// at op 3, after t's last access, still matters: recomputing u at op 5 would recompute t from
// the new a. The importer marks t (u's horizon extends t's), u keeps its flag, and the memory
// manager's chain walk must refuse to drop u once t is gone: lru-recompute then drops a
// instead, and nothing is recomputed. The control reads a at op 3 without writing it, and
// lru-recompute drops u (the least recently used) and recomputes t and u at op 5.
TEST(DtrLogs, AChainIsNotRecomputedThroughAnOverwrittenInput) {
  auto log = [](bool write_a) {
    const std::string path = temp_path(std::string("chain_") + (write_a ? "write" : "read") + ".log");
    std::ofstream out(path);
    out << R"({"INSTRUCTION":"ANNOTATE","ANNOTATION":"START"})" "\n"
        << R"({"INSTRUCTION":"CONSTANT","NAME":"w"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":"w","MEMORY":"1048576"})" "\n"
        << R"({"INSTRUCTION":"CONSTANT","NAME":"x"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":"x","MEMORY":"4096"})" "\n"
        << R"({"INSTRUCTION":"CALL","NAME":"f","ARGS":["w"],"RESULT":["a"],"TIME":"1000"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":"a","MEMORY":"1048576"})" "\n"
        << R"({"INSTRUCTION":"CALL","NAME":"g","ARGS":["a"],"RESULT":["t"],"TIME":"1000"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":"t","MEMORY":"1048576"})" "\n"
        << R"({"INSTRUCTION":"CALL","NAME":"h","ARGS":["t"],"RESULT":["u"],"TIME":"1000"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":"u","MEMORY":"4194304"})" "\n"
        << R"({"INSTRUCTION":"RELEASE","NAME":"t"})" "\n"
        << (write_a ? R"({"INSTRUCTION":"MUTATE","NAME":"add_","ARGS":["a","x"],"MUTATE":[0],"TIME":"1000"})"
                    : R"({"INSTRUCTION":"MUTATE","NAME":"add_","ARGS":["a","x"],"MUTATE":[1],"TIME":"1000"})") << "\n"
        << R"({"INSTRUCTION":"CALL","NAME":"k","ARGS":["w"],"RESULT":["big"],"TIME":"1000"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":"big","MEMORY":"2097152"})" "\n"
        << R"({"INSTRUCTION":"RELEASE","NAME":"big"})" "\n"
        << R"({"INSTRUCTION":"CALL","NAME":"m","ARGS":["u"],"RESULT":["z"],"TIME":"1000"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":"z","MEMORY":"65536"})" "\n"
        << R"({"INSTRUCTION":"RELEASE","NAME":"u"})" "\n"
        << R"({"INSTRUCTION":"RELEASE","NAME":"z"})" "\n";
    return path;
  };
  for (const bool write_a : {false, true}) {
    SCOPED_TRACE(write_a ? "a written at op 3" : "a only read at op 3");
    const std::string path = log(write_a);
    const Graph g = load_trace(path);
    auto flag = [&](const char* name) {
      for (const auto& t : g.tensors())
        if (t.name == name) return t.recomputable;
      throw std::out_of_range(name);
    };
    EXPECT_EQ(flag("t"), !write_a);
    EXPECT_TRUE(flag("u"));
    EXPECT_TRUE(flag("a"));
    // 7.5 MiB: at op 4 (big) one of u, a must go.
    const TrainResult r = replay_trace({.trace = path, .policy = "lru-recompute", .gpu = "p100-16g", .budget = 7864320, .iters = 2});
    for (const auto& it : r.iterations) {
      EXPECT_EQ(it.counters.recomputed_ops, write_a ? 0u : 2u);
      EXPECT_EQ(it.counters.swapped_out_bytes, 0u);
      EXPECT_EQ(it.counters.dropped, 1u);
      EXPECT_LE(it.peak_allocated, 7864320u);
    }
    std::filesystem::remove(path);
  }
}

// Views share their base's storage: a log whose ops make only views adds no bytes.
TEST(DtrLogs, AliasesDoNotCountTwice) {
  const std::string path = temp_path("alias.log");
  {
    std::ofstream out(path);
    out << R"({"INSTRUCTION":"ANNOTATE","ANNOTATION":"START"})" "\n"
        << R"({"INSTRUCTION":"CONSTANT","NAME":"w"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":"w","MEMORY":"4096"})" "\n"
        << R"({"INSTRUCTION":"CALL","NAME":"relu","ARGS":["w"],"RESULT":["a"],"TIME":"1000"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":"a","MEMORY":"1048576"})" "\n"
        << R"({"INSTRUCTION":"ALIAS","NAME":"a","ALIAS":"-1"})" "\n"
        << R"({"INSTRUCTION":"CALL","NAME":"view","ARGS":["a"],"RESULT":["v"],"TIME":"2000"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":"v","MEMORY":"1048576"})" "\n"
        << R"({"INSTRUCTION":"ALIAS","NAME":"v","ALIAS":"0"})" "\n"
        << R"({"INSTRUCTION":"COPY","DST":"v2","SRC":"v"})" "\n"
        << R"({"INSTRUCTION":"RELEASE","NAME":"a"})" "\n"
        << R"({"INSTRUCTION":"ANNOTATE","ANNOTATION":"BACKWARD"})" "\n"
        << R"({"INSTRUCTION":"MUTATE","NAME":"add_","ARGS":["v2","w"],"MUTATE":[0],"TIME":"3000"})" "\n"
        << R"({"INSTRUCTION":"RELEASE","NAME":"v"})" "\n"
        << R"({"INSTRUCTION":"RELEASE","NAME":"v2"})" "\n";
  }
  Graph g = load_trace(path);
  EXPECT_EQ(g.num_tensors(), 2u);  // w and a; v and v2 are names of a's storage
  ASSERT_EQ(g.num_ops(), 3u);
  EXPECT_TRUE(g.op(0).outputs.size() == 1 && g.op(1).outputs.empty());
  EXPECT_TRUE(g.op(2).backward);
  EXPECT_EQ(g.op(2).inplace, std::vector<TensorId>{g.op(0).outputs[0]});
  EXPECT_EQ(g.tensor(g.op(0).outputs[0]).release_after, 2);  // held by its views until their release
  EXPECT_DOUBLE_EQ(recorded_total_ms(g), 0.006);
  const TrainResult r = replay_trace({.trace = path, .gpu = "titan-v-12g", .iters = 1});
  EXPECT_EQ(r.iterations[0].peak_allocated, align_up(4096) + align_up(1048576));
  std::filesystem::remove(path);
}

}  // namespace
