#include "arena.h"

#include <cstdio>

namespace vtensor::pyb {

Arena::Arena(size_t capacity, const std::string& allocator, const std::string& planner)
    : capacity_(align_up(capacity)), alloc_(make_allocator(allocator, align_up(capacity), planner)) {}

std::string Arena::oom_context() const {
  const AllocatorStats& s = alloc_->stats();
  char frag[32];
  std::snprintf(frag, sizeof frag, "%.1f%%", 100.0 * s.fragmentation());
  return "vtensor " + alloc_->name() + " allocator; largest free block " + format_bytes(s.largest_free_block) + ", " +
         format_bytes(s.free_bytes) + " free in all, fragmentation " + frag;
}

// The C++ runtime's message (requested, in use, budget) with the arena's shape as its context.
std::string Arena::oom_message(size_t requested) const {
  return OutOfMemoryError(requested, alloc_->stats().allocated, capacity_, oom_context()).what();
}

std::optional<size_t> Arena::try_allocate(size_t bytes, int64_t tag) {
  std::lock_guard<std::mutex> g(mu_);
  auto off = alloc_->allocate(bytes, tag);
  if (!off) last_oom_ = oom_message(bytes);
  return off;
}

size_t Arena::allocate(size_t bytes, int64_t tag) {
  std::lock_guard<std::mutex> g(mu_);
  auto off = alloc_->allocate(bytes, tag);
  if (!off) {
    last_oom_ = oom_message(bytes);
    throw OutOfMemoryError(bytes, alloc_->stats().allocated, capacity_, oom_context());
  }
  return *off;
}

void Arena::free(size_t offset) {
  std::lock_guard<std::mutex> g(mu_);
  alloc_->free(offset);
}

size_t Arena::block_size(size_t offset) const {
  std::lock_guard<std::mutex> g(mu_);
  return alloc_->block_size(offset);
}

AllocatorStats Arena::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return alloc_->stats();
}

void Arena::reset_peak() {
  std::lock_guard<std::mutex> g(mu_);
  alloc_->reset_peak();
}

void Arena::begin_iteration(int iteration) {
  std::lock_guard<std::mutex> g(mu_);
  iteration_ = iteration;
  alloc_->begin_iteration(iteration);
}

void Arena::end_iteration() {
  std::lock_guard<std::mutex> g(mu_);
  alloc_->end_iteration(true);
}

std::string Arena::report() const {
  std::lock_guard<std::mutex> g(mu_);
  return alloc_->report().dump();
}

std::string Arena::last_oom() const {
  std::lock_guard<std::mutex> g(mu_);
  return last_oom_;
}

}  // namespace vtensor::pyb
