// The Backend is the only code that touches a device: the device arena, pinned host memory,
// streams and events, asynchronous copies and kernels. The memory manager and the executor
// drive it through this interface; policies never see it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vtensor/backend/codec.h"
#include "vtensor/core/graph.h"

namespace vtensor {

// kCompress: FreeLunch's compression stream, beside compute.
enum class Stream { kCompute = 0, kH2D = 1, kD2H = 2, kCompress = 3 };
constexpr int kNumStreams = 4;
const char* to_string(Stream s);

// An event marks a point in a stream; it completes when the work before it is done.
class EventImpl {
 public:
  virtual ~EventImpl() = default;
  virtual bool query() = 0;  // completed?
  virtual void wait() = 0;   // host blocks until completed
};
using Event = std::shared_ptr<EventImpl>;

// Device pointers of one op's tensors, in the op's input / output order.
struct KernelArgs {
  std::vector<float*> inputs;
  std::vector<float*> outputs;
  void* workspace = nullptr;
  uint64_t iteration = 0;
  bool recompute = false;  // a recomputation: skip side effects (running stats)
  ConvAlgo conv_algo = ConvAlgo::kFast;  // conv ops: the algorithm the memory manager sized the workspace for
};

// Non-zero counts of tensors measured by a run with data (tensor name -> {elements, non-zeros}),
// for a backend without data (sim) to size compressed tensors by (densities.h reads and writes them).
// Keyed "NAME#ID": names repeat within a model (every block's relu_out), ids do not, and both
// are the same at any batch of the same model.
struct DensityTable {
  std::string source;  // what recorded them (model, batch, backend), for messages
  std::map<std::string, std::pair<uint64_t, uint64_t>> tensors;
};
inline std::string density_key(const TensorInfo& t) { return t.name + "#" + std::to_string(t.id); }

// What a compression or decompression reports when its work is done (read after its event).
struct CodecResult {
  uint64_t bytes = 0;  // compressed size (compression only)
  double ms = 0;       // kernel time on its stream (cpu: measured; sim: predicted; cuda: not timed, 0)
};

struct BackendOptions {
  size_t arena_bytes = 0;  // the device budget
  std::string gpu;         // sim: which GPU to model; cuda: unused
  bool deterministic = false;  // cuda: deterministic cuDNN algorithms only (bit-identical reruns)
  // sim only, for rehearsing a measured iteration (policy auto): per op index, its kernel time in
  // ms instead of the cost model's (empty: the cost model), and the host link's ms per byte in
  // both directions instead of the GPU's (0: the GPU's).
  std::vector<double> op_ms;
  double link_ms_per_byte = 0;
  // sim only, likewise: a codec call's time as measured on the device (CodecRate) instead of the
  // GPU's memory bandwidth (codec_ms_per_byte 0: predict_codec_ms).
  double codec_latency_ms = 0, codec_ms_per_byte = 0;
  // sim only, likewise: what each host<->device copy adds beyond its bytes when queued behind
  // others, as measured on the device (MemoryView::copy_queued_ms; 0: nothing).
  double copy_queued_ms = 0;
  // sim only, likewise: per op index, the scratch its kernel is given with the fast and the lean
  // convolution algorithm instead of the op's own figures (the device's: cuDNN's on cuda).
  std::vector<size_t> op_workspace, op_workspace_lean;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string device_description() const = 0;
  // False where no tensor values exist (sim): losses and weights cannot be read.
  virtual bool has_data() const { return true; }
  // sim: the name of the GPU it models (a rehearsal of the run can model the same); else empty.
  virtual std::string modelled_gpu() const { return {}; }
  // sim: the per-op times it charges instead of its cost model (BackendOptions::op_ms), if given.
  virtual const std::vector<double>* modelled_op_ms() const { return nullptr; }

  // The device arena: exactly `arena_bytes` of device memory, sub-allocated by the allocators.
  virtual void* arena_base() = 0;
  virtual size_t arena_bytes() const = 0;

  // Pinned host memory for swapped tensors (the HostPool caches it).
  virtual void* host_alloc(size_t bytes) = 0;
  virtual void host_free(void* p, size_t bytes) = 0;

  // Copies are asynchronous on the given stream, ordered within it.
  virtual void copy_async(Stream s, void* dst, const void* src, size_t bytes) = 0;
  // Synchronous copies for set-up and for reading results (loss, weights).
  virtual void copy_to_host(void* host_dst, const void* dev_src, size_t bytes) = 0;
  virtual void copy_to_device(void* dev_dst, const void* host_src, size_t bytes) = 0;
  // Device-to-device copy on the compute stream; the ranges may overlap (defragmentation).
  virtual void move_device(void* dst, const void* src, size_t bytes) = 0;
  // How a move is issued (the cuda backend's; the sim charges the same): one copy when the
  // ranges do not overlap; chunks of the distance when they overlap by at least
  // kMoveMinDirectChunk; else through a staging buffer of kMoveStagingBytes, each chunk copied
  // twice (in, then out).
  static constexpr size_t kMoveStagingBytes = size_t{16} << 20;
  static constexpr size_t kMoveMinDirectChunk = size_t{1} << 20;
  struct MoveCopies {
    size_t calls = 0;   // copy calls (cudaMemcpyAsync)
    size_t bytes = 0;   // bytes copied in all
  };
  static MoveCopies move_copies(size_t bytes, size_t distance);
  // A compaction's moves, in order. No move's destination overlaps the source of a later one
  // (a slide's moves ascend, each into space already left; a relocation's go into holes outside
  // the window they leave), so the moves may be grouped: blocks under kMoveMinDirectChunk go
  // through the staging buffer in chunks of up to kMoveBatchSegments blocks and
  // kMoveStagingBytes, each chunk one gather and one scatter (two launches however many blocks:
  // on the H100 a copy call costs about 6 us however small, docs/benchmarks.md); larger ones
  // move on their own (move_device). The default moves one at a time.
  struct DeviceMove {
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
  };
  static constexpr size_t kMoveBatchSegments = 64;
  struct MoveStep {
    size_t first = 0, count = 0;  // moves[first, first + count)
    bool staged = false;          // a chunk through the staging buffer; else one move of its own
  };
  static std::vector<MoveStep> move_steps(const std::vector<DeviceMove>& moves);
  // A staged block's place in the staging buffer: its bytes, 256-aligned (what a chunk's 16 MiB counts).
  static constexpr size_t staged_slot_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }
  virtual void move_device_batch(const std::vector<DeviceMove>& moves);
  virtual Event record(Stream s) = 0;
  // Work submitted to `s` after this call starts only once `e` has completed.
  virtual void stream_wait(Stream s, const Event& e) = 0;
  // The compute stream waits for a swap copy's event. Where the backend can (cuda, unless
  // VTENSOR_CUDA_DEVICE_WAITS=0), the wait is the device's and the host goes on launching; the
  // time the compute stream then spent waiting is returned by take_device_wait_ms() (after a
  // synchronize). Elsewhere it is stream_wait(kCompute, e), and the host's wait is the stall.
  virtual void compute_wait(const Event& e) { stream_wait(Stream::kCompute, e); }
  virtual bool waits_on_device() const { return false; }
  virtual double take_device_wait_ms() { return 0; }
  virtual void synchronize() = 0;

  // The host's own work, where a backend models the host (the sim, with a GPU that has a host
  // model: HostModel in gpu_specs.h): the memory manager says what it does besides launching and
  // copying. Elsewhere the host's work takes what it takes, and this does nothing.
  enum class HostWork { kAllocation, kPolicyAction };
  virtual void host_work(HostWork) {}
  // The modelled host's clock and what it spent, cumulative since construction (ms, counts);
  // `modelled` false where the host is not modelled (cpu, cuda: their host is measured).
  struct HostClock {
    bool modelled = false;
    double now_ms = 0;                                          // the host's time
    double launch_ms = 0, alloc_ms = 0, action_ms = 0, copy_ms = 0;  // issuing ops, allocating, actions, copies and events
    double wait_ms = 0;         // the host waiting for the device (the loss read back, host waits)
    double device_idle_ms = 0;  // the compute stream waiting for a launch the host had not issued
    uint64_t launches = 0, allocations = 0, actions = 0, copies = 0, events = 0, moved_blocks = 0;
  };
  virtual HostClock host_clock() const { return {}; }

  // Runs one op's kernel on the compute stream.
  virtual void launch(const Graph& g, const Op& op, const KernelArgs& args) = 0;
  // Scratch bytes the kernel of `op` needs under `algo`. The default is the cpu kernels' figure
  // (Op::workspace_bytes / workspace_lean_bytes); cuda asks cuDNN.
  virtual size_t workspace_bytes(const Graph& g, const Op& op, ConvAlgo algo) {
    return algo == ConvAlgo::kLean ? op.workspace_lean_bytes : op.workspace_bytes;
  }
  // --- compression codecs (codec.h) ---
  // Elements of `t` (resident at `dev`) whose bit pattern is non-zero: a synchronous measurement,
  // taken in a policy's measured iteration. Without data (sim): from the recorded densities
  // (set_densities), nullopt where none is recorded for t.
  virtual std::optional<size_t> count_nonzeros(const TensorInfo& t, const void* dev) = 0;
  virtual void set_densities(std::shared_ptr<const DensityTable> d) {}
  virtual std::shared_ptr<const DensityTable> densities() const { return nullptr; }
  // Compresses t's elements at src into dst (capacity bytes) on stream s through `workspace`;
  // when the work is done, result->bytes holds the compressed size (above capacity: it did not
  // fit, dst is garbage). result must stay valid until then and be read only after an event.
  virtual void compress_async(Stream s, Codec c, const TensorInfo& t, const void* src, void* dst, size_t capacity,
                              void* workspace, size_t workspace_bytes, CodecResult* result) = 0;
  virtual void decompress_async(Stream s, Codec c, const TensorInfo& t, const void* src, size_t src_bytes, void* dst, CodecResult* result) = 0;
  // Fills a persistent tensor with its initial values (deterministic in seed).
  virtual void init_tensor(const TensorInfo& t, void* dev, uint64_t seed) = 0;

  // Time on this backend's clock (wall clock, CUDA events, or the simulator's virtual clock).
  virtual double now_ms() = 0;
  // Device time per op, for a policy's measured iteration. Between begin_op_timing() and
  // end_op_timing(), the device work each launch() enqueues (not a recomputation's) is timed on
  // the device; end_op_timing() waits for it and returns per op index its summed time in ms (0:
  // the op enqueued nothing). Where the host clock around launch() already is the kernel's time
  // (cpu: kernels run on the host) or the clock is the model's (sim), begin_op_timing() is false
  // and end_op_timing() empty: the executor's clock readings stand. cuda: CUPTI (op_timer.h).
  virtual bool begin_op_timing() { return false; }
  virtual std::vector<double> end_op_timing(size_t num_ops) { return {}; }

  // --- unified memory (the paged residency, vtensor/memory/paged_memory.h) ---
  // A managed address range of `range_bytes` in pages of `page_bytes`, each backed by one of
  // `frames` device frames (frames x page_bytes <= the budget) or by its own host frame.
  // Returns the range's base; kernels see a page only while it is mapped to a device frame.
  // Backends without it throw std::invalid_argument.
  virtual void* um_reserve(size_t range_bytes, size_t page_bytes, size_t frames);
  // Page -> device frame on stream `s` (asynchronous there), mapped for kernels from now on;
  // `copy`: the host frame holds the page's bytes (false: nothing valid to bring, no transfer).
  virtual void um_migrate_in(Stream s, size_t page, size_t frame, bool copy);
  // Device frame -> host frame on stream `s`; the page is unmapped for kernels from now on.
  // `copy` false: the device bytes are not needed (host copy already valid, or page invalid).
  virtual void um_migrate_out(Stream s, size_t page, size_t frame, bool copy);
  // The fault-handling cost of one batch of `pages` demand faults, on the compute stream
  // (sim: the fault model's latency; cpu and cuda: nothing to add, the work itself is the cost).
  virtual void um_fault_batch(size_t pages) {}
  // Reads `bytes` at `offset` of an unmapped page's host frame (reading results).
  virtual void um_read_host(void* dst, size_t page, size_t offset, size_t bytes);
  // Does a page migrated in keep a valid host copy until written (the page state `both`)?
  // cuda: no, the driver moves pages, so evicting a clean page still copies it.
  virtual bool um_keeps_host_copy() const { return true; }
};

// Backends by name: "cpu", "cuda", "sim". Unknown names throw std::invalid_argument with the accepted list.
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& opts);
std::vector<std::string> backend_names();
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opts);
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opts);  // throws when built without CUDA
std::unique_ptr<Backend> make_sim_backend(const BackendOptions& opts);  // vtensor/backend/sim
bool cuda_available();

}  // namespace vtensor
