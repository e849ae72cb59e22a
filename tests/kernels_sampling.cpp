// The sampler's SIMD passes (argmax, select_at_least, exp_weights) against the scalar reference
// and plain definitions, on ragged lengths around the vector widths, with ties, -inf (a grammar's
// mask) and NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu.h"
#include "core/rng.h"
#include "kernels/sampling.h"

using namespace kvad;

namespace {

const int64_t kLengths[] = {1, 7, 8, 15, 16, 17, 63, 64, 65, 1000, 1024, 1025, 5003};

std::vector<Isa> simd_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (isa <= best_isa()) out.push_back(isa);
  return out;
}

std::vector<float> logits(Rng& rng, int64_t n) {
  std::vector<float> x((size_t)n);
  for (float& v : x) v = (float)(rng.normal() * 3);
  return x;
}

}  // namespace

TEST(SamplingKernels, ArgmaxIsTheFirstLargest) {
  if (simd_isas().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: only the scalar path runs";
  Rng rng(5);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : kLengths)
    for (int trial = 0; trial < 6; trial++) {
      std::vector<float> x = logits(rng, n);
      if (trial == 1) x.assign((size_t)n, 2.5f);                              // all tied: index 0
      if (trial == 2) x[(size_t)rng.below((uint64_t)n)] = x[(size_t)(n - 1)] = 50;  // a tie for the top
      if (trial == 3) x.assign((size_t)n, -inf);                              // everything masked
      if (trial == 4)
        for (int64_t i = 0; i < n; i += 3) x[(size_t)i] = nan;                // NaNs never win
      if (trial == 5) x.assign((size_t)n, nan);
      int64_t want = 0;  // the definition: first index of the largest non-NaN value
      for (int64_t i = 0; i < n; i++)
        if (!std::isnan(x[(size_t)i]) && (std::isnan(x[(size_t)want]) || x[(size_t)i] > x[(size_t)want])) want = i;
      if (std::isnan(x[(size_t)want])) want = 0;
      ASSERT_EQ(kernels::argmax(x.data(), n, Isa::Scalar), want) << "scalar n " << n << " trial " << trial;
      for (Isa isa : simd_isas()) ASSERT_EQ(kernels::argmax(x.data(), n, isa), want) << isa_name(isa) << " n " << n << " trial " << trial;
    }
}

TEST(SamplingKernels, SelectAtLeastMatchesScalar) {
  if (simd_isas().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: only the scalar path runs";
  Rng rng(6);
  for (int64_t n : kLengths)
    for (float t : {-100.0f, -1.0f, 2.0f, 7.5f, 100.0f}) {
      std::vector<float> x = logits(rng, n);
      x[0] = t;  // equal to the threshold: selected
      if (n > 3) x[3] = -std::numeric_limits<float>::infinity(), x[2] = std::numeric_limits<float>::quiet_NaN();
      std::vector<int32_t> want;
      for (int64_t i = 0; i < n; i++)
        if (x[(size_t)i] >= t) want.push_back((int32_t)i);
      std::vector<int32_t> got((size_t)n + 1, -7);
      got.resize((size_t)kernels::select_at_least(x.data(), n, t, got.data(), Isa::Scalar));
      ASSERT_EQ(got, want) << "scalar n " << n << " t " << t;
      for (Isa isa : simd_isas()) {
        std::vector<int32_t> simd((size_t)n + 1, -7);
        const int64_t k = kernels::select_at_least(x.data(), n, t, simd.data(), isa);
        ASSERT_EQ(simd[(size_t)n], -7) << "wrote past n";
        simd.resize((size_t)k);
        ASSERT_EQ(simd, want) << isa_name(isa) << " n " << n << " t " << t;
      }
    }
}

TEST(SamplingKernels, ExpWeightsMatchDouble) {
  if (simd_isas().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: only the scalar path runs";
  Rng rng(7);
  for (int64_t n : kLengths) {
    std::vector<float> x = logits(rng, n);
    if (n > 2) x[0] = -std::numeric_limits<float>::infinity(), x[1] = -400;  // masked; exp underflows: both 0
    float mx = -INFINITY;
    for (float v : x) mx = std::max(mx, v);
    for (float scale : {1.0f, 1.25f, 0.5f}) {
      const float shift = mx * scale;
      double want_total = 0;
      std::vector<double> want((size_t)n);
      for (int64_t i = 0; i < n; i++) {
        const double a = (double)x[(size_t)i] * scale - shift;
        want[(size_t)i] = a >= -87.3 ? std::exp(a) : 0;
        want_total += want[(size_t)i];
      }
      for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (isa > best_isa()) continue;
        std::vector<float> w((size_t)n, -1), runs((size_t)((n + kernels::kWeightRun - 1) / kernels::kWeightRun), -1);
        const double total = kernels::exp_weights(x.data(), n, scale, shift, w.data(), runs.data(), isa);
        for (size_t r = 0; r < runs.size(); r++) {
          double want_run = 0;
          for (int64_t i = (int64_t)r * kernels::kWeightRun; i < std::min(n, (int64_t)(r + 1) * kernels::kWeightRun); i++)
            want_run += want[(size_t)i];
          ASSERT_NEAR(runs[r], want_run, 1e-5 * want_run) << isa_name(isa) << " n " << n << " run " << r;
        }
        // The argument x * scale - shift is rounded to f32 (an ulp of the larger of its terms is an
        // absolute error in a, so a relative one in exp(a)), then exp adds about one ulp.
        for (int64_t i = 0; i < n; i++) {
          const double a = std::fabs((double)x[(size_t)i] * scale) + std::fabs(shift);
          ASSERT_NEAR(w[(size_t)i], want[(size_t)i], want[(size_t)i] > 0 ? 2e-7 * (2 + a) * want[(size_t)i] : 0.0)
              << isa_name(isa) << " n " << n << " i " << i;
        }
        if (n > 2) {
          ASSERT_EQ(w[0], 0.0f) << isa_name(isa) << ": a masked token weighs nothing";
        }
        ASSERT_NEAR(total, want_total, 1e-5 * want_total) << isa_name(isa) << " n " << n;  // as the weights (f32 arguments)
      }
    }
  }
}
