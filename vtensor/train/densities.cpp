#include "vtensor/core/output.h"
#include "vtensor/train/densities.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace vtensor {

DensityTable load_densities(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("--densities '" + path + "': cannot read the file");
  const std::string expected = std::string("expected a JSON object {\"format\": \"") + kDensitiesFormat +
                               "\", \"tensors\": {NAME: {\"elements\": N, \"nonzeros\": K}}} as written by train --densities-out";
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("--densities '" + path + "': not JSON (" + e.what() + "); " + expected);
  }
  if (!j.is_object() || j.value("format", std::string()) != kDensitiesFormat || !j.contains("tensors") ||
      !j["tensors"].is_object())
    throw std::invalid_argument("--densities '" + path + "': " + expected);
  DensityTable d;
  d.source = j.value("source", path);
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
