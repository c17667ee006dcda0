// The two conv algorithms (ConvAlgo::kFast, kLean) give the same bits, kLean with a smaller
// workspace; both are correct across column-block boundaries (P*Q above kConvColumnBlock).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "vtensor/backend/cpu/kernels.h"

#include "tests/support/numeric.h"

namespace cpu = vtensor::cpu;
using vtensor::ConvAlgo;
using Vec = std::vector<float>;

namespace {

using vtensor::test::dot;
using vtensor::test::randn;



struct Case {
  int N, C, H, W, K, R, stride, pad;
};
// P*Q: 195 (a block boundary inside an output row), 169 strided, 400 (4 blocks), 64 (one block), 1x1.
const Case kCases[] = {{2, 3, 15, 13, 4, 3, 1, 1}, {2, 2, 25, 25, 3, 3, 2, 1}, {1, 4, 20, 20, 5, 3, 1, 1},
                       {2, 3, 8, 8, 4, 3, 1, 1},   {2, 3, 16, 16, 4, 1, 1, 0}, {1, 2, 19, 17, 3, 5, 1, 2}};

std::string name(const Case& c) {
  return "N" + std::to_string(c.N) + " C" + std::to_string(c.C) + " " + std::to_string(c.H) + "x" + std::to_string(c.W) +
         " K" + std::to_string(c.K) + " R" + std::to_string(c.R) + " s" + std::to_string(c.stride) + " p" +
         std::to_string(c.pad);
}

struct Out {
  Vec y, dx, dw, db;
};

Out run(const cpu::Conv2dParams& p, ConvAlgo algo, const Vec& x, const Vec& w, const Vec& b, const Vec& dy) {
  Out o;
  Vec ws(cpu::conv2d_workspace_floats(p, algo) + 1);
  o.y.assign(dy.size(), 7.0f);
  o.dx.assign(x.size(), 7.0f);
  o.dw.assign(w.size(), 7.0f);
  o.db.assign(b.size(), 7.0f);
  cpu::conv2d_forward(p, x.data(), w.data(), b.data(), o.y.data(), ws.data(), algo);
  cpu::conv2d_backward_data(p, dy.data(), w.data(), o.dx.data(), ws.data(), algo);
  cpu::conv2d_backward_filter(p, dy.data(), x.data(), o.dw.data(), o.db.data(), ws.data(), algo);
  return o;
}

bool same_bits(const Vec& a, const Vec& b) { return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0; }

TEST(ConvAlgo, FastAndLeanGiveTheSameBits) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const auto p = cpu::make_conv2d_params(c.N, c.C, c.H, c.W, c.K, c.R, c.R, c.stride, c.pad);
    const Vec x = randn(size_t(p.N) * p.C * p.H * p.W, 1), w = randn(size_t(p.K) * p.C * p.R * p.S, 2);
    const Vec b = randn(size_t(p.K), 3), dy = randn(size_t(p.N) * p.K * p.P * p.Q, 4);
    const Out fast = run(p, ConvAlgo::kFast, x, w, b, dy), lean = run(p, ConvAlgo::kLean, x, w, b, dy);
    EXPECT_TRUE(same_bits(fast.y, lean.y));
    EXPECT_TRUE(same_bits(fast.dx, lean.dx));
    EXPECT_TRUE(same_bits(fast.dw, lean.dw));
    EXPECT_TRUE(same_bits(fast.db, lean.db));
  }
}

TEST(ConvAlgo, LeanWorkspaceIsOneColumnBlock) {
  const auto big = cpu::make_conv2d_params(2, 3, 15, 13, 4, 3, 3, 1, 1);  // P*Q = 195
  EXPECT_EQ(cpu::conv2d_workspace_floats(big, ConvAlgo::kFast), size_t(27 * 195));
  EXPECT_EQ(cpu::conv2d_workspace_floats(big, ConvAlgo::kLean), size_t(27 * cpu::kConvColumnBlock));
  const auto small = cpu::make_conv2d_params(2, 3, 8, 8, 4, 3, 3, 1, 1);  // P*Q = 64: one block
  EXPECT_EQ(cpu::conv2d_workspace_floats(small, ConvAlgo::kLean), cpu::conv2d_workspace_floats(small, ConvAlgo::kFast));
  const auto pointwise = cpu::make_conv2d_params(2, 3, 16, 16, 4, 1, 1, 1, 0);
  EXPECT_EQ(cpu::conv2d_workspace_floats(pointwise, ConvAlgo::kLean), 0u);
}

// Forward against direct summation; backward against forward by the adjoint identities
// <dy, conv(x, w)> = <bwd_data(dy, w), x> = <bwd_filter(dy, x), w> (no bias).
TEST(ConvAlgo, BlockedKernelsAreCorrect) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const auto p = cpu::make_conv2d_params(c.N, c.C, c.H, c.W, c.K, c.R, c.R, c.stride, c.pad);
    const Vec x = randn(size_t(p.N) * p.C * p.H * p.W, 5), w = randn(size_t(p.K) * p.C * p.R * p.S, 6);
    const Vec zero(size_t(p.K), 0.0f), dy = randn(size_t(p.N) * p.K * p.P * p.Q, 7);
    const Out o = run(p, ConvAlgo::kLean, x, w, zero, dy);
    for (int n = 0; n < p.N; ++n)
      for (int k = 0; k < p.K; ++k)
        for (int i = 0; i < p.P; ++i)
          for (int j = 0; j < p.Q; ++j) {
            double acc = 0;
            for (int ch = 0; ch < p.C; ++ch)
              for (int r = 0; r < p.R; ++r)
                for (int s = 0; s < p.S; ++s) {
                  const int h = i * p.stride - p.pad + r, ww = j * p.stride - p.pad + s;
                  if (h < 0 || h >= p.H || ww < 0 || ww >= p.W) continue;
                  acc += double(x[((size_t(n) * p.C + ch) * p.H + h) * p.W + ww]) *
                         double(w[((size_t(k) * p.C + ch) * p.R + r) * p.S + s]);
                }
            const float y = o.y[((size_t(n) * p.K + k) * p.P + i) * p.Q + j];
            ASSERT_NEAR(y, acc, 1e-4 * (1 + std::abs(acc)));
          }
    const double ref = dot(dy, o.y);
    EXPECT_NEAR(dot(o.dx, x), ref, 1e-4 * (1 + std::abs(ref)));
    EXPECT_NEAR(dot(o.dw, w), ref, 1e-4 * (1 + std::abs(ref)));
  }
}

}  // namespace
