// Unit tests of the transformer kernels: finite-difference gradient checks for every op
// (embedding, layer norm, GELU, batched matmul, softmax with and without the causal mask,
// the head transpose), forward checks against naive loops, and one Adam step by hand.
#include "vtensor/backend/cpu/kernels_transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tests/support/numeric.h"

namespace cpu = vtensor::cpu;
using Vec = std::vector<float>;

namespace {



using vtensor::test::dot;
using vtensor::test::grad_mismatches;
using vtensor::test::randn;

TEST(Embedding, ForwardGathersRowsAndPositions) {
  const int V = 5, C = 3, N = 4;
  Vec table = randn(size_t(V) * C, 1), ids = {4, 0, 4, 2}, y(size_t(N) * C);
  cpu::embedding_forward(N, V, C, ids.data(), 0, table.data(), y.data());
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) EXPECT_EQ(y[size_t(n) * C + c], table[size_t(ids[n]) * C + c]);
  cpu::embedding_forward(N, V, C, nullptr, 2, table.data(), y.data());  // positions 0, 1, 0, 1
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) EXPECT_EQ(y[size_t(n) * C + c], table[size_t(n % 2) * C + c]);
  Vec bad = {0, 5, 1, 1};
  EXPECT_THROW(cpu::embedding_forward(N, V, C, bad.data(), 0, table.data(), y.data()), std::invalid_argument);
}

TEST(Embedding, GradCheckWithRepeatedIds) {
  const int V = 6, C = 4, N = 7;
  Vec table = randn(size_t(V) * C, 2), ids = {1, 3, 1, 5, 0, 1, 3}, r = randn(size_t(N) * C, 3), y(r.size());
  auto loss = [&] {
    cpu::embedding_forward(N, V, C, ids.data(), 0, table.data(), y.data());
    return dot(y, r);
  };
  Vec dt(table.size(), 7.f);  // junk: the kernel overwrites
  cpu::embedding_backward(N, V, C, r.data(), ids.data(), 0, dt.data());
  EXPECT_EQ(grad_mismatches(table, dt, loss, "embedding dtable"), 0);
  for (int c = 0; c < C; ++c) EXPECT_EQ(dt[size_t(2) * C + c], 0.f) << "unused row gets no gradient";
  // Tied weights: accumulating into an existing gradient gives that gradient plus the rows.
  Vec acc = randn(table.size(), 5), da(table.size());
  cpu::embedding_backward(N, V, C, r.data(), ids.data(), 0, da.data(), acc.data());
  for (size_t i = 0; i < da.size(); ++i) EXPECT_NEAR(da[i], acc[i] + dt[i], 1e-6) << i;
  Vec dp(size_t(3) * C);
  Vec pos = randn(size_t(3) * C, 4);
  auto ploss = [&] {
    cpu::embedding_forward(N, 3, C, nullptr, 3, pos.data(), y.data());
    return dot(y, r);
  };
  cpu::embedding_backward(N, 3, C, r.data(), nullptr, 3, dp.data());
  EXPECT_EQ(grad_mismatches(pos, dp, ploss, "position embedding dtable"), 0);
}

TEST(LayerNorm, NormalisesRows) {
  const int R = 3, C = 16;
  Vec x = randn(size_t(R) * C, 5, 3.f), g(C, 1.f), b(C, 0.f), y(x.size()), m(R), is(R);
  for (auto& v : x) v += 10.f;
  cpu::layernorm_forward(R, C, x.data(), g.data(), b.data(), 1e-5f, y.data(), m.data(), is.data());
  for (int r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += y[size_t(r) * C + c];
    mean /= C;
    for (int c = 0; c < C; ++c) var += (y[size_t(r) * C + c] - mean) * (y[size_t(r) * C + c] - mean);
    EXPECT_NEAR(mean, 0.0, 1e-5);
    EXPECT_NEAR(var / C, 1.0, 1e-3);
  }
}

TEST(LayerNorm, GradCheck) {
  const int R = 4, C = 6;
  const size_t n = size_t(R) * C;
  Vec x = randn(n, 6), g = randn(C, 7), b = randn(C, 8), r = randn(n, 9), y(n), m(R), is(R);
  auto loss = [&] {
    cpu::layernorm_forward(R, C, x.data(), g.data(), b.data(), 1e-5f, y.data(), m.data(), is.data());
    return dot(y, r);
  };
  loss();
  Vec dx(n, 7.f), dg(C, 7.f), db(C, 7.f);
  cpu::layernorm_backward(R, C, r.data(), x.data(), g.data(), m.data(), is.data(), dx.data(), dg.data(), db.data());
  EXPECT_EQ(grad_mismatches(x, dx, loss, "layernorm dx"), 0);
  EXPECT_EQ(grad_mismatches(g, dg, loss, "layernorm dgamma"), 0);
  EXPECT_EQ(grad_mismatches(b, db, loss, "layernorm dbeta"), 0);
}

TEST(Gelu, TanhFormValuesAndGradCheck) {
  Vec pts = {0.f, 1.f, -1.f}, out(3);
  cpu::gelu_forward(3, pts.data(), out.data());
  EXPECT_EQ(out[0], 0.f);
  EXPECT_NEAR(out[1], 0.841192, 1e-5);  // tanh approximation, not the erf form (0.841345)
  EXPECT_NEAR(out[2], -0.158808, 1e-5);
  const size_t n = 40;
  Vec x = randn(n, 10, 2.f), r = randn(n, 11), y(n);
  auto loss = [&] {
    cpu::gelu_forward(n, x.data(), y.data());
    return dot(y, r);
  };
  Vec dx(n);
  cpu::gelu_backward(n, r.data(), x.data(), dx.data());
  EXPECT_EQ(grad_mismatches(x, dx, loss, "gelu dx", 1e-3f), 0);
}

void bmm_case(bool trans_b) {
  const int B = 3, M = 4, N = 5, K = 6;
  const std::string what = std::string("bmm") + (trans_b ? " trans_b" : "");
  const float alpha = 0.5f;
  Vec a = randn(size_t(B) * M * K, 12), b = randn(size_t(B) * K * N, 13), r = randn(size_t(B) * M * N, 14);
  Vec c(r.size());
  cpu::bmm_forward(B, M, N, K, trans_b, alpha, a.data(), b.data(), c.data());
  for (int i = 0; i < B; ++i)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k) {
          const float bv = trans_b ? b[(size_t(i) * N + n) * K + k] : b[(size_t(i) * K + k) * N + n];
          acc += double(a[(size_t(i) * M + m) * K + k]) * bv;
        }
        ASSERT_NEAR(c[(size_t(i) * M + m) * N + n], alpha * acc, 1e-5 * (1 + std::abs(acc))) << what;
      }
  auto loss = [&] {
    cpu::bmm_forward(B, M, N, K, trans_b, alpha, a.data(), b.data(), c.data());
    return dot(c, r);
  };
  Vec da(a.size(), 7.f), db(b.size(), 7.f);
  cpu::bmm_backward(B, M, N, K, trans_b, alpha, r.data(), a.data(), b.data(), da.data(), db.data());
  EXPECT_EQ(grad_mismatches(a, da, loss, what + " da"), 0);
  EXPECT_EQ(grad_mismatches(b, db, loss, what + " db"), 0);
}

TEST(BatchedMatmul, ForwardAndGradCheck) { bmm_case(false); }
TEST(BatchedMatmul, TransposedBForwardAndGradCheck) { bmm_case(true); }

void softmax_case(bool causal) {
  const int rows = 2 * 5, C = 5;  // two [5, 5] score matrices
  const std::string what = causal ? "causal softmax" : "softmax";
  Vec x = randn(size_t(rows) * C, 15, 2.f), r = randn(x.size(), 16), y(x.size());
  auto loss = [&] {
    cpu::softmax_forward(rows, C, causal, x.data(), y.data());
    return dot(y, r);
  };
  loss();
  for (int i = 0; i < rows; ++i) {
    double s = 0;
    for (int j = 0; j < C; ++j) {
      s += y[size_t(i) * C + j];
      if (causal && j > i % C) EXPECT_EQ(y[size_t(i) * C + j], 0.f) << "row " << i << " sees column " << j;
    }
    EXPECT_NEAR(s, 1.0, 1e-6);
  }
  Vec dx(x.size(), 7.f);
  cpu::softmax_backward(rows, C, r.data(), y.data(), dx.data());
  EXPECT_EQ(grad_mismatches(x, dx, loss, what + " dx"), 0);
}

TEST(Softmax, GradCheck) { softmax_case(false); }
TEST(Softmax, CausalMaskAndGradCheck) { softmax_case(true); }

TEST(Softmax, StableForLargeLogits) {
  Vec x = {1000.f, 1001.f, 1002.f}, x0 = {0.f, 1.f, 2.f}, y(3), y0(3);
  cpu::softmax_forward(1, 3, false, x.data(), y.data());
  cpu::softmax_forward(1, 3, false, x0.data(), y0.data());
  for (int j = 0; j < 3; ++j) {
    EXPECT_TRUE(std::isfinite(y[j]));
    EXPECT_NEAR(y[j], y0[j], 1e-6);
  }
}

TEST(Transpose12, ForwardAndGradCheck) {
  const int A = 2, B = 3, C = 4, D = 5;
  const size_t n = size_t(A) * B * C * D;
  Vec x = randn(n, 17), r = randn(n, 18), y(n);
  cpu::transpose12(A, B, C, D, x.data(), y.data());
  for (int a = 0; a < A; ++a)
    for (int b = 0; b < B; ++b)
      for (int c = 0; c < C; ++c)
        for (int d = 0; d < D; ++d)
          ASSERT_EQ(y[((size_t(a) * C + c) * B + b) * D + d], x[((size_t(a) * B + b) * C + c) * D + d]);
  auto loss = [&] {
    cpu::transpose12(A, B, C, D, x.data(), y.data());
    return dot(y, r);
  };
  Vec dx(n);
  cpu::transpose12(A, C, B, D, r.data(), dx.data());  // the backward rule: transpose the gradient back
  EXPECT_EQ(grad_mismatches(x, dx, loss, "transpose dx"), 0);
}

TEST(Adam, StepsMatchTheFormula) {
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  for (bool decoupled : {false, true}) {
    Vec w = {1.f, -2.f, 0.5f}, m(3, 0.f), v(3, 0.f);
    std::vector<double> wr(w.begin(), w.end()), mr(3, 0.0), vr(3, 0.0);
    for (int step = 1; step <= 3; ++step) {
      Vec g = randn(3, 19 + step);
      cpu::adam(3, lr, b1, b2, eps, wd, decoupled, step, w.data(), g.data(), m.data(), v.data());
      for (int i = 0; i < 3; ++i) {
        double gi = g[i] + (decoupled ? 0.0 : wd * wr[i]);
        mr[i] = b1 * mr[i] + (1 - b1) * gi;
        vr[i] = b2 * vr[i] + (1 - b2) * gi * gi;
        if (decoupled) wr[i] -= lr * wd * wr[i];
        wr[i] -= lr * (mr[i] / (1 - std::pow(b1, step))) / (std::sqrt(vr[i] / (1 - std::pow(b2, step))) + eps);
        EXPECT_NEAR(w[i], wr[i], 1e-5) << (decoupled ? "adamw" : "adam") << " step " << step;
      }
    }
  }
  Vec w(1), g(1), m(1), v(1);
  EXPECT_THROW(cpu::adam(1, lr, b1, b2, eps, 0.f, false, 0, w.data(), g.data(), m.data(), v.data()),
               std::invalid_argument);
}

}  // namespace
