#include "vtensor/memory/planners.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>

namespace vtensor {

namespace {

bool overlap_in_time(const BlockLifetime& a, const BlockLifetime& b) { return a.start < b.end && b.start < a.end; }

// Who a block must avoid: the blocks alive at some instant with it, except the fixed blocks alive
// with every planned block (persistent tensors), whose ranges are merged once into `floor`. The
// free gaps a placement sees are those of the union of both, so this only saves work: the same
// gaps, the same plans.
struct Neighbours {
  std::vector<std::vector<size_t>> alive_with;
  std::vector<std::pair<size_t, size_t>> floor;  // merged (offset, end), ascending
};

// One sweep in start order: a block that ended by the current start overlaps neither it nor any
// later one, so only the blocks still alive are tested (O(n log n + pairs), not every pair).
Neighbours neighbours(const std::vector<BlockLifetime>& blocks) {
  Neighbours nb;
  nb.alive_with.resize(blocks.size());
  int64_t min_end = std::numeric_limits<int64_t>::max(), max_start = std::numeric_limits<int64_t>::min();
  for (const auto& b : blocks)
    if (b.fixed_offset < 0) min_end = std::min(min_end, b.end), max_start = std::max(max_start, b.start);
  std::vector<bool> on_floor(blocks.size(), false);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto& b = blocks[i];
    if (b.fixed_offset < 0 || !(b.start < min_end && max_start < b.end)) continue;
    on_floor[i] = true;
    nb.floor.emplace_back(static_cast<size_t>(b.fixed_offset), static_cast<size_t>(b.fixed_offset) + b.size);
  }
  std::sort(nb.floor.begin(), nb.floor.end());
  std::vector<std::pair<size_t, size_t>> merged;
  for (const auto& [a, e] : nb.floor) {
    if (!merged.empty() && a <= merged.back().second) merged.back().second = std::max(merged.back().second, e);
    else merged.emplace_back(a, e);
  }
  nb.floor = std::move(merged);
  std::vector<size_t> by_start;
  for (size_t i = 0; i < blocks.size(); ++i)
    if (!on_floor[i]) by_start.push_back(i);
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](size_t a, size_t b) { return blocks[a].start < blocks[b].start; });
  std::vector<size_t> alive;
  for (size_t i : by_start) {
    alive.erase(std::remove_if(alive.begin(), alive.end(), [&](size_t j) { return blocks[j].end <= blocks[i].start; }),
                alive.end());
    for (size_t j : alive)
      if (overlap_in_time(blocks[i], blocks[j])) {
        nb.alive_with[i].push_back(j);
        nb.alive_with[j].push_back(i);
      }
    alive.push_back(i);
  }
  return nb;
}

// (offset, end) of what block i must avoid that starts below `below`, ascending: the floor and
// its placed neighbours.
void busy_ranges(const std::vector<BlockLifetime>& blocks, const Neighbours& nb, const PlanResult& r,
                 const std::vector<bool>& placed, size_t i, size_t below, std::vector<std::pair<size_t, size_t>>& busy) {
  busy.clear();
  for (const auto& f : nb.floor)
    if (f.first < below) busy.push_back(f);
  for (size_t j : nb.alive_with[i])
    if (placed[j] && r.offsets[j] < below) busy.emplace_back(r.offsets[j], r.offsets[j] + blocks[j].size);
  std::sort(busy.begin(), busy.end());
}

// Lowers every planned block, lowest first, to the lowest offset where it overlaps no block alive
// with it, until none moves: offsets only go down, so the arena never grows. Greedy placement
// leaves holes under blocks placed above a gap that later blocks did not fill.
void settle(const std::vector<BlockLifetime>& blocks, const Neighbours& nb, PlanResult& r) {
  std::vector<size_t> order;
  for (size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].fixed_offset < 0) order.push_back(i);
  const std::vector<bool> all(blocks.size(), true);
  // A block is looked at again only when a block alive with it moved since it was last looked at:
  // its lowest place depends on nothing else.
  std::vector<bool> dirty(blocks.size(), true);
  std::vector<std::pair<size_t, size_t>> busy;
  for (bool moved = true; moved;) {
    moved = false;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r.offsets[a] < r.offsets[b]; });
    for (size_t i : order) {
      if (!dirty[i]) continue;
      dirty[i] = false;
      // Only what starts below the block can open a lower place: above it, the block's own
      // range is free, so the walk would stop there anyway.
      busy_ranges(blocks, nb, r, all, i, r.offsets[i], busy);
      size_t cursor = 0;
      for (const auto& [off, end] : busy) {
        if (off >= cursor + blocks[i].size) break;
        cursor = std::max(cursor, end);
      }
      if (cursor < r.offsets[i]) {
        // What the move frees lies at or above the old offset: only blocks above may use it.
        for (size_t j : nb.alive_with[i])
          if (r.offsets[j] > r.offsets[i]) dirty[j] = true;
        r.offsets[i] = cursor;
        moved = true;
      }
    }
  }
  r.arena = 0;
  for (size_t i = 0; i < blocks.size(); ++i) r.arena = std::max(r.arena, r.offsets[i] + blocks[i].size);
}

// Places blocks in `order`: each goes into the smallest gap (between blocks already placed that
// overlap it in time) that holds it, the lowest such gap on ties; above them all when none does.
PlanResult place_best_fit(const std::vector<BlockLifetime>& blocks, const std::vector<size_t>& order,
                          const char* name) {
  constexpr size_t kUnplaced = std::numeric_limits<size_t>::max();
  PlanResult r;
  r.planner = name;
  r.offsets.assign(blocks.size(), kUnplaced);
  const Neighbours nb = neighbours(blocks);
  std::vector<bool> placed(blocks.size(), false);
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].fixed_offset < 0) continue;
    r.offsets[i] = static_cast<size_t>(blocks[i].fixed_offset);
    r.arena = std::max(r.arena, r.offsets[i] + blocks[i].size);
    placed[i] = true;
  }
  std::vector<std::pair<size_t, size_t>> busy;  // (offset, end) of time-overlapping placed blocks
  for (size_t i : order) {
    if (blocks[i].fixed_offset >= 0) continue;
    const BlockLifetime& b = blocks[i];
    busy_ranges(blocks, nb, r, placed, i, std::numeric_limits<size_t>::max(), busy);
    size_t best = kUnplaced, best_gap = kUnplaced, cursor = 0;
    for (const auto& [off, end] : busy) {
      if (off > cursor) {
        const size_t gap = off - cursor;
        if (gap >= b.size && gap < best_gap) {
          best = cursor;
          best_gap = gap;
        }
      }
      cursor = std::max(cursor, end);
    }
    r.offsets[i] = best != kUnplaced ? best : cursor;
    r.arena = std::max(r.arena, r.offsets[i] + b.size);
    placed[i] = true;
  }
  settle(blocks, nb, r);
  return r;
}

std::vector<size_t> identity(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), size_t{0});
  return v;
}

// Sum of live sizes at each block's start (the instants where the live total can rise).
std::vector<size_t> live_at_starts(const std::vector<BlockLifetime>& blocks) {
  std::map<int64_t, int64_t> delta;
  for (const auto& b : blocks) {
    delta[b.start] += static_cast<int64_t>(b.size);
    delta[b.end] -= static_cast<int64_t>(b.size);
  }
  std::map<int64_t, size_t> live;
  int64_t cur = 0;
  for (const auto& [t, d] : delta) {
    cur += d;
    live[t] = static_cast<size_t>(cur);
  }
  std::vector<size_t> out;
  out.reserve(blocks.size());
  for (const auto& b : blocks) out.push_back(live[b.start]);
  return out;
}

}  // namespace

size_t lifetime_lower_bound(const std::vector<BlockLifetime>& blocks) {
  size_t best = 0;
  for (size_t v : live_at_starts(blocks)) best = std::max(best, v);
  return best;
}

PlanResult plan_greedy_size(const std::vector<BlockLifetime>& blocks) {
  std::vector<size_t> order = identity(blocks.size());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &x = blocks[a], &y = blocks[b];
    if (x.size != y.size) return x.size > y.size;
    // Equal sizes in order of allocation: for blocks of one size this is interval-graph colouring
    // in start order, which is optimal.
    if (x.start != y.start) return x.start < y.start;
    return x.end - x.start > y.end - y.start;
  });
  return place_best_fit(blocks, order, "greedy-size");
}

PlanResult plan_greedy_breadth(const std::vector<BlockLifetime>& blocks) {
  // A block's breadth: the largest live total at any instant of its lifetime. The live total
  // only rises at block starts, so the instants to look at are the starts inside the lifetime.
  std::vector<size_t> at_start = live_at_starts(blocks);
  std::vector<std::pair<int64_t, size_t>> starts;  // (start, live there), sorted by time
  for (size_t i = 0; i < blocks.size(); ++i) starts.emplace_back(blocks[i].start, at_start[i]);
  std::sort(starts.begin(), starts.end());
  std::vector<size_t> breadth(blocks.size(), 0);
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto it = std::lower_bound(starts.begin(), starts.end(), std::make_pair(blocks[i].start, size_t{0}));
    for (; it != starts.end() && it->first < blocks[i].end; ++it) breadth[i] = std::max(breadth[i], it->second);
  }
  std::vector<size_t> order = identity(blocks.size());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (breadth[a] != breadth[b]) return breadth[a] > breadth[b];
    if (blocks[a].size != blocks[b].size) return blocks[a].size > blocks[b].size;
    return blocks[a].start < blocks[b].start;
  });
  return place_best_fit(blocks, order, "greedy-breadth");
}

PlanResult plan_greedy_area(const std::vector<BlockLifetime>& blocks) {
  std::vector<size_t> order = identity(blocks.size());
  auto area = [&](size_t i) {
    return static_cast<long double>(blocks[i].size) * static_cast<long double>(blocks[i].end - blocks[i].start);
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (area(a) != area(b)) return area(a) > area(b);
    if (blocks[a].size != blocks[b].size) return blocks[a].size > blocks[b].size;
    return blocks[a].start < blocks[b].start;
  });
  return place_best_fit(blocks, order, "greedy-area");
}

namespace {
struct NamedPlanner {
  const char* name;
  PlannerFn fn;
};
constexpr NamedPlanner kPlanners[] = {
    {"greedy-size", plan_greedy_size},
    {"greedy-breadth", plan_greedy_breadth},
    {"greedy-area", plan_greedy_area},
    {"best", plan_best},
};
}  // namespace

PlanResult plan_best(const std::vector<BlockLifetime>& blocks) {
  PlanResult best;
  bool have = false;
  for (const auto& p : kPlanners) {
    if (p.fn == plan_best) continue;
    PlanResult r = p.fn(blocks);
    if (!have || r.arena < best.arena) best = std::move(r);
    have = true;
  }
  return best;
}

PlannerFn find_planner(const std::string& name) {
  for (const auto& p : kPlanners)
    if (name == p.name) return p.fn;
  std::string accepted;
  for (const auto& n : planner_names()) accepted += (accepted.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown --planner '" + name + "'; accepted: " + accepted);
}

std::vector<std::string> planner_names() {
  std::vector<std::string> out;
  for (const auto& p : kPlanners) out.push_back(p.name);
  return out;
}

}  // namespace vtensor
