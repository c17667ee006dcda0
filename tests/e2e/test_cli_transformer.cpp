// The vtensor command with transformers: --seq, --optimizer, and bad input (exit 2).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/cli.h"

namespace {

using vtensor::test::CliResult;
using vtensor::test::run_cli;

TEST(CliTransformer, SeqAndAdamwReachTheReport) {
  const std::string report =
      (std::filesystem::temp_directory_path() / ("vtensor_tfm_" + std::to_string(getpid()) + ".json")).string();
  CliResult r = run_cli("train --model gpt-tiny --seq 16 --batch 4 --optimizer adamw --weight-decay 0.01 --iters 2 --report " +
                        report);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("seq 16"), std::string::npos) << r.output;
  std::ifstream in(report);
  ASSERT_TRUE(in.good());
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["config"]["optimizer"], "adamw");
  EXPECT_FLOAT_EQ(j["config"]["lr"].get<float>(), 1e-3f) << "Adam's default rate when --lr is not given";
  EXPECT_EQ(j["config"]["image_size"], 16);
  EXPECT_FLOAT_EQ(j["config"]["weight_decay"].get<float>(), 0.01f);
  std::filesystem::remove(report);
}

TEST(CliTransformer, BadOptimizerAndWidthExitTwo) {
  CliResult r = run_cli("train --model gpt-tiny --optimizer rmsprop --iters 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("sgd, adam, adamw"), std::string::npos) << r.output;
  r = run_cli("train --model bert-tiny --width 62 --iters 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--width"), std::string::npos) << r.output;
}

// maxbatch, sweep and costs take --seq and --optimizer: Adam's second state and a longer sequence
// both leave room for fewer samples; a view costs nothing in the cost model.
TEST(CliTransformer, ExperimentsTakeSeqAndOptimizer) {
  auto max_batch = [](const std::string& args) {
    CliResult r = run_cli("maxbatch --model gpt-tiny --gpu p100-16g --budget 8MiB " + args);
    EXPECT_EQ(r.code, 0) << r.output;
    const size_t at = r.output.find("max batch ");
    return at == std::string::npos ? -1 : std::stoi(r.output.substr(at + 10));
  };
  const int sgd = max_batch("--optimizer sgd"), adam = max_batch("--optimizer adam");
  EXPECT_GT(adam, 0);
  EXPECT_LT(adam, sgd);
  EXPECT_GT(max_batch("--optimizer adam --seq 16"), adam);
  CliResult bad = run_cli("maxbatch --model gpt-tiny --gpu p100-16g --optimizer rmsprop");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("sgd, adam, adamw"), std::string::npos) << bad.output;

  CliResult c = run_cli("costs --model gpt-tiny --gpu v100-32g --seq 16 --optimizer adam");
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find(",adam,"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find(",sgd_momentum,"), std::string::npos) << c.output;
  int views = 0;
  for (size_t at = c.output.find(",reshape,"); at != std::string::npos; at = c.output.find(",reshape,", at + 1)) {
    ++views;
    const std::string row = c.output.substr(at, c.output.find('\n', at) - at);
    EXPECT_NE(row.find(",0.000000,none"), std::string::npos) << row;
  }
  EXPECT_GT(views, 0);
}

}  // namespace
