// Policy auto's planning clock: what the planning limits are counted against (the rehearsals
// clock by default: each rehearsal a fixed time per iteration plus its own deterministic work, so
// the plan is the same on every run and machine; or the wall clock), its wall cap and net, and
// the rehearsals run a few at a time.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "vtensor/core/errors.h"
#include "vtensor/policy/auto/auto.h"

namespace vtensor {

namespace {

// Runs fn(0..n-1), a few at a time.
void run_parallel(size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < n;) fn(i);
  };
  const unsigned t = std::max(1u, std::min(kMaxRehearsalThreads, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < t; ++k) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
}

}  // namespace

void AutoPolicy::start_planning_clock(std::chrono::steady_clock::time_point t0) {
  planning_t0_ = t0;
  wall_capped_ = false;
  wall_reserve_ms_ = 0;
  rehearsed_iterations_ = 0;
  clock_ns_ = 0, charged_ns_ = 0;
  charged_recomputes_ = 0, charged_compactions_ = 0, charged_evictions_ = 0, rehearsals_wall_us_ = 0;
  clock_net_cuts_ = 0;
  iteration_ms_ = static_cast<double>(view_->graph().num_ops()) * kClockNsPerOp * 1e-6;
  eviction_ns_ = static_cast<double>(view_->graph().num_tensors()) * kClockNsPerEvictionTensor;
}

void AutoPolicy::check_deadline() const {
  if (has_deadline_ && std::chrono::steady_clock::now() > deadline_) throw RehearsalTimeout();
}

double AutoPolicy::elapsed_ms(std::chrono::steady_clock::time_point t0, size_t item) const {
  if (clock_ == PlanningClock::kWall)
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The wall cap: past it, every limit counts as reached. The finish's rehearsals (the start state's,
  // the warm start's) still run after that, so the search stops their reserve earlier, at the wall
  // time the rehearsals so far took per counted millisecond.
  const double cap = wall_cap_ms();
  if (cap > 0 && !wall_capped_) {
    const double clock_ms = static_cast<double>(clock_ns_.load()) * 1e-6;
    const double wall_per_clock = clock_ms > 0 ? static_cast<double>(rehearsals_wall_us_.load()) * 1e-3 / clock_ms : 1.0;
    const double reserve = wall_reserve_ms_.load() * std::max(1.0, wall_per_clock);
    if (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - planning_t0_).count() >= cap - reserve)
      wall_capped_ = true;
  }
  if (cap > 0 && wall_capped_) {
    return time_limit_ms_ + kSearchTimeMs + 1;
  }
  // Within a batch, its item i starts after the i before it, shared over the workers: the same
  // reading whichever thread runs it, and however fast.
  // (The rehearsals of a batch add their own work to the clock as they end; an item's reading
  // counts only the ops of the items before it, which do not depend on the order they end in.)
  const double ns = batch_base_ >= 0
                        ? static_cast<double>(batch_base_) + static_cast<double>(item) * kRehearsedIterations * iteration_ms_ * 1e6
                        : static_cast<double>(clock_ns_.load());
  return ns * 1e-6 / kClockWorkers;
}

double AutoPolicy::clock_cost_ns(const RehearsalResult& r, int iterations) const {
  if (!r.trained) return 0;
  return iterations * (static_cast<double>(r.recomputed_ops) * kClockNsPerRecompute +
                       static_cast<double>(r.compactions) * kClockNsPerCompaction +
                       static_cast<double>(r.evictions) * eviction_ns_);
}

double AutoPolicy::rehearsal_ms(const RehearsalResult& r, int iterations) const {
  if (clock_ == PlanningClock::kWall) return r.wall_ms;
  return (iterations * iteration_ms_ + clock_cost_ns(r, iterations) * 1e-6) / kClockWorkers;
}

RehearsalResult AutoPolicy::rehearse_counted(const Candidate& policy, const RehearsalSetup& setup) {
  rehearsed_iterations_ += setup.iterations;
  clock_ns_ += std::llround(setup.iterations * iteration_ms_ * 1e6);
  auto charged = [&](RehearsalResult r) {
    const auto ns = std::llround(clock_cost_ns(r, setup.iterations));
    clock_ns_ += ns, charged_ns_ += ns;
    rehearsals_wall_us_ += std::llround(r.wall_ms * 1e3);
    if (r.trained) {
      charged_recomputes_ += static_cast<long long>(r.recomputed_ops) * setup.iterations;
      charged_compactions_ += static_cast<long long>(r.compactions) * setup.iterations;
      charged_evictions_ += static_cast<long long>(r.evictions) * setup.iterations;
    }
    return r;
  };
  if (clock_ == PlanningClock::kWall || setup.time_limit_ms == 0) return charged(rehearser_(policy, setup));
  // Counted, and cut only where it runs far slower than the clock counts it (a plan that
  // thrashes, recomputing chains over and over: the wall clock would cut it too).
  RehearsalSetup net = setup;
  net.time_limit_ms = std::max(kClockNetMinMs, kClockNetFactor * setup.iterations * iteration_ms_);
  RehearsalResult r = rehearser_(policy, net);
  if (!r.trained && r.error.find("time limit") != std::string::npos) {
    ++clock_net_cuts_;
    r.error = "not rehearsed to the end: over " + format_number(net.time_limit_ms / 1e3) +
              " s, far slower than the planning clock counts it";
  }
  return charged(std::move(r));
}

void AutoPolicy::parallel(size_t n, const std::function<void(size_t)>& fn) {
  const bool outer = batch_base_ < 0;
  if (outer) batch_base_ = clock_ns_.load();
  run_parallel(n, fn);
  if (outer) batch_base_ = -1;
}

}  // namespace vtensor
