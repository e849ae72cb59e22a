// gemm_packed (kernels/gemm.h) against float64 sums, f32 and bf16 panels, for the scalar
// reference and every path the CPU has (AVX-512 with and without its BF16 instructions), on shapes ragged in rows (micro-tiles of 12 on AVX-512, 6
// on AVX2, tasks of 96), outputs (panels of 32, AVX2's halves of 16) and depth (blocks of 256, odd
// k for the bf16 pairs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/gemm.h"
#include "isa_paths.h"
#include "random_values.h"

using namespace kvad;
using test::randn;
using namespace kvad::kernels;

using test::IsaPath;
using test::OnIsaPath;

TEST(Gemm, PackedProductsMatchTheSumInDouble) {
  if (best_isa() < Isa::Avx2) std::printf("  no AVX2 on this CPU: the scalar reference alone is checked\n");
  Rng rng(21);
  const int64_t shapes[][3] = {{1, 1, 1},   {12, 32, 32},  {13, 33, 31},  {2, 320, 1280}, {97, 300, 70},
                               {200, 7, 5}, {25, 513, 65}, {130, 36, 320}, {5, 2880, 40}};
  for (auto& s : shapes) {
    const int64_t n = s[0], k = s[1], m = s[2];
    std::vector<float> a = randn(rng, (size_t)(n * k)), w = randn(rng, (size_t)(m * k)), c((size_t)(n * m));
    for (bool bf16 : {false, true}) {
      const PackedWeight pw = bf16 ? PackedWeight::pack_bf16(w.data(), m, k) : PackedWeight::pack_f32(w.data(), m, k);
      std::vector<double> want((size_t)(n * m));  // once per shape: it is most of this test's time under ASan
      for (int64_t t = 0; t < n; t++)
        for (int64_t o = 0; o < m; o++)
          for (int64_t i = 0; i < k; i++) {
            const float x = a[(size_t)(t * k + i)], y = w[(size_t)(o * k + i)];
            want[(size_t)(t * m + o)] += bf16 ? (double)bf16_to_f32(f32_to_bf16(x)) * bf16_to_f32(f32_to_bf16(y)) : (double)x * y;
          }
      for (const IsaPath& path : test::isa_paths()) {
        OnIsaPath on(path);
        std::fill(c.begin(), c.end(), NAN);
        gemm_packed(a.data(), n, pw, c.data(), path.isa);
        for (int64_t t = 0; t < n; t++)
          for (int64_t o = 0; o < m; o++) {
            ASSERT_NEAR(c[(size_t)(t * m + o)], want[(size_t)(t * m + o)], 4e-6 * std::sqrt((double)k) * 4)
                << "n=" << n << " k=" << k << " m=" << m << (bf16 ? " bf16" : " f32") << " path=" << path.name
                << " at " << t << "," << o;
          }
      }
    }
  }
}

// Activations given in bf16 (an im2col written in bf16) give exactly the products of the f32 entry,
// which rounds them itself: the same values through the same kernel, for every ISA; odd k padded.
TEST(Gemm, Bf16ActivationsGivenEqualRoundedOnes) {
  Rng rng(8);
  for (int64_t k : {36, 37, 300}) {
    const int64_t n = 29, m = 70, kp = (k + 1) / 2 * 2;
    std::vector<float> a = randn(rng, (size_t)(n * k)), w = randn(rng, (size_t)(m * k)), c1((size_t)(n * m)), c2(c1.size());
    const PackedWeight pw = PackedWeight::pack_bf16(w.data(), m, k);
    for (const IsaPath& path : test::isa_paths()) {
      OnIsaPath on(path);
      std::vector<uint16_t> ab((size_t)(n * kp), 0xFFFF);
      for (int64_t r = 0; r < n; r++) {
        to_bf16(a.data() + r * k, k, ab.data() + r * kp, path.isa);
        if (kp > k) ab[(size_t)(r * kp + k)] = 0;
      }
      for (int64_t i = 0; i < n * k; i++) ASSERT_EQ(ab[(size_t)(i / k * kp + i % k)], f32_to_bf16(a[(size_t)i])) << path.name;
      gemm_packed(a.data(), n, pw, c1.data(), path.isa);
      gemm_packed_bf16(ab.data(), n, kp, pw, c2.data(), path.isa);
      EXPECT_EQ(c1, c2) << "k=" << k << " " << path.name;
    }
  }
}

// Every ISA's rounding to bf16 is core's f32_to_bf16, bit for bit, where it is hardest: ties to
// even both ways, values that carry into the exponent, infinities, NaNs (kept quiet), denormals,
// in the vector body and the scalar tail.
TEST(Gemm, RoundingToBf16EqualsTheScalarOnEdgeValues) {
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  std::vector<float> x = {1.0f, bits(0x3F808000), bits(0x3F818000), bits(0x3F80FFFF), bits(0x3F7FFFFF), bits(0x7F7FFFFF),
                          INFINITY, -INFINITY, NAN, bits(0x7F800001), bits(0xFF810000), bits(0x00000001), bits(0x80008000),
                          0.0f, -0.0f, -1.5f, bits(0x477F8000)};
  for (const IsaPath& path : test::isa_paths()) {
    OnIsaPath on(path);
    std::vector<uint16_t> out(x.size(), 0x1234);
    to_bf16(x.data(), (int64_t)x.size(), out.data(), path.isa);
    for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(out[i], f32_to_bf16(x[i])) << path.name << " value " << i;
  }
}

TEST(Gemm, ThreadedEqualsSingleThreaded) {
  Rng rng(4);
  const int64_t n = 301, k = 530, m = 300;
  std::vector<float> a = randn(rng, (size_t)(n * k)), w = randn(rng, (size_t)(m * k)), c1((size_t)(n * m)), c2(c1.size());
  const PackedWeight pw = PackedWeight::pack_f32(w.data(), m, k);
  const int before = pool().size();
  set_threads(1);
  gemm_packed(a.data(), n, pw, c1.data());
  set_threads(before < 2 ? 2 : before);
  gemm_packed(a.data(), n, pw, c2.data());
  set_threads(before);
  EXPECT_EQ(c1, c2);  // each output is summed by one thread in the same order either way
}
