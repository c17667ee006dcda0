// The sim backend's cost model and its discrete-event streams.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "vtensor/backend/sim/cost_model.h"
#include "vtensor/backend/sim/gpu_specs.h"
#include "vtensor/backend/sim/sim_backend.h"
#include "vtensor/models/models.h"

using namespace vtensor;

namespace {

TEST(GpuSpecs, TableHasThePapersCards) {
  for (const char* n : {"titan-x-12g", "titan-v-12g", "p100-16g", "v100-16g", "v100-32g", "a100-40g", "a100-80g",
                        "h100-80g"}) {
    const GpuSpec& g = find_gpu(n);
    EXPECT_NO_THROW(check_gpu_spec(g, n));
  }
  EXPECT_EQ(find_gpu("p100-16g").memory_bytes, size_t{16} << 30);
  try {
    find_gpu("nope");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("p100-16g"), std::string::npos) << e.what();
  }
}

TEST(GpuSpecs, LoadsAGpuFromJson) {
  const auto path = std::filesystem::temp_directory_path() / ("vtensor_gpu_" + std::to_string(getpid()) + ".json");
  {
    std::ofstream(path) << R"({"name": "test-gpu-8g", "memory": "8GiB", "fp32_tflops": 10, "hbm_gbps": 500, "h2d_gbps": 12})";
  }
  EXPECT_EQ(load_gpu_file(path.string()), std::vector<std::string>{"test-gpu-8g"});
  EXPECT_EQ(find_gpu("test-gpu-8g").memory_bytes, size_t{8} << 30);
  EXPECT_EQ(find_gpu("test-gpu-8g").d2h_gbps, 12);
  {
    std::ofstream(path) << R"({"name": "bad", "memory": "8GiB", "fp32_tflops": -1, "hbm_gbps": 500, "h2d_gbps": 12})";
  }
  try {
    load_gpu_file(path.string());
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp32_tflops"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

// Found by the gpu_file fuzz target (tests/fuzz/gpu_file/found-description-not-a-string.json): a
// non-string description escaped as nlohmann's type_error, so the CLI said "internal error" and
// exited 1 instead of naming the field and exiting 2.
TEST(GpuSpecs, ADescriptionThatIsNotAStringIsBadInput) {
  std::istringstream in(R"({"name": "g", "description": 20.5, "memory": "1GiB", "fp32_tflops": 1, "hbm_gbps": 1, "h2d_gbps": 1})");
  try {
    read_gpu_specs(in, "specs.json");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'description' must be a string"), std::string::npos) << e.what();
  }
}

// A calibrated GPU: "base" takes a GPU's figures, "kind_scale" multiplies the cost model's
// prediction of each named op kind (launch included) and leaves the others alone.
TEST(GpuSpecs, ACalibrationScalesItsKindsOnTopOfItsBase) {
  std::istringstream in(R"({"name": "h100-fit", "base": "h100-80g", "kind_scale": {"conv2d": 1.5, "relu": 0.5}})");
  const std::vector<GpuSpec> specs = read_gpu_specs(in, "fit.json");
  ASSERT_EQ(specs.size(), 1u);
  const GpuSpec& fit = specs[0];
  const GpuSpec& h100 = find_gpu("h100-80g");
  EXPECT_EQ(fit.name, "h100-fit");
  EXPECT_EQ(fit.memory_bytes, h100.memory_bytes);
  EXPECT_EQ(fit.fp32_tflops, h100.fp32_tflops);
  EXPECT_EQ(fit.hbm_gbps, h100.hbm_gbps);
  EXPECT_EQ(fit.h2d_gbps, h100.h2d_gbps);
  EXPECT_EQ(fit.d2h_gbps, h100.d2h_gbps);
  EXPECT_EQ(fit.launch_us, h100.launch_us);
  ModelConfig mc{.name = "resnet50", .batch = 8};
  Graph g = build_model(mc);
  int scaled = 0;
  for (const Op& op : g.ops()) {
    const double want = op.kind == OpKind::kConv2d ? 1.5 : op.kind == OpKind::kRelu ? 0.5 : 1.0;
    scaled += want != 1.0;
    EXPECT_NEAR(predict_op(fit, g, op).total_ms, want * predict_op(h100, g, op).total_ms, 1e-12) << op.name;
  }
  EXPECT_GT(scaled, 0);
  // A field given replaces the base's; d2h follows a new h2d unless given too. A link's measured
  // figures come with link_efficiency 1: a copy then takes bytes / that bandwidth.
  std::istringstream more(R"({"name": "h100-slow-link", "base": "h100-80g", "h2d_gbps": 20, "link_efficiency": 1})");
  const GpuSpec slow = read_gpu_specs(more, "fit.json").at(0);
  EXPECT_EQ(slow.h2d_gbps, 20);
  EXPECT_EQ(slow.d2h_gbps, 20);
  EXPECT_TRUE(slow.kind_scale.empty());
  EXPECT_DOUBLE_EQ(predict_copy_ms(slow, size_t{20} << 20, true), (20 << 20) / 20e9 * 1e3);
  EXPECT_DOUBLE_EQ(predict_copy_ms(h100, size_t{20} << 20, false), (20 << 20) / (63e9 * kLinkEfficiency) * 1e3);
}

TEST(GpuSpecs, ABadCalibrationNamesWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"name": "f", "base": "no-such-gpu"})", "'base': --gpu: unknown GPU 'no-such-gpu'; accepted: titan-x-12g"},
      {R"({"name": "f", "base": 3})", "'base' must be a GPU's name"},
      {R"({"name": "f", "base": "h100-80g", "kind_scale": {"conv3d": 2}})", "unknown op kind 'conv3d'; accepted: data, conv2d"},
      {R"({"name": "f", "base": "h100-80g", "kind_scale": {"conv2d": 0}})", "'kind_scale' of 'conv2d' must be a positive number"},
      {R"({"name": "f", "base": "h100-80g", "kind_scale": {"conv2d": "x"}})", "'kind_scale' of 'conv2d' must be a positive number"},
      {R"({"name": "f", "base": "h100-80g", "kind_scale": [1]})", "'kind_scale' must be an object"},
      {R"({"name": "f", "base": "h100-80g", "link_efficiency": 1.5})", "'link_efficiency' must be in (0, 1]"},
      {R"({"name": "f", "memory": "1GiB", "fp32_tflops": 1, "hbm_gbps": 1})", "missing field 'h2d_gbps'"},
  };
  for (const auto& [text, want] : cases) {
    SCOPED_TRACE(text);
    std::istringstream in(text);
    try {
      read_gpu_specs(in, "fit.json");
      FAIL() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("fit.json"), std::string::npos) << e.what();
    }
  }
}

TEST(CostModel, ConvIsComputeBoundReluIsMemoryBound) {
  ModelConfig mc{.name = "resnet50", .batch = 64};
  Graph g = build_model(mc);
  const GpuSpec& gpu = find_gpu("v100-16g");
  bool saw_conv = false, saw_relu = false;
  for (const Op& op : g.ops()) {
    const OpCost c = predict_op(gpu, g, op);
    EXPECT_GT(c.total_ms, 0.0) << op.name;
    EXPECT_DOUBLE_EQ(c.total_ms, c.launch_ms + std::max(c.compute_ms, c.memory_ms)) << op.name;
    if (op.kind == OpKind::kConv2d && g.tensor(op.inputs[1]).shape[2] == 3) {
      saw_conv = true;
      EXPECT_STREQ(c.bound(), "compute") << op.name;
      EXPECT_DOUBLE_EQ(c.compute_ms, op.flops / (gpu.fp32_tflops * 1e12 * efficiency(op.kind).compute) * 1e3);
    }
    if (op.kind == OpKind::kRelu) {
      saw_relu = true;
      EXPECT_STREQ(c.bound(), "memory") << op.name;
      EXPECT_DOUBLE_EQ(c.bytes, 2.0 * static_cast<double>(g.tensor(op.inputs[0]).bytes()));
    }
  }
  EXPECT_TRUE(saw_conv && saw_relu);
  // A faster card predicts less time for the same op.
  const Op& conv = g.op(1);
  EXPECT_LT(predict_op(find_gpu("a100-40g"), g, conv).total_ms, predict_op(find_gpu("titan-x-12g"), g, conv).total_ms);
}

// vdnn-dyn's memory-lean conv algorithm costs time on the sim backend: slower compute for conv
// ops, nothing else changes.
TEST(CostModel, LeanConvAlgorithmIsSlowerOnlyForConvs) {
  ModelConfig mc{.name = "resnet50", .batch = 64};
  Graph g = build_model(mc);
  build_backward(g, OptimizerConfig{});
  const GpuSpec& gpu = find_gpu("v100-16g");
  int convs = 0;
  for (const Op& op : g.ops()) {
    const OpCost fast = predict_op(gpu, g, op, ConvAlgo::kFast), lean = predict_op(gpu, g, op, ConvAlgo::kLean);
    const bool conv = op.kind == OpKind::kConv2d || op.kind == OpKind::kConv2dBwdData || op.kind == OpKind::kConv2dBwdFilter;
    if (!conv) {
      EXPECT_DOUBLE_EQ(lean.total_ms, fast.total_ms) << op.name;
      continue;
    }
    ++convs;
    EXPECT_DOUBLE_EQ(lean.compute_ms, fast.compute_ms / kLeanConvSpeed) << op.name;
    EXPECT_GE(lean.total_ms, fast.total_ms) << op.name;
  }
  EXPECT_GT(convs, 100);  // forward, backward-data and backward-filter of ResNet-50's 53 convs
}

// Transformer kinds: views are free, a gather reads its rows (not the table), attention's bmm is
// a GEMM, and layer norm / softmax / GELU / transpose / Adam are costed by the bytes they move.
TEST(CostModel, TransformerOpsAreCostedByWhatTheyMove) {
  const GpuSpec& gpu = find_gpu("v100-32g");
  auto graph = [](int vocab) {
    Graph g = build_model({.name = "gpt2-small", .batch = 1, .image_size = 1024, .classes = vocab});
    build_backward(g, {.kind = OptimizerKind::kAdam});
    return g;
  };
  Graph g = graph(50257);
  std::map<OpKind, int> seen;
  for (const Op& op : g.ops()) {
    const OpCost c = predict_op(gpu, g, op);
    ++seen[op.kind];
    if (op.kind == OpKind::kReshape) {
      EXPECT_EQ(c.total_ms, 0.0) << op.name;
      EXPECT_EQ(c.bytes, 0.0) << op.name;
      EXPECT_STREQ(c.bound(), "none") << op.name;
      continue;
    }
    EXPECT_GT(c.total_ms, c.launch_ms) << op.name;
    switch (op.kind) {
      case OpKind::kEmbedding:
        EXPECT_DOUBLE_EQ(c.bytes, 2.0 * static_cast<double>(g.tensor(op.outputs[0]).bytes()) +
                                      (op.inputs.size() > 1 ? static_cast<double>(g.tensor(op.inputs[1]).bytes()) : 0.0))
            << op.name;
        break;
      case OpKind::kBatchedMatmul:
      case OpKind::kBatchedMatmulBwd:
        EXPECT_EQ(efficiency(op.kind).compute, efficiency(OpKind::kLinear).compute);
        EXPECT_STREQ(c.bound(), "compute") << op.name;  // head dim 64, seq 1024
        break;
      case OpKind::kAdam: {
        const double w = static_cast<double>(g.tensor(op.inputs[0]).bytes());
        EXPECT_DOUBLE_EQ(c.bytes, 7.0 * w) << op.name;  // w, m, v read and written; g read
        EXPECT_STREQ(c.bound(), "memory") << op.name;
        break;
      }
      case OpKind::kLayerNorm:
      case OpKind::kLayerNormBwd:
      case OpKind::kSoftmax:
      case OpKind::kSoftmaxBwd:
      case OpKind::kGelu:
      case OpKind::kGeluBwd:
      case OpKind::kTranspose:
      case OpKind::kEmbeddingBwd:
        EXPECT_STREQ(c.bound(), "memory") << op.name;
        break;
      default: break;
    }
  }
  for (OpKind k : {OpKind::kEmbedding, OpKind::kEmbeddingBwd, OpKind::kLayerNorm, OpKind::kLayerNormBwd, OpKind::kGelu,
                   OpKind::kGeluBwd, OpKind::kBatchedMatmul, OpKind::kBatchedMatmulBwd, OpKind::kSoftmax,
                   OpKind::kSoftmaxBwd, OpKind::kReshape, OpKind::kTranspose, OpKind::kAdam})
    EXPECT_GT(seen[k], 0) << to_string(k);
  // The token gather costs the same whatever the vocabulary (the table is not read whole).
  Graph small = graph(1000);
  auto first_embedding = [&](const Graph& gr) {
    for (const Op& op : gr.ops())
      if (op.kind == OpKind::kEmbedding) return predict_op(gpu, gr, op).total_ms;
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(first_embedding(g), first_embedding(small));
}

TEST(SimStreams, ALatePrefetchStallsCompute) {
  SimBackend b({.arena_bytes = 1 << 20, .gpu = "p100-16g"});
  const size_t bytes = size_t{64} << 20;
  const double copy_ms = predict_copy_ms(b.gpu(), bytes, true);
  void* host = b.host_alloc(bytes);
  EXPECT_NE(host, b.host_alloc(bytes));  // distinct fake buffers
  b.copy_async(Stream::kH2D, b.arena_base(), host, bytes);
  Event e = b.record(Stream::kH2D);
  EXPECT_DOUBLE_EQ(b.now_ms(), 0.0);  // the copy runs beside compute
  EXPECT_FALSE(e->query());
  b.stream_wait(Stream::kCompute, e);  // the host waits: compute stalls until the copy is done
  EXPECT_DOUBLE_EQ(b.now_ms(), copy_ms);
  EXPECT_TRUE(e->query());
  // A second copy in the same direction starts after the first; the other direction is free.
  b.copy_async(Stream::kH2D, b.arena_base(), host, bytes);
  b.copy_async(Stream::kD2H, host, b.arena_base(), bytes);
  EXPECT_DOUBLE_EQ(b.clock(Stream::kH2D), 2 * copy_ms);
  EXPECT_DOUBLE_EQ(b.clock(Stream::kD2H), copy_ms + predict_copy_ms(b.gpu(), bytes, false));
  b.synchronize();
  EXPECT_DOUBLE_EQ(b.now_ms(), 2 * copy_ms);
  EXPECT_THROW(b.copy_to_host(host, b.arena_base(), 4), std::logic_error);
}

TEST(SimStreams, AnEarlyPrefetchIsHidden) {
  SimBackend b({.arena_bytes = 1 << 20, .gpu = "p100-16g"});
  ModelConfig mc{.name = "resnet50", .batch = 64};
  Graph g = build_model(mc);
  const size_t bytes = size_t{1} << 20;
  b.copy_async(Stream::kH2D, b.arena_base(), b.host_alloc(bytes), bytes);
  Event e = b.record(Stream::kH2D);
  double ops_ms = 0;
  for (int i = 1; i < 4; ++i) {
    b.launch(g, g.op(i), {});
    ops_ms += predict_op(b.gpu(), g, g.op(i)).total_ms;
  }
  ASSERT_GT(ops_ms, predict_copy_ms(b.gpu(), bytes, true));
  EXPECT_TRUE(e->query());
  b.stream_wait(Stream::kCompute, e);
  EXPECT_DOUBLE_EQ(b.now_ms(), ops_ms);  // no stall
}

}  // namespace

// A compaction's moves as the cuda backend issues them (Backend::move_steps): blocks under 1 MiB
// grouped through the staging buffer, up to 64 blocks and 16 MiB a chunk, a larger block on its
// own; nothing for empty or in-place moves.
TEST(DeviceMoves, SmallBlocksAreGroupedLargeOnesMoveAlone) {
  char* base = reinterpret_cast<char*>(uintptr_t{1} << 40);
  std::vector<Backend::DeviceMove> moves;
  for (size_t i = 0; i < 70; ++i) moves.push_back({base + i * 8192, base + i * 8192 + 4096, 4096});
  moves.push_back({base, base, 4096});                                            // in place
  moves.push_back({base + (size_t{1} << 30), base + (size_t{2} << 30), size_t{1} << 20});  // large
  for (size_t i = 0; i < 20; ++i) moves.push_back({base + i * (size_t{1} << 20), base + (size_t{3} << 30), size_t{960} << 10});
  moves.push_back({base, base + 4096, 0});  // empty
  const auto steps = Backend::move_steps(moves);
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_TRUE(steps[0].staged);
  EXPECT_EQ(steps[0].first, 0u);
  EXPECT_EQ(steps[0].count, Backend::kMoveBatchSegments);
  EXPECT_EQ(steps[1].first, 64u);
  EXPECT_EQ(steps[1].count, 6u);
  EXPECT_FALSE(steps[2].staged);
  EXPECT_EQ(steps[2].first, 71u);
  EXPECT_TRUE(steps[3].staged && steps[4].staged);  // 17 x 960 KiB fit 16 MiB of staging, an 18th does not
  EXPECT_EQ(steps[3].count, 17u);
  EXPECT_EQ(steps[4].count, 3u);
  // One move: a copy per call, chunks of the distance, or twice through the staging buffer.
  EXPECT_EQ(Backend::move_copies(size_t{8} << 20, size_t{8} << 20).calls, 1u);
  EXPECT_EQ(Backend::move_copies(size_t{8} << 20, size_t{2} << 20).calls, 4u);
  const auto staged = Backend::move_copies(size_t{40} << 20, 4096);
  EXPECT_EQ(staged.calls, 6u);
  EXPECT_EQ(staged.bytes, size_t{80} << 20);
}

// The sim charges a move a launch per copy call and the bytes copied, and a batch of small moves
// two launches per chunk: 64 blocks of 4 KiB cost what one does on its own, not 64 launches.
TEST(DeviceMoves, TheSimChargesCallsAndBytes) {
  SimBackend b({.arena_bytes = size_t{1} << 30, .gpu = "h100-80g"});
  char* base = static_cast<char*>(b.arena_base());
  const GpuSpec& g = b.gpu();
  b.move_device(base, base + 4096, 4096);
  EXPECT_DOUBLE_EQ(b.now_ms(), predict_move_ms(g, 4096));
  EXPECT_GT(predict_move_ms(g, 4096), g.launch_us * 1e-3);
  double t = b.now_ms();
  b.move_device(base, base + 256, size_t{1} << 20);  // overlapping by 256 B: staged
  EXPECT_DOUBLE_EQ(b.now_ms() - t, 2 * g.launch_us * 1e-3 + predict_move_ms(g, size_t{2} << 20) - g.launch_us * 1e-3);
  std::vector<Backend::DeviceMove> moves;
  for (size_t i = 0; i < 64; ++i) moves.push_back({base + i * 8192, base + i * 8192 + 4096, 4096});
  t = b.now_ms();
  b.move_device_batch(moves);
  EXPECT_DOUBLE_EQ(b.now_ms() - t, predict_staged_moves_ms(g, 64 * 4096));
  EXPECT_LT(b.now_ms() - t, 3 * predict_move_ms(g, 4096));
}

// A queued copy's cost measured on a device (BackendOptions::copy_queued_ms, what auto rehearses
// with off sim) is added to each host<->device copy beside its bytes; the compute stream's device
// moves are not charged it.
TEST(SimStreams, AMeasuredQueuedCopyCostAddsToEachCopy) {
  for (const double queued : {0.0, 0.004}) {
    SCOPED_TRACE(queued);
    SimBackend b({.arena_bytes = 1 << 20, .gpu = "p100-16g", .link_ms_per_byte = 1e-6, .copy_queued_ms = queued});
    char host[64];
    for (int i = 0; i < 3; ++i) b.copy_async(Stream::kD2H, host, b.arena_base(), 64);
    b.copy_async(Stream::kH2D, b.arena_base(), host, 64);
    EXPECT_DOUBLE_EQ(b.clock(Stream::kD2H), 3 * (64e-6 + queued));
    EXPECT_DOUBLE_EQ(b.clock(Stream::kH2D), 64e-6 + queued);
    EXPECT_DOUBLE_EQ(b.clock(Stream::kCompute), 0.0);
  }
}

// A codec rate measured on a device (BackendOptions::codec_*, what auto rehearses with off sim)
// replaces the GPU's bandwidth: each call costs its latency and its bytes read and written at
// that rate, compression and decompression alike; without one, the cost model's.
TEST(SimStreams, AMeasuredCodecRateReplacesTheModel) {
  TensorInfo t;
  t.id = 3;
  t.name = "relu_out";
  t.shape = Shape{1 << 20};
  auto table = std::make_shared<DensityTable>();
  table->tensors[density_key(t)] = {uint64_t{1} << 20, uint64_t{1} << 19};  // half non-zero
  const size_t packed = codec_bytes(Codec::kBitmask, size_t{1} << 20, size_t{1} << 19);
  for (const bool measured : {false, true}) {
    SCOPED_TRACE(measured ? "measured" : "modelled");
    BackendOptions o{.arena_bytes = 1 << 20, .gpu = "p100-16g"};
    if (measured) o.codec_latency_ms = 0.02, o.codec_ms_per_byte = 1e-6;
    SimBackend b(o);
    b.set_densities(table);
    CodecResult c, d;
    b.compress_async(Stream::kCompress, Codec::kBitmask, t, nullptr, nullptr, packed, nullptr, 0, &c);
    b.decompress_async(Stream::kCompress, Codec::kBitmask, t, nullptr, packed, nullptr, &d);
    EXPECT_EQ(c.bytes, packed);
    const double want = measured ? 0.02 + static_cast<double>(t.bytes() + packed) * 1e-6
                                 : predict_codec_ms(b.gpu(), t.bytes(), packed);
    EXPECT_DOUBLE_EQ(c.ms, want);
    EXPECT_DOUBLE_EQ(d.ms, want);
    EXPECT_DOUBLE_EQ(b.clock(Stream::kCompress), 2 * want);
  }
}
