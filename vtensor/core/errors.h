// Errors a user can meet. Bad input is std::invalid_argument (the CLI exits 2 on it);
// running out of the device budget (or of the host budget, where swaps go) is OutOfMemoryError;
// broken invariants are std::logic_error.
#pragma once
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

namespace vtensor {

std::string format_bytes(size_t bytes);  // "12.50 MiB"
std::string format_number(double v);     // "2.5", "99", "1e-05" (printf's %g)
// Parses "512MiB", "1.5GiB", "4096", "1e8", "64 MiB", "64KB" (10^3), "2G" (2^30): the one byte-size
// syntax of the CLI and the Python package. Throws std::invalid_argument naming `what`.
size_t parse_bytes(const std::string& text, const std::string& what = "size");

enum class MemoryKind { kDevice, kHost };

class OutOfMemoryError : public std::runtime_error {
 public:
  OutOfMemoryError(size_t requested, size_t in_use, size_t budget, std::string context,
                   std::optional<size_t> smallest_working_budget = std::nullopt);
  // Out of host memory (--host-budget): a swap-out of `requested` bytes did not fit.
  static OutOfMemoryError host(size_t requested, size_t in_use, size_t budget, std::string context);
  MemoryKind memory() const { return memory_; }
  size_t requested() const { return requested_; }
  size_t in_use() const { return in_use_; }
  size_t budget() const { return budget_; }
  std::optional<size_t> smallest_working_budget() const { return smallest_; }

 private:
  OutOfMemoryError(MemoryKind memory, size_t requested, size_t in_use, size_t budget, const std::string& context,
                   std::optional<size_t> smallest);
  size_t requested_, in_use_, budget_;
  std::optional<size_t> smallest_;
  MemoryKind memory_ = MemoryKind::kDevice;
};

// A device operation failed (a copy between device and host): the CLI exits 1.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writing an output file failed; nothing is left half-written: the CLI exits 1.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace vtensor
