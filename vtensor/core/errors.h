// Errors a user can meet. Bad input is std::invalid_argument (the CLI exits 2 on it);
// running out of the device budget is OutOfMemoryError; broken invariants are std::logic_error.
#pragma once
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

namespace vtensor {

std::string format_bytes(size_t bytes);  // "12.50 MiB"
// Parses "512MiB", "1.5GiB", "4096", "64KB", "2G". Throws std::invalid_argument naming `what`.
size_t parse_bytes(const std::string& text, const std::string& what = "size");

class OutOfMemoryError : public std::runtime_error {
 public:
  OutOfMemoryError(size_t requested, size_t in_use, size_t budget, std::string context,
                   std::optional<size_t> smallest_working_budget = std::nullopt);
  size_t requested() const { return requested_; }
  size_t in_use() const { return in_use_; }
  size_t budget() const { return budget_; }
  std::optional<size_t> smallest_working_budget() const { return smallest_; }

 private:
  size_t requested_, in_use_, budget_;
  std::optional<size_t> smallest_;
};

}  // namespace vtensor
