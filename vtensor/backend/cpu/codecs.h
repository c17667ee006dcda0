// The cpu codecs (formats in vtensor/backend/codec.h): the reference every other backend's
// kernels are checked against. Compression goes chunk by chunk through a workspace (FreeLunch's
// sliding workspace): each chunk is packed into the workspace, then its mask words and values
// are copied to their places in the output, so a workspace of any size gives the same bytes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "vtensor/backend/codec.h"

namespace vtensor::cpu {

// Elements whose bit pattern is not zero.
size_t count_nonzero_bits(const float* x, size_t n);
// Compresses n elements of src into dst (at most `capacity` bytes written) through `workspace`
// (>= codec_chunk_workspace(32) bytes for kBitmask; unused by kSign). Returns the compressed
// size; when it is above capacity the output is incomplete and must not be decompressed.
size_t compress(Codec c, const float* src, size_t n, void* dst, size_t capacity, void* workspace, size_t workspace_bytes);
// Inverse of compress (kSign gives 1.0f where x > 0, else 0.0f).
void decompress(Codec c, const void* src, size_t n, float* dst);

}  // namespace vtensor::cpu
