// Shared by the e2e tests: run a training config and keep what a lossless policy must reproduce
// bit for bit (losses, parameters, buffers such as batch-norm running statistics, optimizer
// state), plus the memory figures the tests assert on.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "vtensor/train/trainer.h"

namespace vtensor::test {

struct RunOutcome {
  TrainResult result;
  std::vector<IterationStats> iters;  // result.iterations
  std::vector<std::vector<float>> params, buffers, optimizer_state;
  size_t peak = 0;  // max peak allocated over the iterations
  uint64_t swapped_out = 0, swapped_in = 0;
};

inline size_t max_peak(const std::vector<IterationStats>& iters) {
  size_t p = 0;
  for (const auto& s : iters) p = std::max(p, s.peak_allocated);
  return p;
}

// Trains `cfg` and reads the final values (not on a backend without values, e.g. sim).
inline RunOutcome run_training(const TrainConfig& cfg) {
  Trainer t(cfg);
  RunOutcome r;
  r.result = t.run();
  r.iters = r.result.iterations;
  r.peak = max_peak(r.iters);
  for (const auto& s : r.iters) {
    r.swapped_out += s.counters.swapped_out_bytes;
    r.swapped_in += s.counters.swapped_in_bytes;
  }
  if (!t.memory().backend().has_data()) return r;
  r.params = t.read_params();
  for (const auto& info : t.graph().tensors()) {
    if (info.kind == TensorKind::kBuffer) r.buffers.push_back(t.read(info.id));
    if (info.kind == TensorKind::kOptimizerState) r.optimizer_state.push_back(t.read(info.id));
  }
  return r;
}

inline void expect_same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                             const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " " << i;
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float))) << what << " " << i;
  }
}

// Losses, parameters, buffers and optimizer state identical to the bit.
inline void expect_bit_identical(const RunOutcome& a, const RunOutcome& b) {
  ASSERT_EQ(a.iters.size(), b.iters.size());
  for (size_t i = 0; i < a.iters.size(); ++i)
    EXPECT_EQ(0, std::memcmp(&a.iters[i].loss, &b.iters[i].loss, sizeof(float)))
        << "iteration " << i << ": " << a.iters[i].loss << " vs " << b.iters[i].loss;
  expect_same_bits(a.params, b.params, "parameter");
  expect_same_bits(a.buffers, b.buffers, "buffer");
  expect_same_bits(a.optimizer_state, b.optimizer_state, "optimizer state");
}

// Losses, parameters and buffers identical to the bit, for any run that keeps them as `iters`,
// `params` and `buffers` (the auto and Capuchin tests' runs).
template <class Run>
void expect_bit_identical(const Run& a, const Run& b) {
  ASSERT_EQ(a.iters.size(), b.iters.size());
  for (size_t i = 0; i < a.iters.size(); ++i)
    EXPECT_EQ(0, std::memcmp(&a.iters[i].loss, &b.iters[i].loss, sizeof(float))) << "iteration " << i;
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * sizeof(float))) << "parameter " << i;
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a.buffers[i].data(), b.buffers[i].data(), a.buffers[i].size() * sizeof(float))) << "buffer " << i;
}

}  // namespace vtensor::test
