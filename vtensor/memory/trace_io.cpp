#include "vtensor/memory/trace_io.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

#include "vtensor/core/input.h"

namespace vtensor {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, size_t line, const std::string& what) {
  throw std::invalid_argument("trace '" + path + "' line " + std::to_string(line) + ": " + what);
}

json parse_line(const std::string& path, size_t line, const std::string& text) {
  json j;
  try {
    j = parse_json(text, "the line");  // nesting and numbers bounded
  } catch (const std::invalid_argument& e) {
    fail(path, line, e.what());
  }
  if (!j.is_object()) fail(path, line, "expected a JSON object");
  return j;
}

const json& field(const std::string& path, size_t line, const json& j, const char* key) {
  if (!j.contains(key)) fail(path, line, std::string("missing field '") + key + "'");
  return j[key];
}

std::string str_field(const std::string& path, size_t line, const json& j, const char* key) {
  const json& v = field(path, line, j, key);
  if (!v.is_string()) fail(path, line, std::string("field '") + key + "' must be a string");
  return v.get<std::string>();
}

int64_t int_field(const std::string& path, size_t line, const json& j, const char* key) {
  const json& v = field(path, line, j, key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
    fail(path, line, std::string("field '") + key + "' must be an integer");
  return v.get<int64_t>();
}

// DTR writes sizes and times as decimal strings.
int64_t decimal_field(const std::string& path, size_t line, const json& j, const char* key) {
  const std::string s = str_field(path, line, j, key);
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    fail(path, line, std::string("field '") + key + "' must be a non-negative integer in a string, got '" + s + "'");
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    fail(path, line, std::string("field '") + key + "' out of range: '" + s + "'");
  }
}

// The largest tensor a trace may declare, 1 PiB (parse_bytes' bound too): sizes and element
// counts stay far from int64 overflow.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 50;

Shape floats_for(int64_t bytes) { return Shape{(bytes + 3) / 4}; }

TensorKind parse_kind(const std::string& path, size_t line, const std::string& s) {
  for (TensorKind k : {TensorKind::kParam, TensorKind::kOptimizerState, TensorKind::kBuffer, TensorKind::kData,
                       TensorKind::kActivation, TensorKind::kGradient})
    if (s == to_string(k)) return k;
  fail(path, line, "unknown tensor kind '" + s + "'");
}

std::ifstream open(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw std::invalid_argument("--trace '" + path + "' is a folder; accepted: a file");
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("--trace: cannot read '" + path + "'");
  return in;
}

// The ids in o[key], each a tensor of the header's n_tensors.
std::vector<TensorId> tensor_ids(const std::string& path, size_t line, const json& o, const char* key, int64_t n_tensors) {
  const json& v = field(path, line, o, key);
  if (!v.is_array()) fail(path, line, std::string("'") + key + "' must be an array");
  std::vector<TensorId> ids;
  for (const auto& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= n_tensors)
      fail(path, line, std::string("'") + key + "' holds an id that is not a tensor: " + x.dump());
    ids.push_back(static_cast<TensorId>(x.get<int64_t>()));
  }
  return ids;
}

// The dims of tensor `name`'s 'shape' field.
std::vector<int64_t> parse_dims(const std::string& path, size_t line, const json& sv, const std::string& name) {
  // Checked element by element: a number past uint64 parses as a double, and converting
  // that to an integer is undefined behaviour (found by fuzz_trace).
  if (!sv.is_array()) fail(path, line, "tensor " + name + ": 'shape' must be an array of integers");
  std::vector<int64_t> dims;
  for (const auto& x : sv) {
    if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail(path, line, "tensor " + name + ": 'shape' must be an array of integers");
    dims.push_back(x.get<int64_t>());
  }
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > kMaxTensorBytes / d))
      fail(path, line, "tensor " + name + ": 'shape' must hold sizes >= 0 of at most 1 PiB in all");
    n *= d;
  }
  return dims;
}

// The header's tensor i, checked against the tensors of g before it.
TensorInfo parse_tensor(const std::string& path, size_t line, const json& t, size_t i, const Graph& g) {
  if (!t.is_object()) fail(path, line, "tensor " + std::to_string(i) + " is not an object");
  if (int_field(path, line, t, "id") != static_cast<int64_t>(i)) fail(path, line, "tensor ids must be 0, 1, 2, ...");
  TensorInfo info;
  info.name = str_field(path, line, t, "name");
  info.kind = parse_kind(path, line, str_field(path, line, t, "kind"));
  const int64_t bytes = int_field(path, line, t, "bytes");
  if (bytes < 0 || bytes > kMaxTensorBytes) fail(path, line, "tensor " + info.name + ": bytes must be 0 to 1 PiB");
  info.shape = floats_for(bytes);
  if (t.contains("shape")) {
    info.shape = Shape(parse_dims(path, line, t["shape"], info.name));
    if (static_cast<int64_t>(info.bytes()) != bytes) fail(path, line, "tensor " + info.name + ": shape and bytes disagree");
  }
  if (t.contains("view_of")) {  // a view: no storage of its own (reshape, shared relu gradients)
    const int64_t v = int_field(path, line, t, "view_of");
    if (v < 0 || v >= static_cast<int64_t>(i) || g.tensor(static_cast<TensorId>(v)).bytes() != info.bytes())
      fail(path, line, "tensor " + info.name + ": 'view_of' must name an earlier tensor of the same size");
    info.view_of = static_cast<TensorId>(v);
  }
  return info;
}

// The header's op i, a replayed op of no kernel.
Op parse_op(const std::string& path, size_t line, const json& o, size_t i, int64_t n_tensors) {
  if (!o.is_object()) fail(path, line, "op " + std::to_string(i) + " is not an object");
  if (int_field(path, line, o, "index") != static_cast<int64_t>(i)) fail(path, line, "op indices must be 0, 1, 2, ...");
  Op op{.kind = OpKind::kReplay};
  op.name = str_field(path, line, o, "name") + " [" + str_field(path, line, o, "kind") + "]";
  op.inputs = tensor_ids(path, line, o, "inputs", n_tensors);
  op.outputs = tensor_ids(path, line, o, "outputs", n_tensors);
  op.inplace = tensor_ids(path, line, o, "inplace", n_tensors);
  const int64_t ws = int_field(path, line, o, "workspace");
  if (ws < 0) fail(path, line, "op " + op.name + " has a negative workspace");
  op.workspace_bytes = static_cast<size_t>(ws);
  if (!field(path, line, o, "flops").is_number()) fail(path, line, "'flops' must be a number");
  op.flops = o["flops"].get<double>();
  if (!field(path, line, o, "backward").is_boolean() || !field(path, line, o, "optimizer").is_boolean())
    fail(path, line, "'backward' and 'optimizer' must be booleans");
  op.backward = o["backward"].get<bool>();
  op.optimizer = o["optimizer"].get<bool>();
  return op;
}

// Every op reads what is persistent or produced before it, and produces each of the rest once,
// as the header's tensors say.
void check_producers(const std::string& path, size_t line, const Graph& g, const std::vector<Op>& parsed,
                     const json& tensors) {
  std::vector<int> producer(tensors.size(), -1);
  for (size_t i = 0; i < parsed.size(); ++i) {
    for (TensorId in : parsed[i].inputs)
      if (!g.tensor(in).persistent() && producer[static_cast<size_t>(in)] < 0)
        fail(path, line, "op " + parsed[i].name + " reads " + g.tensor(in).name + " before any op produces it");
    for (TensorId out : parsed[i].outputs) {
      if (producer[static_cast<size_t>(out)] >= 0 || g.tensor(out).persistent())
        fail(path, line, "op " + parsed[i].name + " produces " + g.tensor(out).name + ", which is persistent or produced twice");
      producer[static_cast<size_t>(out)] = static_cast<int>(i);
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    if (int_field(path, line, tensors[i], "producer") != producer[i])
      fail(path, line, "tensor " + g.tensor(static_cast<TensorId>(i)).name + ": producer disagrees with the op list");
}

// The header's op times: per recorded iteration, one time per op.
std::vector<std::vector<double>> parse_op_times(const std::string& path, size_t line, const json& head, size_t num_ops) {
  std::vector<std::vector<double>> times;
  if (!head.contains("op_times")) return times;
  const json& ot = head["op_times"];
  if (!ot.is_array()) fail(path, line, "'op_times' must be an array");
  for (const auto& it : ot) {
    if (!it.is_object()) fail(path, line, "'op_times' entries must be objects");
    const json& ms = field(path, line, it, "ms");
    if (!ms.is_array() || ms.size() != num_ops)
      fail(path, line, "'op_times' must hold one time per op (" + std::to_string(num_ops) + ")");
    std::vector<double> t;
    for (const auto& x : ms) {
      if (!x.is_number() || x.get<double>() < 0) fail(path, line, "op times must be non-negative numbers");
      t.push_back(x.get<double>());
    }
    times.push_back(std::move(t));
  }
  return times;
}

// The body after the header (line): accesses, checked (the graph is rebuilt from the header).
void check_accesses(std::istream& in, const std::string& path, size_t line, int64_t n_tensors, size_t num_ops) {
  std::string text;
  while (read_line(in, text, "trace '" + path + "'", line + 1)) {
    ++line;
    if (text.empty()) continue;
    const json j = parse_line(path, line, text);
    const std::string type = str_field(path, line, j, "type");
    if (type == "access") {
      const int64_t id = int_field(path, line, j, "id"), op = int_field(path, line, j, "op");
      int_field(path, line, j, "iter");
      int_field(path, line, j, "t_ns");
      str_field(path, line, j, "kind");
      if (id < 0 || id >= n_tensors) fail(path, line, "access to tensor " + std::to_string(id) + ", which the header lacks");
      if (op < 0 || op >= static_cast<int64_t>(num_ops)) fail(path, line, "access by op " + std::to_string(op) + ", which the header lacks");
    } else {
      fail(path, line, "unknown line type '" + type + "'; accepted after the header: access");
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- vtensor traces

Graph load_vtensor_trace(const std::string& path) {
  std::ifstream in = open(path);
  return read_vtensor_trace(in, path);
}

Graph read_vtensor_trace(std::istream& in, const std::string& path) {
  std::string text;
  size_t line = 0;
  if (!read_line(in, text, "trace '" + path + "'", 1)) fail(path, 1, "empty file");
  ++line;
  const json head = parse_line(path, line, text);
  if (str_field(path, line, head, "type") != "graph") fail(path, line, "the first line must be the graph header");
  if (!head.contains("ops"))
    fail(path, line, "the header has no op list (a trace from an older vtensor); record it again with --trace");
  const json& tensors = field(path, line, head, "tensors");
  const json& ops = field(path, line, head, "ops");
  if (!tensors.is_array() || !ops.is_array()) fail(path, line, "'tensors' and 'ops' must be arrays");
  Graph g;
  const auto n_tensors = static_cast<int64_t>(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) g.add_tensor(parse_tensor(path, line, tensors[i], i, g));
  std::vector<Op> parsed;  // added to the graph once their times are known
  for (size_t i = 0; i < ops.size(); ++i) parsed.push_back(parse_op(path, line, ops[i], i, n_tensors));
  check_producers(path, line, g, parsed, tensors);
  const std::vector<std::vector<double>> times = parse_op_times(path, line, head, parsed.size());
  check_accesses(in, path, line, n_tensors, parsed.size());
  if (times.empty()) fail(path, 1, "the header has no op_times: the trace has no op times to replay");
  // The first iteration pays for warm-up (page faults, allocations): average the others.
  const size_t first = times.size() > 1 ? 1 : 0;
  for (size_t i = 0; i < parsed.size(); ++i) {
    double sum = 0;
    for (size_t k = first; k < times.size(); ++k) sum += times[k][i];
    parsed[i].recorded_ms = sum / static_cast<double>(times.size() - first);
    g.add_op(std::move(parsed[i]));
  }
  return g;
}

// ---------------------------------------------------------------- DTR logs

namespace {

class DtrImporter {
 public:
  explicit DtrImporter(std::string path) : path_(std::move(path)) {}

  Graph run(std::istream& in) {
    std::string text;
    while (read_line(in, text, "trace '" + path_ + "'", line_ + 1)) {
      ++line_;
      if (text.empty()) continue;
      instruction(parse_line(path_, line_, text));
    }
    finish_pending();
    if (g_.num_ops() == 0) fail(path_, line_, "no operators (CALL / MUTATE) in the log");
    const int last = static_cast<int>(g_.num_ops()) - 1;
    for (const auto& [storage, refs] : refs_)
      if (refs > 0 && !g_.tensor(storage).persistent()) g_.tensor(storage).release_after = last;
    if (!saved_.empty()) {  // a log vtensor.torch recorded, to follow with values
      // Only what the recording runtime can move is movable here, and a storage written in place
      // after its op made it is not recomputable: its producer alone would not make those bytes.
      for (size_t i = 0; i < g_.num_tensors(); ++i) g_.tensor(static_cast<TensorId>(i)).pinned = !saved_.count(static_cast<TensorId>(i));
      // Nor is what an op that also writes its inputs made (batch norm): it runs once.
      for (const Op& op : g_.ops()) {
        for (TensorId w : op.inplace)
          if (g_.tensor(w).producer >= 0 && g_.tensor(w).producer < op.index) g_.tensor(w).recomputable = false;
        if (!op.inplace.empty())
          for (TensorId out : op.outputs) g_.tensor(out).recomputable = false;
      }
    }
    mark_overwritten_inputs(g_);
    return std::move(g_);
  }

 private:
  struct Pending {
    bool active = false;
    bool constant = false;
    size_t line = 0;
    std::string op_name;
    std::vector<std::string> args, results;
    double ms = 0;
    std::map<std::string, int64_t> memory;
    std::map<std::string, int64_t> alias;
    std::vector<size_t> mutate;  // a CALL's MUTATE: the arguments it also writes
  };

  // A MUTATE field: indices of `args`.
  std::vector<size_t> mutate_field(const json& j, size_t args) {
    const json& m = field(path_, line_, j, "MUTATE");
    if (!m.is_array()) fail(path_, line_, "field 'MUTATE' must be an array of argument indices");
    std::vector<size_t> out;
    for (const auto& x : m) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= static_cast<int64_t>(args))
        fail(path_, line_, "MUTATE index " + x.dump() + " is not an argument index");
      out.push_back(static_cast<size_t>(x.get<int64_t>()));
    }
    return out;
  }

  TensorId storage(const std::string& name) {
    auto it = names_.find(name);
    if (it == names_.end()) fail(path_, line_, "tensor '" + name + "' is not defined (or already released)");
    return it->second;
  }

  void bind(const std::string& name, TensorId id) {
    if (names_.count(name)) fail(path_, line_, "tensor '" + name + "' is defined twice");
    names_[name] = id;
    ++refs_[id];
  }

  std::vector<std::string> names_field(const json& j, const char* key) {
    const json& v = field(path_, line_, j, key);
    if (!v.is_array()) fail(path_, line_, std::string("field '") + key + "' must be an array of tensor names");
    std::vector<std::string> out;
    for (const auto& x : v) {
      if (!x.is_string()) fail(path_, line_, std::string("field '") + key + "' must hold tensor names");
      out.push_back(x.get<std::string>());
    }
    return out;
  }

  void instruction(const json& j) {
    const std::string ins = str_field(path_, line_, j, "INSTRUCTION");
    if (ins == "MEMORY") {
      const std::string name = str_field(path_, line_, j, "NAME");
      if (!pending_.active || (pending_.constant ? pending_.results[0] != name
                                                  : std::find(pending_.results.begin(), pending_.results.end(), name) ==
                                                        pending_.results.end()))
        fail(path_, line_, "MEMORY for '" + name + "', which the instruction before did not make");
      const int64_t bytes = decimal_field(path_, line_, j, "MEMORY");
      if (bytes > kMaxTensorBytes) fail(path_, line_, "MEMORY of '" + name + "' is over 1 PiB");
      pending_.memory[name] = bytes;
      return;
    }
    if (ins == "ALIAS") {
      const std::string name = str_field(path_, line_, j, "NAME");
      if (!pending_.active || pending_.constant ||
          std::find(pending_.results.begin(), pending_.results.end(), name) == pending_.results.end())
        fail(path_, line_, "ALIAS for '" + name + "', which the instruction before did not make");
      const std::string a = str_field(path_, line_, j, "ALIAS");
      try {
        size_t used = 0;
        const int64_t idx = std::stoll(a, &used);
        if (used != a.size() || idx < -1 || idx >= static_cast<int64_t>(pending_.args.size())) throw std::out_of_range(a);
        pending_.alias[name] = idx;
      } catch (const std::exception&) {
        fail(path_, line_, "ALIAS must be -1 or an argument index below " + std::to_string(pending_.args.size()) +
                               ", got '" + a + "'");
      }
      return;
    }
    finish_pending();
    if (ins == "ANNOTATE") {
      const std::string a = str_field(path_, line_, j, "ANNOTATION");
      if (a == "BACKWARD") backward_ = true;
      else if (a != "START") fail(path_, line_, "unknown ANNOTATION '" + a + "'; accepted: START, BACKWARD");
    } else if (ins == "CONSTANT") {
      pending_ = {.active = true, .constant = true, .line = line_, .results = {str_field(path_, line_, j, "NAME")}};
    } else if (ins == "CALL") {
      pending_ = {.active = true, .line = line_, .op_name = str_field(path_, line_, j, "NAME"),
                  .args = names_field(j, "ARGS"), .results = names_field(j, "RESULT"),
                  .ms = static_cast<double>(decimal_field(path_, line_, j, "TIME")) * 1e-6};
      for (const auto& a : pending_.args) storage(a);  // defined?
      if (j.contains("MUTATE")) pending_.mutate = mutate_field(j, pending_.args.size());
    } else if (ins == "MUTATE") {
      Op op{.kind = OpKind::kReplay, .name = str_field(path_, line_, j, "NAME"), .backward = backward_};
      const auto args = names_field(j, "ARGS");
      op.recorded_ms = static_cast<double>(decimal_field(path_, line_, j, "TIME")) * 1e-6;
      for (const auto& a : args) add_unique(op.inputs, storage(a));
      for (size_t x : mutate_field(j, args.size())) add_unique(op.inplace, storage(args[x]));
      g_.add_op(std::move(op));
    } else if (ins == "COPY") {
      bind(str_field(path_, line_, j, "DST"), storage(str_field(path_, line_, j, "SRC")));
    } else if (ins == "COPY_FROM") {
      const TensorId dst = storage(str_field(path_, line_, j, "DST")), src = storage(str_field(path_, line_, j, "SRC"));
      Op op{.kind = OpKind::kReplay, .name = "copy_from", .backward = backward_};
      add_unique(op.inputs, dst);
      add_unique(op.inputs, src);
      op.inplace = {dst};
      g_.add_op(std::move(op));
    } else if (ins == "SAVED") {
      saved_.insert(storage(str_field(path_, line_, j, "NAME")));
    } else if (ins == "RELEASE") {
      const std::string name = str_field(path_, line_, j, "NAME");
      const TensorId id = storage(name);
      names_.erase(name);
      if (--refs_[id] == 0 && !g_.tensor(id).persistent())
        g_.tensor(id).release_after = std::max(0, static_cast<int>(g_.num_ops()) - 1);
    } else {
      fail(path_, line_, "unknown INSTRUCTION '" + ins +
                             "'; accepted: ANNOTATE, CONSTANT, MEMORY, CALL, MUTATE, COPY, COPY_FROM, ALIAS, RELEASE, SAVED");
    }
  }

  static void add_unique(std::vector<TensorId>& v, TensorId id) {
    if (std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
  }

  void finish_pending() {
    if (!pending_.active) return;
    Pending p = std::move(pending_);
    pending_ = {};
    auto bytes_of = [&](const std::string& name) {
      auto it = p.memory.find(name);
      if (it == p.memory.end()) fail(path_, p.line, "no MEMORY line for '" + name + "'");
      return it->second;
    };
    if (p.constant) {
      bind(p.results[0], g_.add_tensor({.name = p.results[0], .shape = floats_for(bytes_of(p.results[0])),
                                        .kind = TensorKind::kParam}));
      return;
    }
    Op op{.kind = OpKind::kReplay, .name = p.op_name, .backward = backward_};
    op.recorded_ms = p.ms;
    for (const auto& a : p.args) add_unique(op.inputs, storage(a));
    for (size_t x : p.mutate) add_unique(op.inplace, storage(p.args[x]));
    for (const auto& r : p.results) {
      auto al = p.alias.find(r);
      if (al != p.alias.end() && al->second >= 0) {  // a view: the argument's storage, no new bytes
        bind(r, storage(p.args[static_cast<size_t>(al->second)]));
        continue;
      }
      const TensorId id = g_.add_tensor({.name = r, .shape = floats_for(bytes_of(r)),
                                         .kind = backward_ ? TensorKind::kGradient : TensorKind::kActivation});
      op.outputs.push_back(id);
      bind(r, id);
    }
    g_.add_op(std::move(op));
  }

  std::string path_;
  size_t line_ = 0;
  Graph g_;
  Pending pending_;
  bool backward_ = false;
  std::unordered_map<std::string, TensorId> names_;
  std::map<TensorId, int> refs_;  // names and views per storage
  std::set<TensorId> saved_;      // SAVED: the storages the recording runtime can move
};

}  // namespace

int mark_overwritten_inputs(Graph& g) {
  const size_t n = g.num_tensors();
  // A storage's last access: its last use, or its release when later (the executor's notion).
  std::vector<int> horizon(n, -1);
  std::vector<std::vector<int>> writes(n);  // per storage, the ops writing it in place, ascending
  for (const Op& op : g.ops()) {
    for (TensorId in : op.inputs) horizon[static_cast<size_t>(in)] = op.index;
    for (TensorId out : op.outputs) horizon[static_cast<size_t>(out)] = op.index;
    for (TensorId w : op.inplace) writes[static_cast<size_t>(w)].push_back(op.index);
  }
  for (const auto& t : g.tensors())
    horizon[static_cast<size_t>(t.id)] = std::max(horizon[static_cast<size_t>(t.id)], t.release_after);
  // A tensor may be recomputed until its horizon: its last access, or later as part of the chain
  // of a recomputable tensor made from it. Walking the ops backwards, every consumer's horizon is
  // final before its inputs' are extended by it.
  int marked = 0;
  for (int i = static_cast<int>(g.num_ops()) - 1; i >= 0; --i) {
    const Op& op = g.op(i);
    if (!is_recomputable(op)) continue;
    for (TensorId out : op.outputs) {
      TensorInfo& t = g.tensor(out);
      const int h = horizon[static_cast<size_t>(out)];
      for (TensorId in : op.inputs) {
        const auto& w = writes[static_cast<size_t>(in)];
        const auto first = std::upper_bound(w.begin(), w.end(), i);  // the first write after i
        if (first != w.end() && *first < h) t.recomputable = false;  // a write at h comes after any recompute
      }
      if (!t.recomputable) {
        ++marked;
        continue;
      }
      for (TensorId in : op.inputs) horizon[static_cast<size_t>(in)] = std::max(horizon[static_cast<size_t>(in)], h);
    }
  }
  return marked;
}

Graph load_dtr_log(const std::string& path) {
  std::ifstream in = open(path);
  return read_dtr_log(in, path);
}

Graph read_dtr_log(std::istream& in, const std::string& name) { return DtrImporter(name).run(in); }

// ---------------------------------------------------------------- by name

std::string dtr_logs_dir() {
  if (const char* env = std::getenv("VTENSOR_DTR_LOGS")) return env;
#ifdef VTENSOR_DTR_LOGS_DIR
  if (std::filesystem::is_directory(VTENSOR_DTR_LOGS_DIR)) return VTENSOR_DTR_LOGS_DIR;
#endif
  return {};
}

namespace {

std::map<std::string, std::string> dtr_logs() {
  std::map<std::string, std::string> out;
  const std::string dir = dtr_logs_dir();
  if (dir.empty() || !std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".log") continue;
    std::string name = e.path().filename().string();
    name = name.substr(0, name.find('-'));
    if (name.rfind("tv_", 0) == 0) name = name.substr(3);
    out[name] = e.path().string();
  }
  return out;
}

}  // namespace

std::vector<std::string> dtr_log_names() {
  std::vector<std::string> out;
  for (const auto& [n, p] : dtr_logs()) out.push_back(n);
  return out;
}

std::string dtr_log_path(const std::string& name) {
  const auto logs = dtr_logs();
  auto it = logs.find(name);
  if (it != logs.end()) return it->second;
  if (logs.empty())
    throw std::invalid_argument("--trace dtr:" + name + ": the DTR logs are not available (extracted from "
                                "../shared/external/dtr-logs at configure time, or set VTENSOR_DTR_LOGS)");
  std::string accepted;
  for (const auto& [n, p] : logs) accepted += (accepted.empty() ? "" : ", ") + n;
  throw std::invalid_argument("--trace dtr:" + name + ": unknown DTR log; accepted: " + accepted);
}

Graph load_trace(const std::string& spec) {
  if (spec.rfind("dtr:", 0) == 0) return load_dtr_log(dtr_log_path(spec.substr(4)));
  std::ifstream in = open(spec);
  std::string first;
  read_line(in, first, "trace '" + spec + "'", 1);
  if (first.find("\"INSTRUCTION\"") != std::string::npos) return load_dtr_log(spec);
  return load_vtensor_trace(spec);
}

double recorded_total_ms(const Graph& g) {
  double t = 0;
  for (const Op& op : g.ops()) t += op.recorded_ms;
  return t;
}

AccessTrace recorded_access_trace(const Graph& g) {
  AccessTrace t;
  auto base = [&](TensorId id) {
    while (g.tensor(id).view_of != kNoTensor) id = g.tensor(id).view_of;
    return id;
  };
  double now_ms = 0;
  for (const Op& op : g.ops()) {
    const auto at = static_cast<int64_t>(std::llround(now_ms * 1e6));
    for (TensorId in : op.inputs) t.accesses.push_back({base(in), op.index, AccessKind::kRead, at});
    for (TensorId out : op.outputs) t.accesses.push_back({base(out), op.index, AccessKind::kWrite, at});
    for (TensorId w : op.inplace) t.accesses.push_back({base(w), op.index, AccessKind::kWrite, at});
    t.op_ms.push_back(op.recorded_ms);
    now_ms += op.recorded_ms;
  }
  return t;
}

}  // namespace vtensor
