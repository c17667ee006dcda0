// train --save / --init: the parameters and buffers as a safetensors file, written whole and read
// back bit for bit, refused by name where they do not fit the model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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
