// cuda-labelled tests: skipped with the reason when this build or machine has no GPU.
#include <gtest/gtest.h>

#include "vtensor/backend/backend.h"

TEST(CudaBackend, AvailableOrSaysWhy) {
  if (!vtensor::cuda_available()) {
    try {
      vtensor::make_backend("cuda", {.arena_bytes = 1 << 20});
      FAIL() << "a build without CUDA must refuse the cuda backend";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();
    }
    GTEST_SKIP() << "this vtensor was built without CUDA: the cuda backend tests need nvcc and a GPU";
  }
  auto b = vtensor::make_backend("cuda", {.arena_bytes = 1 << 20});
  EXPECT_EQ(b->name(), "cuda");
}
