// A linear program over the whole measured iteration (ours; policy auto plans from it and reports
// its optimum as a lower bound). Solved with COIN-OR Clp (Debian's coinor-libclp-dev).
//   Per access gap (a tensor's bytes between two uses; persistent tensors also across the
//   iteration boundary) the fractions x swapped and y dropped-and-recomputed. The iteration is cut
//   into segments of equal measured time; per gap and segment, the cumulative fraction copied out
//   and copied back. Rows: at each op over the budget the bytes off the device (copied out in a
//   segment up to this one, not yet back before it, or dropped) cover what is over the budget;
//   per segment and direction the link moves at most bandwidth x (the segment's kernels + its
//   extra time E); E covers the recomputations placed in the segment (a gap's anywhere from its
//   drop to its access; each at its chain's kernels) and sum E all of them. Minimise sum E.
//   Every simplification errs low (fractional copies, a copy anywhere in a segment its gap touches,
//   a copy in flight counted off the device, a chain's kernels charged but not the bytes its
//   inputs hold meanwhile, no queue order, no fragmentation), so no
//   keep / swap / recompute plan runs below compute + the optimum: a bound that couples the ops
//   (bound.h takes each op alone). Rounded (a gap swapped or recomputed where its fraction is at
//   least a threshold; auto uses 0.3), it gives PlanPins that Capuchin's greedy completes: auto
//   rehearses them as more starts for its search, also timed (each prefetch no later than the
//   optimum's copy back, or than the whole tensor's copy must start), capped (rounded up, the
//   swaps carry more bytes than the optimum moves), and its recomputations alone (the swaps, whose
//   timing the LP models loosest, left to the greedy). The integer program (integer_time_limit_s,
//   COIN-OR Cbc) makes each gap's x and y whole over the optimum's neighbourhood (the gaps it
//   moves in part); off by default: the optimum is nearly whole on the paper models, and Cbc's
//   time would come out of auto's planning limit.
//   in_flight_on_device: the same program with a copy holding its bytes on the device while in
//   flight (off only in the segments after its copy out and before its copy back): no longer a
//   bound, but a model of the rounded swaps closer to the runtime's (auto --auto-lp-model).
//   codec: a third fraction w per gap with a lossless codec (FreeLunch's): kept compressed on the
//   device, its bytes less the buffer off it over the gap, the compression in the gap's first
//   segment and the decompression in its last on the codec lane (one codec at a time beside the
//   compute stream). A bound on plans that also compress, not on keep / swap / recompute ones, so
//   auto solves it apart, for starts only (--auto-lp-model compress).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "vtensor/policy/capuchin.h"

namespace vtensor {

// A lossless codec for one gap (LpOptions::codec): the buffer it keeps on the device and one
// compression's time (a decompression costs the same), as compress.h's gap_codec sizes them.
struct LpCodec {
  Codec codec = Codec::kNone;
  size_t capacity = 0;
  double codec_ns = 0;
  bool operator==(const LpCodec&) const = default;
};

struct LpOptions {
  int segments = 96;         // the iteration cut into this many segments of equal measured time
  int max_rows = 384;        // ops over the budget constrained at most (most over first, then spread)
  long long max_memory_nonzeros = 300000;  // fewer constrained ops past this
  long long max_columns = 30000;           // fewer segments past this
  // Clp's limit, in simplex iterations (counted work: the same answer on every machine, however
  // loaded); past it there is no bound. The largest LPs of the bench's models take under a tenth.
  int max_iterations = 200000;
  double time_limit_s = 60;  // a net in wall seconds, far past what max_iterations takes (0: none)
  // Gaps of fewer bytes than this fraction of the budget leave the device at no cost (optimistic,
  // so the optimum still bounds; far fewer columns).
  double small_fraction = 1.0 / 1024;
  // > 0: also the integer program (each gap swapped or recomputed whole; COIN-OR Cbc), within
  // this many seconds, from the LP's rounding as its first solution; 0: the LP only.
  double integer_time_limit_s = 0;
  // The integer program over the LP optimum's neighbourhood only: a gap the optimum moves whole
  // or not at all stays so, the fractional ones are decided (exact over them, and far smaller).
  bool integer_neighbourhood = true;
  // A gap's bytes count off the device only in the segments after the one its copy out ends in
  // and before the one its copy back starts in, which starts after that (the result is no bound).
  bool in_flight_on_device = false;
  // The codec of the gap of tensor `id` opened after op `evict_op` (nullopt: none): its gaps may
  // also be compressed (the w fractions; the result is no bound on keep / swap / recompute).
  std::function<std::optional<LpCodec>(TensorId id, int evict_op)> codec;
};

// One gap the optimum moves (swap or recompute > 0).
struct LpGap {
  TensorId id = kNoTensor;
  int evict_op = -1, back_op = -1;  // back_op < evict_op: across the iteration boundary
  size_t bytes = 0;
  double swap = 0, recompute = 0;   // fractions
  double compress = 0;              // fraction kept compressed (LpOptions::codec)
  LpCodec codec;                    // its codec (compress > 0)
  double recompute_ms = 0;          // the whole gap's, at its producer's share
  int in_after_op = -1;             // the optimum's copy back starts after this op (-1: none)
  // The latest op, no later than in_after_op, after which the whole tensor's copy back ends by
  // back_op at the link's speed (the optimum may copy back only its fraction from in_after_op).
  int whole_in_after_op = -1;
};

// The integer program's answer (LpOptions::integer_time_limit_s).
struct LpInteger {
  std::string status = "not run";  // "optimal", "time limit", "no solution", ...
  double overhead_ms = 0;          // its best plan's (each gap whole)
  // Cbc's lower bound: on every whole-gap plan where nothing was fixed (integer_neighbourhood
  // false), else over the neighbourhood only.
  double bound_ms = 0;
  int integer_columns = 0, fixed_gaps = 0;
  double wall_ms = 0;
  std::vector<LpGap> gaps;  // its best plan (fractions 0 or 1)
};

struct LpResult {
  std::string status = "not run";  // "optimal", "nothing over the budget", "working set", "time limit", ...
  bool bound = false;              // overhead_ms is a lower bound (solved to optimality)
  double compute_ms = 0;           // the measured kernels end to end
  double overhead_ms = 0;          // the optimum: no keep / swap / recompute plan adds less
  double recompute_ms = 0, stall_ms = 0;  // its split
  double swapped_bytes = 0, recomputed_bytes = 0;  // per iteration, each direction
  double compressed_bytes = 0;     // the compressed fractions' bytes before compression (LpOptions::codec)
  int segments = 0, columns = 0, rows = 0, constrained_ops = 0;
  long long nonzeros = 0;
  int iterations = 0;              // Clp's simplex iterations
  double wall_ms = 0;
  std::vector<LpGap> gaps;
  LpInteger integer;
};

LpResult solve_lp(const PlannerInput& in, const LpOptions& opt = {});

// The optimum rounded: gaps within one iteration recomputed (fraction >= threshold) or swapped,
// swaps in the order their copies leave, then the recomputations.
// Each swap's prefetch: where Capuchin's planner puts it (kPlanner); no later than the optimum
// starts copying the gap's fraction back (kLp); no later than the whole tensor's copy back must
// start to end by its access (kWhole). PlanPin::trigger_op.
// capped: the swaps kept, largest fraction first, only while their whole bytes stay within what
// the optimum moves (its fractions' bytes, within the iteration); the rest is left to the planner.
// recompute_only: the recomputations alone; every swap is left to the planner.
// A gap whose compressed fraction is at least the threshold and its largest is compressed
// (PlanPin with the gap's codec), in every variant.
enum class LpTiming { kPlanner, kLp, kWhole };
std::vector<PlanPin> lp_pins(const LpResult& r, double threshold = 0.5, LpTiming timing = LpTiming::kPlanner,
                             bool capped = false, bool recompute_only = false);

}  // namespace vtensor
