#include "vtensor/backend/sim/gpu_specs.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "vtensor/core/errors.h"
#include "vtensor/core/input.h"

namespace vtensor {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

// Sources: NVIDIA product pages and datasheets for each card (FP32 peak at boost clock, memory
// bandwidth); host links are the theoretical per-direction PCIe figures: gen3 x16 15.75 GB/s,
// gen4 x16 31.5 GB/s, gen5 x16 63 GB/s. Launch overhead: the usual 5 us of a CUDA launch.
std::vector<GpuSpec> builtin() {
  return {
      // GeForce GTX Titan X (Maxwell, 2015): 3072 cores at 1075 MHz boost, 336.5 GB/s GDDR5.
      // vDNN's (MICRO'16) evaluation card.
      {"titan-x-12g", "NVIDIA Titan X (Maxwell), 12 GiB GDDR5, PCIe 3.0 x16", 12 * kGiB, 6.6, 336.5, 15.75, 15.75, 5},
      // Titan V (Volta, 2017): 14.9 TFLOP/s FP32, 652.8 GB/s HBM2. The DTR logs were recorded on one.
      {"titan-v-12g", "NVIDIA Titan V, 12 GiB HBM2, PCIe 3.0 x16", 12 * kGiB, 14.9, 652.8, 15.75, 15.75, 5},
      // Tesla P100 PCIe 16 GB: 9.3 TFLOP/s FP32, 732 GB/s HBM2. Capuchin's (ASPLOS'20) card.
      {"p100-16g", "NVIDIA Tesla P100 PCIe, 16 GiB HBM2, PCIe 3.0 x16", 16 * kGiB, 9.3, 732, 15.75, 15.75, 5},
      // Tesla V100 SXM2: 15.7 TFLOP/s FP32, 900 GB/s HBM2, host over PCIe 3.0 x16.
      {"v100-16g", "NVIDIA Tesla V100 SXM2, 16 GiB HBM2, PCIe 3.0 x16 to the host", 16 * kGiB, 15.7, 900, 15.75, 15.75, 5},
      {"v100-32g", "NVIDIA Tesla V100 SXM2, 32 GiB HBM2, PCIe 3.0 x16 to the host", 32 * kGiB, 15.7, 900, 15.75, 15.75, 5},
      // A100 SXM4: 19.5 TFLOP/s FP32 (not TF32), 1555 GB/s (40 GB) / 2039 GB/s (80 GB), PCIe 4.0 x16.
      {"a100-40g", "NVIDIA A100 SXM4, 40 GiB HBM2, PCIe 4.0 x16", 40 * kGiB, 19.5, 1555, 31.5, 31.5, 5},
      {"a100-80g", "NVIDIA A100 SXM4, 80 GiB HBM2e, PCIe 4.0 x16", 80 * kGiB, 19.5, 2039, 31.5, 31.5, 5},
      // H100 SXM5: 67 TFLOP/s FP32, 3.35 TB/s HBM3, PCIe 5.0 x16.
      {"h100-80g", "NVIDIA H100 SXM5, 80 GiB HBM3, PCIe 5.0 x16", 80 * kGiB, 67, 3350, 63, 63, 5},
  };
}

std::mutex& table_mutex() {
  static std::mutex mu;
  return mu;
}

std::vector<GpuSpec>& table() {
  static std::vector<GpuSpec> t = builtin();
  return t;
}

double number(const nlohmann::json& j, const char* key, const std::string& where, double fallback = -1) {
  if (!j.contains(key)) {
    if (fallback >= 0) return fallback;
    throw std::invalid_argument(where + ": missing field '" + key + "'");
  }
  if (!j[key].is_number()) throw std::invalid_argument(where + ": field '" + key + "' must be a number");
  return j[key].get<double>();
}

// "kind_scale": {"conv2d": 1.3, ...}: per OpKind, 1 where not given.
std::vector<double> kind_scale(const nlohmann::json& j, const std::string& where) {
  constexpr size_t kKinds = static_cast<size_t>(OpKind::kReplay) + 1;
  if (!j.is_object()) throw std::invalid_argument(where + ": 'kind_scale' must be an object of op kind -> factor");
  std::vector<double> scale(kKinds, 1.0);
  for (const auto& [name, v] : j.items()) {
    size_t k = 0;
    while (k < kKinds && name != to_string(static_cast<OpKind>(k))) ++k;
    if (k == kKinds) {
      std::string accepted;
      for (size_t i = 0; i < kKinds; ++i) accepted += (i ? ", " : "") + std::string(to_string(static_cast<OpKind>(i)));
      throw std::invalid_argument(where + ": 'kind_scale': unknown op kind '" + name + "'; accepted: " + accepted);
    }
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      throw std::invalid_argument(where + ": 'kind_scale' of '" + name + "' must be a positive number");
    scale[k] = v.get<double>();
  }
  return scale;
}

// "host": {...}: HostModel; op kinds not in "op_us" take its "default" (0 if none).
HostModel host_model(const nlohmann::json& j, const std::string& where) {
  constexpr size_t kKinds = static_cast<size_t>(OpKind::kReplay) + 1;
  if (!j.is_object()) throw std::invalid_argument(where + ": 'host' must be an object");
  static const std::vector<std::string> kFields = {"op_us",     "alloc_us",       "copy_us",  "event_us", "move_us",
                                                   "action_us", "queued_copy_us", "loss_sync"};
  for (const auto& [name, v] : j.items())
    if (std::find(kFields.begin(), kFields.end(), name) == kFields.end()) {
      std::string accepted;
      for (const auto& f : kFields) accepted += (accepted.empty() ? "" : ", ") + f;
      throw std::invalid_argument(where + ": 'host': unknown field '" + name + "'; accepted: " + accepted);
    }
  HostModel h;
  h.on = true;
  auto us = [&](const char* key) {
    const double v = number(j, key, where + " 'host'", 0);
    if (!(v >= 0) || !std::isfinite(v)) throw std::invalid_argument(where + ": 'host' field '" + key + "' must be >= 0");
    return v;
  };
  h.alloc_us = us("alloc_us"), h.copy_us = us("copy_us"), h.event_us = us("event_us");
  h.move_us = us("move_us"), h.action_us = us("action_us"), h.queued_copy_us = us("queued_copy_us");
  if (j.contains("loss_sync")) {
    if (!j["loss_sync"].is_boolean()) throw std::invalid_argument(where + ": 'host' field 'loss_sync' must be true or false");
    h.loss_sync = j["loss_sync"].get<bool>();
  }
  h.op_us.assign(kKinds, 0.0);
  if (!j.contains("op_us")) return h;
  const auto& ops = j["op_us"];
  if (!ops.is_object()) throw std::invalid_argument(where + ": 'host': 'op_us' must be an object of op kind -> microseconds");
  auto value = [&](const std::string& name, const nlohmann::json& v) {
    if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>()))
      throw std::invalid_argument(where + ": 'host': 'op_us' of '" + name + "' must be a number >= 0");
    return v.get<double>();
  };
  if (ops.contains("default")) h.op_us.assign(kKinds, value("default", ops["default"]));
  for (const auto& [name, v] : ops.items()) {
    if (name == "default") continue;
    size_t k = 0;
    while (k < kKinds && name != to_string(static_cast<OpKind>(k))) ++k;
    if (k == kKinds) {
      std::string accepted = "default";
      for (size_t i = 0; i < kKinds; ++i) accepted += ", " + std::string(to_string(static_cast<OpKind>(i)));
      throw std::invalid_argument(where + ": 'host': 'op_us': unknown op kind '" + name + "'; accepted: " + accepted);
    }
    h.op_us[k] = value(name, v);
  }
  return h;
}

}  // namespace

void check_gpu_spec(const GpuSpec& g, const std::string& where) {
  auto positive = [&](double v, const char* field) {
    if (!(v > 0)) throw std::invalid_argument(where + ": '" + field + "' must be positive");
  };
  if (g.name.empty()) throw std::invalid_argument(where + ": 'name' must not be empty");
  positive(static_cast<double>(g.memory_bytes), "memory");
  positive(g.fp32_tflops, "fp32_tflops");
  positive(g.hbm_gbps, "hbm_gbps");
  positive(g.h2d_gbps, "h2d_gbps");
  positive(g.d2h_gbps, "d2h_gbps");
  if (g.launch_us < 0) throw std::invalid_argument(where + ": 'launch_us' must be >= 0");
}

const std::vector<GpuSpec>& gpu_table() { return table(); }

std::vector<std::string> gpu_names() {
  std::lock_guard<std::mutex> l(table_mutex());
  std::vector<std::string> out;
  for (const auto& g : table()) out.push_back(g.name);
  return out;
}

const GpuSpec& find_gpu(const std::string& name) {
  {
    std::lock_guard<std::mutex> l(table_mutex());
    for (const auto& g : table())
      if (g.name == name) return g;
  }
  std::string accepted;
  for (const auto& n : gpu_names()) accepted += (accepted.empty() ? "" : ", ") + n;
  throw std::invalid_argument("--gpu: unknown GPU '" + name + "'; accepted: " + accepted +
                              " (or add one with --gpu-file)");
}

std::vector<GpuSpec> read_gpu_specs(std::istream& in, const std::string& path) {
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxInputBytes)
      throw std::invalid_argument("--gpu-file '" + path + "' is larger than " + format_bytes(kMaxInputBytes));
  }
  nlohmann::json j = parse_json(text, "--gpu-file '" + path + "'");
  if (!j.is_array()) j = nlohmann::json::array({j});
  std::vector<GpuSpec> specs;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& o = j[i];
    const std::string where = "--gpu-file '" + path + "' entry " + std::to_string(i);
    if (!o.is_object()) throw std::invalid_argument(where + ": expected an object");
    if (!o.contains("name") || !o["name"].is_string()) throw std::invalid_argument(where + ": missing string field 'name'");
    GpuSpec g;
    const bool based = o.contains("base");
    if (based) {
      if (!o["base"].is_string()) throw std::invalid_argument(where + ": 'base' must be a GPU's name");
      try {
        g = find_gpu(o["base"].get<std::string>());
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(where + ": 'base': " + e.what());
      }
      g.description += " (" + o["name"].get<std::string>() + ", from " + path + ")";
    }
    g.name = o["name"].get<std::string>();
    if (o.contains("description") && !o["description"].is_string())
      throw std::invalid_argument(where + ": 'description' must be a string");
    g.description = o.value("description", based ? g.description : g.name + " (from " + path + ")");
    if (!o.contains("memory")) {
      if (!based) throw std::invalid_argument(where + ": missing field 'memory'");
    } else if (o["memory"].is_string()) {
      g.memory_bytes = parse_bytes(o["memory"].get<std::string>(), where + " 'memory'");
    } else if (o["memory"].is_number_unsigned()) {
      g.memory_bytes = o["memory"].get<size_t>();
    } else {
      throw std::invalid_argument(where + ": 'memory' must be bytes or a size such as \"16GiB\"");
    }
    g.fp32_tflops = number(o, "fp32_tflops", where, based ? g.fp32_tflops : -1);
    g.hbm_gbps = number(o, "hbm_gbps", where, based ? g.hbm_gbps : -1);
    const bool h2d_given = o.contains("h2d_gbps");
    g.h2d_gbps = number(o, "h2d_gbps", where, based ? g.h2d_gbps : -1);
    g.d2h_gbps = number(o, "d2h_gbps", where, based && !h2d_given ? g.d2h_gbps : g.h2d_gbps);  // default: the h2d figure
    g.launch_us = number(o, "launch_us", where, based ? g.launch_us : 5);
    if (o.contains("kind_scale")) g.kind_scale = kind_scale(o["kind_scale"], where);
    if (o.contains("link_efficiency")) {
      g.link_efficiency = number(o, "link_efficiency", where);
      if (!(g.link_efficiency > 0 && g.link_efficiency <= 1))
        throw std::invalid_argument(where + ": 'link_efficiency' must be in (0, 1]");
    }
    if (o.contains("host")) g.host = host_model(o["host"], where);
    check_gpu_spec(g, where);
    specs.push_back(g);
  }
  return specs;
}

std::vector<std::string> load_gpu_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("--gpu-file: cannot read '" + path + "'");
  std::vector<GpuSpec> specs = read_gpu_specs(in, path);
  std::lock_guard<std::mutex> l(table_mutex());
  std::vector<std::string> names;
  for (auto& g : specs) {
    names.push_back(g.name);
    bool replaced = false;
    for (auto& t : table())
      if (t.name == g.name) {
        t = g;
        replaced = true;
      }
    if (!replaced) table().push_back(g);
  }
  return names;
}

}  // namespace vtensor
