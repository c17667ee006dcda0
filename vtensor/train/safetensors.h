// Weights in the safetensors format (the file Hugging Face's and PyTorch's `safetensors` package
// reads and writes): an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw little-endian bytes. vtensor writes F32 tensors
// named as the model zoo names them (`train --save`), and reads them back (`train --init`).
// Written through write_output (whole or not at all); read through the bounded input path: a
// header over 100 MiB, a range outside the file, overlapping ranges, a dtype other than F32 or a
// shape that does not match the range are bad input naming the file and the tensor.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vtensor {

struct NamedTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
using TensorFile = std::map<std::string, NamedTensor>;

// now: renamed onto `path` at once, not with the run's other outputs (write_output's `now`).
void write_safetensors(const TensorFile& tensors, const std::string& path,
                       const std::map<std::string, std::string>& metadata = {}, bool now = false);
TensorFile read_safetensors(const std::string& path, const std::string& flag = "--init");
// The file's "__metadata__" (string to string; empty when it has none).
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path, const std::string& flag);
// The same from the file's bytes; `path` names it in the messages (the fuzz target feeds this).
TensorFile parse_safetensors(const std::string& bytes, const std::string& path, const std::string& flag = "--init");

}  // namespace vtensor
