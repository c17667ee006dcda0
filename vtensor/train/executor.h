// Runs the graph's ops in order, the same sequence every iteration. For each op it asks the
// MemoryManager for resident inputs and allocated outputs, launches the kernel on the backend,
// releases tensors whose last use has passed, and lets the manager carry out policy actions.
// It also re-runs producers when the manager recomputes a dropped tensor.
#pragma once
#include <string>
#include <vector>

#include "vtensor/backend/backend.h"
#include "vtensor/memory/memory_manager.h"

namespace vtensor {

// One op kind's recomputations in an iteration: how many ops re-ran, their time (the memory
// manager's recompute_ms, split), the bytes they restored, and of them the repeats: an op re-run
// once more in the same iteration (its tensor dropped again after it was restored, or re-run
// for another chain). A replayed op's kind is the one its trace recorded (recompute_kind).
struct RecomputeByKind {
  std::string kind;
  uint64_t count = 0, repeats = 0, restored_bytes = 0;
  double ms = 0, repeat_ms = 0;
};

// One restore by recomputation: the ops re-run to bring back one dropped tensor that an op (or a
// policy's action after it) needed, its chain of dropped or released ancestors included. A deep
// chain (a dropped tensor whose sources were dropped too) re-runs many ops at one access.
struct RecomputeChain {
  int op = -1;  // the op that needed it
  std::string op_name, tensor;
  uint64_t ops = 0, restored_bytes = 0;
  double ms = 0;
};

struct IterationStats {
  int iteration = 0;
  float loss = 0.f;
  bool has_loss = true;  // false on backends without values (sim): `loss` means nothing
  double time_ms = 0;
  size_t peak_allocated = 0, peak_reserved = 0;
  double fragmentation = 0;  // at the peak's end of the iteration
  size_t peak_host = 0;      // host pool bytes held (in use + cached), peak this iteration
  bool host_limited = false; // a --host-budget is set
  MemoryCounters counters;
  bool paged = false;       // unified memory (policies um, um-prefetch)
  PagingCounters paging;
  size_t page_bytes = 0;    // unified memory: the page the counters count in
  bool op_times_on_device = false;  // the trace's op times came from the device (a measured iteration on cuda)
  // Host wall time launching the ops (mid-iteration waits, e.g. the loss read back, included) and
  // waiting at the end for the device to finish them. Where the device runs asynchronously
  // (cuda), a drain near zero with launch near time_ms says the GPU waited for the host.
  double host_launch_ms = 0, host_drain_ms = 0;
  // Of host_launch_ms: in the backend's kernel launches (recomputations included), in the memory
  // manager's allocations (outputs, workspaces: the OOM ladder's evictions and compactions), and
  // in its after-op actions (the policy's swap-outs, prefetches, drops, and the swap-outs
  // completed). The rest is the accesses (waits, on-demand restores) and the releases.
  double host_kernel_ms = 0, host_alloc_ms = 0, host_after_op_ms = 0;
  // On sim with a host model (HostModel), the host_* figures above are the modelled host's, and:
  bool host_modelled = false;
  struct ModelledHost {
    double wait_ms = 0;         // the host waiting for the device within the op loop (loss read back, host waits)
    double device_idle_ms = 0;  // the compute stream waiting for a launch the host had not issued
    uint64_t launches = 0, allocations = 0, actions = 0, copies = 0, events = 0, moved_blocks = 0;
  } host_model;
  // Host wall time in the policy's end of the iteration (MemoryManager::policy_end_ms): where a
  // planned policy plans, auto for seconds after its measured iteration.
  double host_plan_ms = 0;
  std::vector<RecomputeByKind> recompute_by_kind;  // the most time first
  std::vector<RecomputeChain> recompute_chains;    // in the order they ran
};

// The kind an op is counted under: its OpKind, or for a replayed op the kind its trace recorded
// (a DTR log's op name, `cudnn_convolution`; a vtensor trace's bracketed kind, `conv2d`).
std::string recompute_kind(const Op& op);

class Executor {
 public:
  Executor(const Graph& g, Backend& backend, MemoryManager& mm);
  IterationStats run_iteration(int iteration);

 private:
  void run_op(int op_index);
  void recompute(TensorId id);
  // The op's workspace for `algo`; a convolution whose fast workspace finds no room runs with the
  // lean algorithm (smaller workspace) instead of failing: `algo` and `bytes` say what was taken.
  void* allocate_workspace(const Op& op, ConvAlgo& algo, size_t& bytes);
  static void set_modelled_host(IterationStats& s, const Backend::HostClock& c0, const Backend::HostClock& c1,
                                const Backend::HostClock& c2);

  const Graph& g_;
  Backend& backend_;
  MemoryManager& mm_;
  std::vector<std::vector<TensorId>> release_after_;  // per op: tensors whose last use it is
  struct Recomputation {
    int op;
    double ms;
    uint64_t restored_bytes;
  };
  std::vector<Recomputation> recomputations_;  // this iteration's, in order
  std::vector<RecomputeChain> chains_;         // this iteration's, in order (names filled at its end)
  std::vector<TensorId> chain_tensor_;         // per chain: the tensor it restored
  int current_op_ = -1;                        // the op run_op is running
  int chain_depth_ = 0;                        // recompute() calls open: 1 at a chain's top
  std::vector<RecomputeByKind> recompute_by_kind() const;
  uint64_t iteration_ = 0;
  float loss_ = 0.f;
  double kernel_ms_ = 0, alloc_ms_ = 0, after_op_ms_ = 0;  // this iteration's, host clock
  // Those are timed off sim only: on sim the report leaves them out, and the clock reads were an
  // eighth of a rehearsal's time (auto's search runs thousands).
  bool time_host_ = true;
};

}  // namespace vtensor
