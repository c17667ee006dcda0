#include "vtensor/policy/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "vtensor/core/errors.h"

namespace vtensor {
namespace {

std::optional<long long> parse_whole(const std::string& v) {
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return n;
}

std::optional<double> parse_real(const std::string& v) {
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (*end != '\0' || !std::isfinite(d)) return std::nullopt;
  return d;
}

std::string either(const std::vector<std::string>& names) {  // "a", "a or b", "a, b or c"
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

}  // namespace

PolicyOptions& PolicyOptions::set(const std::string& flag, const std::string& value) {
  values_[flag] = value;
  return *this;
}

PolicyOptions& PolicyOptions::set_number(const std::string& flag, double value) {
  const double r = std::round(value);
  return set(flag, r == value && std::abs(r) < 1e15 ? std::to_string(static_cast<long long>(r)) : format_number(value));
}

PolicyOptions PolicyOptions::only(const std::vector<PolicyOption>& declared) const {
  PolicyOptions o;
  o.budget_given = budget_given;
  for (const auto& d : declared)
    if (auto it = values_.find(d.flag); it != values_.end()) o.values_.insert(*it);
  return o;
}

std::optional<std::string> PolicyOptions::text(const std::string& flag) const {
  const auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> PolicyOptions::choice(const std::string& flag, const std::vector<std::string>& accepted) const {
  const auto v = text(flag);
  if (!v) return v;
  for (const auto& a : accepted)
    if (*v == a) return v;
  throw std::invalid_argument("--" + flag + " must be " + either(accepted) + ", got '" + *v + "'");
}

std::optional<int> PolicyOptions::rehearsals(const std::string& flag, const std::string& zero_means) const {
  const auto v = text(flag);
  if (!v) return std::nullopt;
  const auto n = parse_whole(*v);
  if (!n || *n < 0 || *n > 1000000000)
    throw std::invalid_argument("--" + flag + " must be a rehearsal count >= 0 (0: " + zero_means + "), got " + *v);
  return static_cast<int>(*n);
}

std::optional<int> PolicyOptions::positive(const std::string& flag) const {
  const auto v = text(flag);
  if (!v) return std::nullopt;
  const auto n = parse_whole(*v);
  if (!n || *n <= 0 || *n > 1000000000)
    throw std::invalid_argument("--" + flag + ": must be a whole number above 0 (leave the option out for the default), got '" +
                                *v + "'");
  return static_cast<int>(*n);
}

std::optional<int> PolicyOptions::whole(const std::string& flag) const {
  const auto v = text(flag);
  if (!v) return std::nullopt;
  const auto n = parse_whole(*v);
  if (!n || *n < -1000000000 || *n > 1000000000)
    throw std::invalid_argument("--" + flag + ": must be a whole number, got '" + *v + "'");
  return static_cast<int>(*n);
}

std::optional<double> PolicyOptions::seconds(const std::string& flag, double lo, double hi, bool lo_open,
                                             const std::string& zero_means) const {
  const auto v = text(flag);
  if (!v) return std::nullopt;
  const auto d = parse_real(*v);
  if (!d || !(lo_open ? *d > lo : *d >= lo) || !(*d <= hi))
    throw std::invalid_argument("--" + flag + " must be seconds in " + (lo_open ? "(" : "[") + format_number(lo) + ", " +
                                format_number(hi) + "]" + (zero_means.empty() ? "" : " (0: " + zero_means + ")") +
                                ", got " + *v);
  return d;
}

std::optional<size_t> PolicyOptions::bytes(const std::string& flag) const {
  const auto v = text(flag);
  if (!v) return std::nullopt;
  return parse_bytes(*v, "--" + flag);
}

std::vector<std::string> PolicyOptions::list(const std::string& flag) const {
  std::vector<std::string> out;
  const auto v = text(flag);
  if (!v) return out;
  for (size_t at = 0; at <= v->size();) {
    const size_t comma = std::min(v->find(',', at), v->size());
    if (comma > at) out.push_back(v->substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace vtensor
