// Built when CUDA is off or nvcc is missing: the cuda backend exists by name and says why it cannot run.
#include <stdexcept>

#include "vtensor/backend/backend.h"

namespace vtensor {

bool cuda_available() { return false; }

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
  throw std::invalid_argument(
      "backend 'cuda' is not available: this vtensor was built without CUDA (nvcc not found or "
      "-DVTENSOR_CUDA=OFF); use --backend cpu, or rebuild on a machine with the CUDA toolkit");
}

}  // namespace vtensor
