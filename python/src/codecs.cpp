#include "codecs.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "vtensor/backend/codec.h"
#include "vtensor/backend/cpu/codecs.h"

namespace py = pybind11;

namespace vtensor::pyb {
namespace {

constexpr size_t kWorkspaceBytes = 64 << 10;  // the sliding workspace of one compression

Codec lossless(const std::string& name) {
  const Codec c = parse_codec(name);  // throws naming the accepted codecs
  if (!codec_lossless(c) || c == Codec::kNone) throw std::invalid_argument("codec '" + name + "' is not a lossless codec");
  return c;
}

const float* floats(uintptr_t p) { return reinterpret_cast<const float*>(p); }

}  // namespace

void bind_codecs(py::module_& m) {
  m.def("codec_count_nonzero", [](uintptr_t src, size_t n) {
    py::gil_scoped_release unlocked;
    return cpu::count_nonzero_bits(floats(src), n);
  }, py::arg("src"), py::arg("n"), "Elements of the n float32 at src whose bit pattern is not zero.");
  m.def("codec_bytes", [](const std::string& codec, size_t n, size_t nonzeros) {
    return codec_bytes(lossless(codec), n, nonzeros);
  }, py::arg("codec"), py::arg("n"), py::arg("nonzeros"), "Compressed size of n float32 with that many non-zeros.");
  m.def("codec_compress", [](const std::string& codec, uintptr_t src, size_t n, uintptr_t dst, size_t capacity) {
    const Codec c = lossless(codec);
    thread_local std::vector<uint8_t> workspace(kWorkspaceBytes);
    py::gil_scoped_release unlocked;
    return cpu::compress(c, floats(src), n, reinterpret_cast<void*>(dst), capacity, workspace.data(), workspace.size());
  }, py::arg("codec"), py::arg("src"), py::arg("n"), py::arg("dst"), py::arg("capacity"),
     "Compresses n float32 at src into dst; returns the compressed size (above capacity: incomplete).");
  m.def("codec_decompress", [](const std::string& codec, uintptr_t src, size_t n, uintptr_t dst) {
    const Codec c = lossless(codec);
    py::gil_scoped_release unlocked;
    cpu::decompress(c, reinterpret_cast<const void*>(src), n, reinterpret_cast<float*>(dst));
  }, py::arg("codec"), py::arg("src"), py::arg("n"), py::arg("dst"), "Inverse of codec_compress.");
}

}  // namespace vtensor::pyb
