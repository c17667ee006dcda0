// The cuda-labelled tests' guard: skips the test, with the reason, where this build has no CUDA
// or the machine no visible device (vtensor::cuda_available, vtensor/backend/cuda_module.cpp).
#pragma once
#include <gtest/gtest.h>

#include "vtensor/backend/backend.h"

#define VT_REQUIRE_GPU()                                                                                      \
  do {                                                                                                        \
    if (!::vtensor::cuda_available())                                                                         \
      GTEST_SKIP() << "no GPU: this build has no CUDA (nvcc not found or -DVTENSOR_CUDA=OFF) or no CUDA device " \
                      "is visible; the cuda tests need an NVIDIA GPU";                                        \
  } while (0)
