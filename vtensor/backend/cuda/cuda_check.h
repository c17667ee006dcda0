// Checks for every CUDA runtime, cuBLAS and cuDNN call: a failure throws std::runtime_error
// naming the call, the file and line, and the library's own message.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace vtensor::cuda {

[[noreturn]] inline void fail(const char* lib, const char* call, const char* file, int line, const std::string& why) {
  throw std::runtime_error(std::string(lib) + " call failed: " + call + " at " + file + ":" + std::to_string(line) +
                           ": " + why);
}

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) fail("CUDA", call, file, line, std::string(cudaGetErrorName(e)) + " " + cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLAS", call, file, line, std::string(cublasGetStatusString(s)));
}
inline void check(cudnnStatus_t s, const char* call, const char* file, int line) {
  if (s != CUDNN_STATUS_SUCCESS) fail("cuDNN", call, file, line, std::string(cudnnGetErrorString(s)));
}

// In destructors, which must not throw: a failure is reported on stderr, naming the call.
template <typename Status>
void check_nothrow(Status s, const char* call, const char* file, int line) noexcept {
  try {
    check(s, call, file, line);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vtensor: while releasing: %s\n", e.what());
  }
}

}  // namespace vtensor::cuda

// VT_CHECK(cudaMemcpyAsync(...)): the call's text is the message.
#define VT_CHECK(call) ::vtensor::cuda::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad configuration shows up here, named by the kernel.
#define VT_CHECK_LAUNCH(name) ::vtensor::cuda::check(cudaGetLastError(), name, __FILE__, __LINE__)
#define VT_CHECK_NOTHROW(call) ::vtensor::cuda::check_nothrow((call), #call, __FILE__, __LINE__)
