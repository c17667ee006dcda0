// The cuda backend lives in its own shared library, libvtensor_cuda.so beside libvtensor.so, loaded
// the first time `--backend cuda` or cuda_available() asks for it. Linked into every program, the
// CUDA libraries (cudart, cuBLAS/cuBLASLt, cuDNN, CUPTI) cost each process 0.4 s at start, GPU or
// not, and the tests start hundreds of processes. Before loading it, the NVIDIA driver's library
// is looked for: without it no device can be visible, and the CUDA libraries are not loaded at all.
#include <dlfcn.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "vtensor/backend/backend.h"

namespace vtensor {

namespace {

struct CudaModule {
  std::string error;  // why the backend cannot start, when it cannot
  bool (*available)() = nullptr;
  Backend* (*make)(const BackendOptions&) = nullptr;
};

const CudaModule& cuda_module() {
  static const CudaModule module = [] {
    CudaModule m;
#ifndef VTENSOR_CUDA_MODULE
    m.error = "backend 'cuda' is not available: this vtensor was built without CUDA (nvcc not found or "
              "-DVTENSOR_CUDA=OFF); use --backend cpu, or rebuild on a machine with the CUDA toolkit";
#else
    // cudart finds devices through the driver's libcuda.so.1; a machine without it has none.
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!driver) {
      m.error = "backend 'cuda': no CUDA device is visible (the NVIDIA driver's libcuda.so.1 is not found); "
                "use --backend cpu or sim";
      return m;
    }
    dlclose(driver);
    std::filesystem::path path = VTENSOR_CUDA_MODULE;
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&cuda_available), &self) && self.dli_fname)
      path = std::filesystem::path(self.dli_fname).parent_path() / VTENSOR_CUDA_MODULE;
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = dlerror();
      m.error = "backend 'cuda' is not available: cannot load " + path.string() + " (" + (why ? why : "?") +
                "); use --backend cpu or sim";
      return m;
    }
    m.available = reinterpret_cast<bool (*)()>(dlsym(lib, "vtensor_cuda_available"));
    m.make = reinterpret_cast<Backend* (*)(const BackendOptions&)>(dlsym(lib, "vtensor_cuda_make_backend"));
    if (!m.available || !m.make) {
      m.error = "backend 'cuda' is not available: " + path.string() + " lacks vtensor's entry points";
      m.available = nullptr;
      m.make = nullptr;
    }
#endif
    return m;
  }();
  return module;
}

}  // namespace

bool cuda_available() {
  const CudaModule& m = cuda_module();
  return m.available && m.available();
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opts) {
  const CudaModule& m = cuda_module();
  if (!m.make) throw std::invalid_argument(m.error);
  return std::unique_ptr<Backend>(m.make(opts));
}

}  // namespace vtensor
