#include "vtensor/core/fault.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace vtensor::fault {
namespace {

constexpr size_t kKinds = static_cast<size_t>(Kind::kCount);
std::array<std::atomic<uint64_t>, kKinds> counts{};
std::atomic<int> armed_kind{-1};
std::atomic<uint64_t> armed_nth{0};
std::once_flag env_once;
std::atomic<bool> env_read{false};  // hit()'s fast path: no call_once (a library call) per event

// VTENSOR_FAULT=KIND:K, read once; a malformed value is bad input.
void parse_env() {
  const char* v = std::getenv("VTENSOR_FAULT");
  if (!v || !*v) return;
  const std::string s = v;
  const auto colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  for (size_t k = 0; k < kKinds; ++k)
    if (kind == name(static_cast<Kind>(k)) && colon != std::string::npos) {
      try {
        size_t used = 0;
        const unsigned long long n = std::stoull(s.substr(colon + 1), &used);
        if (used == s.size() - colon - 1 && n > 0) {
          armed_nth = n;
          armed_kind = static_cast<int>(k);
          return;
        }
      } catch (const std::exception&) {
      }
    }
  throw std::invalid_argument("VTENSOR_FAULT='" + s + "': accepted: KIND:K with KIND one of device-alloc, host-alloc, "
                              "copy, report-write and K a positive count");
}
// Read once; a malformed value throws again at the next event (call_once retries after a throw).
void read_env() {
  parse_env();
  env_read.store(true, std::memory_order_release);
}

}  // namespace

const char* name(Kind k) {
  switch (k) {
    case Kind::kDeviceAlloc: return "device-alloc";
    case Kind::kHostAlloc: return "host-alloc";
    case Kind::kCopy: return "copy";
    case Kind::kReportWrite: return "report-write";
    case Kind::kCount: break;
  }
  return "?";
}

void arm(Kind k, uint64_t nth) {
  std::call_once(env_once, [] {});  // an explicit arm overrides the environment
  env_read.store(true, std::memory_order_release);
  for (auto& c : counts) c = 0;
  armed_nth = nth;
  armed_kind = static_cast<int>(k);
}

void disarm() {
  std::call_once(env_once, [] {});
  env_read.store(true, std::memory_order_release);
  for (auto& c : counts) c = 0;
  armed_kind = -1;
}

void check_env() {
  if (!env_read.load(std::memory_order_acquire)) std::call_once(env_once, read_env);
}

bool hit(Kind k) {
  if (!env_read.load(std::memory_order_acquire)) std::call_once(env_once, read_env);
  const uint64_t n = counts[static_cast<size_t>(k)].fetch_add(1, std::memory_order_relaxed) + 1;
  return armed_kind == static_cast<int>(k) && n == armed_nth;
}

uint64_t count(Kind k) { return counts[static_cast<size_t>(k)]; }

std::string message(Kind k, const std::string& what) {
  return "injected fault: " + what + " #" + std::to_string(count(k)) + " failed (VTENSOR_FAULT / fault::arm)";
}

}  // namespace vtensor::fault
