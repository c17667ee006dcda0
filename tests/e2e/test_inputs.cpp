// Every reader the command has (vtensor/core/input.h, and the safetensors reader) on inputs made to hurt it: nested 10^5
// deep, endless (/dev/zero), a folder, a number out of range. Each is bad input: exit 2 naming
// the file, in bounded memory and time, never a crash or an internal error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/cli.h"

namespace fs = std::filesystem;
using vtensor::test::run_cli;
using vtensor::test::temp_path;

TEST(Inputs, EveryReaderRefusesHostileInputWithExitTwo) {
  const fs::path d = temp_path("inputs", "dir");
  fs::remove_all(d);
  fs::create_directories(d);
  const std::string deep = (d / "deep.json").string(), big = (d / "big.json").string(), folder = (d / "folder").string();
  std::ofstream(deep) << std::string(100000, '[') << std::string(100000, ']') << "\n";
  std::ofstream(big) << "{\"format\": \"vtensor-densities-1\", \"tensors\": {\"a\": {\"elements\": 1e400, \"nonzeros\": 1}}}\n";
  fs::create_directories(folder);
  // (the reader's flag, the command with X where the input goes)
  const std::vector<std::pair<std::string, std::string>> readers = {
      {"view", "view X -o " + (d / "p.html").string()},
      {"--auto-plan", "train --model resnet-tiny --policy auto --budget 1MiB --iters 2 --quiet --auto-plan X"},
      {"--gpu-file", "train --model resnet-tiny --backend sim --gpu-file X --gpu p100-16g --iters 1 --quiet"},
      {"--densities", "train --model resnet-tiny --backend sim --gpu p100-16g --policy compress --iters 1 --quiet --densities X"},
      {"replay --trace", "replay --trace X --gpu p100-16g --quiet"},
      {"--init", "train --model mlp-tiny --iters 1 --quiet --init X"},
      {"sweep --trace", "sweep --trace X --gpu p100-16g --policies none --budgets 100% --out " + (d / "s.csv").string()},
  };
  for (const auto& [flag, cmd] : readers)
    for (const std::string& input : {deep, std::string("/dev/zero"), folder, big}) {
      SCOPED_TRACE(flag + " " + input);
      std::string c = cmd;
      c.replace(c.find('X'), 1, input);
      const auto r = run_cli(c);
      EXPECT_EQ(r.code, 2) << r.output;
      EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
      EXPECT_FALSE(fs::exists(d / "p.html") || fs::exists(d / "s.csv")) << r.output;
    }
  fs::remove_all(d);
}

// A count in a report or sweep (batch, byte and op counts) that no integer holds is a malformed
// report, not an undefined cast: the view fuzz target found a batch of 4.6e20.
TEST(Inputs, ViewRefusesACountNoIntegerHolds) {
  const fs::path d = temp_path("inputs-counts", "dir");
  fs::remove_all(d);
  fs::create_directories(d);
  const std::string row = R"({"policy": "none", "model": "mlp-tiny", "budget": "50%", "budget_bytes": 58368,
                              "status": "ok", "overhead": 1.0, "unmanaged_peak_bytes": 116480, "batch": )";
  for (const std::string& batch : {"4.61169e+20", "-1", "1e10"}) {
    SCOPED_TRACE(batch);
    const std::string in = (d / "s.json").string(), out = (d / "s.html").string();
    std::ofstream(in) << "[" << row << batch << "}]\n";
    const auto r = run_cli("view " + in + " -o " + out);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("'batch' is"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out));
  }
  std::ofstream(d / "s.json") << "[" << row << "16}]\n";
  EXPECT_EQ(run_cli("view " + (d / "s.json").string() + " -o " + (d / "s.html").string()).code, 0);
  fs::remove_all(d);
}
