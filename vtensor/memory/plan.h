// A Plan is data: the actions a policy wants carried out at fixed points of the iteration.
// It can be printed, tested on a recorded trace without a device, and replayed.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "vtensor/backend/codec.h"
#include "vtensor/ops/op.h"

namespace vtensor {

enum class ActionKind {
  kSwapOut,   // after op `op`: copy the tensor to host; its device memory is freed at the end of
              // op `free_after` (waiting for the copy if it is still running)
  kPrefetch,  // after op `op`: start copying it back to the device
  kDrop,      // after op `op`: free it; it is recomputed from its lineage when next accessed
  kCompress,  // after op `op`: compress it with `codec` into a buffer of `capacity` bytes on the
              // compression stream; its original block is freed at the end of op `free_after`.
              // A kPrefetch of a compressed tensor decompresses it.
  kRecompute,  // after op `op`: recompute a dropped tensor now, ahead of its access (on the
               // compute stream, where it would otherwise wait on a copy); a no-op otherwise
};
const char* to_string(ActionKind k);

struct Action {
  ActionKind kind;
  TensorId tensor;
  int op;
  // kSwapOut, kCompress: the op at whose end the block is freed (> op); kDefaultRelease: the
  // memory manager's own point, the end of op `op` + 2. Either way a point fixed by the op sequence.
  int free_after = kDefaultRelease;
  Codec codec = Codec::kNone;  // kCompress only
  size_t capacity = 0;         // kCompress only: the compressed buffer's bytes
  bool per_use_buffer = false; // kCompress only: the buffer is freed once the tensor is back, even
                               // with CompressionOptions::persistent_buffers (a planner's one-gap choice)
  static constexpr int kDefaultRelease = -1;
  bool operator==(const Action&) const = default;
};

struct Plan {
  std::vector<Action> actions;
  std::vector<Action> at(int op) const;  // the actions after op, in plan order
  std::string str() const;
};

// Orders the actions by op; at the same op, the ones that free memory before prefetches.
void sort_actions(Plan& plan);

// A planner's model of one copy queue (a direction of the host link, or the codec stream): busy
// intervals, one copy at a time. A saturated lane is long chains of intervals that touch (each copy
// placed at the previous one's end), and the gaps between chains are mostly too short for the
// copy asked about: earliest_fit skips blocks of kBlock chain ends whose widest gap is too narrow,
// through an index (chain ends, the gap after each, each block's widest) rebuilt on the first query
// after a change. Capuchin's planner asks it tens of thousands of times per plan.
class CopyLane {
 public:
  // The earliest start at or after t0 where a copy of `dur` fits between the busy intervals.
  double earliest_fit(double t0, double dur) const;
  void add(double start, double dur);
  // Removes the interval [start, start + dur) added before; false when there is none.
  bool remove(double start, double dur);
  const std::vector<std::pair<double, double>>& busy() const { return busy_; }

 private:
  static constexpr size_t kBlock = 16;
  void index() const;
  double scan(size_t i, double s, double dur) const;  // the fit from interval i on, one by one
  std::vector<std::pair<double, double>> busy_;  // sorted by start, disjoint
  mutable std::vector<size_t> chain_last_;       // per interval: the last one of its touching chain
  mutable std::vector<double> gap_;              // per chain end: the free time after it (else -inf)
  mutable std::vector<double> block_gap_;        // per kBlock intervals: the widest of their gaps
  mutable bool plain_ = false;                   // an empty or overlapping interval: scan only
  mutable bool indexed_ = true;
};

// The same queue as the device runs it (a stream copies in issue order): a copy starts when it is
// issued or when the copy issued before it ends, whichever is later. A copy issued before queued
// ones goes ahead of them and delays them, where CopyLane would fit it into a later gap; delay()
// is what that costs the queued copies that end after their need time. Copies issued at the same
// time run in the order they were added.
class FifoLane {
 public:
  // The start of a copy issued at `issue` (behind every copy issued at or before it).
  double start_if(double issue) const;
  // The stall (time past their need) that copy would add to the queued copies it delays.
  double delay(double issue, double dur) const;
  // Queues it (`need`: when it must have ended; `key`: for remove and start_of); its start.
  double add(double issue, double dur, double need, int key);
  bool remove(int key);                // the first copy added with key; false when there is none
  double start_of(int key) const;      // its start now (-1 when there is none)
  size_t size() const { return q_.size(); }

 private:
  struct Copy { double issue, dur, need; int key; double start; };
  size_t place(double issue) const;    // the first copy issued after `issue`
  double end_before(size_t i) const { return i == 0 ? -1e300 : q_[i - 1].start + q_[i - 1].dur; }
  void settle(size_t from);            // starts from copy `from` on
  std::vector<Copy> q_;                // by issue time; ties in add order
};

// A planner's predicted memory curve: bytes held after each op. The arithmetic Capuchin's and
// the compression planner share: its peak, the bytes over a budget summed over the ops, whether
// any op in [first, last] is over, and adding a tensor's bytes over [first, last] (both clamped
// to the curve).
size_t curve_peak(const std::vector<size_t>& mem);
// A copy's issue op (a prefetch's in-trigger), walked back from op `from` while the copy issued
// after op p would end (copy_end(p)) later than `deadline`: not below op `lo`, and not back from an
// op over the budget (the tensor would be held there). The op it stops at. copy_end must not
// decrease with the op (a later issue never ends sooner), which lets the walk bisect.
int walk_back_trigger(int from, int lo, const std::function<double(int)>& copy_end, double deadline,
                      const std::vector<size_t>& mem, size_t budget);
double curve_excess(const std::vector<size_t>& mem, size_t budget);
bool curve_over(const std::vector<size_t>& mem, size_t budget, int first, int last);
void curve_add(std::vector<size_t>& mem, int first, int last, long long delta);

// The same curve for a planner that tries a choice and undoes it: the bytes over the budget
// (summed over the ops, exact) and the count of ops over it are kept as the curve changes, so
// excess() and fits() cost nothing and add() costs its range. mark() starts a trial; rollback()
// undoes the adds since its mark (in reverse, so the curve is restored exactly), commit() keeps
// them. Marks nest.
class MemoryCurve {
 public:
  MemoryCurve() = default;
  MemoryCurve(std::vector<size_t> mem, size_t budget);
  const std::vector<size_t>& values() const { return mem_; }
  size_t operator[](size_t i) const { return mem_[i]; }
  size_t size() const { return mem_.size(); }
  size_t peak() const { return curve_peak(mem_); }
  bool fits() const { return over_ops_ == 0; }
  unsigned long long excess() const { return excess_; }
  bool over(int first, int last) const { return curve_over(mem_, budget_, first, last); }
  void add(int first, int last, long long delta);
  size_t mark() { ++marks_; return journal_.size(); }
  void rollback(size_t mark);
  void commit(size_t mark);

 private:
  void apply(int first, int last, long long delta);
  struct Add { int first, last; long long delta; };
  std::vector<size_t> mem_;
  size_t budget_ = 0;
  unsigned long long excess_ = 0;
  size_t over_ops_ = 0;
  std::vector<Add> journal_;
  int marks_ = 0;
};

// The plan's actions by the op after which they run, in plan order: a guided iteration's
// per-op lookup (actions naming no op or one past num_ops are left out).
std::vector<std::vector<Action>> actions_by_op(const Plan& plan, size_t num_ops);

}  // namespace vtensor
