// A Policy decides; it never touches a device. The MemoryManager asks it for victims when an
// allocation does not fit (passive eviction) and for planned actions after each op, and hands
// it the access trace at the end of each iteration.
#pragma once
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vtensor/backend/codec.h"
#include "vtensor/core/graph.h"
#include "vtensor/memory/access_tracker.h"
#include "vtensor/memory/page_policy.h"
#include "vtensor/memory/plan.h"

namespace vtensor {

struct DensityTable;  // vtensor/backend/backend.h

enum class Residency {
  kUnallocated, kResident, kSwappingOut, kOnHost, kSwappingIn, kDropped,
  kCompressing, kCompressed, kDecompressing,  // on the device in compressed form (FreeLunch)
};
const char* to_string(Residency r);

// What a policy may read about a tensor.
struct TensorView {
  TensorId id;
  size_t bytes;
  Residency residency;
  bool locked;             // in use by the running op: not evictable now
  bool persistent;
  uint64_t last_access;    // logical clock of the last access (deterministic across backends)
  int last_access_op;
};

class MemoryView {
 public:
  virtual ~MemoryView() = default;
  virtual const Graph& graph() const = 0;
  virtual TensorView view(TensorId id) const = 0;
  // Tensors whose bytes are on the device now and that nothing has locked.
  virtual std::vector<TensorId> evictable() const = 0;
  // view() of each of evictable(), in its order (one call where a policy weighs them all).
  virtual std::vector<TensorView> evictable_views() const {
    std::vector<TensorView> out;
    for (TensorId id : evictable()) out.push_back(view(id));
    return out;
  }
  // Can the tensor be dropped now and recomputed later from what is alive?
  virtual bool can_recompute(TensorId id) const = 0;
  virtual size_t budget() const = 0;
  virtual size_t allocated() const = 0;
  // Bytes the host pool can still take for swap-outs (--host-budget; SIZE_MAX: unlimited).
  virtual size_t host_room() const { return std::numeric_limits<size_t>::max(); }
  // Host<->device copy time on the backend's clock: per byte, and the fixed cost of one copy
  // (issue to completion seen by the host) (0: unknown).
  virtual double copy_ms_per_byte() const { return 0.0; }
  virtual double copy_latency_ms() const { return 0.0; }
  // What one more copy adds when queued behind others (the host's call and the copy engine's
  // start, without a lone copy's round trip): 0 where the link costs its bytes alone.
  virtual double copy_queued_ms() const { return 0.0; }
  // The backend's codec speed, measured on synthetic data when the persistent tensors were
  // placed, where the policy asked (PlanningHooks::wants_codec_rate); nullopt: not measured (sim: the
  // cost model's is the run).
  virtual std::optional<CodecRate> codec_rate() const { return std::nullopt; }
  // The sim backend's GPU name (a rehearsal on sim can model the same one); empty elsewhere.
  virtual std::string modelled_gpu() const { return {}; }
  virtual const std::vector<double>* modelled_op_ms() const { return nullptr; }  // sim: the op times it charges, if given
  // The device allocator's name ("caching", "planned") and the host pool's budget (0: unlimited),
  // so that a rehearsal of the run (policy auto) can use the same.
  virtual std::string allocator_name() const { return "caching"; }
  virtual size_t host_budget() const { return 0; }
  // Scratch an op's kernel is given this iteration (its conv algorithm's, as the backend sizes it).
  virtual size_t workspace_bytes(const Op& op) const { return op.workspace_bytes; }
  // The scratch the backend gives the op with either convolution algorithm (cuda: cuDNN's sizes).
  virtual size_t device_workspace_bytes(const Op& op, ConvAlgo algo) const {
    return algo == ConvAlgo::kLean ? op.workspace_lean_bytes : op.workspace_bytes;
  }
  // Elements of a resident tensor whose bit pattern is non-zero (a measurement for sizing
  // compressed buffers; without data, the recorded densities). nullopt: not known.
  virtual std::optional<size_t> count_nonzeros(TensorId id) const { return std::nullopt; }
  // The recorded densities a backend without data counts from (sim with --densities); null
  // elsewhere (a backend with data counts its own tensors).
  virtual std::shared_ptr<const DensityTable> densities() const { return nullptr; }
};

// Mechanism switches of the compression (FreeLunch's ablation); the policy plans by the same ones.
struct CompressionOptions {
  bool sliding_workspace = true;   // one fixed workspace; off: a worst-case one per compression
  bool persistent_buffers = true;  // per-tensor buffers kept across iterations; off: allocated each time
  bool on_compute_stream = false;  // run the codecs on the compute stream (no overlap)
  size_t workspace_bytes = size_t{64} << 10;  // the sliding workspace's size (at most)
  bool bitmask = true, sign = true;  // the codecs the policy may use (--codecs)
  Codec lossy = Codec::kNone;        // --lossy: opt-in lossy codec for what no lossless one fits
  bool operator==(const CompressionOptions&) const = default;
};

enum class EvictAction { kSwap, kDrop };
struct Victim {
  TensorId id;
  EvictAction action;
};

// The arena an iteration starts with, where a policy compacts at iteration end:
// - kPacked: the live blocks slid down in their order, the free space one block on top;
// - kReordered: packed, then the persistent tensors that got a new block this iteration above the
//   others in the order they got it (packing keeps the order, which a tensor brought back into
//   another hole changes: the layout can drift from one iteration to the next);
// - kRestored: the blocks moved back where the last iteration started with them, packed where
//   that cannot be done (MemoryManager::restore_start_state). Every iteration alike, and only
//   the displaced blocks move.
enum class StartState { kPacked, kReordered, kRestored };

// One live block of the arena where an iteration ends (MemoryManager::move_to_layout).
struct LayoutBlock {
  TensorId id;  // kNoTensor: the sliding workspace
  bool buffer;  // a compressed buffer (comp_offset), not the tensor's own block
  size_t offset, size;
  bool operator==(const LayoutBlock&) const = default;
};
const char* to_string(StartState s);

class RehearsingPolicy;  // vtensor/policy/planning.h
class PlanningHooks;     // vtensor/memory/planning_hooks.h

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  // A policy that plans by rehearsal (auto) gives its planning hooks here; null for the others.
  virtual RehearsingPolicy* rehearsing() { return nullptr; }
  // A policy that shapes the arena and the plan between iterations (auto): its hooks; null: none.
  virtual PlanningHooks* planning() { return nullptr; }
  // A policy that compresses (compress, compress+swap, compress+capuchin): the codecs and mechanism
  // its options chose, which the memory manager runs them with; null: the defaults.
  virtual const CompressionOptions* compression() const { return nullptr; }
  // Once, when the memory manager is built: the graph and budget a planning policy plans from.
  // The view stays valid for the policy's lifetime.
  virtual void attach(const MemoryView& view) {}
  virtual void begin_iteration(int iteration) {}
  // Per-op conv algorithm for the coming iteration (indexed by op; empty: all ConvAlgo::kFast).
  // The memory manager sizes workspaces by it and the executor passes it to the kernels.
  virtual std::vector<ConvAlgo> conv_algorithms() const { return {}; }
  // Actions to carry out after op `op_index` has been launched.
  virtual std::vector<Action> after_op(int op_index) { return {}; }
  // An allocation of `bytes` did not fit: which tensors to evict (in order). Empty: give up (OOM).
  virtual std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) = 0;
  virtual void end_iteration(const AccessTrace& trace) {}
  // Persistent tensors the plan has on the host when an iteration starts (after end_iteration):
  // the memory manager copies those still on the device out before the next iteration, so the
  // first iteration a new plan guides starts from the state the later ones start from.
  virtual std::vector<TensorId> on_host_at_start() const { return {}; }
  // Whether the iteration that just ended (asked after end_iteration) ran the schedule the next
  // one runs: false after a measuring iteration a plan replaces. The planned pool plans only
  // from one that did.
  virtual bool iteration_repeats() const { return true; }
  // The coming iteration is measured: its trace's op times make the plan the next ones follow.
  // Asked after begin_iteration; backends that time ops on the device (cuda) then do.
  virtual bool measuring() const { return false; }
  // An access found `id` not resident (`from`: on host, swapping in, dropped) and waited
  // `waited_ms` for its copy back from host or its recomputation: a late or missing prefetch
  // (Capuchin's feedback, vDNN's per-layer stall time).
  virtual void on_restore(TensorId id, int op_index, Residency from, double waited_ms) {}
  // The compute stream waited `waited_ms` for `id`'s swap-out to end (at its release point, or
  // for its block when an allocation needed it): a congested copy queue.
  virtual void on_swap_out_wait(TensorId id, double waited_ms) {}
  // The smallest budget a static plan is known to need, for the OutOfMemoryError (nullopt: unknown).
  virtual std::optional<size_t> smallest_working_budget() const { return std::nullopt; }
  // Lossless policies must give bit-identical training to `none`.
  virtual bool lossless() const { return true; }
  // What the policy decided (per layer / per tensor), for the run's report; null when nothing.
  virtual nlohmann::json report() const { return nullptr; }
  // One line for the console after a run (e.g. vdnn-dyn's chosen configuration); empty: none.
  virtual std::string summary() const { return {}; }
  // Unified-memory policies (um, um-prefetch) decide pages too: the memory manager then runs
  // the paged residency (vtensor/memory/paged_memory.h). Null: no paging.
  virtual PagePolicy* paging() { return nullptr; }
};

}  // namespace vtensor
