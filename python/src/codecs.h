// vtensor's lossless codecs (vtensor/backend/codec.h) for the PyTorch package's compress policy:
// the cpu codecs over the raw pointers of contiguous CPU tensors that Python owns. The GIL is
// released while a codec runs.
#pragma once
#include <pybind11/pybind11.h>

namespace vtensor::pyb {

void bind_codecs(pybind11::module_& m);

}  // namespace vtensor::pyb
