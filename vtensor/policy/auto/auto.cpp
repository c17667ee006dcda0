// Policy auto as the memory manager sees it: the constructor, the hooks it forwards to the
// policy that runs (Capuchin's hybrid while measuring, then the chosen plan's), the measured
// iteration's passive eviction and non-zero counts, and end_iteration, which plans (choose.cpp).
#include <algorithm>
#include <stdexcept>

#include "vtensor/backend/backend.h"
#include "vtensor/policy/auto/auto.h"
#include "vtensor/policy/compress.h"

namespace vtensor {

using namespace auto_detail;

namespace {

// A guided plan and whether it fits (Capuchin's or a compression plan); false when not guided.
bool guided_plan_fits(const Policy& p, bool* fits) {
  if (const auto* c = dynamic_cast<const CapuchinPolicy*>(&p); c && c->guided()) return *fits = c->plan().fits, true;
  if (const auto* z = dynamic_cast<const CompressPolicy*>(&p); z && z->guided()) return *fits = z->plan().fits, true;
  return false;
}

}  // namespace

AutoPolicy::AutoPolicy(Candidate forced, std::vector<PlanPin> pins)
    : forced_(std::move(forced)), candidates_(auto_candidates()),
      measuring_(std::make_unique<CapuchinPolicy>(CapuchinMode::kHybrid)), pins_(std::move(pins)) {
  static_cast<CapuchinPolicy&>(*measuring_).set_feedback_iterations(kFeedbackIterations);
  if (!forced_.empty() && !make_candidate(forced_)) throw std::invalid_argument(unknown_candidate_message(forced_.name()));
}

AutoPolicy::~AutoPolicy() = default;

void AutoPolicy::attach(const MemoryView& view) {
  view_ = &view;
  measuring_->attach(view);
}

void AutoPolicy::begin_iteration(int iteration) {
  if (pending_) {
    install(pending_->first);
    runs_.push_back({pending_->first, -1, {}, pending_->second});
    pending_.reset();
    plan_changed_ = true;
  }
  current().begin_iteration(iteration);
}

std::vector<ConvAlgo> AutoPolicy::conv_algorithms() const { return current().conv_algorithms(); }

// Count non-zeros in the measured iteration when a compression candidate may run.
bool AutoPolicy::counts_nonzeros() const {
  if (!forced_.empty()) return forced_.compresses();
  return std::any_of(candidates_.begin(), candidates_.end(), [](const Candidate& c) { return c.compresses(); });
}

std::vector<Action> AutoPolicy::after_op(int op_index) {
  check_deadline();
  if (!active_ && view_ && op_index >= 0 && counts_nonzeros()) {
    // Measured iteration: how dense each compressible output is, while it is on the device (as
    // CompressPolicy's own measured iteration counts; on sim, the recorded densities).
    const Graph& g = view_->graph();
    nonzeros_.resize(g.num_tensors());
    for (TensorId out : g.op(op_index).outputs)
      if (compressible(g, out)) nonzeros_[static_cast<size_t>(out)] = view_->count_nonzeros(out);
  }
  return current().after_op(op_index);
}

// The densities the compression candidates are rehearsed with: the run's own table on sim, else
// one built from the counts of the measured iteration; null (and why) without a count for every
// compressible output.
std::shared_ptr<const DensityTable> AutoPolicy::measured_densities(std::string* why) const {
  const Graph& g = view_->graph();
  auto table = std::make_shared<DensityTable>();
  table->source = "auto's measured iteration";
  for (const TensorInfo& t : g.tensors()) {
    if (!compressible(g, t.id)) continue;
    const size_t id = static_cast<size_t>(t.id);
    if (id >= nonzeros_.size() || !nonzeros_[id]) {
      *why = "not rehearsed: no density measured for '" + t.name +
             "' (on sim, compression candidates need --densities FILE from a cpu run's --densities-out)";
      return nullptr;
    }
    table->tensors[density_key(t)] = {static_cast<uint64_t>(t.shape.numel()), *nonzeros_[id]};
  }
  if (table->tensors.empty()) {
    *why = "not rehearsed: no ReLU or max-pool output to compress";
    return nullptr;
  }
  if (auto recorded = view_->densities()) return recorded;  // sim: exactly what the run counts from
  return table;
}

std::vector<Victim> AutoPolicy::choose_victims(size_t bytes, const MemoryView& view) {
  check_deadline();
  bool fits = false;
  if (active_ && fallback_ && guided_plan_fits(*active_, &fits)) {
    // As Capuchin's own fallback: a request within the budget is fragmentation (compacted).
    const auto need = guided_fallback_bytes(bytes, view.allocated(), view.budget(), fits, compact_unfit_);
    return need ? fallback_->choose_victims(*need, view) : std::vector<Victim>{};
  }
  if (active_) return active_->choose_victims(bytes, view);
  // Measuring: swap the least recently used, parameters and optimizer state last. Swapping (not
  // dropping) never runs out where a recomputation's locked inputs would (measuring under DTR's
  // eviction stopped ResNet-50 at 50% at batch 76 where swapping reaches 152); keeping the
  // persistent tensors in place leaves the arena as a recomputing policy's own first iteration
  // does (after plain LRU swapping, DTR ran 5% slower than on its own).
  std::vector<TensorView> cands = view.evictable_views();
  // In that order (a total one: ids are unique), taken from a heap: a request needs few of them.
  const auto later = [](const TensorView& a, const TensorView& b) {
    if (a.persistent != b.persistent) return a.persistent;
    return a.last_access != b.last_access ? a.last_access > b.last_access : a.id > b.id;
  };
  std::make_heap(cands.begin(), cands.end(), later);
  std::vector<Victim> out;
  size_t freed = 0, room = view.host_room();
  for (auto end = cands.end(); end != cands.begin() && freed < bytes; --end) {
    std::pop_heap(cands.begin(), end, later);
    const TensorView& c = *(end - 1);
    if (c.bytes <= room) {
      out.push_back({c.id, EvictAction::kSwap});
      room -= c.bytes;
    } else if (view.can_recompute(c.id)) {
      out.push_back({c.id, EvictAction::kDrop});  // the host is full: recomputed instead
    } else {
      continue;
    }
    freed += c.bytes;
  }
  return out;
}

void AutoPolicy::on_restore(TensorId id, int op_index, Residency from, double waited_ms) {
  current().on_restore(id, op_index, from, waited_ms);
}
std::optional<size_t> AutoPolicy::smallest_working_budget() const { return current().smallest_working_budget(); }

void AutoPolicy::end_iteration(const AccessTrace& trace) {
  measured_last_ = !active_;
  if (active_) {
    active_->end_iteration(trace);
    return;
  }
  if (!view_) throw std::logic_error("auto: end_iteration before attach");
  choose(trace);
}

}  // namespace vtensor
