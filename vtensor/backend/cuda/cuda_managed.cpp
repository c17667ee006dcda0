// The cuda backend's unified memory (its cuda test passes on an H100; not measured at scale).
// The managed range is one cudaMallocManaged allocation; the paged memory's frames are notional
// (the driver picks physical pages), but their count bounds device residency: before asking for
// the range, the arena is freed and the free device memory must hold frames x page bytes, and the
// paged memory never has more pages on the device than frames, so the driver is never asked for
// more device memory than the card has free and never evicts on its own. Moves are
// cudaMemPrefetchAsync to the device or to the host on the given stream (demand faults on the
// compute stream before the kernel, so kernels do not fault); an invalidated page is discarded
// (cudaMemDiscardBatchAsync, CUDA 12.8+), never copied. No cudaMemAdvise: a preferred location
// or accessed-by mapping would let kernels read host memory remotely instead of migrating, which
// is not the model measured here.
#include "vtensor/backend/cuda/cuda_backend.h"
#include "vtensor/backend/cuda/cuda_check.h"
#include "vtensor/core/errors.h"

namespace vtensor {

void* CudaBackend::um_reserve(size_t range_bytes, size_t page_bytes, size_t frames) {
  if (managed_) throw std::logic_error("cuda backend: the managed range is reserved already");
  VT_CHECK(cudaDeviceSynchronize());
  if (arena_) VT_CHECK(cudaFree(arena_));  // the pages take its place; calibration has used it already
  arena_ = nullptr;
  size_t free_b = 0, total_b = 0;
  VT_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (frames * page_bytes > free_b)
    throw std::invalid_argument("--budget " + format_bytes(frames * page_bytes) + " of unified-memory pages does not fit the " +
                                format_bytes(free_b) + " free on the device; accepted: a budget up to that");
  int concurrent = 0;
  VT_CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device_));
  if (!concurrent)
    throw std::invalid_argument("backend 'cuda': this device cannot page managed memory on demand "
                                "(cudaDevAttrConcurrentManagedAccess is 0); use --backend sim for um policies");
  VT_CHECK(cudaMallocManaged(&managed_, range_bytes, cudaMemAttachGlobal));
  um_range_ = range_bytes;
  um_page_ = page_bytes;
  // Every page starts on the host.
  cudaMemLocation host{};
  host.type = cudaMemLocationTypeHost;
  VT_CHECK(cudaMemPrefetchAsync(managed_, range_bytes, host, 0, stream(Stream::kCompute)));
  VT_CHECK(cudaStreamSynchronize(stream(Stream::kCompute)));
  return managed_;
}

void CudaBackend::um_migrate_in(Stream s, size_t page, size_t, bool) {
  cudaMemLocation dev{};
  dev.type = cudaMemLocationTypeDevice;
  dev.id = device_;
  VT_CHECK(cudaMemPrefetchAsync(static_cast<char*>(managed_) + page * um_page_, um_page_, dev, 0, stream(s)));
}

void CudaBackend::um_migrate_out(Stream s, size_t page, size_t, bool copy) {
  void* p = static_cast<char*>(managed_) + page * um_page_;
  if (!copy) {  // invalidated: its bytes are dropped
    size_t bytes = um_page_;
    VT_CHECK(cudaMemDiscardBatchAsync(&p, &bytes, 1, 0, stream(s)));
    return;
  }
  cudaMemLocation host{};
  host.type = cudaMemLocationTypeHost;
  VT_CHECK(cudaMemPrefetchAsync(p, um_page_, host, 0, stream(s)));
}

void CudaBackend::um_read_host(void* dst, size_t page, size_t offset, size_t bytes) {
  VT_CHECK(cudaMemcpy(dst, static_cast<char*>(managed_) + page * um_page_ + offset, bytes, cudaMemcpyDefault));
}

}  // namespace vtensor
