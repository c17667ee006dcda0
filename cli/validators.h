// The CLI's checks of option values that CLI11 runs on what the user gave (leaving an option out
// takes its default, which the check does not see).
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <exception>
#include <string>

namespace vtensor::cli {

// Sizes and counts where 0 has no meaning: refused like a negative (leaving the option out takes
// the model's preset or the policy's search).
inline const CLI::Validator kPositive(
    [](std::string& v) -> std::string {
      try {
        size_t used = 0;
        const long long n = std::stoll(v, &used);
        if (used == v.size() && n > 0) return {};
      } catch (const std::exception&) {
      }
      return "must be a whole number above 0 (leave the option out for the default), got '" + v + "'";
    },
    "INT > 0");
// Learning rate, momentum, weight decay: a NaN or an infinity trains to NaN.
inline const CLI::Validator kFinite(
    [](std::string& v) -> std::string {
      try {
        size_t used = 0;
        const double d = std::stod(v, &used);
        if (used == v.size() && std::isfinite(d)) return {};
      } catch (const std::exception&) {
      }
      return "must be a finite number, got '" + v + "'";
    },
    "FINITE");

}  // namespace vtensor::cli
