#include "vtensor/train/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "vtensor/core/input.h"
#include "vtensor/core/output.h"

namespace vtensor {
namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the format's own reference limit

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_u64(const std::string& in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(in[static_cast<size_t>(i)]);
  return v;
}

}  // namespace

void write_safetensors(const TensorFile& tensors, const std::string& path, const std::map<std::string, std::string>& metadata,
                       bool now) {
  nlohmann::json head = nlohmann::json::object();
  if (!metadata.empty()) head["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = t.values.size() * sizeof(float);
    head[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header = head.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data 8-byte aligned, as the format suggests
  write_output(path, "weights", [&](std::ostream& out) {
    std::string len;
    put_u64(len, header.size());
    out << len << header;
    static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559, "F32 is IEEE binary32");
    for (const auto& [name, t] : tensors)  // little-endian, as x86-64 and arm64 hold them
      out.write(reinterpret_cast<const char*>(t.values.data()), static_cast<std::streamsize>(t.values.size() * sizeof(float)));
  }, now);
}

TensorFile read_safetensors(const std::string& path, const std::string& flag) {
  return parse_safetensors(read_input(path, flag + " '" + path + "'", size_t{1} << 40), path, flag);
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path, const std::string& flag) {
  const std::string where = flag + " '" + path + "'";
  const std::string bytes = read_input(path, where, size_t{1} << 40);
  if (bytes.size() < 8 || get_u64(bytes) > bytes.size() - 8) throw std::invalid_argument(where + ": not a safetensors file");
  const nlohmann::json head = parse_json(bytes.substr(8, get_u64(bytes)), where + "'s header");
  std::map<std::string, std::string> out;
  if (head.is_object() && head.contains("__metadata__") && head["__metadata__"].is_object())
    for (const auto& [k, v] : head["__metadata__"].items())
      if (v.is_string()) out[k] = v.get<std::string>();
  return out;
}

TensorFile parse_safetensors(const std::string& bytes, const std::string& path, const std::string& flag) {
  const std::string where = flag + " '" + path + "'";
  const std::string accepted = "; accepted: a safetensors file of F32 tensors (train --save, or safetensors.torch.save_file)";
  if (bytes.size() < 8) throw std::invalid_argument(where + ": shorter than a safetensors header" + accepted);
  const uint64_t n = get_u64(bytes);
  if (n > kMaxHeaderBytes || n > bytes.size() - 8)
    throw std::invalid_argument(where + ": a header of " + std::to_string(n) + " bytes does not fit the file" + accepted);
  const nlohmann::json head = parse_json(bytes.substr(8, n), where + "'s header");
  if (!head.is_object()) throw std::invalid_argument(where + ": the header is not a JSON object" + accepted);
  const uint64_t data = 8 + n, size = bytes.size() - data;
  TensorFile out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, t] : head.items()) {
    if (name == "__metadata__") continue;
    const std::string tw = where + " tensor '" + name + "'";
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets") ||
        !t["dtype"].is_string() || !t["shape"].is_array() || !t["data_offsets"].is_array() || t["data_offsets"].size() != 2)
      throw std::invalid_argument(tw + ": needs \"dtype\", \"shape\" and \"data_offsets\": [begin, end]" + accepted);
    if (t["dtype"].get<std::string>() != "F32")
      throw std::invalid_argument(tw + ": dtype " + t["dtype"].get<std::string>() + "; accepted: F32");
    uint64_t numel = 1;
    NamedTensor nt;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40))
        throw std::invalid_argument(tw + ": a shape of non-negative integers" + accepted);
      numel *= d.get<uint64_t>();
      if (numel > (uint64_t{1} << 40)) throw std::invalid_argument(tw + ": more elements than a tensor may have");
      nt.shape.push_back(d.get<int64_t>());
    }
    const auto& r = t["data_offsets"];
    if (!r[0].is_number_unsigned() || !r[1].is_number_unsigned())
      throw std::invalid_argument(tw + ": data_offsets must be non-negative integers" + accepted);
    const uint64_t b = r[0].get<uint64_t>(), e = r[1].get<uint64_t>();
    if (b > e || e > size) throw std::invalid_argument(tw + ": its bytes lie outside the file" + accepted);
    if (e - b != numel * sizeof(float))
      throw std::invalid_argument(tw + ": " + std::to_string(e - b) + " bytes for " + std::to_string(numel) + " F32 elements");
    ranges.emplace_back(b, e);
    nt.values.resize(numel);
    if (numel) std::memcpy(nt.values.data(), bytes.data() + data + b, e - b);
    out.emplace(name, std::move(nt));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) throw std::invalid_argument(where + ": two tensors share bytes" + accepted);
  return out;
}

}  // namespace vtensor
