// The vtensor command as a user meets it: exit codes, messages, reports.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sys/wait.h>

#include "tests/support/cli.h"
#include "tests/support/env.h"

namespace {

using Result = vtensor::test::CliResult;
Result run(const std::string& args) { return vtensor::test::run_cli(args); }

std::string temp_path(const std::string& name) { return vtensor::test::temp_path("cli", name); }

TEST(Cli, TrainWritesAReport) {
  const std::string report = temp_path("report.json");
  Result r = run("train --model resnet-tiny --iters 3 --budget 2MiB --policy lru --report " + report);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("iter 3/3"), std::string::npos) << r.output;
  std::ifstream in(report);
  ASSERT_TRUE(in.good());
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["config"]["policy"], "lru");
  EXPECT_EQ(j["iterations"].size(), 3u);
  EXPECT_LE(j["summary"]["peak_allocated_bytes"].get<size_t>(), j["config"]["budget_bytes"].get<size_t>());
  EXPECT_GT(j["iterations"][0]["swapped_out_bytes"].get<size_t>(), 0u);
  // The last line's means: over every iteration, and after the first (the steady time).
  double all = 0;
  for (const auto& it : j["iterations"]) all += it["time_ms"].get<double>();
  const double first = j["iterations"][0]["time_ms"].get<double>();
  char means[96];
  std::snprintf(means, sizeof means, "mean iteration %.1f ms (%.1f ms after the first)\n", all / 3, (all - first) / 2);
  EXPECT_NE(r.output.find(means), std::string::npos) << means << r.output;
  // The host's launch and end-of-iteration wait: parts of the iteration's wall time on cpu.
  for (const auto& it : j["iterations"]) {
    const double launch = it["host_launch_ms"].get<double>(), drain = it["host_drain_ms"].get<double>();
    EXPECT_GT(launch, 0.0) << it.dump();
    EXPECT_GE(drain, 0.0) << it.dump();
    EXPECT_LE(launch + drain, it["time_ms"].get<double>() + 1e-3) << it.dump();
    // Where the launch went: kernels (the cpu runs them there), allocations, the policy's
    // after-op actions (lru's swap-outs complete there); parts of the launch, not more.
    const double kernel = it["host_kernel_ms"].get<double>(), alloc = it["host_alloc_ms"].get<double>(),
                 after = it["host_after_op_ms"].get<double>();
    EXPECT_GT(kernel, 0.0) << it.dump();
    EXPECT_GT(alloc, 0.0) << it.dump();
    EXPECT_GE(after, 0.0) << it.dump();
    EXPECT_LE(kernel + alloc + after, launch + 1e-3) << it.dump();
    EXPECT_GE(it["host_plan_ms"].get<double>(), 0.0) << it.dump();
    EXPECT_LE(launch + drain + it["host_plan_ms"].get<double>(), it["time_ms"].get<double>() + 1e-3) << it.dump();
    EXPECT_LT(it["host_plan_ms"].get<double>(), 100.0) << "lru plans nothing: its line must not say planning";
  }
  std::filesystem::remove(report);
}

// auto plans at the end of its measured iteration, seconds of host time in that iteration's time
// on cpu: its line says so (and the report's host_plan_ms); the next iteration's does not.
TEST(Cli, AutosPlanningIsNamedOnTheIterationItTakes) {
  const std::string report = temp_path("report_auto.json");
  Result r = run("train --model resnet-tiny --iters 2 --budget 1MiB --policy auto --auto-seconds 0.2 --report " + report);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(report);
  auto j = nlohmann::json::parse(in);
  const double first = j["iterations"][0]["host_plan_ms"].get<double>(), second = j["iterations"][1]["host_plan_ms"].get<double>();
  EXPECT_GE(first, 100.0) << j["iterations"].dump();
  EXPECT_LT(second, first) << j["iterations"].dump();
  const size_t l1 = r.output.find("iter 1/2"), l2 = r.output.find("iter 2/2");
  ASSERT_NE(l1, std::string::npos) << r.output;
  ASSERT_NE(l2, std::string::npos) << r.output;
  char planning[64];
  std::snprintf(planning, sizeof planning, "  planning %.1f s (host)\n", first / 1e3);
  EXPECT_EQ(r.output.find(planning, l1), r.output.find('\n', l1) - std::strlen(planning) + 1) << planning << r.output;
  if (second < 100) EXPECT_EQ(r.output.substr(l2, r.output.find('\n', l2) - l2).find("planning"), std::string::npos) << r.output;
  std::filesystem::remove(report);
}

// A report of auto holds its plan; --auto-plan runs it again without the search: the same
// iterations on sim, a line that says so, and refusals that name the search options it ignores
// and a file it cannot read.
TEST(Cli, AutosPlanRunsAgainFromItsReport) {
  const std::string report = temp_path("report_plan.json"), again = temp_path("report_plan_again.json");
  const std::string args = "train --model resnet-tiny --iters 3 --backend sim --gpu p100-16g --budget 1MiB --policy auto --quiet";
  Result first = run(args + " --auto-seconds 0.5 --report " + report);
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("auto's plan is in it (policy_report.saved_plan): --auto-plan " + report +
                              " runs it again without the search\n"),
            std::string::npos)
      << first.output;
  Result second = run(args + " --auto-plan " + report + " --report " + again);
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find(", the plan in " + report + " ("), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("), no search"), std::string::npos) << second.output;
  EXPECT_EQ(second.output.find("auto's plan is in it"), std::string::npos) << "a replayed plan's run need not say so";
  auto done = [](const std::string& out) { return out.substr(out.find("done:")); };
  EXPECT_EQ(done(second.output).substr(0, done(second.output).find('\n')), done(first.output).substr(0, done(first.output).find('\n')));
  std::ifstream a(report), b(again);
  const auto ja = nlohmann::json::parse(a), jb = nlohmann::json::parse(b);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(ja["iterations"][i]["time_ms"], jb["iterations"][i]["time_ms"]) << i;
  EXPECT_EQ(jb["policy_report"]["plan_file"]["path"], report);
  Result search = run(args + " --auto-plan " + report + " --auto-seconds 2");
  EXPECT_EQ(search.code, 2) << search.output;
  EXPECT_NE(search.output.find("--auto-seconds sets auto's search; --auto-plan runs a saved plan without one"), std::string::npos)
      << search.output;
  Result other = run("train --model resnet-tiny --iters 2 --backend sim --gpu p100-16g --budget 2MiB --policy auto --auto-plan " + report);
  EXPECT_EQ(other.code, 2) << other.output;
  EXPECT_NE(other.output.find("the plan was made for a budget of 1048576 bytes"), std::string::npos) << other.output;
  std::filesystem::remove(report);
  std::filesystem::remove(again);
  Result missing = run(args + " --auto-plan " + report);
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--auto-plan: cannot read '" + report + "'"), std::string::npos) << missing.output;
}

TEST(Cli, SimReportsNoHostTimes) {  // its clock is the model's: a host time beside it would mislead
  const std::string report = temp_path("report_sim.json");
  Result r = run("train --model resnet-tiny --iters 2 --backend sim --gpu p100-16g --policy none --report " + report);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(report);
  auto j = nlohmann::json::parse(in);
  for (const auto& it : j["iterations"]) {
    EXPECT_TRUE(it["host_launch_ms"].is_null()) << it.dump();
    EXPECT_TRUE(it["host_drain_ms"].is_null()) << it.dump();
    for (const char* k : {"host_kernel_ms", "host_alloc_ms", "host_after_op_ms", "host_plan_ms"}) EXPECT_TRUE(it[k].is_null()) << k;
  }
  std::filesystem::remove(report);
}

TEST(Cli, ListsModelsAndPolicies) {
  Result m = run("models");
  EXPECT_EQ(m.code, 0);
  for (const char* name : {"mlp", "vgg16", "resnet50", "resnet-tiny"}) EXPECT_NE(m.output.find(name), std::string::npos);
  Result p = run("policies");
  EXPECT_EQ(p.code, 0);
  for (const char* name : {"none", "lru", "lru-recompute", "checkpoint"}) EXPECT_NE(p.output.find(name), std::string::npos);
}

TEST(Cli, BadArgumentsNameTheArgumentAndExitTwo) {
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"train --model resnet-huge", "unknown model 'resnet-huge'; accepted: "},
           {"train --model resnet-tiny --policy magic", "unknown policy 'magic'; accepted: none, lru, lru-recompute"},
           {"train --model resnet-tiny --backend tpu", "unknown backend 'tpu'; accepted: cpu, cuda"},
           {"train --model resnet-tiny --budget lots", "--budget"},
           {"train --model resnet-tiny --budget 12XB", "invalid unit"},
           {"train --model resnet-tiny --iters 0", "--iters"},
           {"train --model resnet-tiny --batch -3", "--batch"},
           {"train --model resnet-tiny --allocator buddy", "unknown allocator 'buddy'; accepted: caching, planned"},
           {"train --model resnet-tiny --report /nonexistent/dir/r.json", "does not exist"},
           {"train --model resnet-tiny --allocator planned --planner tetris",
            "unknown --planner 'tetris'; accepted: greedy-size, greedy-breadth, greedy-area, best"},
           {"train --model resnet-tiny --planner best", "--planner applies to --allocator planned only"},
           {"train --model resnet-tiny --checkpoint-segments 3", "--checkpoint-segments applies to --policy checkpoint only"},
           {"train --model resnet-tiny --policy checkpoint --checkpoint-segments -1", "--checkpoint-segments: must be a whole number above 0"},
           // Zero where it has no meaning is refused like a negative; leaving the option out takes the default.
           {"train --model resnet-tiny --batch 0", "--batch: must be a whole number above 0 (leave the option out for the default)"},
           {"train --model resnet-tiny --width 0", "--width: must be a whole number above 0"},
           {"train --model resnet-tiny --classes 0", "--classes: must be a whole number above 0"},
           {"train --model resnet-tiny --image-size 0", "--image-size: must be a whole number above 0"},
           {"train --model gpt-tiny --seq 0", "--seq: must be a whole number above 0"},
           {"train --model resnet-tiny --policy checkpoint --checkpoint-segments 0", "--checkpoint-segments: must be a whole number above 0"},
           {"sweep --model resnet-tiny --policies checkpoint --checkpoint-segments 0 --out x.csv", "--checkpoint-segments: must be"},
           {"maxbatch --model resnet-tiny --gpu p100-16g --width 0", "--width: must be a whole number above 0"},
           {"train --model resnet-tiny --batch 2.5", "--batch: must be a whole number above 0"},
           // A budget the simulated GPU cannot hold is refused unless asked for.
           {"train --model resnet-tiny --backend sim --gpu p100-16g --budget 17GiB",
            "--budget 17.00 GiB is above p100-16g's memory (16.00 GiB); accepted: at most 16.00 GiB, or --budget-above-gpu"},
           {"replay --trace dtr:lstm --gpu p100-16g --budget 1024GiB", "is above p100-16g's memory"},
           {"maxbatch --model resnet-tiny --gpu p100-16g --budget 20GiB", "is above p100-16g's memory"},
           {"sweep --model resnet-tiny --gpu p100-16g --budgets 50%,20GiB --out x.csv", "is above p100-16g's memory"},
           {"train --model resnet-tiny --budget-above-gpu", "--budget-above-gpu applies to --backend sim only"},
           // A non-finite learning rate, momentum or weight decay trains to NaN: refused.
           {"train --model resnet-tiny --lr nan", "--lr: must be a finite number, got 'nan'"},
           {"train --model resnet-tiny --lr inf", "--lr: must be a finite number"},
           {"train --model resnet-tiny --momentum -inf", "--momentum: must be a finite number"},
           {"train --model resnet-tiny --weight-decay nan", "--weight-decay: must be a finite number"},
           {"maxbatch --model resnet-tiny --gpu p100-16g --policy dtr --checkpoint-segments 3", "--checkpoint-segments applies"},
           {"train --model resnet-tiny --policy capuchin --auto-search 8", "--auto-search applies to --policy auto only"},
           {"train --model resnet-tiny --policy auto --auto-search -1", "--auto-search must be a rehearsal count >= 0"},
           {"sweep --model resnet-tiny --policies auto --auto-search -2 --out x.csv", "--auto-search must be a rehearsal count"},
           {"train --model resnet-tiny --policy dtr --auto-window 8", "--auto-window applies to --policy auto only"},
           {"train --model resnet-tiny --policy dtr --auto-room 8", "--auto-room applies to --policy auto only"},
           {"sweep --model resnet-tiny --policies auto --auto-room -2 --out x.csv", "--auto-room must be a rehearsal count >= 0"},
           {"sweep --model resnet-tiny --policies auto --auto-window -1 --out x.csv", "--auto-window must be a rehearsal count >= 0"},
           {"train --model resnet-tiny --policy capuchin --auto-lp 2", "--auto-lp applies to --policy auto only"},
           {"sweep --model resnet-tiny --policies auto --auto-lp -1 --out x.csv", "--auto-lp must be a rehearsal count >= 0"},
           {"train --model resnet-tiny --policy dtr --auto-ilp 1", "--auto-ilp applies to --policy auto only"},
           {"train --model resnet-tiny --policy auto --auto-ilp 99", "--auto-ilp must be seconds in [0, 60]"},
           {"train --model resnet-tiny --policy dtr --auto-seconds 1", "--auto-seconds applies to --policy auto only"},
           {"train --model resnet-tiny --policy auto --auto-seconds 0", "--auto-seconds must be seconds in (0, 600]"},
           {"sweep --model resnet-tiny --policies auto --auto-seconds 700 --out x.csv", "--auto-seconds must be seconds in (0, 600]"},
           {"sweep --model resnet-tiny --policies auto --auto-ilp -1 --out x.csv", "--auto-ilp must be seconds in [0, 60]"},
           {"replay --trace dtr:lstm --gpu p100-16g --policy dtr --auto-ilp 1", "--auto-ilp applies to --policy auto only"},
           {"train --model resnet-tiny --policy auto --auto-lp-model exact", "--auto-lp-model must be bound, in-flight, both or compress, got 'exact'"},
           {"train --model resnet-tiny --policy dtr --auto-lp-model in-flight", "--auto-lp-model applies to --policy auto only"},
           {"train --model resnet-tiny --policy auto --auto-clock cpu", "--auto-clock must be wall or rehearsals, got 'cpu'"},
           {"train --model resnet-tiny --policy dtr --auto-clock rehearsals", "--auto-clock applies to --policy auto only"},
           {"train --model resnet-tiny --policy auto --auto-wall-cap -1", "--auto-wall-cap must be seconds in [0, 600]"},
           {"train --model resnet-tiny --policy lru --auto-wall-cap 5", "--auto-wall-cap applies to --policy auto only"},
           {"train --model resnet-tiny --policy auto --auto-replay-guard maybe", "--auto-replay-guard must be on or off, got 'maybe'"},
           {"train --model resnet-tiny --policy lru --auto-replay-guard off", "--auto-replay-guard applies to --policy auto only"},
           {"train --model resnet-tiny --policy auto --auto-codec-rate guessed", "--auto-codec-rate must be measured or modelled, got 'guessed'"},
           {"train --model resnet-tiny --policy lru --auto-codec-rate modelled", "--auto-codec-rate applies to --policy auto only"},
           {"train --model resnet-tiny --policy auto --auto-copy-cost free", "--auto-copy-cost must be queued or bytes, got 'free'"},
           {"train --model resnet-tiny --policy lru --auto-copy-cost bytes", "--auto-copy-cost applies to --policy auto only"},
           {"train --model resnet-tiny --policy auto --auto-candidates capuchin,bogus", "--auto-candidates: auto: unknown candidate 'bogus'; accepted: capuchin"},
           {"train --model resnet-tiny --policy dtr --auto-candidates dtr", "--auto-candidates applies to --policy auto only"},
           {"replay --trace dtr:unet --gpu p100-16g --policy dtr --auto-wall-cap 5", "--auto-wall-cap applies to --policy auto only"},
           {"sweep --model resnet-tiny --policies auto --auto-clock fast --out x.csv", "--auto-clock must be wall or rehearsals"},
           {"replay --trace dtr:lstm --gpu p100-16g --policy dtr --auto-clock wall", "--auto-clock applies to --policy auto only"},
           {"replay --trace dtr:lstm --gpu p100-16g --policy auto --auto-clock x", "--auto-clock must be wall or rehearsals"},
           {"sweep --model resnet-tiny --policies auto --auto-lp-model x --out x.csv", "--auto-lp-model must be bound, in-flight, both or compress"},
           {"replay --trace dtr:lstm --gpu p100-16g --policy dtr --auto-lp-model in-flight", "--auto-lp-model applies to --policy auto only"},
           {"train", "--model"},
           {"fly", "fly"},
       }) {
    Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
  }
}

TEST(Cli, OutOfMemoryIsAClearErrorAndWritesNoReport) {
  const std::string report = temp_path("oom.json");
  Result r = run("train --model resnet-tiny --iters 2 --budget 256KiB --policy none --report " + report);
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("out of device memory: requested"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("budget"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(report));
  EXPECT_FALSE(std::filesystem::exists(report + ".tmp"));
}

// The OOM message names the free bytes, the largest free block and the fragmentation they imply.
TEST(Cli, OutOfMemoryNamesTheFragmentation) {
  Result r = run("train --model vgg-tiny --policy lru --budget 600KiB --iters 2 --quiet");
  ASSERT_EQ(r.code, 3) << r.output;
  std::smatch m;
  const std::regex clause(R"(free ([0-9.]+) (B|KiB|MiB|GiB), largest free block ([0-9.]+) (B|KiB|MiB|GiB) \(fragmentation ([0-9]+)%\))");
  ASSERT_TRUE(std::regex_search(r.output, m, clause)) << r.output;
  auto bytes = [](const std::string& v, const std::string& unit) {
    const double scale = unit == "GiB" ? 1 << 30 : unit == "MiB" ? 1 << 20 : unit == "KiB" ? 1 << 10 : 1;
    return std::stod(v) * scale;
  };
  const double free = bytes(m[1], m[2]), largest = bytes(m[3], m[4]);
  ASSERT_GT(free, 0);
  EXPECT_LE(largest, free);
  EXPECT_NEAR(std::stoi(m[5]), 100 * (1 - largest / free), 1.0) << r.output;
}

TEST(Cli, CudaWithoutCudaSaysWhy) {
  Result r = run("train --model resnet-tiny --iters 1 --backend cuda");
#ifndef VTENSOR_HAVE_CUDA
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("built without CUDA"), std::string::npos) << r.output;
#endif
}

// The cuda backend is a library of its own, loaded only for --backend cuda (cuda_module.cpp): a
// cpu run loads none of the CUDA libraries. With a driver present (the toolkit's stub driver,
// which finds no device) a cuda run loads that library, whose own device check then answers.
TEST(Cli, CudaLibrariesLoadOnlyForTheCudaBackend) {
  using Env = vtensor::test::ScopedEnv;
  {
    Env debug("LD_DEBUG", "files");  // the loader lists every library it opens
    Result r = run("train --model mlp-tiny --iters 1 --backend cpu --quiet");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("file=libopenblas"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("libcudart"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("libvtensor_cuda"), std::string::npos) << r.output;
  }
#if defined(VTENSOR_HAVE_CUDA) && defined(VTENSOR_CUDA_STUB_DRIVER)
  const std::filesystem::path dir = temp_path("stub_driver");
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / "libcuda.so.1");
  std::filesystem::create_symlink(VTENSOR_CUDA_STUB_DRIVER, dir / "libcuda.so.1");
  Env path("LD_LIBRARY_PATH", dir.string());
  Env debug("LD_DEBUG", "files");
  Result r = run("train --model mlp-tiny --iters 1 --backend cuda");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("libvtensor_cuda.so"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no CUDA device is visible (cudaGetDeviceCount found none)"), std::string::npos) << r.output;
#endif
}

// --auto-ilp's solver (lp.cpp, COIN-OR Cbc): silent unless VTENSOR_CBC_LOG=1, and always without
// Cbc's preprocessing, whose postProcess crashed when the time limit stopped it at the wrong
// moment. mlp-tiny at half its peak on sim leaves 4 gaps to decide; Cbc solves them in ms.
TEST(Cli, CbcRunsWithoutPreprocessingAndLogsOnlyWhenAsked) {
  const std::string cmd = "train --model mlp-tiny --backend sim --gpu p100-16g --policy auto --budget 57856B --iters 2 "
                          "--auto-ilp 5 --quiet";
  const Result quiet = run(cmd);
  ASSERT_EQ(quiet.code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("CBC"), std::string::npos) << quiet.output;
  vtensor::test::ScopedEnv log("VTENSOR_CBC_LOG", "1");
  const Result r = run(cmd);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("CBC MILP Solver"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("-preprocess off"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Result - Optimal solution found"), std::string::npos) << r.output;
}

TEST(Cli, TraceIsWrittenAsJsonLines) {
  const std::string trace = temp_path("trace.jsonl");
  Result r = run("train --model mlp-tiny --iters 2 --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(trace);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(nlohmann::json::parse(line)["type"], "graph");
  size_t accesses = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["type"], "access");
    ++accesses;
  }
  EXPECT_GT(accesses, 0u);
  std::filesystem::remove(trace);
}

TEST(Cli, PlannedAllocatorReportsArenaAndLowerBound) {
  const std::string report = temp_path("planned.json");
  Result r = run("train --model mlp-tiny --iters 3 --allocator planned --planner best --report " + report);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  const auto& a = j["allocator_report"];
  EXPECT_EQ(a["allocator"], "planned");
  EXPECT_EQ(j["config"]["planner"], "best");
  EXPECT_GT(a["lower_bound_bytes"].get<size_t>(), 0u);
  EXPECT_GE(a["arena_over_lower_bound"].get<double>(), 1.0);
  EXPECT_GE(a["caching"]["arena_over_lower_bound"].get<double>(), 1.0);
  std::filesystem::remove(report);
}

}  // namespace
