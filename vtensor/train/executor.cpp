#include "vtensor/train/executor.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "vtensor/core/errors.h"
#include "vtensor/memory/planning_hooks.h"

namespace vtensor {

namespace {
using Clock = std::chrono::steady_clock;
// Adds the host time of its scope to `sum` (ms), where `on`.
class HostTimer {
 public:
  HostTimer(double& sum, bool on) : sum_(sum), on_(on) {
    if (on_) t0_ = Clock::now();
  }
  ~HostTimer() {
    if (on_) sum_ += std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
  }
  HostTimer(const HostTimer&) = delete;
  HostTimer& operator=(const HostTimer&) = delete;

 private:
  double& sum_;
  bool on_;
  Clock::time_point t0_;
};
}  // namespace

Executor::Executor(const Graph& g, Backend& backend, MemoryManager& mm)
    : g_(g), backend_(backend), mm_(mm), time_host_(backend.modelled_gpu().empty()) {
  std::vector<int> last_use(g.num_tensors(), -1);
  for (const Op& op : g.ops()) {
    for (TensorId in : op.inputs) last_use[static_cast<size_t>(in)] = op.index;
    for (TensorId out : op.outputs) last_use[static_cast<size_t>(out)] = std::max(last_use[static_cast<size_t>(out)], op.index);
  }
  // A view's base lives until the last use of the base and of all its views.
  for (const auto& t : g.tensors()) {
    TensorId b = t.id;
    while (g.tensor(b).view_of != kNoTensor) b = g.tensor(b).view_of;
    int& lb = last_use[static_cast<size_t>(b)];
    lb = std::max(lb, last_use[static_cast<size_t>(t.id)]);
  }
  release_after_.resize(g.num_ops());
  for (const auto& t : g.tensors())  // a replayed program may hold a tensor past its last use
    if (t.release_after >= 0) last_use[static_cast<size_t>(t.id)] = std::max(last_use[static_cast<size_t>(t.id)], t.release_after);
  for (const auto& t : g.tensors())
    if (!t.persistent() && last_use[static_cast<size_t>(t.id)] >= 0)
      release_after_[static_cast<size_t>(last_use[static_cast<size_t>(t.id)])].push_back(t.id);
  mm_.set_recompute_fn([this](TensorId id) { recompute(id); });
}

IterationStats Executor::run_iteration(int iteration) {
  iteration_ = static_cast<uint64_t>(iteration);
  mm_.begin_iteration(iteration);
  const double t0 = backend_.now_ms();
  kernel_ms_ = alloc_ms_ = after_op_ms_ = 0;
  recomputations_.clear();
  chains_.clear();
  chain_tensor_.clear();
  const Backend::HostClock c0 = backend_.host_clock();
  const auto h0 = Clock::now();
  for (const Op& op : g_.ops()) run_op(op.index);
  const auto h1 = Clock::now();
  const Backend::HostClock c1 = backend_.host_clock();
  mm_.end_iteration();
  const auto h2 = Clock::now();
  backend_.synchronize();
  mm_.collect_device_waits();
  const auto h3 = Clock::now();
  IterationStats s;
  s.host_launch_ms = std::chrono::duration<double, std::milli>(h1 - h0).count();
  s.host_drain_ms = std::chrono::duration<double, std::milli>(h3 - h2).count();
  s.host_plan_ms = mm_.policy_end_ms();
  s.host_kernel_ms = kernel_ms_;
  s.host_alloc_ms = alloc_ms_;
  s.host_after_op_ms = after_op_ms_;
  if (c0.modelled) set_modelled_host(s, c0, c1, backend_.host_clock());
  s.iteration = iteration;
  s.loss = loss_;
  s.has_loss = backend_.has_data();
  s.time_ms = backend_.now_ms() - t0;
  if (PlanningHooks* plan = mm_.policy().planning()) plan->on_iteration_time(iteration, s.time_ms);
  const auto& a = mm_.allocator().stats();
  s.peak_allocated = a.peak_allocated;
  s.peak_reserved = a.peak_reserved;
  s.fragmentation = a.fragmentation();
  s.peak_host = mm_.host_pool().peak_held();
  s.host_limited = mm_.host_pool().limited();
  s.counters = mm_.counters();
  s.op_times_on_device = mm_.tracker().current().op_ms_on_device;
  s.recompute_by_kind = recompute_by_kind();
  for (size_t i = 0; i < chains_.size(); ++i) {
    chains_[i].op_name = chains_[i].op >= 0 ? g_.op(chains_[i].op).name : "";
    chains_[i].tensor = g_.tensor(chain_tensor_[i]).name;
  }
  s.recompute_chains = std::move(chains_);
  chains_.clear();
  if (const PagedMemory* pm = mm_.paged()) {
    s.paged = true;
    s.paging = pm->counters();
    s.page_bytes = pm->page_bytes();
  }
  return s;
}

// The sim's modelled host (HostModel) in the fields a device run measures: launch up to the end of
// the op loop, drain after it; the policy's actions, copies and events stand for the after-op work.
void Executor::set_modelled_host(IterationStats& s, const Backend::HostClock& c0, const Backend::HostClock& c1,
                                 const Backend::HostClock& c2) {
  s.host_modelled = true;
  s.host_launch_ms = c1.now_ms - c0.now_ms;
  s.host_drain_ms = c2.now_ms - c1.now_ms;
  s.host_kernel_ms = c1.launch_ms - c0.launch_ms;
  s.host_alloc_ms = c1.alloc_ms - c0.alloc_ms;
  s.host_after_op_ms = (c1.action_ms - c0.action_ms) + (c1.copy_ms - c0.copy_ms);
  s.host_model = {.wait_ms = c1.wait_ms - c0.wait_ms,
                  .device_idle_ms = c2.device_idle_ms - c0.device_idle_ms,
                  .launches = c1.launches - c0.launches,
                  .allocations = c1.allocations - c0.allocations,
                  .actions = c1.actions - c0.actions,
                  .copies = c1.copies - c0.copies,
                  .events = c1.events - c0.events,
                  .moved_blocks = c1.moved_blocks - c0.moved_blocks};
}

void* Executor::allocate_workspace(const Op& op, ConvAlgo& algo, size_t& bytes) {
  bytes = backend_.workspace_bytes(g_, op, algo);
  if (!bytes) return nullptr;
  try {
    return mm_.allocate_scratch(bytes, "workspace");
  } catch (const OutOfMemoryError&) {
    const size_t lean = algo == ConvAlgo::kFast ? backend_.workspace_bytes(g_, op, ConvAlgo::kLean) : bytes;
    if (lean >= bytes) throw;
    algo = ConvAlgo::kLean;
    bytes = lean;
    mm_.note_lean_conv_fallback();
    return lean ? mm_.allocate_scratch(lean, "workspace") : nullptr;
  }
}

void Executor::run_op(int op_index) {
  const Op& op = g_.op(op_index);
  current_op_ = op_index;
  KernelArgs args;
  args.iteration = iteration_;
  auto is_inplace = [&](TensorId t) {
    for (TensorId w : op.inplace)
      if (w == t) return true;
    return false;
  };
  for (TensorId in : op.inputs) {
    mm_.access(in, is_inplace(in) ? AccessKind::kWrite : AccessKind::kRead, op_index);
    mm_.lock(in);
  }
  for (TensorId out : op.outputs) {
    {
      HostTimer h(alloc_ms_, time_host_);
      mm_.allocate(out);
    }
    mm_.access(out, AccessKind::kWrite, op_index);
    mm_.lock(out);
  }
  args.conv_algo = mm_.conv_algo(op.index);
  size_t ws_bytes = 0;
  {
    HostTimer h(alloc_ms_, time_host_);
    args.workspace = allocate_workspace(op, args.conv_algo, ws_bytes);
  }
  mm_.fault_pages(op_index, args.workspace, args.workspace ? ws_bytes : 0);  // unified memory
  // Only now: an allocation above may have compacted the arena and moved tensors.
  for (TensorId in : op.inputs) args.inputs.push_back(mm_.device_ptr(in));
  for (TensorId out : op.outputs) args.outputs.push_back(mm_.device_ptr(out));
  const double t0 = backend_.now_ms(), idle0 = backend_.host_clock().device_idle_ms;
  {
    HostTimer h(kernel_ms_, time_host_);
    backend_.launch(g_, op, args);
  }
  mm_.kernel_launched();
  // The kernel's time: a modelled host's lateness (the device idle before it) is not the op's.
  mm_.tracker().record_op(op_index, backend_.now_ms() - t0 - (backend_.host_clock().device_idle_ms - idle0));
  if (args.workspace) mm_.free_scratch(args.workspace);
  for (TensorId in : op.inputs) mm_.unlock(in);
  for (TensorId out : op.outputs) mm_.unlock(out);
  if (!op.outputs.empty() && op.outputs[0] == g_.loss && backend_.has_data()) mm_.read(g_.loss, &loss_);
  for (TensorId t : release_after_[static_cast<size_t>(op_index)]) mm_.release(t);
  HostTimer h(after_op_ms_, time_host_);
  mm_.after_op(op_index);
}

void Executor::recompute(TensorId id) {
  const Op& op = g_.op(g_.tensor(id).producer);
  if (chain_depth_ == 0) {  // a chain's top: the access that needed `id`; the calls below are its sources
    chains_.push_back({.op = current_op_});
    chain_tensor_.push_back(id);
  }
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } depth{++chain_depth_};
  KernelArgs args;
  args.iteration = iteration_;
  args.recompute = true;
  for (TensorId in : op.inputs) {
    mm_.access(in, AccessKind::kRecomputeRead, op.index);
    mm_.lock(in);
  }
  std::vector<TensorId> restored;
  std::vector<void*> scratch(op.outputs.size(), nullptr);
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    const TensorId out = op.outputs[i];
    if (mm_.residency(out) == Residency::kDropped) {
      mm_.allocate(out);
      mm_.access(out, AccessKind::kRecomputeWrite, op.index);
      mm_.lock(out);
      restored.push_back(out);
    } else {  // alive elsewhere or no longer needed: compute into scratch and discard
      scratch[i] = mm_.allocate_scratch(g_.tensor(out).bytes(), "recompute scratch");
    }
  }
  args.conv_algo = mm_.conv_algo(op.index);
  size_t ws_bytes = 0;
  args.workspace = allocate_workspace(op, args.conv_algo, ws_bytes);
  for (TensorId in : op.inputs) args.inputs.push_back(mm_.device_ptr(in));
  for (size_t i = 0; i < op.outputs.size(); ++i)
    args.outputs.push_back(scratch[i] ? static_cast<float*>(scratch[i]) : mm_.device_ptr(op.outputs[i]));
  const double t0 = backend_.now_ms(), idle0 = backend_.host_clock().device_idle_ms;
  {
    HostTimer h(kernel_ms_, time_host_);
    backend_.launch(g_, op, args);
  }
  const double ms = backend_.now_ms() - t0 - (backend_.host_clock().device_idle_ms - idle0);
  mm_.note_recompute(ms);
  uint64_t restored_bytes = 0;
  for (TensorId out : restored) restored_bytes += g_.tensor(out).bytes();
  recomputations_.push_back({op.index, ms, restored_bytes});
  RecomputeChain& chain = chains_.back();
  ++chain.ops;
  chain.ms += ms;
  chain.restored_bytes += restored_bytes;
  if (args.workspace) mm_.free_scratch(args.workspace);
  for (void* p : scratch)
    if (p) mm_.free_scratch(p);
  for (TensorId in : op.inputs) mm_.unlock(in);
  for (TensorId out : restored) mm_.unlock(out);
  for (TensorId out : restored) mm_.recomputed(out);
}

std::string recompute_kind(const Op& op) {
  if (op.kind != OpKind::kReplay) return to_string(op.kind);
  const size_t open = op.name.rfind(" [");
  if (open != std::string::npos && op.name.size() > open + 3 && op.name.back() == ']')
    return op.name.substr(open + 2, op.name.size() - open - 3);
  return op.name;
}

std::vector<RecomputeByKind> Executor::recompute_by_kind() const {
  std::vector<RecomputeByKind> kinds;
  std::vector<bool> seen(recomputations_.empty() ? 0 : g_.num_ops(), false);
  for (const Recomputation& r : recomputations_) {
    const std::string kind = recompute_kind(g_.op(r.op));
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const RecomputeByKind& k) { return k.kind == kind; });
    if (it == kinds.end()) it = kinds.insert(kinds.end(), RecomputeByKind{.kind = kind});
    ++it->count;
    it->ms += r.ms;
    it->restored_bytes += r.restored_bytes;
    if (seen[static_cast<size_t>(r.op)]) ++it->repeats, it->repeat_ms += r.ms;
    seen[static_cast<size_t>(r.op)] = true;
  }
  std::stable_sort(kinds.begin(), kinds.end(), [](const RecomputeByKind& a, const RecomputeByKind& b) { return a.ms > b.ms; });
  return kinds;
}

}  // namespace vtensor
