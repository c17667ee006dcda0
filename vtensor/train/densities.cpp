#include "vtensor/train/densities.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "vtensor/core/input.h"
#include "vtensor/core/output.h"

namespace vtensor {

DensityTable load_densities(const std::string& path) { return read_densities(read_input(path, "--densities '" + path + "'"), path); }

DensityTable read_densities(const std::string& text, const std::string& path) {
  const std::string expected = std::string("expected a JSON object {\"format\": \"") + kDensitiesFormat +
                               "\", \"tensors\": {NAME: {\"elements\": N, \"nonzeros\": K}}} as written by train --densities-out";
  nlohmann::json j;
  try {
    j = parse_json(text, "--densities '" + path + "'");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + "; " + expected);
  }
  const auto string_field = [&](const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  if (!j.is_object() || string_field("format") != kDensitiesFormat || !j.contains("tensors") || !j["tensors"].is_object())
    throw std::invalid_argument("--densities '" + path + "': " + expected);
  DensityTable d;
  d.source = j.contains("source") ? string_field("source") : path;
  for (const auto& [name, v] : j["tensors"].items()) {
    if (!v.is_object() || !v.contains("elements") || !v.contains("nonzeros") || !v["elements"].is_number_unsigned() ||
        !v["nonzeros"].is_number_unsigned())
      throw std::invalid_argument("--densities '" + path + "': tensor '" + name +
                                  "' needs non-negative integers \"elements\" and \"nonzeros\"");
    const auto n = v["elements"].get<uint64_t>(), k = v["nonzeros"].get<uint64_t>();
    if (n == 0 || k > n)
      throw std::invalid_argument("--densities '" + path + "': tensor '" + name + "' has " + std::to_string(k) +
                                  " non-zeros of " + std::to_string(n) + " elements; accepted: 0 <= nonzeros <= elements, elements > 0");
    d.tensors[name] = {n, k};
  }
  if (d.tensors.empty()) throw std::invalid_argument("--densities '" + path + "': no tensors recorded");
  return d;
}

void write_densities(const DensityTable& d, const std::string& path) {
  nlohmann::json t = nlohmann::json::object();
  for (const auto& [name, v] : d.tensors) t[name] = {{"elements", v.first}, {"nonzeros", v.second}};
  const nlohmann::json j = {{"format", kDensitiesFormat}, {"source", d.source}, {"tensors", t}};
  write_output(path, "densities", j.dump(1) + "\n");
}

}  // namespace vtensor
