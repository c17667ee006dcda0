// Offline memory planners for the planned pool (Zhang et al., arXiv 1903.06631, section 3.1; the
// planner-as-free-function shape follows TVM's memory planners). Input: the blocks of one
// iteration with their lifetimes; output: an offset per block such that no two blocks alive at
// the same instant overlap, and the arena that holds them all.
//   greedy-size:    largest block first, into the best-fitting gap among the blocks it overlaps in
//                   time (Zhang et al.'s choice; TF-Lite's "greedy by size"). The default.
//   greedy-breadth: blocks of the busiest instants first (by the largest live total over the
//                   block's lifetime, then size), the same best-fit placement.
//   greedy-area:    largest size x lifetime first (long, large blocks settle at the bottom).
//   best:           runs every planner above and keeps the smallest arena (ties: registry order).
// Fixed blocks are placed first, where they are. After placement every planner settles: each
// block, lowest first, moves down to the lowest offset free over its lifetime, until none moves
// (best-fit can leave a block in a high, tight gap above a lower one that a later block never
// used; on vgg-tiny at batch 8 greedy-size went from 3.7% to 1.8% above the lower bound).
// The lower bound on any plan's arena is the largest sum of live bytes at one instant.
// Each block is placed against the blocks alive with it (found by one sweep over start times)
// and the merged ranges of the fixed blocks alive with every other: O(n log n + p log p) per pass
// for p pairs alive together (bench/run.py planner-bench; a planned pool replans inside policy
// auto's rehearsals, so this is on its search's clock).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vtensor {

// A block alive over the half-open event interval [start, end). A block with fixed_offset >= 0
// is already placed (a tensor alive across the iteration boundary): planners keep it there and
// place the others around it.
struct BlockLifetime {
  size_t size;
  int64_t start, end;
  int64_t fixed_offset = -1;
};

struct PlanResult {
  std::vector<size_t> offsets;  // one per block, in input order
  size_t arena = 0;             // max(offset + size)
  std::string planner;          // which planner made it (for `best`: the winner)
};

using PlannerFn = PlanResult (*)(const std::vector<BlockLifetime>&);

PlanResult plan_greedy_size(const std::vector<BlockLifetime>& blocks);
PlanResult plan_greedy_breadth(const std::vector<BlockLifetime>& blocks);
PlanResult plan_greedy_area(const std::vector<BlockLifetime>& blocks);
PlanResult plan_best(const std::vector<BlockLifetime>& blocks);

// Largest sum of sizes of blocks alive at one instant.
size_t lifetime_lower_bound(const std::vector<BlockLifetime>& blocks);

// Planners by name ("greedy-size", "greedy-breadth", "greedy-area", "best"). Unknown names throw
// std::invalid_argument naming the accepted ones.
PlannerFn find_planner(const std::string& name);
std::vector<std::string> planner_names();

}  // namespace vtensor
