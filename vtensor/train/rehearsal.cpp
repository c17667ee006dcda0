#include "vtensor/train/rehearsal.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "vtensor/backend/sim/sim_backend.h"
#include "vtensor/core/errors.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/policy/auto/auto.h"
#include "vtensor/train/executor.h"

namespace vtensor {
namespace {

// A guided iteration's figures, summed into `r` (averaged by average_guided).
void add_guided(RehearsalResult& r, const IterationStats& s) {
  r.peak_allocated = std::max(r.peak_allocated, s.peak_allocated);
  r.time_ms += s.time_ms;
  r.stall_ms += s.counters.stall_ms;
  r.recompute_ms += s.counters.recompute_ms;
  r.compact_ms += s.counters.compact_ms;
  r.compactions += s.counters.compactions;
  r.evictions += s.counters.evictions;
  r.swapped_out_bytes += s.counters.swapped_out_bytes;
  r.recomputed_ops += s.counters.recomputed_ops;
}

void average_guided(RehearsalResult& r, int guided) {
  r.time_ms /= guided, r.stall_ms /= guided, r.recompute_ms /= guided, r.compact_ms /= guided;
  r.compactions /= static_cast<uint64_t>(guided), r.evictions /= static_cast<uint64_t>(guided);
  r.swapped_out_bytes /= static_cast<uint64_t>(guided), r.recomputed_ops /= static_cast<uint64_t>(guided);
}

// The plan's gaps as the guided iterations measured them: the candidates it moved or that cost
// time, then those over the iteration's end (the wrap swaps, and the persistent tensors the plan
// kept that the passive fallback evicted).
void collect_gaps(const CapuchinPolicy& c, const Graph& g, RehearsalResult& r) {
  const auto& cost = c.measured_cost_ms();
  const auto& fed = c.fed_back();
  const auto& cands = c.plan().candidates;
  for (size_t k = 0; k < cands.size(); ++k)
    if (cands[k].decision != CapuchinDecision::kKeep || (k < cost.size() && cost[k] > 0))
      r.gaps.push_back({cands[k].id, cands[k].evict_op, cands[k].back_op, cands[k].trigger_op, cands[k].decision,
                        cands[k].bytes, k < cost.size() ? cost[k] : 0.0, false, k < fed.size() ? fed[k] : 0});
  const auto& wrap_cost = c.measured_wrap_cost_ms();
  std::vector<char> wrapped(wrap_cost.size(), 0);
  for (const WrapSwap& w : c.plan().wrap_swaps) {
    r.gaps.push_back({w.id, w.evict_op, w.back_op, w.trigger_op, CapuchinDecision::kSwap, w.bytes,
                      wrap_cost[static_cast<size_t>(w.id)], true});
    wrapped[static_cast<size_t>(w.id)] = 1;
  }
  for (size_t id = 0; id < wrap_cost.size(); ++id)
    if (!wrapped[id] && wrap_cost[id] > 0) {
      const auto t = static_cast<TensorId>(id);
      r.gaps.push_back({t, c.last_use(t), c.first_use(t), -1, CapuchinDecision::kKeep, g.tensor(t).bytes(), wrap_cost[id], true});
    }
}

}  // namespace

RehearsalResult rehearse(const Candidate& candidate, const RehearsalSetup& setup) {
  const auto t0 = std::chrono::steady_clock::now();
  RehearsalResult r;
  r.policy = candidate;
  try {
    if (!setup.graph) throw std::invalid_argument("rehearse: no graph");
    BackendOptions opts{.arena_bytes = setup.budget, .gpu = setup.gpu};
    opts.op_ms = setup.op_ms;
    opts.link_ms_per_byte = setup.link_ms_per_byte;
    opts.codec_latency_ms = setup.codec_latency_ms, opts.codec_ms_per_byte = setup.codec_ms_per_byte;
    opts.copy_queued_ms = setup.copy_queued_ms;
    opts.op_workspace = setup.workspace;
    opts.op_workspace_lean = setup.workspace_lean;
    auto backend = make_sim_backend(opts);
    if (setup.densities) backend->set_densities(setup.densities);
    auto policy = std::make_unique<AutoPolicy>(candidate, setup.pins);
    policy->set_start_state(setup.start_state);
    policy->set_start_layout(setup.start_layout);
    policy->set_trigger_moves(setup.trigger_moves);
    policy->set_compact_unfit(setup.compact_unfit);
    policy->set_min_wrap_bytes(setup.min_wrap_bytes);
    policy->set_high_placement(setup.high_placement_bytes);
    const AutoPolicy* ap = policy.get();
    r.pins = setup.pins;
    r.start_state = setup.start_state;
    r.compact_unfit = setup.compact_unfit;
    r.min_wrap_bytes = setup.min_wrap_bytes;
    r.high_placement_bytes = setup.high_placement_bytes;
    if (setup.time_limit_ms > 0)
      policy->set_deadline(std::chrono::steady_clock::now() +
                           std::chrono::microseconds(static_cast<long long>(setup.time_limit_ms * 1e3)));
    MemoryManager mm(*backend, *setup.graph, make_allocator(setup.allocator, backend->arena_bytes(), ""), std::move(policy));
    mm.set_host_budget(setup.host_budget);
    Executor exec(*setup.graph, *backend, mm);
    mm.init_persistent(1);
    int guided = 0;
    for (int i = 0; i < std::max(setup.iterations, 2); ++i) {
      const IterationStats s = exec.run_iteration(i);
      if (i == 0) {  // the measured iteration: the same for every candidate, but for its end's moves
        r.measured_ms = s.time_ms;
        r.start_layout_applied = !setup.start_layout.empty() && mm.live_device_blocks() == setup.start_layout;
        if (!setup.measured_only) continue;
        r.measured_trace = std::make_shared<const AccessTrace>(mm.tracker().current());
        r.trained = true;
        r.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return r;
      }
      ++guided;
      add_guided(r, s);
    }
    average_guided(r, guided);
    r.trained = true;
    r.end_layout = mm.live_device_blocks();
    if (const CapuchinPolicy* c = ap->capuchin()) collect_gaps(*c, *setup.graph, r);
  } catch (const RehearsalTimeout& e) {
    r.error = e.what();
  } catch (const OutOfMemoryError& e) {
    r.error = std::string("out of memory: ") + e.what();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  r.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace vtensor
