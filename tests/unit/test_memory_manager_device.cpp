// MemoryManager on backends that behave like a device (a wrapped cpu backend, sim): the device's
// workspaces in auto's rehearsal, its op times, its waits counted as stall, the copy calibration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/memory_manager_rig.h"
#include "vtensor/backend/backend.h"
#include "vtensor/backend/sim/sim_backend.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/memory_manager.h"
#include "vtensor/memory/policy.h"
#include "vtensor/models/models.h"
#include "vtensor/policy/auto/auto.h"
#include "vtensor/policy/registry.h"
#include "vtensor/train/executor.h"
#include "vtensor/train/rehearsal.h"
#include "vtensor/train/trainer.h"

namespace vtensor {
namespace {

using namespace vtensor::test;  // the rig: tests/support/memory_manager_rig.h

// The cpu backend behind another name: every call forwarded, for test backends that change a few.
class CpuWrapper : public Backend {
 public:
  explicit CpuWrapper(size_t budget) : cpu_(make_cpu_backend({.arena_bytes = budget})) {}
  std::string device_description() const override { return cpu_->device_description(); }
  void* arena_base() override { return cpu_->arena_base(); }
  size_t arena_bytes() const override { return cpu_->arena_bytes(); }
  void* host_alloc(size_t bytes) override { return cpu_->host_alloc(bytes); }
  void host_free(void* p, size_t bytes) override { cpu_->host_free(p, bytes); }
  void copy_async(Stream s, void* dst, const void* src, size_t bytes) override { cpu_->copy_async(s, dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { cpu_->copy_to_host(dst, src, bytes); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { cpu_->copy_to_device(dst, src, bytes); }
  void move_device(void* dst, const void* src, size_t bytes) override { cpu_->move_device(dst, src, bytes); }
  Event record(Stream s) override { return cpu_->record(s); }
  void stream_wait(Stream s, const Event& e) override { cpu_->stream_wait(s, e); }
  void synchronize() override { cpu_->synchronize(); }
  void launch(const Graph& g, const Op& op, const KernelArgs& args) override { cpu_->launch(g, op, args); }
  size_t workspace_bytes(const Graph& g, const Op& op, ConvAlgo algo) override { return cpu_->workspace_bytes(g, op, algo); }
  std::optional<size_t> count_nonzeros(const TensorInfo& t, const void* dev) override { return cpu_->count_nonzeros(t, dev); }
  void compress_async(Stream s, Codec c, const TensorInfo& t, const void* src, void* dst, size_t capacity, void* ws,
                      size_t ws_bytes, CodecResult* r) override {
    cpu_->compress_async(s, c, t, src, dst, capacity, ws, ws_bytes, r);
  }
  void decompress_async(Stream s, Codec c, const TensorInfo& t, const void* src, size_t src_bytes, void* dst,
                        CodecResult* r) override {
    cpu_->decompress_async(s, c, t, src, src_bytes, dst, r);
  }
  void init_tensor(const TensorInfo& t, void* dev, uint64_t seed) override { cpu_->init_tensor(t, dev, seed); }
  double now_ms() override { return cpu_->now_ms(); }

 protected:
  std::unique_ptr<Backend> cpu_;
};

// A cpu backend that says it times ops on the device, as cuda does with CUPTI: each op's "device
// time" is 1 + op index / 1000 ms, so the trace shows whether the manager took them.
// Its clock is its own, so that a run's choices never depend on the machine's speed: an op takes
// 0.5 ms, a copy 1 ms per MB (the manager's link calibration reads it), and copies end before
// copy_async returns, so no copy is ever waited for.
class DeviceTimedCpu final : public CpuWrapper {
 public:
  explicit DeviceTimedCpu(size_t budget, size_t workspace_scale = 1) : CpuWrapper(budget), workspace_scale_(workspace_scale) {}
  int begun = 0, ended = 0;
  bool begin_op_timing() override {
    ++begun;
    return true;
  }
  std::vector<double> end_op_timing(size_t num_ops) override {
    ++ended;
    std::vector<double> ms(num_ops);
    for (size_t k = 0; k < num_ops; ++k) ms[k] = 1.0 + static_cast<double>(k) / 1000.0;
    return ms;
  }
  std::string name() const override { return "device-timed cpu"; }
  void copy_async(Stream s, void* dst, const void* src, size_t bytes) override {
    cpu_->copy_async(s, dst, src, bytes);
    cpu_->record(s)->wait();
    clock_ms_ += static_cast<double>(bytes) * 1e-6;
  }
  void launch(const Graph& g, const Op& op, const KernelArgs& args) override {
    cpu_->launch(g, op, args);
    clock_ms_ += 0.5;
  }
  // The fast algorithm's scratch workspace_scale times the cpu's, as cuDNN's exceeds the op's own
  // figure on cuda (the kernels still get at least what they need).
  size_t workspace_bytes(const Graph& g, const Op& op, ConvAlgo algo) override {
    const size_t ws = cpu_->workspace_bytes(g, op, algo);
    return algo == ConvAlgo::kFast ? ws * workspace_scale_ : ws;
  }
  double now_ms() override { return clock_ms_; }

 private:
  size_t workspace_scale_ = 1;
  double clock_ms_ = 0;
};

// Off sim, auto rehearses on a sim of the measurement: the device's op times, its link, and its
// workspaces (cuDNN's on cuda, far above the op's own figures). With the workspaces the rehearsal
// is the run in memory: its predicted peak and evictions are those of the guided iterations.
// Before the rehearsal took the device's workspaces, its plans fitted the op's own figures:
// VGG-16 under auto at 50% on an H100 planned 1.39 GB of swaps and swapped 6.17 GB, with 66
// evictions by the passive fallback (docs/benchmarks.md).
TEST(DeviceWorkspaces, AutosRehearsalPlansForTheDevicesWorkspaces) {
  Graph g = build_model(tiny("resnet-tiny", 8));
  build_backward(g, OptimizerConfig{});
  const size_t scale = 4;
  auto run = [&](const std::string& policy, size_t budget, std::vector<IterationStats>& stats) {
    DeviceTimedCpu backend(budget, scale);
    std::unique_ptr<Policy> p = make_policy(policy);
    if (auto* a = dynamic_cast<AutoPolicy*>(p.get())) a->set_rehearser(rehearse);  // as the Trainer does
    MemoryManager mm(backend, g, make_allocator("caching", budget), std::move(p));
    Executor exec(g, backend, mm);
    mm.init_persistent(1);
    for (int it = 0; it < 4; ++it) stats.push_back(exec.run_iteration(it));
    return mm.policy().report();
  };
  std::vector<IterationStats> none;
  run("none", size_t{64} << 20, none);
  size_t peak = 0;
  for (const auto& s : none) peak = std::max(peak, s.peak_allocated);
  const size_t budget = align_up(peak / 2);
  std::vector<IterationStats> got;
  const nlohmann::json rep = run("auto", budget, got);
  ASSERT_TRUE(rep.contains("predicted_peak_bytes")) << rep.dump();
  size_t guided_peak = 0;
  uint64_t evictions = 0;
  for (size_t i = 1; i < got.size(); ++i) guided_peak = std::max(guided_peak, got[i].peak_allocated), evictions += got[i].counters.evictions;
  EXPECT_LE(guided_peak, budget);
  EXPECT_EQ(rep["predicted_peak_bytes"].get<size_t>(), guided_peak) << rep["chosen"];
  EXPECT_EQ(rep["predicted_evictions"].get<uint64_t>(), evictions / (got.size() - 1)) << rep["chosen"];
}

// A measured iteration (Policy::measuring) takes its op times from a backend that times ops on the
// device; a guided iteration and a policy that never measures do not ask for them.
TEST(DeviceOpTimes, TheMeasuredIterationTakesTheDevicesOpTimes) {
  for (const std::string name : {"capuchin", "none"}) {
    SCOPED_TRACE(name);
    Graph g = build_model(tiny("resnet-tiny", 8));
    build_backward(g, OptimizerConfig{});
    const size_t budget = size_t{64} << 20;
    DeviceTimedCpu backend(budget);
    MemoryManager mm(backend, g, make_allocator("caching", budget), make_policy(name));
    Executor exec(g, backend, mm);
    mm.init_persistent(1);
    for (int it = 0; it < 3; ++it) {
      const IterationStats s = exec.run_iteration(it);
      const AccessTrace& tr = mm.tracker().current();
      const bool measured = name == "capuchin" && it == 0;
      EXPECT_EQ(s.op_times_on_device, measured) << "iteration " << it;
      EXPECT_EQ(tr.op_ms_on_device, measured) << "iteration " << it;
      ASSERT_EQ(tr.op_ms.size(), g.num_ops());
      if (measured)
        for (size_t k = 0; k < g.num_ops(); ++k) EXPECT_DOUBLE_EQ(tr.op_ms[k], 1.0 + static_cast<double>(k) / 1000.0);
      else
        EXPECT_NE(tr.op_ms[g.num_ops() - 1], 1.0 + static_cast<double>(g.num_ops() - 1) / 1000.0);
    }
    EXPECT_EQ(backend.begun, name == "capuchin" ? 1 : 0);
    EXPECT_EQ(backend.ended, backend.begun);
  }
}

// A copy's event that reads as still running the first time it is asked, as a copy the host got
// ahead of does on cuda: the manager's wait for it is then always taken.
class LateOnceEvent final : public EventImpl {
 public:
  explicit LateOnceEvent(Event inner) : inner_(std::move(inner)) {}
  bool query() override { return std::exchange(asked_, true) && inner_->query(); }
  void wait() override { inner_->wait(); }

 private:
  Event inner_;
  bool asked_ = false;
};

// A backend that waits for swap copies "on the device" (Backend::compute_wait), as cuda does by
// default: each such wait is counted, and take_device_wait_ms() reports 0.25 ms
// for each since the last call. The cpu underneath still waits, so the values are the cpu's.
class DeviceWaitingCpu final : public CpuWrapper {
 public:
  explicit DeviceWaitingCpu(size_t budget) : CpuWrapper(budget) {}
  int compute_waits = 0, takes = 0, pending = 0;
  void compute_wait(const Event& e) override {
    ++compute_waits, ++pending;
    cpu_->stream_wait(Stream::kCompute, e);
  }
  bool waits_on_device() const override { return true; }
  double take_device_wait_ms() override {
    ++takes;
    return 0.25 * std::exchange(pending, 0);
  }
  Event record(Stream s) override {
    Event e = cpu_->record(s);
    return s == Stream::kD2H || s == Stream::kH2D ? std::make_shared<LateOnceEvent>(std::move(e)) : e;
  }
  std::string name() const override { return "device-waiting cpu"; }
};

// Swap copies are waited for through Backend::compute_wait, and the device's wait time (not the
// host's in the call) is the iteration's stall, added after its synchronize
// (MemoryManager::collect_device_waits); the losses are those of the same run on the plain cpu
// backend.
TEST(DeviceWaits, SwapWaitsAreTheDevicesAndCountAsStall) {
  Graph g = build_model(tiny("resnet-tiny", 8));
  build_backward(g, OptimizerConfig{});
  auto losses = [&](Backend& backend, size_t budget, std::vector<IterationStats>* stats) {
    MemoryManager mm(backend, g, make_allocator("caching", budget), make_policy("lru"));
    Executor exec(g, backend, mm);
    mm.init_persistent(1);
    std::vector<float> out;
    for (int it = 0; it < 3; ++it) {
      const IterationStats s = exec.run_iteration(it);
      out.push_back(s.loss);
      if (stats) stats->push_back(s);
    }
    return out;
  };
  const size_t full = size_t{64} << 20;
  auto cpu_full = make_cpu_backend({.arena_bytes = full});
  std::vector<IterationStats> unlimited;
  losses(*cpu_full, full, &unlimited);
  size_t peak = 0;
  for (const auto& s : unlimited) peak = std::max(peak, s.peak_allocated);
  const size_t budget = align_up(peak / 2);
  auto cpu = make_cpu_backend({.arena_bytes = budget});
  const std::vector<float> ref = losses(*cpu, budget, nullptr);
  DeviceWaitingCpu backend(budget);
  std::vector<IterationStats> stats;
  const std::vector<float> got = losses(backend, budget, &stats);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(0, std::memcmp(&got[i], &ref[i], sizeof(float))) << "iteration " << i;
  EXPECT_GT(backend.compute_waits, 0) << "lru at half the peak swaps, and each copy is late once";
  EXPECT_EQ(backend.takes, 3) << "one collection per iteration";
  double stall = 0;
  for (const auto& s : stats) {
    EXPECT_GT(s.counters.swapped_out_bytes, 0u);
    stall += s.counters.stall_ms;
  }
  // The host's time in the call is not a stall: the device's waits alone.
  EXPECT_DOUBLE_EQ(stall, 0.25 * backend.compute_waits);
}

// Another policy, with the waits the manager tells it summed: the restores' and the swap-outs'.
class WaitCounting : public Policy {
 public:
  explicit WaitCounting(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  void attach(const MemoryView& v) override { inner_->attach(v); }
  void begin_iteration(int i) override { inner_->begin_iteration(i); }
  std::vector<Action> after_op(int op) override { return inner_->after_op(op); }
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& v) override { return inner_->choose_victims(bytes, v); }
  void end_iteration(const AccessTrace& t) override { inner_->end_iteration(t); }
  void on_restore(TensorId id, int op, Residency from, double ms) override {
    restores_ms += ms;
    inner_->on_restore(id, op, from, ms);
  }
  void on_swap_out_wait(TensorId id, double ms) override {
    swap_outs_ms += ms;
    inner_->on_swap_out_wait(id, ms);
  }
  double restores_ms = 0, swap_outs_ms = 0;

 private:
  std::unique_ptr<Policy> inner_;
};

// The copy calibration (MemoryManager::calibrate_copies) on a sim backend whose copies each cost
// a fixed amount beyond their bytes: a lone copy's latency and a queued copy's cost are both that
// amount, and the rate per byte is the link's. Without it, a queued copy adds nothing.
TEST(CopyCalibration, AQueuedCopysCostIsWhatEachAddsBehindOthers) {
  Graph g = build_model(tiny("resnet-tiny", 2));
  build_backward(g, OptimizerConfig{});
  for (const double queued : {0.0, 0.003}) {
    SCOPED_TRACE(queued);
    auto backend = make_sim_backend({.arena_bytes = size_t{64} << 20, .gpu = "p100-16g", .link_ms_per_byte = 2e-7,
                                     .copy_queued_ms = queued});
    MemoryManager mm(*backend, g, make_allocator("caching", size_t{64} << 20), make_policy("lru"));
    EXPECT_NEAR(mm.copy_ms_per_byte(), 2e-7, 1e-12);
    EXPECT_NEAR(mm.copy_latency_ms(), queued + 2e-7 * kAllocAlignment, 1e-9);
    EXPECT_NEAR(mm.copy_queued_ms(), queued, 1e-9);
  }
}

// Each millisecond the compute stream waited is told to the policy once: a restore that had to
// wait for another tensor's swap-out (to have its block) is told its own wait, and the swap-out
// its. Charged to both, the search's per-gap costs (policy auto) counted that wait twice.
TEST(DeviceWaits, ASwapOutWaitInsideARestoreIsToldOnce) {
  Graph g = build_model(tiny("resnet-tiny", 8));
  build_backward(g, OptimizerConfig{});
  struct Out {
    size_t peak = 0;
    double waited = 0, restores_ms = 0, swap_outs_ms = 0;
  };
  auto run = [&](size_t budget) {
    auto backend = make_sim_backend({.arena_bytes = budget, .gpu = "p100-16g"});
    auto policy = std::make_unique<WaitCounting>(make_policy("lru"));
    const WaitCounting& counting = *policy;  // lives as long as mm
    MemoryManager mm(*backend, g, make_allocator("caching", budget), std::move(policy));
    Executor exec(g, *backend, mm);
    mm.init_persistent(1);
    Out out;
    for (int it = 0; it < 3; ++it) {
      const IterationStats s = exec.run_iteration(it);
      out.peak = std::max(out.peak, s.peak_allocated);
      out.waited += s.counters.stall_ms + s.counters.recompute_ms;
    }
    out.restores_ms = counting.restores_ms, out.swap_outs_ms = counting.swap_outs_ms;
    return out;
  };
  const Out got = run(align_up(run(size_t{256} << 20).peak * 2 / 5));
  EXPECT_GT(got.restores_ms, 0);
  EXPECT_GT(got.swap_outs_ms, 0);
  EXPECT_LE(got.restores_ms + got.swap_outs_ms, got.waited * (1 + 1e-9));
}

}  // namespace
}  // namespace vtensor
