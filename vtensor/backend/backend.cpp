#include "vtensor/backend/backend.h"

#include <stdexcept>

namespace vtensor {

const char* to_string(Stream s) {
  switch (s) {
    case Stream::kCompute: return "compute";
    case Stream::kH2D: return "h2d";
    case Stream::kD2H: return "d2h";
    case Stream::kCompress: return "compress";
  }
  return "?";
}

void* Backend::um_reserve(size_t, size_t, size_t) {
  throw std::invalid_argument("backend " + name() + " has no unified memory (paged residency); accepted: cpu, sim, cuda");
}
void Backend::um_migrate_in(Stream, size_t, size_t, bool) { throw std::logic_error("um_migrate_in: no managed range"); }
void Backend::um_migrate_out(Stream, size_t, size_t, bool) { throw std::logic_error("um_migrate_out: no managed range"); }
void Backend::um_read_host(void*, size_t, size_t, size_t) { throw std::logic_error("um_read_host: no managed range"); }

std::vector<std::string> backend_names() { return {"cpu", "cuda", "sim"}; }

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& opts) {
  if (name == "cpu") return make_cpu_backend(opts);
  if (name == "cuda") return make_cuda_backend(opts);
  if (name == "sim") return make_sim_backend(opts);
  std::string accepted;
  for (const auto& n : backend_names()) accepted += (accepted.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown backend '" + name + "'; accepted: " + accepted);
}

}  // namespace vtensor
