// End-to-end: FreeLunch's compress, compress+swap and compress+capuchin train tiny models under a budget,
// bit-identical to `none` in losses, weights, running statistics and optimizer state, with real
// compressions (bytes really packed on the cpu backend) and the peak within the budget; the
// densities a cpu run records size the compressed tensors of a sim run; the ablation switches
// change what they should; bad input exits 2 naming what is accepted.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "vtensor/memory/allocator.h"
#include "vtensor/train/densities.h"
#include "vtensor/train/trainer.h"

#include "tests/support/cli.h"
#include "tests/support/training.h"

using namespace vtensor;
using namespace vtensor::test;

namespace {

TrainConfig config(const std::string& model, const std::string& policy, size_t budget, int iters) {
  TrainConfig cfg;
  cfg.model.name = model;
  cfg.policy = policy;
  cfg.budget = budget;
  cfg.iters = iters;
  if (model.rfind("gpt", 0) == 0) cfg.optimizer.kind = OptimizerKind::kAdam, cfg.optimizer.lr = 1e-3f;
  return cfg;
}

uint64_t total(const RunOutcome& r, uint64_t MemoryCounters::*field) {
  uint64_t n = 0;
  for (const auto& s : r.iters) n += s.counters.*field;
  return n;
}

// The smallest fraction of the unmanaged peak (in steps of 5%) at which both policies train
// each model here: below it an op's own inputs and outputs no longer fit (vgg-tiny's first
// batch-norm backward holds 512 KiB locked; test_capuchin.cpp says the same of every policy).
double floor_fraction(const std::string& model) {
  if (model == "vgg-tiny") return 0.62;
  if (model == "gpt-tiny") return 0.25;
  return 0.35;
}

struct Variant {
  const char* policy;
  bool persistent_buffers;
};

class Compress : public ::testing::TestWithParam<std::string> {};

TEST_P(Compress, BitIdenticalToNoneAtTheSmallestBudget) {
  const std::string model = GetParam();
  const int iters = 4;
  const RunOutcome base = run_training(config(model, "none", 0, iters));
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(base.peak) * floor_fraction(model)));
  uint64_t compressed = 0, swapped = 0;
  for (const Variant v : {Variant{"compress", true}, Variant{"compress", false}, Variant{"compress+swap", true},
                          Variant{"compress+capuchin", true}}) {
    SCOPED_TRACE(std::string(v.policy) + (v.persistent_buffers ? "" : " --no-persistent-buffers"));
    TrainConfig cfg = config(model, v.policy, budget, iters);
    if (!v.persistent_buffers) cfg.policy_options.set("no-persistent-buffers", "true");
    const RunOutcome r = run_training(cfg);
    expect_bit_identical(base, r);
    for (const auto& s : r.iters) EXPECT_LE(s.peak_allocated, budget);
    compressed += total(r, &MemoryCounters::compressed_bytes);
    swapped += total(r, &MemoryCounters::swapped_out_bytes);
    for (const auto& s : r.iters) EXPECT_LE(s.counters.compressed_to_bytes, s.counters.compressed_bytes);
  }
  // gpt-tiny has no ReLU (GELU): nothing to compress, the swaps carry it.
  if (model == "gpt-tiny") EXPECT_EQ(compressed, 0u);
  else EXPECT_GT(compressed, 0u);
  EXPECT_GT(swapped, 0u);
}

INSTANTIATE_TEST_SUITE_P(Models, Compress, ::testing::Values("resnet-tiny", "vgg-tiny", "gpt-tiny"));

// Where the compression plan fits the budget, compression takes the place of swaps: the guided
// iterations swap less, on the whole, than the measured (passive LRU) one at the same budget
// (not each one: compressed buffers sit between tensors, and the fragmentation they leave can
// make a later iteration swap as much), and the report has per tensor codec, sizes, times and
// stall. The plan comes from the op times: on cpu those are wall-clock times, so which plan the
// clock gives varies with the load and the build (a sanitizer build runs the ops several times
// slower, not all alike), and the cpu run checks what holds whichever plan it gets: bit-identical
// training within the budget, and a consistent report. The claim itself is checked on sim, whose
// virtual clock makes the plan deterministic, sized by the non-zero counts the cpu run recorded.
TEST(Compress, ReplacesSwapsWhereThePlanFits) {
  const RunOutcome base = run_training(config("resnet-tiny", "none", 0, 4));
  const size_t budget = align_up(size_t{3520} << 10);  // 96% of the unmanaged 3.58 MiB; the plan predicts 3.42 MiB
  ASSERT_LT(budget, base.peak);
  const auto check_report = [](const RunOutcome& r) {
    const nlohmann::json report = nlohmann::json::parse(report_json(r.result));
    if (r.result.compression.empty()) return;
    ASSERT_TRUE(report.contains("compression"));
    for (const auto& t : report["compression"]) {
      EXPECT_TRUE(t["codec"] == "bitmask" || t["codec"] == "sign");
      EXPECT_LT(t["bytes_after"].get<size_t>(), t["bytes_before"].get<size_t>());
      EXPECT_GE(t["compress_ms"].get<double>(), 0.0);
      EXPECT_TRUE(t.contains("stall_ms"));
    }
  };
  const std::string densities = temp_path("compress", "replaces-swaps-densities.json");
  {
    SCOPED_TRACE("cpu");
    TrainConfig cfg = config("resnet-tiny", "compress", budget, 4);
    cfg.densities_out = densities;
    const RunOutcome r = run_training(cfg);
    expect_bit_identical(base, r);
    for (const auto& s : r.iters) EXPECT_LE(s.peak_allocated, budget);
    ASSERT_GT(r.iters[0].counters.swapped_out_bytes, 0u);  // the measured iteration: passive LRU
    EXPECT_EQ(r.iters[0].counters.compressions, 0u);
    check_report(r);
  }
  SCOPED_TRACE("sim");
  TrainConfig cfg = config("resnet-tiny", "compress", budget, 4);
  cfg.backend = "sim";
  cfg.gpu = "p100-16g";
  cfg.densities_path = densities;
  const RunOutcome r = run_training(cfg);
  for (const auto& s : r.iters) EXPECT_LE(s.peak_allocated, budget);
  ASSERT_TRUE(r.result.policy_report.value("predicted_fits", false)) << r.result.policy_summary;
  const uint64_t measured = r.iters[0].counters.swapped_out_bytes;
  ASSERT_GT(measured, 0u);
  uint64_t guided = 0;
  for (size_t i = 1; i < r.iters.size(); ++i) {
    EXPECT_GT(r.iters[i].counters.compressions, 0u) << "iteration " << i;
    guided += r.iters[i].counters.swapped_out_bytes;
  }
  EXPECT_LT(guided, measured * (r.iters.size() - 1)) << "the guided iterations swap no less than the measured one";
  EXPECT_LT(r.iters[1].counters.swapped_out_bytes, measured);
  ASSERT_FALSE(r.result.compression.empty());
  check_report(r);
  EXPECT_NE(format_iteration_line(r.iters.back(), 4).find("compressed"), std::string::npos);
}

// resnet-tiny's last ReLU feeds the global average pool, whose backward reads only dy: the ReLU
// backward is its only later reader, so it is kept as 1 bit per element, and training is still
// bit-identical. With the codecs on the compute stream nothing has to hide behind other ops, so
// the choice does not hang on how fast the cpu's clock runs (a sanitizer build included); on the
// compression stream it does (the gap is short), so that run checks bit-identity and the size
// only where it compresses. On sim the choice is deterministic.
TEST(Compress, SignCodecWhereOnlyTheSignIsRead) {
  const RunOutcome base = run_training(config("resnet-tiny", "none", 0, 3));
  int sign = 0;
  const auto run = [&](int percent, bool on_compute_stream) {
    SCOPED_TRACE(std::to_string(percent) + "%" + (on_compute_stream ? " on the compute stream" : ""));
    TrainConfig cfg = config("resnet-tiny", "compress", align_up(base.peak * static_cast<size_t>(percent) / 100), 3);
    cfg.policy_options.set("codecs", "sign").set("no-persistent-buffers", "true");
    if (on_compute_stream) cfg.policy_options.set("compress-on-compute-stream", "true");
    const RunOutcome r = run_training(cfg);
    expect_bit_identical(base, r);
    int here = 0;
    for (const auto& c : r.result.compression)
      if (c.compressions > 0) {
        EXPECT_EQ(c.codec, Codec::kSign);
        EXPECT_EQ(c.bytes_after, c.bytes_before / 32);
        ++here;
      }
    return here;
  };
  for (int percent : {84, 76}) sign += run(percent, true);
  EXPECT_GT(sign, 0);
  run(84, false);
  TrainConfig sim = config("resnet-tiny", "compress", align_up(size_t{3000} << 10), 3);
  sim.backend = "sim";
  sim.gpu = "p100-16g";
  sim.policy_options.set("codecs", "sign").set("no-persistent-buffers", "true");  // sign: no densities needed
  const RunOutcome r = run_training(sim);
  ASSERT_EQ(r.result.compression.size(), 1u);
  EXPECT_EQ(r.result.compression[0].codec, Codec::kSign);
}

// The densities a cpu run measured size the sim run's compressed tensors: the sim reports, per
// tensor, the bitmask size the recorded non-zero count gives.
TEST(Compress, SimSizesCompressedTensorsByTheCpuDensities) {
  const std::string path = temp_path("compress", "densities.json");
  TrainConfig cpu = config("resnet-tiny", "compress", 0, 2);
  cpu.densities_out = path;
  run_training(cpu);
  const DensityTable d = load_densities(path);
  ASSERT_FALSE(d.tensors.empty());
  TrainConfig sim = config("resnet-tiny", "compress", 0, 3);
  sim.backend = "sim";
  sim.gpu = "p100-16g";
  sim.densities_path = path;
  const RunOutcome base = run_training([&] {
    TrainConfig c = sim;
    c.policy = "none";
    c.densities_path.clear();
    return c;
  }());
  sim.budget = align_up(base.peak * 80 / 100);
  Trainer t(sim);
  const TrainResult r = t.run();
  int checked = 0;
  for (const auto& c : r.compression) {
    if (c.codec != Codec::kBitmask) continue;
    const auto& info = t.graph().tensor(c.id);
    const auto it = d.tensors.find(density_key(info));
    ASSERT_NE(it, d.tensors.end()) << info.name;
    EXPECT_EQ(c.bytes_after, codec_bytes(Codec::kBitmask, it->second.first, it->second.second));
    ++checked;
  }
  EXPECT_GT(checked, 0);
  std::filesystem::remove(path);
}

// FreeLunch's ablation on sim (deterministic): codecs on the compute stream cost compute time;
// without persistent buffers each compression allocates its buffer; without the sliding
// workspace each bitmask compression holds a worst-case workspace.
TEST(Compress, AblationSwitchesChangeWhatTheyShould) {
  const std::string path = temp_path("compress", "ablation_densities.json");
  TrainConfig cpu = config("resnet-tiny", "compress", 0, 1);
  cpu.densities_out = path;
  run_training(cpu);
  auto sim_run = [&](const std::string& ablation) {  // a switch of the compress policies, or none
    TrainConfig c = config("resnet-tiny", "compress", 0, 3);
    c.backend = "sim";
    c.gpu = "p100-16g";
    c.densities_path = path;
    c.budget = align_up(size_t{3600} << 10);  // predicted peak 3.56 MiB unmanaged: a little under
    if (!ablation.empty()) c.policy_options.set(ablation, "true");
    return run_training(c);
  };
  const RunOutcome def = sim_run("");
  ASSERT_GT(def.iters.back().counters.compressions, 0u);
  const RunOutcome on_compute = sim_run("compress-on-compute-stream");
  EXPECT_GT(on_compute.iters.back().time_ms, def.iters.back().time_ms);
  const RunOutcome ns = sim_run("no-sliding-workspace");
  EXPECT_GT(ns.iters.back().counters.compressions, 0u);
  EXPECT_NE(ns.iters.back().peak_allocated, def.iters.back().peak_allocated);
  std::filesystem::remove(path);
}

TEST(CompressCli, BadInputExitsTwoNamingWhatIsAccepted) {
  const std::string report = temp_path("compress", "bad_report.json");
  std::filesystem::remove(report);
  auto r = run_cli("train --model resnet-tiny --policy compress --codecs zstd --iters 1 --report " + report);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown codec 'zstd'; accepted: bitmask, sign"), std::string::npos) << r.output;
  r = run_cli("train --model resnet-tiny --policy capuchin --no-sliding-workspace --iters 1 --report " + report);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--no-sliding-workspace applies to --policy compress, compress+swap or compress+capuchin only"), std::string::npos)
      << r.output;
  r = run_cli("train --model resnet-tiny --policy compress --backend sim --gpu p100-16g --iters 1 --report " + report);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("needs --densities FILE"), std::string::npos) << r.output;
  const std::string bad = temp_path("compress", "bad_densities.json");
  std::ofstream(bad) << "{\"format\": \"vtensor-densities-1\", \"tensors\": {\"x#1\": {\"elements\": 4, \"nonzeros\": 9}}}";
  r = run_cli("train --model resnet-tiny --policy compress --backend sim --gpu p100-16g --iters 1 --densities " + bad +
              " --report " + report);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("accepted: 0 <= nonzeros <= elements"), std::string::npos) << r.output;
  std::ofstream(bad) << "not json";
  r = run_cli("train --model resnet-tiny --policy compress --backend sim --gpu p100-16g --iters 1 --densities " + bad);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("not JSON"), std::string::npos) << r.output;
  std::ofstream(bad) << "{\"format\": \"vtensor-densities-1\", \"tensors\": {\"x#1\": {\"elements\": 4, \"nonzeros\": 2}}}";
  r = run_cli("train --model resnet-tiny --policy compress --backend sim --gpu p100-16g --iters 1 --densities " + bad);
  EXPECT_EQ(r.code, 2) << r.output;  // recorded for another model
  EXPECT_NE(r.output.find("has no entry for tensor"), std::string::npos) << r.output;
  r = run_cli("train --model resnet-tiny --policy compress --densities " + bad + " --iters 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--densities applies to --backend sim only"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(report)) << "a failed run wrote a report";
  std::filesystem::remove(bad);
  // A model without ReLU or max-pool needs no densities on sim.
  r = run_cli("train --model gpt-tiny --policy compress --backend sim --gpu p100-16g --iters 2 --quiet");
  EXPECT_EQ(r.code, 0) << r.output;
}

// Opt-in lossy codecs: the math changes (losses drift from `none`, a little), the report says so,
// and the run's config names the mode. Lossless policies refuse --lossy.
TEST(Compress, LossyCodecsDriftALittleAndSaySo) {
  const int iters = 8;
  const RunOutcome base = run_training(config("resnet-tiny", "none", 0, iters));
  const size_t budget = align_up(base.peak * 35 / 100);
  for (const std::string mode : {"bf16", "fp16", "int8"}) {
    SCOPED_TRACE(mode);
    TrainConfig cfg = config("resnet-tiny", "compress", budget, iters);
    cfg.policy_options.set("lossy", mode);
    const RunOutcome r = run_training(cfg);
    bool lossy_used = false, differs = false;
    for (const auto& c : r.result.compression) lossy_used = lossy_used || c.codec == parse_lossy(mode);
    EXPECT_TRUE(lossy_used);
    for (size_t i = 0; i < r.iters.size(); ++i) {
      differs = differs || std::memcmp(&r.iters[i].loss, &base.iters[i].loss, 4) != 0 || r.params != base.params;
      EXPECT_NEAR(r.iters[i].loss, base.iters[i].loss, 0.01 * std::fabs(base.iters[i].loss)) << "iteration " << i;
    }
    EXPECT_TRUE(differs) << "a lossy codec that changes nothing";
    EXPECT_LE(max_peak(r.iters), budget);
    const nlohmann::json report = nlohmann::json::parse(report_json(r.result));
    EXPECT_EQ(report["config"]["lossy"], mode);
    EXPECT_EQ(report["policy_report"]["lossy"], mode);
  }
  const auto r = run_cli("train --model resnet-tiny --policy capuchin --lossy bf16 --iters 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--lossy applies to --policy compress, compress+swap or compress+capuchin only"), std::string::npos) << r.output;
  const auto u = run_cli("train --model resnet-tiny --policy compress --lossy fp8 --iters 1");
  EXPECT_EQ(u.code, 2) << u.output;
  EXPECT_NE(u.output.find("unknown lossy mode 'fp8'; accepted: bf16, fp16, int8"), std::string::npos) << u.output;
}

TEST(CompressCli, OutOfMemoryNamesRequestedInUseAndBudget) {
  const auto r = run_cli("train --model resnet-tiny --policy compress --budget 200KiB --iters 2");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("out of device memory: requested"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("in use of a 200.00 KiB budget"), std::string::npos) << r.output;
}

}  // namespace
