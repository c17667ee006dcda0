#include "vtensor/memory/dtr_log.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

namespace vtensor {

LoggedProgram read_dtr_log(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read DTR log '" + path + "'");
  LoggedProgram p;
  std::unordered_map<std::string, TensorId> storage;  // name -> storage
  std::vector<char> mutated;
  std::vector<TensorId> last_args;                     // arguments of the last CALL (for ALIAS)
  int64_t now = 0;
  int line_no = 0;
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("DTR log '" + path + "' line " + std::to_string(line_no) + ": " + why);
  };
  auto lookup = [&](const std::string& name) {
    auto it = storage.find(name);
    if (it == storage.end()) fail("unknown tensor '" + name + "'");
    return it->second;
  };
  auto new_storage = [&](const std::string& name, int producer) {
    LoggedTensor t;
    t.name = name;
    t.producer = producer;
    p.tensors.push_back(t);
    mutated.push_back(0);
    const auto id = static_cast<TensorId>(p.tensors.size() - 1);
    storage[name] = id;
    return id;
  };
  auto access = [&](TensorId id, AccessKind k) {
    p.trace.accesses.push_back({id, static_cast<int>(p.op_names.size()) - 1, k, now});
  };
  auto begin_op = [&](const std::string& name, int64_t time) {
    p.op_names.push_back(name);
    p.op_time_ns.push_back(time);
  };
  int64_t pending_time = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      fail(std::string("not JSON: ") + e.what());
    }
    const std::string ins = j.value("INSTRUCTION", "");
    if (ins == "ANNOTATE") {
      if (j.value("ANNOTATION", "") == "BACKWARD") p.backward_start_op = static_cast<int>(p.op_names.size());
    } else if (ins == "CONSTANT") {
      const TensorId id = new_storage(j.at("NAME"), -1);
      p.tensors[static_cast<size_t>(id)].persistent = true;
    } else if (ins == "MEMORY") {
      p.tensors[static_cast<size_t>(lookup(j.at("NAME")))].bytes = std::stoull(j.at("MEMORY").get<std::string>());
    } else if (ins == "COPY") {
      storage[j.at("DST")] = lookup(j.at("SRC"));
    } else if (ins == "RELEASE") {
      // The program dropped a name; lifetimes come from the last access instead.
    } else if (ins == "CALL" || ins == "MUTATE" || ins == "COPY_FROM") {
      now += pending_time;
      pending_time = ins == "COPY_FROM" ? 0 : std::stoll(j.at("TIME").get<std::string>());
      begin_op(ins == "COPY_FROM" ? "copy_from" : j.at("NAME").get<std::string>(), pending_time);
      const int op = static_cast<int>(p.op_names.size()) - 1;
      last_args.clear();
      if (ins == "COPY_FROM") {
        last_args = {lookup(j.at("SRC")), lookup(j.at("DST"))};
      } else {
        for (const auto& a : j.at("ARGS")) last_args.push_back(lookup(a));
      }
      for (TensorId a : last_args) access(a, AccessKind::kRead);
      if (ins == "CALL") {
        for (const auto& r : j.at("RESULT")) {
          const TensorId id = new_storage(r, op);
          p.tensors[static_cast<size_t>(id)].inputs = last_args;
          p.tensors[static_cast<size_t>(id)].recomputable = true;
          access(id, AccessKind::kWrite);
        }
      } else if (ins == "MUTATE") {
        for (const auto& k : j.at("MUTATE")) {
          const size_t i = k.get<size_t>();
          if (i >= last_args.size()) fail("MUTATE index out of range");
          mutated[static_cast<size_t>(last_args[i])] = 1;
          access(last_args[i], AccessKind::kWrite);
        }
      } else {
        mutated[static_cast<size_t>(last_args[1])] = 1;
        access(last_args[1], AccessKind::kWrite);
      }
    } else if (ins == "ALIAS") {
      const int k = std::stoi(j.at("ALIAS").get<std::string>());
      if (k < 0) continue;
      if (static_cast<size_t>(k) >= last_args.size()) fail("ALIAS index out of range");
      // A view: no bytes of its own; the name now means its argument's storage.
      const TensorId view = lookup(j.at("NAME"));
      auto& t = p.tensors[static_cast<size_t>(view)];
      t.bytes = 0;
      t.recomputable = false;
      storage[j.at("NAME")] = last_args[static_cast<size_t>(k)];
    } else {
      fail("unknown instruction '" + ins + "'");
    }
  }
  now += pending_time;
  p.total_time_ns = now;
  for (auto& t : p.tensors) {
    if (!t.recomputable) continue;
    for (TensorId in : t.inputs)
      if (mutated[static_cast<size_t>(in)]) t.recomputable = false;
  }
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (mutated[i]) p.tensors[i].recomputable = false;
  return p;
}

}  // namespace vtensor
