// The MemoryManager owns every tensor's residency and is the only code that changes it:
//   unallocated -> resident -> swapping_out -> on_host -> swapping_in -> resident
//   resident -> dropped -> (recompute) -> resident
//   resident -> compressing -> compressed -> decompressing -> resident
// It owns the device allocator, the host pool and the access tracker, carries out the
// active policy's actions, and runs the OOM ladder when an allocation does not fit:
//   1. the allocator reuses a cached free block;
//   2. wait for in-flight swap-outs, whose blocks are freed once their copies complete (and
//      compressions likewise);
//   3. ask the policy for victims and evict them (swap out or drop), then retry; when it has
//      none, wait for in-flight prefetches, which makes them evictable, and ask again;
//   4. if enough bytes are free but scattered, compact as much as makes the block (the window
//      of blocks with the fewest live bytes: those move into holes elsewhere, or slide); then free
//      the persistent compression buffers (and the sliding workspace) that hold nothing now;
//      then drop compressed tensors that can be recomputed (least recently used first);
//   5. throw OutOfMemoryError{requested, in use, budget}.
// Host budget (--host-budget): a swap-out that does not fit in the host pool is not taken. A
// planned one (Action kSwapOut) is skipped, the tensor stays resident; an eviction victim is
// refused and the others are tried (policies read host_room() to pick ones that fit or to drop
// instead). When a round evicts nothing and a swap was refused, step 5 throws the host's
// OutOfMemoryError{requested on host, in use there, host budget}.
// Pointers to tensors are valid until the next allocation (compaction moves them): the
// executor resolves them right before it launches a kernel. Scratch blocks never move.
// Dropped tensors keep the inputs of their producer alive (a lineage reference), so a tensor
// whose last use has passed is freed only when no dropped tensor needs it for recomputation.
// Compression (FreeLunch) is carried out like a swap, on the compression stream instead of a
// copy stream and into a block of the device arena instead of host memory: a kCompress action
// gets the tensor a buffer of the planned capacity (its persistent per-tensor buffer, kept from
// one iteration to the next, unless CompressionOptions::persistent_buffers is off) and a
// workspace (one fixed sliding workspace for the run, or, with sliding_workspace off, one of the
// tensor's worst-case size for this compression), and the original block is freed at the
// action's release op once the codec has finished; a compressed size above the capacity (the
// data grew denser than measured) keeps the tensor resident. A kPrefetch of a compressed tensor
// decompresses it into a new block; an access to a compressed tensor decompresses it on demand
// and counts the wait as stall. Where the policy asks (PlanningHooks::wants_codec_rate), the codec is
// timed once before the first iteration, in blocks freed again (measure_codec_rate).
// Views (TensorInfo::view_of) have no block and no residency of their own: every function
// here maps a view to its base, so accessing a view makes the base resident, and swap, drop
// and recompute act on the base. A view is never a victim on its own; the executor keeps the
// base alive until the last use of the base and of all its views.
#pragma once
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "vtensor/backend/backend.h"
#include "vtensor/memory/access_tracker.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/memory/host_pool.h"
#include "vtensor/memory/paged_memory.h"
#include "vtensor/memory/policy.h"

namespace vtensor {

struct MemoryCounters {
  uint64_t swapped_out_bytes = 0, swapped_in_bytes = 0;
  uint64_t swap_outs = 0, swap_ins = 0, prefetches = 0;
  uint64_t dropped = 0, recomputed_ops = 0;
  double recompute_ms = 0, stall_ms = 0;  // compute time spent recomputing / waiting for copies
  uint64_t evictions = 0;                 // victims taken by the OOM ladder
  uint64_t compactions = 0, compacted_bytes = 0;  // defragmentation moves
  uint64_t compacted_blocks = 0;  // blocks moved (Backend::move_device_batch groups the small ones)
  // The moves' time on the backend's clock (the sim's compute stream; on cuda the host's enqueueing
  // unless VTENSOR_CUDA_SYNC_TIMING=1, as recompute_ms); the waits for copies before them are stall.
  double compact_ms = 0;
  uint64_t reordered_bytes = 0;  // of those, placed tensors moved above the packed ones (pack_start_state)
  uint64_t restored_bytes = 0;   // of those, blocks moved back where the iteration started with them
  uint64_t lean_conv_fallbacks = 0;  // convolutions run with the lean algorithm: no room for the fast one's workspace
  uint64_t host_skipped_swaps = 0;  // swap-outs not taken for lack of host budget (planned or eviction)
  // Compression: bytes before / after of the compressions completed, and how they went.
  uint64_t compressed_bytes = 0, compressed_to_bytes = 0;
  uint64_t compressions = 0, decompressions = 0, on_demand_decompressions = 0;
  uint64_t compress_overflows = 0;  // compressed size above the planned buffer: kept resident
  uint64_t compress_skipped = 0;    // no room for the buffer or workspace: kept resident
  uint64_t buffers_released = 0;    // idle persistent buffers freed by the OOM ladder
  double compress_ms = 0, decompress_ms = 0;  // codec time on its stream
  // Field by field (the timeline's events between two points): a counter added above goes here too.
  MemoryCounters& operator-=(const MemoryCounters& b);
};

// One tensor's compressions over the last iteration, for the run's report.
struct CompressionStat {
  TensorId id = kNoTensor;
  Codec codec = Codec::kNone;
  size_t bytes_before = 0, bytes_after = 0, capacity = 0;
  double compress_ms = 0, decompress_ms = 0, stall_ms = 0;
  int compressions = 0, overflows = 0, on_demand = 0;
};

// What holds the device bytes of a timeline point (the memory view's stacked categories).
enum class HeldBy { kParameters, kGradients, kOptimizerState, kActivations, kCompressed, kInFlight, kWorkspace, kCount };
constexpr size_t kHeldByCount = static_cast<size_t>(HeldBy::kCount);
const char* to_string(HeldBy h);

struct TimelinePoint {
  int op_index;
  size_t allocated, reserved;
  // Device bytes after the op: parameters (and buffers), gradients, optimizer state, activations
  // (and data), compressed buffers, tensors in flight to or from host; kWorkspace is the scratch
  // the op allocated while it ran (freed by now), so allocated + held[kWorkspace] is the op's own peak.
  std::array<size_t, kHeldByCount> held{};
  // Unified memory: the device frames in use x page bytes (allocated then counts the managed range),
  // and the pages faulted in on demand and prefetched since the previous point.
  size_t device_page_bytes = 0;
  uint64_t page_faults = 0, page_prefetches = 0;
  MemoryCounters events;  // what happened since the previous point (swaps, drops, recomputations, stalls)
};

// One residency move the memory manager made, at an op boundary: `point` is the op before which it
// is done (after_op(k)'s actions and op k+1's allocations: k+1; num_ops: after the last op). The
// moves of an iteration are its executed plan, whoever decided them (the policy's actions or the
// OOM ladder's evictions): what a runtime outside vtensor can follow (vtensor.torch.auto).
struct Move {
  enum class Kind { kSwapOut, kPrefetch, kDrop, kCompress };
  Kind kind;
  TensorId id;  // the storage (a view's base)
  int point;
  bool planned;  // a policy action after an op; false: an eviction or an on-demand restore
  bool operator==(const Move&) const = default;
};
const char* to_string(Move::Kind k);

class MemoryManager final : public MemoryView {
 public:
  // Re-runs the producer of a dropped tensor (the executor provides it).
  using RecomputeFn = std::function<void(TensorId)>;

  MemoryManager(Backend& backend, const Graph& graph, std::unique_ptr<DeviceAllocator> allocator,
                std::unique_ptr<Policy> policy);
  ~MemoryManager() override;

  void set_recompute_fn(RecomputeFn fn) { recompute_ = std::move(fn); }
  void set_timeline_enabled(bool on) { timeline_enabled_ = on; }
  // Keep each iteration's moves (moves(): the last iteration's, cleared when one begins).
  void set_move_log_enabled(bool on) { move_log_enabled_ = on; }
  const std::vector<Move>& moves() const { return moves_; }
  void set_host_budget(size_t bytes) { host_.set_budget(bytes); }  // 0: unlimited
  void set_compression(const CompressionOptions& o) { compression_ = o; }
  const CompressionOptions& compression() const { return compression_; }
  // The policy's conv algorithm for an op this iteration, and the workspace it needs.
  ConvAlgo conv_algo(int op_index) const {
    return static_cast<size_t>(op_index) < conv_algos_.size() ? conv_algos_[static_cast<size_t>(op_index)] : ConvAlgo::kFast;
  }
  size_t workspace_bytes(const Op& op) const override { return backend_.workspace_bytes(graph_, op, conv_algo(op.index)); }
  size_t device_workspace_bytes(const Op& op, ConvAlgo algo) const override { return backend_.workspace_bytes(graph_, op, algo); }

  // Allocates and initialises the persistent tensors (parameters, optimizer state, buffers).
  // values: tensors given their bytes (train --init) instead of their seeded initialisation.
  void init_persistent(uint64_t seed, const std::map<TensorId, const float*>* values = nullptr);

  void begin_iteration(int iteration);
  void end_iteration();

  // --- executor interface ---
  // Makes `id` resident (waits for a copy, swaps in, recomputes) and records the access.
  float* access(TensorId id, AccessKind kind, int op_index);
  // Gives an op output device memory (OOM ladder); the tensor becomes resident.
  float* allocate(TensorId id);
  void lock(TensorId id);
  void unlock(TensorId id);
  // The tensor's last use this iteration has passed.
  void release(TensorId id);
  // Scratch (workspaces, recompute outputs not needed): an arena offset.
  void* allocate_scratch(size_t bytes, const char* what);
  void free_scratch(void* p);
  // After op `op_index` was launched: complete the swap-outs whose release point this op is,
  // carry out the policy's actions.
  void after_op(int op_index);
  // Unified memory (policies with paging(), paged_memory.h): before op `op_index`'s kernel, fault
  // in the pages of its inputs, outputs and workspace; after the launch, let them go again.
  // No-ops without paging.
  void fault_pages(int op_index, const void* workspace, size_t workspace_bytes);
  void kernel_launched();
  const PagedMemory* paged() const { return paged_.get(); }
  // The books balance (after any failure too): the caching allocator's own invariants, and the
  // device bytes the tensors and compressed buffers hold fit in what the allocator counts as
  // allocated. Throws std::logic_error naming the first violation.
  void check_invariants() const;
  // The executor recomputed `id` (a dropped output): its inputs no longer need to stay alive for it.
  void recomputed(TensorId id) { add_lineage_refs(id, -1); }
  void note_lean_conv_fallback() { ++counters_.lean_conv_fallbacks; }
  // After the iteration's synchronize: adds the compute stream's device waits to the stall.
  void collect_device_waits();
  void note_recompute(double ms) {
    ++counters_.recomputed_ops;
    counters_.recompute_ms += ms;
  }

  // --- mechanisms (each is one residency transition) ---
  // resident -> swapping_out (async). The block is freed at the end of the second op after the
  // one whose after_op issues it (an eviction during op k's allocations: at the end of op k+1);
  // a planned swap-out names its own release op (Action::free_after).
  void swap_out(TensorId id);
  void prefetch(TensorId id);              // on_host -> swapping_in (async)
  void drop(TensorId id);                  // resident (or compressed) -> dropped
  // resident -> compressing (async on the compression stream); completed at the end of op
  // sequence number release_seq. False (nothing changes) when no buffer or workspace fits.
  bool compress(TensorId id, Codec codec, size_t capacity, uint64_t release_seq, bool per_use_buffer = false);
  void decompress(TensorId id);            // compressed -> decompressing (async)
  float* device_ptr(TensorId id) const;    // resident tensors only
  // Reads a tensor's bytes to host memory wherever it lives (for the loss, weights, tests).
  void read(TensorId id, void* host_dst);

  // --- MemoryView ---
  const Graph& graph() const override { return graph_; }
  TensorView view(TensorId id) const override;
  std::vector<TensorId> evictable() const override;
  std::vector<TensorView> evictable_views() const override;
  bool can_recompute(TensorId id) const override;
  size_t budget() const override { return backend_.arena_bytes(); }
  size_t allocated() const override { return allocator_->stats().allocated; }
  size_t host_room() const override { return host_.room(); }
  // Measured once with calibration copies (device to host): kCalibrationBytes for the
  // bandwidth, one alignment unit for the latency, and runs of such units queued back to back
  // for a queued copy's cost.
  double copy_ms_per_byte() const override;
  double copy_latency_ms() const override;
  double copy_queued_ms() const override;
  // Host wall time the policy's end of the last iteration took (where a planned policy plans:
  // auto for seconds after its measured iteration).
  double policy_end_ms() const { return policy_end_ms_; }
  std::string modelled_gpu() const override { return backend_.modelled_gpu(); }
  const std::vector<double>* modelled_op_ms() const override { return backend_.modelled_op_ms(); }
  std::optional<CodecRate> codec_rate() const override { return codec_rate_; }
  // The probe's largest tensor (elements), at most a third of the arena left free.
  static constexpr size_t kCodecProbeElements = size_t{4} << 20;
  std::shared_ptr<const DensityTable> densities() const override { return backend_.densities(); }
  std::string allocator_name() const override { return allocator_->name(); }
  size_t host_budget() const override { return host_.budget() == HostPool::kUnlimited ? 0 : host_.budget(); }
  static constexpr size_t kCalibrationBytes = size_t{4} << 20;
  static constexpr int kQueuedRun = 8;  // the shorter run of queued copies (copy_queued_ms)

  Residency residency(TensorId id) const { return st(storage_of(id)).residency; }
  // The tensor that owns id's storage: id itself, or the base of a view (chains resolved).
  TensorId storage_of(TensorId id) const { return base_.at(static_cast<size_t>(id)); }
  bool is_view(TensorId id) const { return storage_of(id) != id; }
  const DeviceAllocator& allocator() const { return *allocator_; }
  DeviceAllocator& allocator() { return *allocator_; }
  const HostPool& host_pool() const { return host_; }
  AccessTracker& tracker() { return tracker_; }
  Policy& policy() { return *policy_; }
  const MemoryCounters& counters() const { return counters_; }
  const std::vector<TimelinePoint>& timeline() const { return timeline_; }
  // The last iteration's compressions, per tensor (in tensor order).
  std::vector<CompressionStat> compression_stats() const;
  // Non-zero counts measured by count_nonzeros on a backend with data (for --densities-out).
  const DensityTable& measured_densities() const { return measured_; }
  std::optional<size_t> count_nonzeros(TensorId id) const override;
  Backend& backend() { return backend_; }
  // The blocks live on the device, by (id, buffer): between iterations, the layout the next
  // one starts from (PlanningHooks::take_start_layout).
  std::vector<LayoutBlock> live_device_blocks() const;
  // The live blocks moved to `layout` (the same blocks, by (id, buffer)): a move waits for those
  // whose blocks lie where it goes, and a cycle of them goes through a gap free now and in the
  // layout (through_gaps; else nothing moves). Caching allocator only; nullopt where it cannot be
  // done (other blocks, a cycle, no gap; the moves done so far stay), else whether anything moved.
  std::optional<bool> move_to_layout(const std::vector<LayoutBlock>& layout, bool through_gaps = true);

 private:
  struct State {
    Residency residency = Residency::kUnallocated;
    size_t bytes = 0;
    size_t offset = 0;       // device block (resident, swapping_out, swapping_in)
    void* host = nullptr;    // host copy (swapping_out, on_host, swapping_in)
    Event event;             // the copy in flight
    int locks = 0;
    int lineage_refs = 0;    // dropped tensors that need this one to be recomputed
    bool released = false;   // last use passed; freed when lineage_refs reaches 0
    bool persistent = false;
    uint64_t placed_seq = 0;  // persistent: when it last got a new block (0: not this iteration)
    uint64_t last_access = 0;
    int last_access_op = -1;
    uint64_t release_seq = 0;  // swap-out, compression: completed at the end of the op with this op_seq_
    // Compression: the buffer (a block of the arena), the codec and what the stream reports.
    Codec codec = Codec::kNone;
    bool has_buffer = false;      // comp_offset holds a block of comp_capacity bytes
    bool per_use_buffer = false;  // freed once the tensor is back, even with persistent buffers
    size_t comp_offset = 0, comp_capacity = 0, comp_bytes = 0;
    bool own_workspace = false;   // ws_offset: this compression's own workspace (no sliding)
    size_t ws_offset = 0;
    CodecResult result;           // written by the compression stream
    CompressionStat stat;         // this iteration's
  };
  const State& st(TensorId id) const { return states_.at(static_cast<size_t>(id)); }
  State& st(TensorId id) { return states_.at(static_cast<size_t>(id)); }

  std::string usage_summary() const;
  size_t alloc_block(size_t bytes, int64_t tag, const char* what);  // the OOM ladder
  void restore(TensorId id);               // any -> resident
  // The compute stream waits for s.event, counted as stall. A swap copy's wait may be the device's
  // (Backend::compute_wait): its stall is counted by collect_device_waits().
  void wait_copy(State& s, bool swap_copy = false);
  bool can_recompute(TensorId id, std::vector<int8_t>& memo) const;
  bool can_recompute_uncached(TensorId id, std::vector<int8_t>& memo) const;
  bool finish_oldest_swap_out();           // waits for it, frees its block
  void swap_out_waited(TensorId id, double ms);  // tells the policy; counted apart from the restores
  bool finish_prefetches();                // swapping_in -> resident for unlocked tensors
  void complete_swap_out(TensorId id);
  void cancel_swap_out(TensorId id);             // swapping_out -> resident
  void start_swap_out(TensorId id, uint64_t release_seq);
  void finish_swap_outs_due(uint64_t op_seq);  // those whose release point is reached, in issue order
  void free_device(State& s);
  void free_buffer(State& s, bool even_persistent);
  void free_own_workspace(State& s);
  bool release_idle_buffers();  // OOM ladder: persistent buffers of tensors not compressed now
  bool drop_compressed(size_t bytes);  // OOM ladder, last: compressed tensors that can be recomputed
  void complete_compress(TensorId id);
  void cancel_compress(TensorId id);           // compressing -> resident
  void finish_decompress(TensorId id);         // decompressing -> resident
  void finish_compressions_due(uint64_t op_seq);
  bool finish_oldest_compress();
  void* arena_at(size_t off) const { return static_cast<char*>(backend_.arena_base()) + off; }
  void free_host(State& s);
  void destroy(TensorId id);               // release for real
  void add_lineage_refs(TensorId id, int delta);
  void evict(const Victim& v);
  void sample_timeline(int op_index);
  bool compact(size_t need = 0);  // need > 0: only as much as makes a free block of need bytes
  bool pack_start_state();  // compact, then the persistent tensors placed this iteration on top
  // The blocks the iteration started with, moved back where they were: nullopt where that cannot
  // be done (move_to_layout), else whether anything moved.
  std::optional<bool> restore_start_state();

  Backend& backend_;
  const Graph& graph_;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<Policy> policy_;
  HostPool host_;
  AccessTracker tracker_;
  std::vector<State> states_;
  std::vector<TensorId> base_;  // storage_of()
  std::deque<TensorId> swapping_out_;  // in submission order
  std::deque<TensorId> compressing_;   // in submission order
  CompressionOptions compression_;
  bool has_sliding_ = false;
  size_t sliding_offset_ = 0, sliding_bytes_ = 0;  // the sliding workspace, kept for the run
  mutable DensityTable measured_;
  RecomputeFn recompute_;
  MemoryCounters counters_;
  uint64_t clock_ = 0;
  uint64_t op_seq_ = 0;  // ops completed since construction
  uint64_t placements_ = 0;  // persistent tensors given a new block since construction
  std::vector<LayoutBlock> start_layout_;  // what the iteration started with (restore_start_state)
  double swap_out_waits_ms_ = 0;  // the stall on_swap_out_wait was told, in all (access() leaves it out of a restore's)
  int iteration_ = 0;
  bool timeline_enabled_ = false;
  bool move_log_enabled_ = false;
  int move_point_ = 0;     // the op boundary a move now is made at (Move::point)
  bool in_after_op_ = false;  // moves now are the policy's actions (Move::planned)
  std::vector<Move> moves_;
  void log_move(Move::Kind k, TensorId id) {  // every move is a policy action the host issues
    backend_.host_work(Backend::HostWork::kPolicyAction);
    if (move_log_enabled_) moves_.push_back({k, id, move_point_, in_after_op_});
  }
  size_t op_scratch_ = 0;          // scratch bytes allocated since the last timeline point
  MemoryCounters timeline_prev_;   // the counters at the last timeline point
  uint64_t timeline_prev_faults_ = 0, timeline_prev_prefetches_ = 0;  // paging counters at it
  std::vector<TimelinePoint> timeline_;
  std::vector<ConvAlgo> conv_algos_;  // the policy's choice for this iteration
  bool device_op_timing_ = false;     // this iteration's ops are timed on the device (measuring policy)
  void calibrate_copies() const;
  void calibrate_queued_copies() const;  // copy_queued_ms, measured when first asked
  void init_paging(PagePolicy& pp);  // managed range, caching allocator over it
  char* arena() const { return paged_ ? paged_->base() : static_cast<char*>(backend_.arena_base()); }
  std::unique_ptr<PagedMemory> paged_;
  double policy_end_ms_ = 0;  // policy_end_ms
  mutable double copy_ms_per_byte_ = -1, copy_latency_ms_ = -1, copy_queued_ms_ = -1;  // not measured yet
  std::optional<CodecRate> codec_rate_;  // init_persistent, where the policy wants it
  // The bitmask codec timed on the backend (off sim), in arena blocks freed again.
  std::optional<CodecRate> measure_codec_rate();
};

}  // namespace vtensor
