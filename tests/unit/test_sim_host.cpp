// The sim's host model (HostModel, gpu_specs.h): its spec, the host clock beside the device
// streams, and the per-op times a GPU run measured (--op-times, op_times.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "vtensor/backend/sim/gpu_specs.h"
#include "vtensor/backend/sim/sim_backend.h"
#include "vtensor/models/models.h"
#include "vtensor/train/op_times.h"
#include "vtensor/train/trainer.h"

using namespace vtensor;

namespace {

// Registers the GPUs of `json` (a --gpu-file's text) and returns their names.
std::vector<std::string> load(const std::string& json) {
  const auto path = std::filesystem::temp_directory_path() / ("vtensor_host_" + std::to_string(getpid()) + ".json");
  std::ofstream(path) << json;
  auto names = load_gpu_file(path.string());
  std::filesystem::remove(path);
  return names;
}

std::string error_of(const std::string& json) {
  std::istringstream in(json);
  try {
    read_gpu_specs(in, "specs.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(HostModel, TheBuiltInGpusModelNoHost) {
  for (const auto& name : gpu_names()) EXPECT_FALSE(find_gpu(name).host.on) << name;
  SimBackend b({.arena_bytes = 1 << 20, .gpu = "h100-80g"});
  EXPECT_FALSE(b.host_clock().modelled);
}

TEST(HostModel, ASpecGivesItsCostsPerKindOverTheDefault) {
  std::istringstream in(R"({"name": "h", "base": "h100-80g", "host": {"op_us": {"default": 8, "conv2d": 40},
                          "alloc_us": 1, "copy_us": 5, "event_us": 2, "move_us": 3, "action_us": 4,
                          "queued_copy_us": 6, "loss_sync": false}})");
  const GpuSpec g = read_gpu_specs(in, "specs.json").at(0);
  ASSERT_TRUE(g.host.on);
  EXPECT_EQ(g.host.op_us.at(static_cast<size_t>(OpKind::kConv2d)), 40);
  EXPECT_EQ(g.host.op_us.at(static_cast<size_t>(OpKind::kRelu)), 8);
  EXPECT_EQ(g.host.alloc_us, 1);
  EXPECT_EQ(g.host.copy_us, 5);
  EXPECT_EQ(g.host.event_us, 2);
  EXPECT_EQ(g.host.move_us, 3);
  EXPECT_EQ(g.host.action_us, 4);
  EXPECT_EQ(g.host.queued_copy_us, 6);
  EXPECT_FALSE(g.host.loss_sync);
}

TEST(HostModel, ABadHostNamesWhatIsWrong) {
  const std::string base = R"({"name": "h", "base": "h100-80g", "host": )";
  for (const auto& [host, want] : std::vector<std::pair<std::string, std::string>>{
           {"[1]", "'host' must be an object"},
           {R"({"launch_us": 1})", "unknown field 'launch_us'; accepted: op_us, alloc_us"},
           {R"({"copy_us": -1})", "'copy_us' must be >= 0"},
           {R"({"op_us": {"conv3d": 1}})", "unknown op kind 'conv3d'; accepted: default, data"},
           {R"({"op_us": {"relu": "x"}})", "'op_us' of 'relu' must be a number >= 0"},
           {R"({"loss_sync": 1})", "'loss_sync' must be true or false"}}) {
    const std::string e = error_of(base + host + "}");
    EXPECT_NE(e.find(want), std::string::npos) << host << ": " << e;
  }
}

// A host slower than the device bounds the iteration: the compute stream idles for each late
// launch, and an iteration takes the host's time, not the kernels'.
TEST(HostModel, ALateHostIdlesTheDevice) {
  load(R"([{"name": "slow-host", "base": "h100-80g", "host": {"op_us": {"default": 200}, "loss_sync": false}},
           {"name": "no-host", "base": "h100-80g"}])");
  auto run = [](const std::string& gpu) {
    TrainConfig c;
    c.model = {.name = "mlp-tiny"};
    c.backend = "sim", c.gpu = gpu, c.iters = 2;
    Trainer t(c);
    t.step();
    return t.step();
  };
  const IterationStats slow = run("slow-host"), bare = run("no-host");
  const Graph g = [] {
    Graph g = build_model({.name = "mlp-tiny"});
    build_backward(g, OptimizerConfig{});
    return g;
  }();
  const double host_ms = 0.2 * static_cast<double>(g.num_ops());
  EXPECT_FALSE(bare.host_modelled);
  ASSERT_TRUE(slow.host_modelled);
  EXPECT_LT(bare.time_ms, host_ms / 4);  // tiny kernels: the device alone is far faster
  EXPECT_NEAR(slow.host_kernel_ms, host_ms, 1e-9);
  EXPECT_EQ(slow.host_model.launches, g.num_ops());
  EXPECT_GE(slow.time_ms, host_ms);
  EXPECT_LE(slow.time_ms, host_ms + bare.time_ms + 1e-9);
  EXPECT_GT(slow.host_model.device_idle_ms, host_ms - bare.time_ms - 1e-9);
}

// At the loss the host reads it back: it waits there for the device, where it was ahead.
TEST(HostModel, TheHostWaitsForTheLoss) {
  load(R"([{"name": "fast-host-sync", "base": "titan-x-12g", "host": {"op_us": {"default": 0.1}}},
           {"name": "fast-host-async", "base": "titan-x-12g", "host": {"op_us": {"default": 0.1}, "loss_sync": false}}])");
  auto run = [](const std::string& gpu) {
    TrainConfig c;
    c.model = {.name = "mlp"};
    c.backend = "sim", c.gpu = gpu, c.iters = 1;
    return Trainer(c).step();
  };
  const IterationStats sync = run("fast-host-sync"), async = run("fast-host-async");
  EXPECT_GT(sync.host_model.wait_ms, 0.0);
  EXPECT_EQ(async.host_model.wait_ms, 0.0);
  EXPECT_GT(sync.host_launch_ms, async.host_launch_ms);  // it waited in the op loop, not at the end
  // A fast host bounds nothing either way: the launch after the wait is late by its own 0.1 us only.
  EXPECT_NEAR(sync.time_ms, async.time_ms, 1e-3);
}

// A copy queued behind another on its stream costs the model's per-copy cost more; one that
// finds its stream idle does not. Events complete no earlier than the host recorded them.
TEST(HostModel, QueuedCopiesAndEventsFollowTheHost) {
  load(R"({"name": "queued-host", "base": "p100-16g", "host": {"copy_us": 10, "event_us": 1, "queued_copy_us": 5}})");
  SimBackend b({.arena_bytes = 1 << 20, .gpu = "queued-host", .link_ms_per_byte = 1e-6});
  char host[64];
  b.copy_async(Stream::kH2D, b.arena_base(), host, 64);  // issued at 10 us, the stream idle
  EXPECT_DOUBLE_EQ(b.clock(Stream::kH2D), 0.010 + 64e-6);
  b.copy_async(Stream::kH2D, b.arena_base(), host, 64);  // issued at 20 us, the stream idle again
  EXPECT_DOUBLE_EQ(b.clock(Stream::kH2D), 0.020 + 64e-6);
  const size_t big = size_t{1} << 20;  // 1 ms on this link: the next copy queues behind it
  b.copy_async(Stream::kH2D, b.arena_base(), host, big);
  b.copy_async(Stream::kH2D, b.arena_base(), host, 64);
  EXPECT_DOUBLE_EQ(b.clock(Stream::kH2D), 0.030 + static_cast<double>(big) * 1e-6 + 64e-6 + 0.005);
  const Event e = b.record(Stream::kCompute);  // the compute stream is idle at 0; recorded at 41 us
  EXPECT_DOUBLE_EQ(dynamic_cast<SimEvent&>(*e).time_ms(), 0.041);
  EXPECT_TRUE(e->query());  // the host's now is its recording time
  const Backend::HostClock c = b.host_clock();
  EXPECT_EQ(c.copies, 4u);
  EXPECT_EQ(c.events, 1u);
  EXPECT_DOUBLE_EQ(c.now_ms, 0.041);
  b.synchronize();
  EXPECT_DOUBLE_EQ(b.host_clock().now_ms, b.clock(Stream::kH2D));
}

Graph mlp_tiny() {
  Graph g = build_model({.name = "mlp-tiny"});
  build_backward(g, OptimizerConfig{});
  return g;
}

// What bench/sim_vs_device.py --ops-out writes for `g`, every op at `ms`; `first_kind` replaces op 0's kind.
std::string op_times_csv(const Graph& g, double ms, const std::string& first_kind = "") {
  std::string csv = "op,name,kind,flops,bytes,measured_ms,predicted_ms\n";
  for (const Op& op : g.ops())
    csv += std::to_string(op.index) + "," + op.name + "," +
           (op.index == 0 && !first_kind.empty() ? first_kind : std::string(to_string(op.kind))) + "," +
           std::to_string(static_cast<uint64_t>(op.flops)) + ",0," + std::to_string(ms) + ",0\n";
  return csv;
}

TEST(OpTimes, ReadsTheOpsCsvOfAGpuRun) {
  const Graph g = mlp_tiny();
  const auto ms = read_op_times(op_times_csv(g, 0.25), "ops.csv", g);
  ASSERT_EQ(ms.size(), g.num_ops());
  for (double v : ms) EXPECT_EQ(v, 0.25);
}

TEST(OpTimes, AFileForAnotherGraphIsRefused) {
  const Graph g = mlp_tiny();
  const std::string good = op_times_csv(g, 0.25);
  auto error = [&](const std::string& text) {
    try {
      read_op_times(text, "ops.csv", g);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error("op,kind\n0,data\n").find("no 'op' or no 'measured_ms' column"), std::string::npos);
  const std::string first_row = good.substr(good.find('\n') + 1, good.find('\n', good.find('\n') + 1) - good.find('\n'));
  const std::string without_first = good.substr(0, good.find('\n') + 1) + good.substr(good.find('\n') + first_row.size() + 1);
  EXPECT_NE(error(without_first).find("no time for op 0"), std::string::npos) << error(without_first);
  EXPECT_NE(error(good + first_row).find("is given twice"), std::string::npos);
  const std::string other_kind = op_times_csv(g, 0.25, "conv2d");
  EXPECT_NE(error(other_kind).find("accepted: times recorded for the same model and batch"), std::string::npos)
      << error(other_kind);
  std::string bad_time = good;
  bad_time.replace(bad_time.find(",0.250000,"), 10, ",-1,");
  EXPECT_NE(error(bad_time).find("must be a time >= 0"), std::string::npos) << error(bad_time);
  EXPECT_NE(error(good + "999,x,relu,0,0,1,0\n").find("is not an op index of this graph"), std::string::npos);
}

// --op-times: the sim charges each op the given time, so an unmanaged iteration is their sum.
TEST(OpTimes, TheSimChargesTheMeasuredTimes) {
  const Graph g = mlp_tiny();
  const auto path = std::filesystem::temp_directory_path() / ("vtensor_ops_" + std::to_string(getpid()) + ".csv");
  std::ofstream(path) << op_times_csv(g, 0.25);
  TrainConfig c;
  c.model = {.name = "mlp-tiny"};
  c.backend = "sim", c.gpu = "h100-80g", c.iters = 1, c.op_times_path = path.string();
  const IterationStats s = Trainer(c).step();
  EXPECT_NEAR(s.time_ms, 0.25 * static_cast<double>(g.num_ops()), 1e-9);
  c.backend = "cpu", c.gpu.clear();
  try {
    Trainer t(c);
    FAIL() << "accepted --op-times on cpu";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--op-times applies to --backend sim only"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
