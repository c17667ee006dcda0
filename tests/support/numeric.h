// Shared by the kernel tests: seeded random vectors and the finite-difference gradient check.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace vtensor::test {

using Vec = std::vector<float>;

constexpr float kGradEps = 1e-2f;   // central-difference step
constexpr double kGradTol = 5e-3;   // relative tolerance (absolute below 1)

inline Vec randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(b[i]);
  return s;
}

// Compares the analytic gradient `ana` of loss() w.r.t. `in` with central differences and
// returns the number of mismatches (reported, the first five, unless `report` is false).
// An all-zero analytic gradient fails: the check would be vacuous.
inline int grad_mismatches(Vec& in, const Vec& ana, const std::function<double()>& loss, float eps, double tol,
                           const std::string& what, bool report = true) {
  EXPECT_EQ(in.size(), ana.size()) << what;
  int bad = 0;
  double ana_norm = 0.0;
  for (size_t i = 0; i < in.size(); ++i) {
    const float v = in[i];
    const float hi = v + eps, lo = v - eps;
    in[i] = hi;
    const double lp = loss();
    in[i] = lo;
    const double lm = loss();
    in[i] = v;
    const double num = (lp - lm) / (double(hi) - double(lo));
    const double a = ana[i];
    ana_norm += a * a;
    if (std::abs(a - num) > tol * std::max({1.0, std::abs(a), std::abs(num)})) {
      if (report && bad < 5) ADD_FAILURE() << what << "[" << i << "]: analytic " << a << " numeric " << num;
      ++bad;
    }
  }
  if (report) {
    EXPECT_GT(ana_norm, 0.0) << what << ": gradient is all zero, check is vacuous";
  }
  return bad;
}

inline int grad_mismatches(Vec& in, const Vec& ana, const std::function<double()>& loss, const std::string& what,
                           float eps = kGradEps) {
  return grad_mismatches(in, ana, loss, eps, kGradTol, what);
}

}  // namespace vtensor::test
