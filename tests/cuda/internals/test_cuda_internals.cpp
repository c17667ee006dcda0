// cuda-labelled tests that reach into the cuda backend's own library (libvtensor_cuda.so): its
// event pool and the CUDA runtime's view of device memory. They are a program of their own, the
// only one linked with the CUDA libraries: the other cuda tests go through make_backend, so they
// start without loading them (vtensor/backend/cuda_module.cpp). Each skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "vtensor/backend/backend.h"
#include "vtensor/backend/cuda/cuda_backend.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/train/trainer.h"

#include "tests/support/gpu.h"

using namespace vtensor;

namespace {

// The events a record hands out come from a pool (cuda_backend.h): recorded again once given
// back, they still order each round's copy after its own data, and a round of two records
// creates no new event.
TEST(CudaInternals, ReusedEventsStillOrderCopies) {
  VT_REQUIRE_GPU();
  auto owned = make_backend("cuda", {.arena_bytes = size_t{256} << 20, .deterministic = true});
  auto& be = *owned;
  auto* cb = dynamic_cast<CudaBackend*>(&be);
  ASSERT_NE(cb, nullptr);
  const size_t bytes = size_t{1} << 20;
  char* host = static_cast<char*>(be.host_alloc(bytes));
  char* dev = static_cast<char*>(be.arena_base());
  std::vector<char> pattern(bytes);
  be.record(Stream::kD2H)->wait();  // the pool holds an event from here on
  const size_t created = cb->events_created();
  for (int round = 0; round < 64; ++round) {
    for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<char>(i * 13 + static_cast<size_t>(round) * 101);
    be.copy_to_device(dev, pattern.data(), bytes);
    be.stream_wait(Stream::kD2H, be.record(Stream::kCompute));
    be.copy_async(Stream::kD2H, host, dev, bytes);
    be.record(Stream::kD2H)->wait();
    ASSERT_EQ(0, std::memcmp(host, pattern.data(), bytes)) << "round " << round;
  }
  EXPECT_LE(cb->events_created(), created + 1);  // the compute record's event, then both reused
  be.host_free(host, bytes);
}

class CudaInternalsTraining : public ::testing::TestWithParam<std::string> {};

// Unified memory on cuda: um-prefetch at 75% of the unmanaged peak, bit-identical to none, and the
// device memory the process uses, sampled at each iteration's end, within the budget plus what the
// same run under none uses beyond its own peak allocated bytes (cuBLAS / cuDNN handles, their
// workspaces and loaded kernels), plus 32 MiB for the driver's migration granularity.
TEST_P(CudaInternalsTraining, UnifiedMemoryAtHalfThePeakMatchesNoneWithinTheBudget) {
  VT_REQUIRE_GPU();
  const int iters = 3;
  TrainConfig cfg;
  cfg.model.name = GetParam();
  cfg.backend = "cuda";
  cfg.policy = "none";
  cfg.budget = size_t{256} << 20;
  cfg.iters = iters;
  cfg.deterministic = true;
  // Device bytes the process holds beyond `free0`, worst over the iterations' ends.
  const auto run_sampled = [](const TrainConfig& c, size_t& worst) {
    size_t free0 = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
    Trainer t(c);
    worst = 0;
    auto res = t.run([&](const IterationStats&) {
      size_t f = 0, tot = 0;
      cudaMemGetInfo(&f, &tot);
      worst = std::max(worst, free0 > f ? free0 - f : 0);
    });
    return std::make_pair(std::move(res), t.read_params());
  };
  size_t worst_none = 0;
  const auto [base, base_params] = run_sampled(cfg, worst_none);
  size_t peak = 0;
  for (const auto& s : base.iterations) peak = std::max(peak, s.peak_allocated);
  const size_t runtime_bytes = worst_none > peak ? worst_none - peak : 0;
  const size_t page = size_t{16} << 10;
  const size_t budget = align_up(static_cast<size_t>(static_cast<double>(peak) * 0.75), page);
  cfg.policy = "um-prefetch";
  cfg.budget = budget;
  cfg.policy_options.set("um-page-size", page);
  size_t worst = 0;
  const auto [res, params] = run_sampled(cfg, worst);
  EXPECT_LE(worst, budget + runtime_bytes + (size_t{32} << 20))
      << "none held " << worst_none << " B at a peak of " << peak << " B allocated";
  ASSERT_EQ(base.iterations.size(), res.iterations.size());
  for (size_t i = 0; i < base.iterations.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(&base.iterations[i].loss, &res.iterations[i].loss, sizeof(float))) << "iteration " << i;
    EXPECT_LE(res.iterations[i].paging.peak_device_bytes, budget);
  }
  ASSERT_EQ(base_params.size(), params.size());
  for (size_t i = 0; i < base_params.size(); ++i)
    EXPECT_EQ(0, std::memcmp(base_params[i].data(), params[i].data(), base_params[i].size() * sizeof(float))) << "parameter " << i;
}

INSTANTIATE_TEST_SUITE_P(TinyModels, CudaInternalsTraining, ::testing::Values("resnet-tiny", "vgg-tiny", "gpt-tiny"));

}  // namespace
