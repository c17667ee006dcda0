// Caching allocator throughput (a training-like pattern of allocations and frees) and the
// planned pool planner's time on a training-like iteration.
#include <benchmark/benchmark.h>

#include <random>

#include "vtensor/memory/caching_allocator.h"
#include "vtensor/memory/planners.h"

static void BM_CachingAllocTrainingPattern(benchmark::State& state) {
  const size_t live = static_cast<size_t>(state.range(0));
  vtensor::CachingAllocator a(size_t{1} << 34);
  std::mt19937_64 rng(1);
  std::vector<size_t> blocks;
  for (auto _ : state) {
    if (blocks.size() < live) {
      blocks.push_back(*a.allocate(256 * (1 + rng() % 4096)));
    } else {
      const size_t i = rng() % blocks.size();
      a.free(blocks[i]);
      blocks[i] = blocks.back();
      blocks.pop_back();
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CachingAllocTrainingPattern)->Arg(64)->Arg(1024)->Arg(16384);

// The planned pool's planner on a training-like iteration: a quarter of the blocks persistent
// (fixed at the bottom, alive throughout), half activations alive from their forward op to its
// mirror in backward, a quarter short-lived temporaries. Policy auto's rehearsals plan one such
// iteration each under --allocator planned (GPT-2 small: about 1,300 blocks).
static void BM_PlanGreedySize(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::mt19937_64 rng(2);
  std::vector<vtensor::BlockLifetime> blocks;
  const int64_t acts = static_cast<int64_t>(n / 2), end = 2 * acts + 2;
  size_t floor = 0;
  for (size_t i = 0; i < n / 4; ++i) {
    const size_t size = 512 * (1 + rng() % 8192);
    blocks.push_back({size, -1, end + 1, static_cast<int64_t>(floor)});
    floor += size;
  }
  for (int64_t i = 0; i < acts; ++i) blocks.push_back({512 * (1 + rng() % 65536), i, 2 * acts - i + 1});
  while (blocks.size() < n) {
    const auto t = static_cast<int64_t>(rng() % static_cast<uint64_t>(end));
    blocks.push_back({512 * (1 + rng() % 16384), t, t + 1 + static_cast<int64_t>(rng() % 3)});
  }
  for (auto _ : state) benchmark::DoNotOptimize(vtensor::plan_greedy_size(blocks));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PlanGreedySize)->Arg(500)->Arg(1300)->Arg(3000)->Unit(benchmark::kMillisecond);
