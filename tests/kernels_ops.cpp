// The SIMD activations (vectorised exp) against the scalar reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/ops.h"

using namespace kvad;

TEST(Ops, SimdActivationsMatchScalar) {
  Rng rng(11);
  std::vector<float> g(1003), u(1003);
  for (size_t i = 0; i < g.size(); i++) g[i] = (float)(rng.normal() * 6), u[i] = (float)rng.normal();
  g[0] = -100, g[1] = 100, g[2] = 0;  // saturation and zero
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (isa > best_isa()) continue;
    std::vector<float> a = g, b = g;
    kernels::silu_mul(a.data(), u.data(), (int64_t)a.size(), Isa::Scalar);
    kernels::silu_mul(b.data(), u.data(), (int64_t)b.size(), isa);
    for (size_t i = 0; i < a.size(); i++) ASSERT_NEAR(b[i], a[i], 2e-6 * (1 + std::fabs(a[i]))) << isa_name(isa) << i;
    a = g, b = g;
    kernels::gelu_tanh(a.data(), (int64_t)a.size(), Isa::Scalar);
    kernels::gelu_tanh(b.data(), (int64_t)b.size(), isa);
    for (size_t i = 0; i < a.size(); i++) ASSERT_NEAR(b[i], a[i], 2e-6 * (1 + std::fabs(a[i]))) << isa_name(isa) << i;
  }
}

// rmsnorm_rows on every ISA against a float64 RMSNorm: row lengths that end in every tail of a
// vector, many rows (the pool's path) and few, in place and strided, values large enough that a
// float sum of squares would lose bits.
TEST(Ops, RmsnormRowsMatchDouble) {
  Rng rng(12);
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{3, 7}, {300, 128}, {2, 1000}, {40, 4864}}) {
    const int64_t stride = n + 5;
    std::vector<float> x((size_t)(rows * stride)), w((size_t)n);
    for (float& v : x) v = (float)(rng.normal() * 300);
    for (float& v : w) v = (float)(1 + rng.normal() * 0.1);
    std::vector<double> want((size_t)(rows * n));
    for (int64_t r = 0; r < rows; r++) {
      double ss = 0;
      for (int64_t i = 0; i < n; i++) ss += (double)x[(size_t)(r * stride + i)] * x[(size_t)(r * stride + i)];
      const double scale = 1.0 / std::sqrt(ss / (double)n + 1e-6);
      for (int64_t i = 0; i < n; i++) want[(size_t)(r * n + i)] = x[(size_t)(r * stride + i)] * scale * w[(size_t)i];
    }
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (isa > best_isa()) continue;
      std::vector<float> out((size_t)(rows * n), NAN), inplace = x;
      kernels::rmsnorm_rows(x.data(), stride, w.data(), 1e-6f, rows, n, out.data(), n, isa);
      kernels::rmsnorm_rows(inplace.data(), stride, w.data(), 1e-6f, rows, n, inplace.data(), stride, isa);
      for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
          const double ref = want[(size_t)(r * n + i)];
          ASSERT_NEAR(out[(size_t)(r * n + i)], ref, 3e-7 * (1 + std::fabs(ref))) << isa_name(isa) << " row " << r << " of " << n;
          ASSERT_EQ(inplace[(size_t)(r * stride + i)], out[(size_t)(r * n + i)]) << isa_name(isa);
        }
    }
  }
}

// gelu_erf_mul (GEGLU) against the exact erf GELU in double, scalar and SIMD, both signs and the
// saturated tails.
TEST(Ops, GeluErfMulMatchesDouble) {
  Rng rng(17);
  std::vector<float> v(1003), g(1003), out(1003);
  for (size_t i = 0; i < v.size(); i++) v[i] = (float)rng.normal(), g[i] = (float)(rng.normal() * 4);
  g[0] = -30, g[1] = 30, g[2] = 0, g[3] = -1e-3f;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (isa > best_isa()) continue;
    kernels::gelu_erf_mul(v.data(), g.data(), out.data(), (int64_t)v.size(), isa);
    for (size_t i = 0; i < v.size(); i++) {
      const double want = v[i] * 0.5 * g[i] * (1 + std::erf(g[i] / std::sqrt(2.0)));
      ASSERT_NEAR(out[i], want, 4e-7 * std::fabs(v[i]) * (1 + std::fabs(g[i]))) << isa_name(isa) << " " << g[i];
    }
  }
}

// channel_moments / channel_affine (GroupNorm over channels-last maps): every ISA against double
// sums and the plain formula, channels ragged around the 16 lanes, rows past a 64-row run.
TEST(Ops, ChannelMomentsAndAffineMatchDouble) {
  Rng rng(19);
  for (int64_t c : {1, 16, 37, 130}) {
    const int64_t rows = 150;
    std::vector<float> x((size_t)(rows * c)), center((size_t)c), scale((size_t)c), shift((size_t)c);
    for (float& v : x) v = (float)(rng.normal() * 3 + 5);
    for (int64_t ch = 0; ch < c; ch++)
      center[(size_t)ch] = (float)rng.normal() + 5, scale[(size_t)ch] = (float)rng.normal(), shift[(size_t)ch] = (float)rng.normal();
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (isa > best_isa()) continue;
      std::vector<double> s1((size_t)c, 1.0), s2((size_t)c, 2.0);  // added to, not overwritten
      kernels::channel_moments(x.data(), rows, c, center.data(), s1.data(), s2.data(), isa);
      for (int64_t ch = 0; ch < c; ch++) {
        double w1 = 1, w2 = 2;
        for (int64_t r = 0; r < rows; r++) {
          const double d = (double)x[(size_t)(r * c + ch)] - center[(size_t)ch];
          w1 += d, w2 += d * d;
        }
        ASSERT_NEAR(s1[(size_t)ch], w1, 1e-4 * rows) << "c=" << c << " " << isa_name(isa);
        ASSERT_NEAR(s2[(size_t)ch], w2, 1e-5 * w2) << "c=" << c << " " << isa_name(isa);
      }
      for (bool silu : {false, true}) {
        std::vector<float> y = x;
        kernels::channel_affine(y.data(), rows, c, scale.data(), shift.data(), silu, isa);
        for (int64_t i = 0; i < rows * c; i++) {
          const double v = (double)x[(size_t)i] * scale[(size_t)(i % c)] + shift[(size_t)(i % c)];
          const double want = silu ? v / (1 + std::exp(-v)) : v;
          ASSERT_NEAR(y[(size_t)i], want, 2e-6 * (1 + std::fabs(want))) << "c=" << c << " " << isa_name(isa);
        }
      }
    }
  }
}

// softmax_scaled (attention rows over an image's thousands of keys) against softmax in double, for
// the scalar reference and every instruction set the CPU has; lengths around the lanes.
TEST(Ops, SoftmaxScaledMatchesDouble) {
  Rng rng(13);
  for (int64_t n : {1, 5, 16, 17, 100, 4099}) {
    std::vector<float> x((size_t)n);
    for (float& v : x) v = (float)(rng.normal() * 20);
    const float scale = 0.158113883f;  // 1/sqrt(40), SD's first-level head
    double mx = -INFINITY, sum = 0;
    for (float v : x) mx = std::max(mx, (double)v * scale);
    for (float v : x) sum += std::exp((double)v * scale - mx);
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (isa > best_isa()) continue;
      std::vector<float> y = x;
      kernels::softmax_scaled(y.data(), n, scale, isa);
      for (int64_t i = 0; i < n; i++) {
        const double want = std::exp((double)x[(size_t)i] * scale - mx) / sum;
        ASSERT_NEAR(y[(size_t)i], want, 5e-6 * want + 1e-9) << "n=" << n << " isa=" << isa_name(isa) << " i=" << i;
      }
    }
  }
}

// softmax_numerators_bf16 (a bf16 attention's one pass over a row of scores) against exp in
// double: each numerator the bf16 of the exact value or its neighbour (the SIMD exp is a
// polynomial), the padding zero, the sum that of the unrounded values; lengths around the lanes
// and the 32-wide main loop, padded to an even length as a bf16 product wants.
TEST(Ops, SoftmaxNumeratorsBf16MatchDouble) {
  Rng rng(14);
  for (int64_t n : {1, 5, 16, 17, 31, 32, 33, 77, 4096, 4099}) {
    std::vector<float> x((size_t)n);
    for (float& v : x) v = (float)(rng.normal() * 20);
    const float scale = 0.158113883f;
    const int64_t n_out = (n + 1) / 2 * 2 + 2;
    double mx = -INFINITY, sum = 0;
    for (float v : x) mx = std::max(mx, (double)v);
    for (float v : x) sum += std::exp(((double)v - mx) * scale);
    for (Isa isa : {Isa::Scalar, Isa::Avx512}) {
      if (isa > best_isa()) continue;
      std::vector<uint16_t> out((size_t)n_out, 0xFFFF);
      const float got_sum = kernels::softmax_numerators_bf16(x.data(), n, scale, out.data(), n_out, isa);
      EXPECT_NEAR(got_sum, sum, 2e-5 * sum) << "n=" << n << " isa=" << isa_name(isa);
      for (int64_t i = 0; i < n_out; i++) {
        const double want = i < n ? std::exp(((double)x[(size_t)i] - mx) * scale) : 0.0;
        const uint16_t exact = f32_to_bf16((float)want);
        ASSERT_LE(std::abs((int)out[(size_t)i] - (int)exact), 1)
            << "n=" << n << " isa=" << isa_name(isa) << " i=" << i << ": " << bf16_to_f32(out[(size_t)i]) << " vs " << want;
      }
    }
  }
}

// lowrank_add (the LoRA side path's t B^T) against the sum in double, for each instruction set,
// over widths around the vector lanes and the ranks adapters use.
TEST(Ops, LowRankAddMatchesTheSumInDouble) {
  Rng rng(3);
  for (int64_t n : {1, 7, 8, 9, 16, 17, 4864 + 3})
    for (int64_t r : {1, 4, 16}) {
      std::vector<float> rows((size_t)(r * n)), coef((size_t)r), y((size_t)n);
      for (float& v : rows) v = (float)rng.normal();
      for (float& v : coef) v = (float)rng.normal();
      for (float& v : y) v = (float)rng.normal();
      // The bf16 form reads the rows rounded to bf16: the same sum over the rounded values.
      std::vector<uint16_t> rows16(rows.size());
      std::vector<float> rounded(rows.size());
      for (size_t i = 0; i < rows.size(); i++) rows16[i] = f32_to_bf16(rows[i]), rounded[i] = bf16_to_f32(rows16[i]);
      // The whole row, and a slice of its columns (what one thread's share of a product updates).
      std::vector<std::pair<int64_t, int64_t>> slices = {{0, n}};
      if (n > 9) slices.push_back({3, n - 5});
      for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (isa > best_isa()) continue;
        for (bool bf16 : {false, true})
          for (auto [c0, len] : slices) {
            std::vector<float> got = y;
            const std::vector<float>& used = bf16 ? rounded : rows;
            if (bf16) kernels::lowrank_add_bf16(got.data() + c0, coef.data(), rows16.data() + c0, r, len, n, isa);
            else kernels::lowrank_add(got.data() + c0, coef.data(), rows.data() + c0, r, len, n, isa);
            for (int64_t i = 0; i < n; i++) {
              double want = y[(size_t)i];
              if (i >= c0 && i < c0 + len)
                for (int64_t j = 0; j < r; j++) want += (double)coef[(size_t)j] * used[(size_t)(j * n + i)];
              ASSERT_NEAR(got[(size_t)i], want, 1e-5 * (1 + std::fabs(want)))
                  << isa_name(isa) << (bf16 ? " bf16" : "") << " n " << n << " r " << r << " slice " << c0;
            }
          }
      }
    }
}
