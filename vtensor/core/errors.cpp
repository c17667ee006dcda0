#include "vtensor/core/errors.h"

#include <limits>

#include <cctype>
#include <cmath>
#include <cstdio>

namespace vtensor {

std::string format_number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string format_bytes(size_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1ull << 30));
  else if (bytes >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1ull << 20));
  else if (bytes >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.2f KiB", b / (1ull << 10));
  else std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

size_t parse_bytes(const std::string& text, const std::string& what) {
  const std::string accepted =
      " (accepted: a number, e.g. 512, 1.5 or 1e8, then an optional unit B, KiB, MiB, GiB, K, M, G (powers of 1024) or "
      "KB, MB, GB (powers of 1000), a space allowed between; e.g. 512MiB or '64 MiB')";
  auto is_digit = [&](size_t k) { return k < text.size() && std::isdigit(static_cast<unsigned char>(text[k])); };
  size_t i = 0, end = text.size();
  while (i < end && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  while (end > i && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  const size_t start = i;
  size_t digits = 0;
  for (; is_digit(i); ++i) ++digits;
  if (i < end && text[i] == '.')
    for (++i; is_digit(i); ++i) ++digits;
  if (digits == 0) throw std::invalid_argument("invalid " + what + " '" + text + "'" + accepted);
  if (i < end && (text[i] == 'e' || text[i] == 'E')) {  // an exponent, only where digits follow
    size_t k = i + 1;
    if (k < end && (text[k] == '+' || text[k] == '-')) ++k;
    if (is_digit(k)) {
      for (i = k; is_digit(i); ++i) {}
    }
  }
  double value = 0;
  try {
    value = std::stod(text.substr(start, i - start));
  } catch (const std::exception&) {  // out of double's range: 1e400
    throw std::invalid_argument(what + " '" + text + "' is out of range (1 B to 1 PB)");
  }
  while (i < end && text[i] == ' ') ++i;
  std::string unit = text.substr(i, end - i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KIB" || unit == "KI") mult = 1024.0;
  else if (unit == "M" || unit == "MIB" || unit == "MI") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GIB" || unit == "GI") mult = 1024.0 * 1024 * 1024;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else throw std::invalid_argument("invalid unit '" + text.substr(i, end - i) + "' in " + what + " '" + text + "'" + accepted);
  const double bytes = value * mult;
  if (!(bytes >= 1) || bytes > 1e15) throw std::invalid_argument(what + " '" + text + "' is out of range (1 B to 1 PB)");
  return static_cast<size_t>(std::llround(bytes));
}

static std::string oom_message(MemoryKind memory, size_t requested, size_t in_use, size_t budget,
                               const std::string& context, std::optional<size_t> smallest) {
  const bool host = memory == MemoryKind::kHost;
  std::string m = std::string(host ? "out of host memory: requested " : "out of device memory: requested ") +
                  format_bytes(requested) + (host ? " on the host" : "") + " with " + format_bytes(in_use) +
                  (host && budget == std::numeric_limits<size_t>::max()
                       ? std::string(" in use, no host budget set")
                       : " in use of a " + format_bytes(budget) + (host ? " host budget (--host-budget)" : " budget"));
  if (!context.empty()) m += " (" + context + ")";
  if (smallest) m += "; the smallest budget known to work is " + format_bytes(*smallest);
  return m;
}

OutOfMemoryError::OutOfMemoryError(size_t requested, size_t in_use, size_t budget, std::string context,
                                   std::optional<size_t> smallest)
    : OutOfMemoryError(MemoryKind::kDevice, requested, in_use, budget, context, smallest) {}

OutOfMemoryError::OutOfMemoryError(MemoryKind memory, size_t requested, size_t in_use, size_t budget,
                                   const std::string& context, std::optional<size_t> smallest)
    : std::runtime_error(oom_message(memory, requested, in_use, budget, context, smallest)),
      requested_(requested), in_use_(in_use), budget_(budget), smallest_(smallest), memory_(memory) {}

OutOfMemoryError OutOfMemoryError::host(size_t requested, size_t in_use, size_t budget, std::string context) {
  return OutOfMemoryError(MemoryKind::kHost, requested, in_use, budget, context, std::nullopt);
}

}  // namespace vtensor
