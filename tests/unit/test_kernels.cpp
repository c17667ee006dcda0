// Unit tests of the CPU reference kernels: finite-difference gradient checks for every op, forward
// checks against naive loops, and the determinism / running-stat / dropout-mask contracts.
#include "vtensor/backend/cpu/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/numeric.h"

namespace cpu = vtensor::cpu;
using Vec = std::vector<float>;

namespace {


// Distinct values at least 0.1 apart, in random order (no ties, no kinks within eps).
Vec distinct(size_t n, uint32_t seed) {
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.1f * float(i) - 0.05f * float(n);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}


using vtensor::test::dot;
using vtensor::test::grad_mismatches;
using vtensor::test::randn;

constexpr float kEps = vtensor::test::kGradEps;
constexpr double kTol = vtensor::test::kGradTol;

// ---- conv2d ----

struct ConvCase {
  int N, C, H, W, K, R, S, stride, pad;
  bool bias;
};

std::string name(const ConvCase& c) {
  return "conv N" + std::to_string(c.N) + " C" + std::to_string(c.C) + " " + std::to_string(c.H) + "x" +
         std::to_string(c.W) + " K" + std::to_string(c.K) + " " + std::to_string(c.R) + "x" +
         std::to_string(c.S) + " s" + std::to_string(c.stride) + " p" + std::to_string(c.pad) +
         (c.bias ? " bias" : "");
}

Vec naive_conv(const cpu::Conv2dParams& p, const Vec& x, const Vec& w, const float* b) {
  Vec y(size_t(p.N) * p.K * p.P * p.Q);
  for (int n = 0; n < p.N; ++n)
    for (int k = 0; k < p.K; ++k)
      for (int op = 0; op < p.P; ++op)
        for (int oq = 0; oq < p.Q; ++oq) {
          double acc = b ? b[k] : 0.0;
          for (int c = 0; c < p.C; ++c)
            for (int r = 0; r < p.R; ++r)
              for (int s = 0; s < p.S; ++s) {
                const int h = op * p.stride - p.pad + r, ww = oq * p.stride - p.pad + s;
                if (h < 0 || h >= p.H || ww < 0 || ww >= p.W) continue;
                acc += double(x[((size_t(n) * p.C + c) * p.H + h) * p.W + ww]) *
                       double(w[((size_t(k) * p.C + c) * p.R + r) * p.S + s]);
              }
          y[((size_t(n) * p.K + k) * p.P + op) * p.Q + oq] = float(acc);
        }
  return y;
}

const ConvCase kConvCases[] = {
    {2, 3, 5, 4, 2, 3, 2, 1, 0, true},   // non-square input and filter
    {2, 3, 5, 4, 2, 3, 2, 1, 0, false},
    {2, 2, 6, 5, 3, 3, 3, 1, 1, true},   // same padding
    {1, 2, 7, 6, 2, 3, 3, 2, 1, false},  // stride 2, pad 1
    {2, 2, 7, 5, 3, 2, 3, 2, 0, true},   // stride 2, pad 0, non-square filter
    {2, 3, 4, 3, 2, 1, 1, 1, 0, true},   // 1x1 fast path
    {1, 3, 5, 5, 2, 1, 1, 2, 0, false},  // 1x1 strided
};

TEST(Conv2d, ForwardMatchesNaive) {
  for (const auto& c : kConvCases) {
    const auto p = cpu::make_conv2d_params(c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.stride, c.pad);
    Vec x = randn(size_t(p.N) * p.C * p.H * p.W, 1), w = randn(size_t(p.K) * p.C * p.R * p.S, 2);
    Vec b = randn(p.K, 3), ws(cpu::conv2d_workspace_floats(p)), y(size_t(p.N) * p.K * p.P * p.Q);
    cpu::conv2d_forward(p, x.data(), w.data(), c.bias ? b.data() : nullptr, y.data(), ws.data());
    const Vec ref = naive_conv(p, x, w, c.bias ? b.data() : nullptr);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << name(c);
  }
}

TEST(Conv2d, Params) {
  const auto p = cpu::make_conv2d_params(2, 3, 7, 6, 4, 3, 2, 2, 1);
  EXPECT_EQ(p.P, 4);
  EXPECT_EQ(p.Q, 4);
  EXPECT_EQ(cpu::conv2d_workspace_floats(p), size_t(3 * 3 * 2 * 4 * 4));
}

// Runs the conv gradient check for one case; returns the mismatch count over dx, dw, db.
int conv_grad_mismatches(const ConvCase& c, bool negate_dx, bool report) {
  const auto p = cpu::make_conv2d_params(c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.stride, c.pad);
  Vec x = randn(size_t(p.N) * p.C * p.H * p.W, 11), w = randn(size_t(p.K) * p.C * p.R * p.S, 12);
  Vec b = randn(p.K, 13), r = randn(size_t(p.N) * p.K * p.P * p.Q, 14);
  Vec ws(cpu::conv2d_workspace_floats(p)), y(r.size());
  auto loss = [&] {
    cpu::conv2d_forward(p, x.data(), w.data(), c.bias ? b.data() : nullptr, y.data(), ws.data());
    return dot(y, r);
  };
  Vec dx(x.size(), 7.0f), dw(w.size(), 7.0f), db(b.size(), 7.0f);  // junk: kernels must overwrite
  cpu::conv2d_backward_data(p, r.data(), w.data(), dx.data(), ws.data());
  cpu::conv2d_backward_filter(p, r.data(), x.data(), dw.data(), c.bias ? db.data() : nullptr, ws.data());
  if (negate_dx) dx[dx.size() / 2] = -dx[dx.size() / 2];
  const std::string n = name(c);
  int bad = grad_mismatches(x, dx, loss, kEps, kTol, n + " dx", report);
  bad += grad_mismatches(w, dw, loss, kEps, kTol, n + " dw", report);
  if (c.bias) bad += grad_mismatches(b, db, loss, kEps, kTol, n + " db", report);
  return bad;
}

TEST(Conv2d, GradCheck) {
  for (const auto& c : kConvCases) EXPECT_EQ(conv_grad_mismatches(c, false, true), 0) << name(c);
}

// The checker itself must catch a wrong gradient.
TEST(GradCheck, DetectsWrongGradient) {
  EXPECT_GT(conv_grad_mismatches(kConvCases[2], true, false), 0);
}

TEST(Conv2d, DeterministicAcrossAddresses) {
  const auto p = cpu::make_conv2d_params(2, 8, 12, 11, 16, 3, 3, 1, 1);
  const size_t ny = size_t(p.N) * p.K * p.P * p.Q, nx = size_t(p.N) * p.C * p.H * p.W;
  Vec x = randn(nx, 21), w = randn(size_t(p.K) * p.C * p.R * p.S, 22), b = randn(p.K, 23);
  Vec x2(nx + 1), ws1(cpu::conv2d_workspace_floats(p)), ws2(ws1.size() + 1), y1(ny), y2(ny + 1);
  std::copy(x.begin(), x.end(), x2.begin() + 1);  // inputs, workspace and outputs shifted by 4 bytes
  cpu::conv2d_forward(p, x.data(), w.data(), b.data(), y1.data(), ws1.data());
  cpu::conv2d_forward(p, x2.data() + 1, w.data(), b.data(), y2.data() + 1, ws2.data() + 1);
  EXPECT_EQ(std::memcmp(y1.data(), y2.data() + 1, ny * sizeof(float)), 0);

  Vec dx1(nx), dx2(nx + 1), dw1(w.size()), dw2(w.size() + 1), db1(p.K), db2(p.K + 1);
  cpu::conv2d_backward_data(p, y1.data(), w.data(), dx1.data(), ws1.data());
  cpu::conv2d_backward_data(p, y2.data() + 1, w.data(), dx2.data() + 1, ws2.data() + 1);
  EXPECT_EQ(std::memcmp(dx1.data(), dx2.data() + 1, nx * sizeof(float)), 0);
  cpu::conv2d_backward_filter(p, y1.data(), x.data(), dw1.data(), db1.data(), ws1.data());
  cpu::conv2d_backward_filter(p, y2.data() + 1, x2.data() + 1, dw2.data() + 1, db2.data() + 1,
                              ws2.data() + 1);
  EXPECT_EQ(std::memcmp(dw1.data(), dw2.data() + 1, w.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(db1.data(), db2.data() + 1, p.K * sizeof(float)), 0);
}

TEST(Conv2d, RejectsBadParams) {
  EXPECT_THROW(cpu::make_conv2d_params(1, 1, 2, 2, 1, 3, 3, 1, 0), std::invalid_argument);
  EXPECT_THROW(cpu::make_conv2d_params(1, 1, 4, 4, 1, 3, 3, 0, 0), std::invalid_argument);
}

// ---- batchnorm ----

void batchnorm_grad_check(int N, int C, int HW) {
  const std::string what = "batchnorm N" + std::to_string(N) + " C" + std::to_string(C) + " HW" +
                           std::to_string(HW);
  const size_t n = size_t(N) * C * HW;
  Vec x = randn(n, 31), gamma = randn(C, 32), beta = randn(C, 33), r = randn(n, 34), y(n);
  for (size_t i = 0; i < n; ++i) {  // per-channel offsets and scales
    const int c = int(i / HW % C);
    x[i] = x[i] * float(1 + c) + float(c);
  }
  Vec mean(C), invstd(C), rm(C, 0.0f), rv(C, 1.0f);
  auto loss = [&] {
    cpu::batchnorm_forward(N, C, HW, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                           invstd.data(), rm.data(), rv.data(), 0.1f, 1e-5f, false);
    return dot(y, r);
  };
  loss();
  Vec dx(n), dgamma(C), dbeta(C);
  cpu::batchnorm_backward(N, C, HW, r.data(), x.data(), gamma.data(), mean.data(), invstd.data(), dx.data(),
                          dgamma.data(), dbeta.data());
  EXPECT_EQ(grad_mismatches(x, dx, loss, 1e-3f, kTol, what + " dx"), 0);
  EXPECT_EQ(grad_mismatches(gamma, dgamma, loss, kEps, kTol, what + " dgamma"), 0);
  EXPECT_EQ(grad_mismatches(beta, dbeta, loss, kEps, kTol, what + " dbeta"), 0);
}

TEST(Batchnorm, GradCheckHW1) { batchnorm_grad_check(5, 3, 1); }
TEST(Batchnorm, GradCheckSpatial) { batchnorm_grad_check(2, 3, 6); }

TEST(Batchnorm, NormalisesBatch) {
  const int N = 4, C = 2, HW = 3;
  Vec x = randn(N * C * HW, 41, 3.0f), gamma(C, 1.0f), beta(C, 0.0f), y(x.size()), mean(C), invstd(C);
  Vec rm(C), rv(C);
  cpu::batchnorm_forward(N, C, HW, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data(),
                         rm.data(), rv.data(), 0.1f, 0.0f, false);
  for (int c = 0; c < C; ++c) {
    double s = 0, s2 = 0;
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < HW; ++j) {
        const double v = y[(size_t(i) * C + c) * HW + j];
        s += v;
        s2 += v * v;
      }
    EXPECT_NEAR(s / (N * HW), 0.0, 1e-6);
    EXPECT_NEAR(s2 / (N * HW), 1.0, 1e-5);  // biased variance
  }
}

TEST(Batchnorm, RunningStats) {
  const int N = 3, C = 2, HW = 4, M = N * HW;
  const float momentum = 0.1f;
  Vec x = randn(N * C * HW, 51, 2.0f), gamma = randn(C, 52), beta = randn(C, 53);
  Vec y1(x.size()), y2(x.size()), mean(C), invstd(C);
  const Vec rm0 = {0.5f, -0.25f}, rv0 = {2.0f, 0.75f};
  Vec rm = rm0, rv = rv0;
  cpu::batchnorm_forward(N, C, HW, x.data(), gamma.data(), beta.data(), y1.data(), mean.data(), invstd.data(),
                         rm.data(), rv.data(), momentum, 1e-5f, false);
  EXPECT_EQ(std::memcmp(rm.data(), rm0.data(), C * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(rv.data(), rv0.data(), C * sizeof(float)), 0);
  cpu::batchnorm_forward(N, C, HW, x.data(), gamma.data(), beta.data(), y2.data(), mean.data(), invstd.data(),
                         rm.data(), rv.data(), momentum, 1e-5f, true);
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0);
  for (int c = 0; c < C; ++c) {
    double s = 0, s2 = 0;
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < HW; ++j) s += x[(size_t(i) * C + c) * HW + j];
    const double mu = s / M;
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < HW; ++j) s2 += std::pow(x[(size_t(i) * C + c) * HW + j] - mu, 2);
    EXPECT_NEAR(mean[c], mu, 1e-6);
    EXPECT_NEAR(invstd[c], 1.0 / std::sqrt(s2 / M + 1e-5), 1e-5);
    EXPECT_NEAR(rm[c], (1 - momentum) * rm0[c] + momentum * mu, 1e-6);
    EXPECT_NEAR(rv[c], (1 - momentum) * rv0[c] + momentum * s2 / (M - 1), 1e-6);  // unbiased
  }
}

// ---- relu, pools, linear, add, dropout, softmax_ce ----

TEST(Relu, GradCheck) {
  Vec x = distinct(40, 61), r = randn(40, 62), y(40), dx(40);
  for (auto& v : x) v += (v >= 0 ? 0.05f : -0.05f) + 0.001f;  // keep away from the kink at 0
  auto loss = [&] {
    cpu::relu_forward(x.size(), x.data(), y.data());
    return dot(y, r);
  };
  loss();
  cpu::relu_backward(x.size(), r.data(), y.data(), dx.data());
  EXPECT_EQ(grad_mismatches(x, dx, loss, kEps, kTol, "relu dx"), 0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], std::max(x[i], 0.0f));
}

struct PoolCase {
  int N, C, H, W, k, stride, pad;
};

int pool_out(int H, int k, int stride, int pad) { return (H + 2 * pad - k) / stride + 1; }

TEST(Maxpool, GradCheck) {
  for (const PoolCase c :
       {PoolCase{2, 2, 6, 4, 2, 2, 0}, PoolCase{1, 2, 7, 6, 3, 2, 1}, PoolCase{1, 1, 5, 5, 3, 1, 1}}) {
    const int P = pool_out(c.H, c.k, c.stride, c.pad), Q = pool_out(c.W, c.k, c.stride, c.pad);
    const std::string what = "maxpool k" + std::to_string(c.k) + " s" + std::to_string(c.stride) + " p" +
                             std::to_string(c.pad);
    Vec x = distinct(size_t(c.N) * c.C * c.H * c.W, 71), r = randn(size_t(c.N) * c.C * P * Q, 72);
    Vec y(r.size()), dx(x.size(), 7.0f);
    auto loss = [&] {
      cpu::maxpool2d_forward(c.N, c.C, c.H, c.W, c.k, c.stride, c.pad, P, Q, x.data(), y.data());
      return dot(y, r);
    };
    cpu::maxpool2d_backward(c.N, c.C, c.H, c.W, c.k, c.stride, c.pad, P, Q, r.data(), x.data(), dx.data());
    EXPECT_EQ(grad_mismatches(x, dx, loss, kEps, kTol, what + " dx"), 0);
  }
}

TEST(Maxpool, ForwardMatchesNaive) {
  // Shifted all-negative inputs too: padding is -inf, so a padded 0 must never win.
  for (const PoolCase c :
       {PoolCase{1, 2, 6, 4, 2, 2, 0}, PoolCase{2, 1, 7, 6, 3, 2, 1}, PoolCase{1, 1, 4, 5, 3, 2, 1}}) {
    const int P = pool_out(c.H, c.k, c.stride, c.pad), Q = pool_out(c.W, c.k, c.stride, c.pad);
    for (float shift : {0.0f, -100.0f}) {
      Vec x = distinct(size_t(c.N) * c.C * c.H * c.W, 73), y(size_t(c.N) * c.C * P * Q);
      for (auto& v : x) v += shift;
      cpu::maxpool2d_forward(c.N, c.C, c.H, c.W, c.k, c.stride, c.pad, P, Q, x.data(), y.data());
      for (int nc = 0; nc < c.N * c.C; ++nc)
        for (int op = 0; op < P; ++op)
          for (int oq = 0; oq < Q; ++oq) {
            float best = -std::numeric_limits<float>::infinity();
            for (int r = 0; r < c.k; ++r)
              for (int s = 0; s < c.k; ++s) {
                const int h = op * c.stride - c.pad + r, w = oq * c.stride - c.pad + s;
                if (h < 0 || h >= c.H || w < 0 || w >= c.W) continue;
                best = std::max(best, x[(nc * c.H + h) * c.W + w]);
              }
            EXPECT_EQ(y[(nc * P + op) * Q + oq], best);
          }
    }
  }
}

TEST(Maxpool, TiesRouteToFirstMaximum) {
  // Constant input, 2x2 windows with stride 1: each window's gradient goes to its top-left element.
  const int H = 3, W = 3, P = 2, Q = 2;
  Vec x(H * W, 1.0f), dy = {1.0f, 2.0f, 4.0f, 8.0f}, dx(H * W, 7.0f);
  cpu::maxpool2d_backward(1, 1, H, W, 2, 1, 0, P, Q, dy.data(), x.data(), dx.data());
  const Vec want = {1, 2, 0, 4, 8, 0, 0, 0, 0};
  EXPECT_EQ(dx, want);
}

TEST(GlobalAvgpool, GradCheck) {
  const int N = 2, C = 3, HW = 5;
  Vec x = randn(N * C * HW, 81), r = randn(N * C, 82), y(N * C), dx(x.size());
  auto loss = [&] {
    cpu::global_avgpool_forward(N, C, HW, x.data(), y.data());
    return dot(y, r);
  };
  loss();
  EXPECT_NEAR(y[1], (x[5] + x[6] + x[7] + x[8] + x[9]) / 5.0f, 1e-6);
  cpu::global_avgpool_backward(N, C, HW, r.data(), dx.data());
  EXPECT_EQ(grad_mismatches(x, dx, loss, kEps, kTol, "avgpool dx"), 0);
}

TEST(Linear, ForwardMatchesNaive) {
  const int M = 5, In = 7, Out = 4;
  Vec x = randn(M * In, 91), w = randn(Out * In, 92), b = randn(Out, 93), y(M * Out), y0(M * Out);
  cpu::linear_forward(M, In, Out, x.data(), w.data(), b.data(), y.data());
  cpu::linear_forward(M, In, Out, x.data(), w.data(), nullptr, y0.data());
  for (int m = 0; m < M; ++m)
    for (int o = 0; o < Out; ++o) {
      double acc = 0;
      for (int i = 0; i < In; ++i) acc += double(x[m * In + i]) * w[o * In + i];
      EXPECT_NEAR(y0[m * Out + o], acc, 1e-5 * (1 + std::abs(acc)));
      EXPECT_NEAR(y[m * Out + o], acc + b[o], 1e-5 * (1 + std::abs(acc + b[o])));
    }
}

TEST(Linear, GradCheck) {
  const int M = 3, In = 5, Out = 4;
  Vec x = randn(M * In, 101), w = randn(Out * In, 102), b = randn(Out, 103), r = randn(M * Out, 104);
  Vec y(M * Out), dx(x.size(), 7.0f), dw(w.size(), 7.0f), db(Out, 7.0f);
  auto loss = [&] {
    cpu::linear_forward(M, In, Out, x.data(), w.data(), b.data(), y.data());
    return dot(y, r);
  };
  cpu::linear_backward(M, In, Out, r.data(), x.data(), w.data(), dx.data(), dw.data(), db.data());
  EXPECT_EQ(grad_mismatches(x, dx, loss, kEps, kTol, "linear dx"), 0);
  EXPECT_EQ(grad_mismatches(w, dw, loss, kEps, kTol, "linear dw"), 0);
  EXPECT_EQ(grad_mismatches(b, db, loss, kEps, kTol, "linear db"), 0);
  // Nullable dx / db leave the rest unchanged.
  Vec dw2(w.size());
  cpu::linear_backward(M, In, Out, r.data(), x.data(), w.data(), nullptr, dw2.data(), nullptr);
  EXPECT_EQ(dw, dw2);
}

TEST(Add, GradCheck) {
  Vec a = randn(12, 111), b = randn(12, 112), r = randn(12, 113), y(12);
  auto loss = [&] {
    cpu::add_forward(a.size(), a.data(), b.data(), y.data());
    return dot(y, r);
  };
  // The gradient of a sum passes dy to both inputs.
  EXPECT_EQ(grad_mismatches(a, r, loss, kEps, kTol, "add da"), 0);
  EXPECT_EQ(grad_mismatches(b, r, loss, kEps, kTol, "add db"), 0);
  Vec c(12);
  cpu::copy(a.size(), a.data(), c.data());
  EXPECT_EQ(a, c);
}

TEST(Dropout, GradCheck) {
  const size_t n = 30;
  const float p = 0.4f;
  const uint64_t seed = 1234;
  Vec x = randn(n, 121), r = randn(n, 122), y(n), dx(n);
  auto loss = [&] {
    cpu::dropout_forward(n, p, seed, x.data(), y.data());
    return dot(y, r);
  };
  cpu::dropout_backward(n, p, seed, r.data(), dx.data());
  EXPECT_EQ(grad_mismatches(x, dx, loss, kEps, kTol, "dropout dx"), 0);
}

TEST(Dropout, MaskContract) {
  const size_t n = 10000;
  const float p = 0.3f;
  Vec x(n, 1.0f), y1(n), y2(n), y3(n);
  cpu::dropout_forward(n, p, 42, x.data(), y1.data());
  cpu::dropout_forward(n, p, 42, x.data(), y2.data());
  cpu::dropout_forward(n, p, 43, x.data(), y3.data());
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), n * sizeof(float)), 0);
  size_t dropped = 0, differ = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool keep = cpu::dropout_keep(42, i, p);
    EXPECT_EQ(y1[i], keep ? 1.0f / (1.0f - p) : 0.0f);
    dropped += !keep;
    differ += (y1[i] == 0.0f) != (y3[i] == 0.0f);
  }
  EXPECT_NEAR(double(dropped) / n, p, 0.02);
  EXPECT_GT(differ, n / 10);  // a different seed gives a different mask
  // p = 0 is an exact copy.
  Vec z = randn(n, 131), zc(n);
  cpu::dropout_forward(n, 0.0f, 42, z.data(), zc.data());
  EXPECT_EQ(std::memcmp(z.data(), zc.data(), n * sizeof(float)), 0);
}

TEST(Random, Mix64AndUniform) {
  EXPECT_EQ(cpu::mix64(0x9e3779b97f4a7c15ULL), 0xe220a8397b1dcdafULL);  // splitmix64(seed 0), first output
  double s = 0;
  for (uint64_t i = 0; i < 4096; ++i) {
    const float u = cpu::uniform01(7, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    s += u;
  }
  EXPECT_NEAR(s / 4096, 0.5, 0.02);
  EXPECT_EQ(cpu::uniform01(7, 5), float(cpu::mix64(7 ^ cpu::mix64(5)) >> 40) * 0x1p-24f);
}

TEST(SoftmaxCe, GradCheck) {
  const int N = 3, K = 5;
  Vec z = randn(N * K, 141, 2.0f), labels = {4, 0, 2}, dz(z.size());
  float loss_v = 0;
  auto loss = [&] {
    cpu::softmax_ce_forward(N, K, z.data(), labels.data(), &loss_v);
    return double(loss_v);
  };
  cpu::softmax_ce_backward(N, K, z.data(), labels.data(), dz.data());
  EXPECT_EQ(grad_mismatches(z, dz, loss, 1e-2f, kTol, "softmax_ce dlogits"), 0);
}

TEST(SoftmaxCe, ValueAndStability) {
  // Uniform logits: loss = log K. Huge logits must not overflow.
  const int K = 4;
  Vec z = {1000, 1000, 1000, 1000, -1000, 1000, 2000, -5}, labels = {1, 0};
  float loss = 0;
  cpu::softmax_ce_forward(2, K, z.data(), labels.data(), &loss);
  EXPECT_NEAR(loss, (std::log(4.0) + 3000.0) / 2, 1e-3);
  Vec dz(z.size());
  cpu::softmax_ce_backward(2, K, z.data(), labels.data(), dz.data());
  for (float v : dz) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(dz[1], (0.25 - 1) / 2, 1e-7);
  EXPECT_NEAR(dz[4], -0.5, 1e-7);
}

TEST(SoftmaxCe, RejectsBadLabel) {
  Vec z(6, 0.0f), dz(6);
  float loss = 0;
  for (float bad : {3.0f, -1.0f, 100.0f, std::numeric_limits<float>::quiet_NaN()}) {
    Vec labels = {0.0f, bad};
    EXPECT_THROW(cpu::softmax_ce_forward(2, 3, z.data(), labels.data(), &loss), std::invalid_argument);
    EXPECT_THROW(cpu::softmax_ce_backward(2, 3, z.data(), labels.data(), dz.data()), std::invalid_argument);
  }
}

TEST(Sgd, MomentumStep) {
  // m = 0.9 * 0.2 + (0.5 + 0.01 * 1) = 0.69; w = 1 - 0.1 * 0.69 = 0.931.
  Vec w = {1.0f, -2.0f}, g = {0.5f, 0.0f}, m = {0.2f, 0.0f};
  cpu::sgd_momentum(2, 0.1f, 0.9f, 0.01f, w.data(), g.data(), m.data());
  EXPECT_FLOAT_EQ(m[0], 0.69f);
  EXPECT_FLOAT_EQ(w[0], 0.931f);
  EXPECT_FLOAT_EQ(m[1], -0.02f);   // weight decay only
  EXPECT_FLOAT_EQ(w[1], -1.998f);
}

}  // namespace
