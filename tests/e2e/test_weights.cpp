// train --save / --init: the parameters and buffers as a safetensors file, written whole and read
// back bit for bit, refused by name where they do not fit the model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/cli.h"
#include "vtensor/train/safetensors.h"
#include "vtensor/train/trainer.h"

using namespace vtensor;
using vtensor::test::run_cli;
using vtensor::test::temp_path;

namespace {

TrainConfig tiny(const std::string& model) {
  TrainConfig c;
  c.model.name = model;
  c.iters = 3;
  return c;
}

}  // namespace

TEST(Weights, SavedThenInitialisedFromIsBitForBit) {
  for (const std::string model : {"mlp-tiny", "resnet-tiny"}) {
    SCOPED_TRACE(model);
    const std::string path = temp_path("weights", model + ".safetensors");
    TrainConfig c = tiny(model);
    c.save_path = path;
    Trainer a(c);
    a.run();
    const TensorFile f = read_safetensors(path);
    size_t params = 0;
    for (const auto& t : a.graph().tensors()) {
      if (t.kind != TensorKind::kParam && t.kind != TensorKind::kBuffer) continue;
      ASSERT_TRUE(f.count(t.name)) << t.name;
      EXPECT_EQ(f.at(t.name).shape, t.shape.dims()) << t.name;
      EXPECT_EQ(f.at(t.name).values, a.read(t.id)) << t.name;  // the final values, bit for bit
      params += t.kind == TensorKind::kParam;
    }
    EXPECT_GT(params, 0u);
    TrainConfig d = tiny(model);
    d.init_path = path;
    Trainer b(d);  // before any iteration: exactly the file's values
    for (const auto& t : b.graph().tensors())
      if (t.kind == TensorKind::kParam || t.kind == TensorKind::kBuffer) EXPECT_EQ(b.read(t.id), f.at(t.name).values) << t.name;
    std::filesystem::remove(path);
  }
}

TEST(Weights, AFileThatDoesNotFitTheModelIsRefusedByName) {
  const std::string path = temp_path("weights", "mlp.safetensors"), bad = temp_path("weights", "bad.safetensors");
  ASSERT_EQ(run_cli("train --model mlp-tiny --iters 1 --quiet --save " + path).code, 0);
  auto r = run_cli("train --model resnet-tiny --iters 1 --quiet --init " + path);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("parameters of model resnet-tiny are not in the file"), std::string::npos) << r.output;
  TensorFile f = read_safetensors(path);
  f.begin()->second.shape.push_back(1);  // a shape the model does not have (the same bytes)
  write_safetensors(f, bad);
  r = run_cli("train --model mlp-tiny --iters 1 --quiet --init " + bad);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("tensor '" + f.begin()->first + "' has shape"), std::string::npos) << r.output;
  std::ofstream(bad, std::ios::binary) << std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
  r = run_cli("train --model mlp-tiny --iters 1 --quiet --init " + bad);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("does not fit the file"), std::string::npos) << r.output;
  r = run_cli("train --model mlp-tiny --backend sim --gpu p100-16g --iters 1 --quiet --save " + bad);
  EXPECT_EQ(r.code, 2) << r.output;
  r = run_cli("train --model mlp-tiny --iters 1 --quiet --init " + path + " --save " + path);
  EXPECT_EQ(r.code, 2) << r.output;  // the output over its own input
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

// --save-dir / --resume: a run killed with SIGKILL at any point and resumed from its last saved
// state ends with the weights, optimizer state and losses of the run that was never stopped, under
// none and under a policy that swaps and recomputes (lru-recompute at a budget below the peak).
TEST(Weights, AKilledRunResumedEndsBitIdenticalToOneNeverStopped) {
  const auto losses = [](const std::string& report) {
    std::ifstream in(report);
    const nlohmann::json j = nlohmann::json::parse(in);
    std::map<int, float> out;
    for (const auto& it : j["iterations"]) out[it["iteration"].get<int>()] = it["loss"].get<float>();
    return out;
  };
  for (const std::string policy : {"none", "lru-recompute --budget 2MiB"}) {
    SCOPED_TRACE(policy);
    const std::string args = "train --model resnet-tiny --optimizer adam --iters 40 --quiet --policy " + policy;
    const std::string ref_dir = temp_path("resume", "ref");
    std::filesystem::remove_all(ref_dir);
    std::filesystem::create_directories(ref_dir);
    ASSERT_EQ(run_cli(args + " --save-dir " + ref_dir + " --report " + ref_dir + "/r.json").code, 0);
    const TensorFile want = read_safetensors(ref_dir + "/state.safetensors", "--resume");
    const auto want_losses = losses(ref_dir + "/r.json");
    for (const char* delay : {"0.2", "0.5", "0.9"}) {
      SCOPED_TRACE(delay);
      const std::string dir = temp_path("resume", std::string("run") + delay);
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      const std::string kill = "bash -c '" + std::string(VTENSOR_BINARY) + " " + args + " --save-dir " + dir +
                               " --save-every 3 >/dev/null 2>&1 & p=$!; sleep " + delay +
                               "; kill -KILL $p 2>/dev/null; wait $p; echo rc=$?'";
      FILE* p = popen(kill.c_str(), "r");
      std::string out;
      char buf[256];
      while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
      pclose(p);
      if (out.find("rc=0") == std::string::npos) {  // killed: go on from the last state, or start again
        const bool saved = std::filesystem::exists(dir + "/state.safetensors");
        const auto r = run_cli(args + (saved ? " --resume " + dir : "") + " --save-dir " + dir + " --report " + dir + "/r.json");
        ASSERT_EQ(r.code, 0) << r.output;
        for (const auto& [it, loss] : losses(dir + "/r.json")) EXPECT_EQ(loss, want_losses.at(it)) << "iteration " << it;
      }
      const TensorFile got = read_safetensors(dir + "/state.safetensors", "--resume");
      ASSERT_EQ(got.size(), want.size());
      for (const auto& [name, t] : want) EXPECT_EQ(got.at(name).values, t.values) << name;  // weights, moments, buffers
      std::filesystem::remove_all(dir);
    }
    std::filesystem::remove_all(ref_dir);
  }
}
