// Caching allocator throughput: a training-like pattern of allocations and frees.
#include <benchmark/benchmark.h>

#include <random>

#include "vtensor/memory/caching_allocator.h"

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
