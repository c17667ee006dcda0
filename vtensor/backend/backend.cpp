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

Backend::MoveCopies Backend::move_copies(size_t bytes, size_t distance) {
  if (!bytes || !distance) return {};
  if (distance >= bytes) return {1, bytes};
  if (distance >= kMoveMinDirectChunk) return {(bytes + distance - 1) / distance, bytes};
  const size_t chunks = (bytes + kMoveStagingBytes - 1) / kMoveStagingBytes;
  return {2 * chunks, 2 * bytes};
}

std::vector<Backend::MoveStep> Backend::move_steps(const std::vector<DeviceMove>& moves) {
  std::vector<MoveStep> steps;
  size_t staged_bytes = 0;
  for (size_t i = 0; i < moves.size(); ++i) {
    const DeviceMove& m = moves[i];
    if (!m.bytes || m.dst == m.src) continue;
    if (m.bytes >= kMoveMinDirectChunk) {
      steps.push_back({i, 1, false});
      continue;
    }
    const size_t padded = staged_slot_bytes(m.bytes);
    MoveStep* last = steps.empty() ? nullptr : &steps.back();
    // A chunk holds consecutive moves only (the skipped ones move nothing), so a large move ends it.
    const bool extend = last && last->staged && last->first + last->count == i &&
                        last->count < kMoveBatchSegments && staged_bytes + padded <= kMoveStagingBytes;
    if (extend) {
      ++last->count;
      staged_bytes += padded;
    } else {
      steps.push_back({i, 1, true});
      staged_bytes = padded;
    }
  }
  return steps;
}

void Backend::move_device_batch(const std::vector<DeviceMove>& moves) {
  for (const DeviceMove& m : moves) move_device(m.dst, m.src, m.bytes);
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& opts) {
  if (name == "cpu") return make_cpu_backend(opts);
  if (name == "cuda") return make_cuda_backend(opts);
  if (name == "sim") return make_sim_backend(opts);
  std::string accepted;
  for (const auto& n : backend_names()) accepted += (accepted.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown backend '" + name + "'; accepted: " + accepted);
}

}  // namespace vtensor
