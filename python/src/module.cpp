// The `vtensor._vtensor` extension: vtensor's allocators over one arena, the pluggable
// allocator's entry points, and the planners the PyTorch hooks call (Capuchin's swap planner,
// the checkpoint choice). No torch here: the Python side passes plain numbers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "arena.h"
#include "codecs.h"
#include "planning.h"
#include "pluggable.h"
#include "step_plan.h"
#include "vtensor/core/errors.h"
#include "vtensor/policy/capuchin.h"

namespace py = pybind11;
using namespace vtensor;
using namespace vtensor::pyb;

namespace {

py::dict stats_dict(const AllocatorStats& s) {
  py::dict d;  // PyTorch's names (torch.cuda.memory_stats), and ours
  d["allocated_bytes"] = s.allocated;
  d["reserved_bytes"] = s.reserved;
  d["peak_allocated_bytes"] = s.peak_allocated;
  d["peak_reserved_bytes"] = s.peak_reserved;
  d["capacity_bytes"] = s.capacity;
  d["free_bytes"] = s.free_bytes;
  d["largest_free_block_bytes"] = s.largest_free_block;
  d["fragmentation"] = s.fragmentation();
  d["num_allocs"] = s.num_allocs;
  d["num_frees"] = s.num_frees;
  d["num_ooms"] = s.num_ooms;
  return d;
}

// (tensor bytes, accesses (tensor, op, is_write, time ns), per-op ns, ns per byte, budget)
py::dict capuchin_swap(const std::vector<size_t>& bytes, const std::vector<std::tuple<int, int, bool, int64_t>>& accesses,
                       const std::vector<double>& op_ns, double swap_ns_per_byte, size_t budget) {
  PlannerInput in;
  in.num_ops = static_cast<int>(op_ns.size());
  in.op_ns = op_ns;
  in.swap_ns_per_byte = swap_ns_per_byte;
  in.budget = budget;
  for (size_t b : bytes) {
    PlannerTensor t;
    t.bytes = b;
    in.tensors.push_back(t);  // no lineage: hooks cannot recompute
  }
  for (const auto& [id, op, write, t] : accesses)
    in.accesses.push_back({id, op, write ? AccessKind::kWrite : AccessKind::kRead, t});
  const CapuchinPlan p = plan_capuchin(in, CapuchinMode::kSwap);
  py::list actions;
  for (const Action& a : p.plan.actions)
    actions.append(py::make_tuple(to_string(a.kind), a.tensor, a.op, a.free_after));
  py::dict d;
  d["actions"] = actions;
  d["fits"] = p.fits;
  d["peak_before"] = p.peak_before;
  d["peak_after"] = p.peak_after;
  int swaps = 0;
  for (const auto& c : p.candidates) swaps += c.decision == CapuchinDecision::kSwap;
  d["swaps"] = swaps;
  d["candidates"] = p.candidates.size();
  return d;
}

}  // namespace

PYBIND11_MODULE(_vtensor, m) {
  m.doc() = "vtensor's memory manager pieces for PyTorch (see python/vtensor/torch/)";
  // vtensor.OutOfMemoryError: a torch.OutOfMemoryError (torch >= 2.1 has it) and a MemoryError, so
  // `except torch.OutOfMemoryError` catches vtensor's too. Never freed: it outlives the module.
  py::tuple bases = py::make_tuple(py::reinterpret_borrow<py::object>(PyExc_MemoryError));
  try {
    py::object torch_oom = py::module_::import("torch").attr("OutOfMemoryError");
    bases = py::make_tuple(torch_oom, py::reinterpret_borrow<py::object>(PyExc_MemoryError));
  } catch (const py::error_already_set&) {  // an older torch: a MemoryError only
  }
  py::dict body;
  body["__module__"] = "vtensor";
  body["__doc__"] = "The device budget (or host budget) could not hold a request: what was requested, in use, and the budget.";
  static PyObject* oom = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(
                             "OutOfMemoryError", bases, body).release().ptr();
  m.attr("OutOfMemoryError") = py::reinterpret_borrow<py::object>(oom);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OutOfMemoryError& e) {
      PyErr_SetString(oom, e.what());
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  bind_codecs(m);
  m.def("parse_bytes", [](const std::string& s, const std::string& what) { return parse_bytes(s, what); },
        py::arg("text"), py::arg("what") = "size");
  m.def("format_bytes", &format_bytes);
  m.def("allocator_names", &allocator_names);

  py::class_<Arena>(m, "Arena")
      .def(py::init<size_t, const std::string&, const std::string&>(), py::arg("capacity"),
           py::arg("allocator") = "caching", py::arg("planner") = "")
      .def("allocate", &Arena::allocate, py::arg("bytes"), py::arg("tag") = -1)
      .def("try_allocate", &Arena::try_allocate, py::arg("bytes"), py::arg("tag") = -1)
      .def("free", &Arena::free)
      .def("block_size", &Arena::block_size)
      .def("stats", [](const Arena& a) { return stats_dict(a.stats()); })
      .def("reset_peak", &Arena::reset_peak)
      .def("begin_iteration", &Arena::begin_iteration)
      .def("end_iteration", &Arena::end_iteration)
      .def("report", &Arena::report)
      .def("oom_message", &Arena::oom_message)
      .def("last_oom", &Arena::last_oom)
      .def_property_readonly("name", &Arena::name)
      .def_property_readonly("capacity", &Arena::capacity);

  m.def("pluggable_configure", &pluggable_configure, py::arg("capacity"), py::arg("allocator"), py::arg("base") = 0);
  m.def("pluggable_stats", []() -> py::object {
    Arena* a = pluggable_arena();
    if (!a) return py::none();
    py::dict d = stats_dict(a->stats());
    d["num_failed_requests"] = pluggable_failed();
    return d;
  });
  m.def("pluggable_reset_peak", []() {
    if (Arena* a = pluggable_arena()) a->reset_peak();
  });
  m.def("pluggable_last_oom", []() { Arena* a = pluggable_arena(); return a ? a->last_oom() : std::string(); });
  m.def("pluggable_base", &pluggable_base);
  m.def("pluggable_begin_iteration", [](int i) {
    if (Arena* a = pluggable_arena()) a->begin_iteration(i);
  });
  m.def("pluggable_end_iteration", []() {
    if (Arena* a = pluggable_arena()) a->end_iteration();
  });
  m.def("pluggable_report", []() { Arena* a = pluggable_arena(); return a ? a->report() : std::string("null"); });
  m.def("pluggable_name", []() { Arena* a = pluggable_arena(); return a ? a->name() : std::string(); });
  m.attr("malloc_symbol") = "vtensor_torch_malloc";
  m.attr("free_symbol") = "vtensor_torch_free";

  m.def(
      "plan_step",
      [](const std::string& log, size_t budget, const std::string& policy, const std::string& gpu,
         const std::string& gpu_file, int iters, const std::map<std::string, std::string>& options) {
        PolicyOptions o;
        for (const auto& [k, v] : options) o.set(k, v);
        StepPlan p;
        {
          py::gil_scoped_release free;  // planning can take seconds
          p = plan_step(log, budget, policy, gpu, gpu_file, iters, o);
        }
        py::list moves;
        for (const StepMove& m : p.moves) moves.append(py::make_tuple(m.point, m.kind, m.tensor, m.planned));
        py::dict d;
        d["moves"] = moves;
        d["iteration_ms"] = p.iteration_ms;
        d["peak_bytes"] = p.peak_bytes;
        d["num_ops"] = p.num_ops;
        d["summary"] = p.summary;
        d["report"] = p.report;
        return d;
      },
      py::arg("log"), py::arg("budget"), py::arg("policy") = "auto", py::arg("gpu") = "h100-80g",
      py::arg("gpu_file") = "", py::arg("iters") = 3, py::arg("options") = std::map<std::string, std::string>{});

  m.def("capuchin_swap_plan", &capuchin_swap, py::arg("bytes"), py::arg("accesses"), py::arg("op_ns"),
        py::arg("swap_ns_per_byte"), py::arg("budget"));

  py::class_<ModuleUnit>(m, "ModuleUnit")
      .def(py::init<>())
      .def_readwrite("name", &ModuleUnit::name)
      .def_readwrite("saved_bytes", &ModuleUnit::saved_bytes)
      .def_readwrite("out_bytes", &ModuleUnit::out_bytes)
      .def_readwrite("inputs", &ModuleUnit::inputs)
      .def_readwrite("saves", &ModuleUnit::saves)
      .def_readwrite("cost_ns", &ModuleUnit::cost_ns);
  m.def("predict_checkpoint_peak", &predict_checkpoint_peak);
  m.def("choose_checkpoints", [](const std::vector<ModuleUnit>& units, size_t budget) {
    const CheckpointChoice c = choose_checkpoints(units, budget);
    py::dict d;
    d["chosen"] = c.chosen;
    d["peak"] = c.peak;
    d["peak_none"] = c.peak_none;
    d["recompute_ns"] = c.recompute_ns;
    d["fits"] = c.fits;
    d["evaluated"] = c.evaluated;
    d["rule"] = c.rule;
    return d;
  });
}
