// The state of one run of Capuchin's planner (plan_capuchin, capuchin_planner.h), shared by the
// files that implement it and by nothing else: capuchin_planner.cpp (the paper's greedy: measure,
// candidates, hidden swaps, the MSPS / stall-per-byte greedy, trigger refinement) and
// capuchin_planner_auto.cpp (policy auto's extensions: pins, wrap swaps, the deadline-ordered D2H
// queue, the issue-ordered H2D queue, prefetches for a pinned recomputation's chain).
// The predicted memory curve (MemoryCurve) and the copy lanes (CopyLane, FifoLane) are plan.h's.
#pragma once
#include <algorithm>
#include <functional>
#include <vector>

#include "vtensor/policy/capuchin_planner.h"

namespace vtensor::capuchin_detail {

constexpr double kEpsNs = 1e-3;

class CapuchinPlanner {
 public:
  CapuchinPlanner(const PlannerInput& in, CapuchinMode mode) : in_(in), mode_(mode), fifo_(in.fifo_prefetches) {}

  CapuchinPlan run();

 private:
  struct SwapEval {
    bool ok = false;
    size_t pos = 0;                  // its place in the D2H queue (outq_)
    int trigger = -1, release = -1;  // prefetch after trigger; the block is freed after release
    double stall = 0, out_end = 0, in_start = 0;
    double issue = 0, delay = 0;  // the prefetch's issue time; the stall it adds to queued ones (fifo)
    double cost() const { return stall + delay; }
  };
  struct Option {  // greedy: a candidate's best choice now
    double score = -1;
    bool swap = false;
    double chain = 0;
    SwapEval eval;
  };

  size_t n_ops() const { return static_cast<size_t>(in_.num_ops); }
  double dur(int op) const { return start_[static_cast<size_t>(op) + 1] - start_[static_cast<size_t>(op)]; }
  size_t peak() const { return mem_.peak(); }
  bool fits() const { return mem_.fits(); }
  unsigned long long excess() const { return mem_.excess(); }  // bytes over the budget, summed over the ops
  bool hits_over(int first, int last) const { return mem_.over(first, last); }
  void add_mem(int first, int last, long long delta) { mem_.add(first, last, delta); }
  // The H2D queue: CopyLane's gaps, or with fifo_prefetches the stream's issue order (FifoLane,
  // keyed by candidate; a wrap swap's copy is never removed: key -1).
  double in_fit(double issue, double dur) const { return fifo_ ? inq_.start_if(issue) : h2d_.earliest_fit(issue, dur); }
  double in_delay(double issue, double dur) const { return fifo_ ? inq_.delay(issue, dur) : 0; }
  void in_add(double issue, double start, double dur, double need, int key) {
    if (fifo_) inq_.add(issue, dur, need, key);
    else h2d_.add(start, dur);
  }
  void in_remove(double start, double dur, int key) {
    if (fifo_) inq_.remove(key);
    else h2d_.remove(start, dur);
  }
  double issue_at(int trigger, double out_end) const { return std::max(start_[static_cast<size_t>(trigger) + 1], out_end); }

  // The paper's greedy (capuchin_planner.cpp), in the order run() calls it.
  void measure();
  void find_candidates();
  void index_candidates();
  void hidden_swaps();
  Option evaluate(CapuchinCandidate& c) const;
  void greedy();
  void refine_triggers();
  void issue_swap_outs();
  // Swaps: the D2H queue, the swap-in's trigger, taking one.
  size_t fifo_pos(const CapuchinCandidate& c) const;
  double queued_out_end(const CapuchinCandidate& c, size_t pos) const;
  // Release: the op the queued swap-out ends in; the block is gone from the op after it. In-trigger:
  // walk back from the back-access until the copy is hidden; never before an op that would then
  // hold the tensor above the budget (the peak window), never before the release.
  SwapEval eval_swap(const CapuchinCandidate& c) const { return eval_swap(c, queue_pos(c)); }
  SwapEval eval_swap(const CapuchinCandidate& c, size_t pos) const;
  bool apply_swap(CapuchinCandidate& c, const SwapEval& s);
  bool queue_swap_outs(size_t from);
  bool take_swap(CapuchinCandidate& c, SwapEval s, const std::function<bool(SwapEval&)>& accept = {});
  int need_by(const CapuchinCandidate& c) const;
  // Recomputations: chains, what a drop holds, taking one.
  double chain_ns(TensorId x, int b, int e_ctx, const std::function<void(int)>* restored = nullptr) const;
  double chain_walk(TensorId x, int b, int e_ctx, int depth, const std::function<void(int)>* restored) const;
  bool breaks_a_recompute(const CapuchinCandidate& c) const;
  bool cancels_a_recompute() const;
  size_t held_inputs(const CapuchinCandidate& c) const;
  void hold_from(int k, int b);
  void hold_restored(const CapuchinCandidate& c);
  void recompute_taken(CapuchinCandidate& c, bool pinned);
  void apply_recompute(CapuchinCandidate& c, double chain);

  // Policy auto's extensions (capuchin_planner_auto.cpp); each does nothing at PlannerInput's defaults.
  void wrap_swaps(bool unpinned);                                // wrap_persistent, pins on a wrap gap
  void apply_pins();                                             // pins
  bool compress_pinned(CapuchinCandidate& c, const PlanPin& p);  // a kCompress pin
  void prefetch_for_chain(const CapuchinCandidate& c);           // a pinned recomputation
  size_t queue_pos(const CapuchinCandidate& c) const;            // deadline_swap_outs (else fifo_pos)
  void read_prefetch_starts();                                   // fifo_prefetches
  void order_prefetches_as_queued();                             // fifo_prefetches
  void order_prefetches_by_need();                               // need_ordered_prefetches

  const PlannerInput& in_;
  mutable std::vector<int> seen_;  // chain_walk: stamp_ when counted in the current chain
  mutable std::vector<TensorId>* reads_ = nullptr;  // chain_walk: the live tensors a chain reads
  std::vector<std::vector<int>> read_by_;  // per tensor: recomputations whose chains read it (candidate indices)
  mutable int stamp_ = 0;
  CapuchinMode mode_;
  CapuchinPlan out_;
  std::vector<double> start_;
  std::vector<int> first_, last_;
  std::vector<std::vector<int>> ops_of_, cands_of_;
  MemoryCurve mem_;  // the predicted curve as the choices change it
  std::vector<int> held_from_;  // per candidate: first op a recomputation holds it back from, -1: none
  bool fifo_ = false;
  CopyLane h2d_;
  FifoLane inq_;  // the H2D queue with fifo_prefetches (h2d_ is unused then)
  CopyLane codec_;  // the compression stream (pinned compressions)
  std::vector<int> outq_;       // chosen swaps in D2H issue order (swap-out op, then when chosen)
  std::vector<double> out_end_;  // per candidate: when its queued swap-out ends
  std::vector<int> moved_;       // swaps whose release the last queue_swap_outs moved
  int order_ = 0;
  std::vector<char> no_swap_;  // per candidate: its swap failed (greedy)
};

}  // namespace vtensor::capuchin_detail
