// The cpu backend's unified memory: a real emulation of page migration. The managed range is
// reserved PROT_NONE; a page on the device is mmap(MAP_FIXED)ed onto its frame of the device
// memfd (exactly frames x page bytes: device residency cannot exceed the budget), a page
// elsewhere is left inaccessible, so a kernel touching a page that was not faulted in crashes
// instead of reading host memory. Migrations are memcpys between the two memfds' own mappings,
// on the copy-stream threads when asynchronous; the remap happens at issue, the bytes are
// ordered by the events the paged memory waits on.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "vtensor/backend/cpu/cpu_backend.h"
#include "vtensor/core/errors.h"

namespace vtensor {
namespace {

int make_memfd(const char* name, size_t bytes) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("cpu backend: memfd_create failed: ") + std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    throw std::runtime_error("cpu backend: cannot size a memfd of " + format_bytes(bytes) + ": " + std::strerror(errno));
  }
  return fd;
}

void* map_or_throw(void* addr, size_t bytes, int prot, int flags, int fd, size_t off, const char* what) {
  void* p = mmap(addr, bytes, prot, flags, fd, static_cast<off_t>(off));
  if (p == MAP_FAILED) throw std::runtime_error(std::string("cpu backend: mmap of ") + what + " failed: " + std::strerror(errno));
  return p;
}

}  // namespace

void* CpuBackend::um_reserve(size_t range_bytes, size_t page_bytes, size_t frames) {
  if (um_.base) throw std::logic_error("cpu backend: the managed range is reserved already");
  if (page_bytes % static_cast<size_t>(sysconf(_SC_PAGESIZE)) != 0 || range_bytes % page_bytes != 0)
    throw std::invalid_argument("cpu backend: unified-memory pages must be multiples of the host page");
  if (frames * page_bytes > arena_bytes_) throw std::logic_error("cpu backend: more device frames than the budget holds");
  um_.range = range_bytes;
  um_.page = page_bytes;
  um_.frames = frames;
  um_.device_fd = make_memfd("vtensor-device-frames", frames * page_bytes);
  um_.host_fd = make_memfd("vtensor-host-frames", range_bytes);  // sparse: costs only what is written
  um_.device = static_cast<char*>(
      map_or_throw(nullptr, frames * page_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, um_.device_fd, 0, "the device frames"));
  um_.host = static_cast<char*>(
      map_or_throw(nullptr, range_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, um_.host_fd, 0, "the host frames"));
  um_.base = static_cast<char*>(map_or_throw(nullptr, range_bytes, PROT_NONE,
                                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0, "the managed range"));
  return um_.base;
}

void CpuBackend::um_release() {
  if (!um_.base) return;
  munmap(um_.base, um_.range);
  munmap(um_.host, um_.range);
  munmap(um_.device, um_.frames * um_.page);
  close(um_.host_fd);
  close(um_.device_fd);
  um_ = {};
}

void CpuBackend::run_on(Stream s, std::function<void()> task) {
  if (s == Stream::kCompute) task();
  else worker(s).submit(std::move(task));
}

void CpuBackend::um_migrate_in(Stream s, size_t page, size_t frame, bool copy) {
  const size_t P = um_.page;
  if (!um_.base || page * P >= um_.range || frame >= um_.frames) throw std::logic_error("um_migrate_in: page or frame out of range");
  map_or_throw(um_.base + page * P, P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, um_.device_fd, frame * P,
               "a page onto its device frame");
  if (copy) {
    char* dst = um_.device + frame * P;
    const char* src = um_.host + page * P;
    run_on(s, [=] { std::memcpy(dst, src, P); });
  }
}

void CpuBackend::um_migrate_out(Stream s, size_t page, size_t frame, bool copy) {
  const size_t P = um_.page;
  if (!um_.base || page * P >= um_.range || frame >= um_.frames) throw std::logic_error("um_migrate_out: page or frame out of range");
  map_or_throw(um_.base + page * P, P, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0,
               "a page off the device");
  if (copy) {
    char* dst = um_.host + page * P;
    const char* src = um_.device + frame * P;
    run_on(s, [=] { std::memcpy(dst, src, P); });
  }
}

void CpuBackend::um_read_host(void* dst, size_t page, size_t offset, size_t bytes) {
  if (!um_.base || offset + bytes > um_.page) throw std::logic_error("um_read_host: out of range");
  std::memcpy(dst, um_.host + page * um_.page + offset, bytes);
}

}  // namespace vtensor
