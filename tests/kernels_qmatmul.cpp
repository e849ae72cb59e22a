// The integer kernels: the scalar reference against a float64 product of the dequantised
// operands, and every SIMD kernel against the scalar one, on ragged shapes (rows not a multiple
// of 16, columns not a multiple of 32, 1..9 tokens).
#include <gtest/gtest.h>

#include <cmath>

#include "core/huge_pages.h"
#include "core/rng.h"
#include "kernels/matmul.h"
#include "kernels/qmatmul.h"
#include "quant/activations.h"
#include "quant/packed.h"
#include "random_values.h"

using namespace kvad;
using test::randn;
using namespace kvad::kernels;

namespace {

// Dequantised activations: what the integer kernel multiplies, exactly.
std::vector<double> dequant_acts(const QuantActs& a) {
  std::vector<double> out((size_t)(a.n * a.k));
  for (int64_t t = 0; t < a.n; t++)
    for (int64_t i = 0; i < a.k; i++)
      out[(size_t)(t * a.k + i)] = (double)a.codes(t)[i] * a.scale[(size_t)(t * a.blocks + i / 32)];
  return out;
}

}  // namespace

TEST(QuantMatrix, RoundTripErrorIsWithinHalfAStep) {
  Rng rng(1);
  int64_t rows = 37, cols = 100;
  std::vector<float> w = randn(rng, (size_t)(rows * cols));
  for (QKind k : {QKind::Q8, QKind::Q4}) {
    QuantMatrix q = QuantMatrix::quantize(k, w.data(), rows, cols);
    std::vector<float> row((size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
      q.row(r, row.data());
      for (int64_t b = 0; b * 32 < cols; b++) {
        float lo = 1e30f, hi = -1e30f, amax = 0;
        for (int64_t i = b * 32; i < std::min<int64_t>(cols, b * 32 + 32); i++) {
          lo = std::min(lo, w[(size_t)(r * cols + i)]);
          hi = std::max(hi, w[(size_t)(r * cols + i)]);
          amax = std::max(amax, std::fabs(w[(size_t)(r * cols + i)]));
        }
        float step = k == QKind::Q8 ? amax / 127 : (hi - lo) / 15;
        for (int64_t i = b * 32; i < std::min<int64_t>(cols, b * 32 + 32); i++)
          ASSERT_LE(std::fabs(row[(size_t)i] - w[(size_t)(r * cols + i)]), 0.5 * step * 1.01 + 1e-3 * step)
              << qkind_name(k) << " r=" << r << " i=" << i;
      }
    }
  }
  EXPECT_EQ(QuantMatrix::quantize(QKind::Q8, w.data(), rows, cols).bytes() * 8.0 / (48 * 128), 8.5);
  EXPECT_EQ(QuantMatrix::quantize(QKind::Q4, w.data(), rows, cols).bytes() * 8.0 / (48 * 128), 5.0);
}

TEST(QuantMatrix, AMatrixOfAHugePageOrMoreHoldsTheSameRows) {
  // From 2 MB a matrix lives in huge pages (core/huge_pages.h), below in the heap: the first rows
  // of a big matrix dequantise to exactly what the same rows quantised alone do.
  Rng rng(5);
  const int64_t rows = 4100, cols = 1000;  // q8: 257 groups x 32 blocks x 544 bytes, 4.5 MB
  std::vector<float> w = randn(rng, (size_t)(rows * cols));
  for (QKind k : {QKind::Q8, QKind::Q4}) {
    QuantMatrix big = QuantMatrix::quantize(k, w.data(), rows, cols);
    QuantMatrix small = QuantMatrix::quantize(k, w.data(), 40, cols);
    ASSERT_GE(big.bytes(), HugePageBuffer::kHugePage) << qkind_name(k);
    ASSERT_LT(small.bytes(), HugePageBuffer::kHugePage) << qkind_name(k);
    EXPECT_EQ((uintptr_t)big.data() % HugePageBuffer::kHugePage, 0u) << qkind_name(k) << ": not in the huge-page buffer";
    std::vector<float> a((size_t)cols), b((size_t)cols);
    for (int64_t r : {int64_t{0}, int64_t{17}, int64_t{39}}) {
      big.row(r, a.data());
      small.row(r, b.data());
      EXPECT_EQ(a, b) << qkind_name(k) << " row " << r;
    }
    big.row(rows - 1, a.data());  // the last group's padding rows were zeroed: the real row is intact
    for (int64_t i = 0; i < cols; i++) ASSERT_NEAR(a[(size_t)i], w[(size_t)((rows - 1) * cols + i)], 0.3) << i;
  }
}

TEST(QMatmul, ScalarEqualsFloat64ProductOfDequantisedOperands) {
  Rng rng(2);
  int64_t n = 3, k = 77, m = 21;
  std::vector<float> w = randn(rng, (size_t)(m * k)), x = randn(rng, (size_t)(n * k));
  for (QKind kind : {QKind::Q8, QKind::Q4}) {
    QuantMatrix q = QuantMatrix::quantize(kind, w.data(), m, k);
    QuantActs a;
    quantize_acts(x.data(), n, k, a);
    std::vector<double> xd = dequant_acts(a);
    std::vector<float> y((size_t)(n * m)), row((size_t)k);
    qmatmul(a, q, y.data(), Isa::Scalar);
    for (int64_t r = 0; r < m; r++) {
      q.row(r, row.data());
      for (int64_t t = 0; t < n; t++) {
        double s = 0;
        for (int64_t i = 0; i < k; i++) s += (double)row[(size_t)i] * xd[(size_t)(t * k + i)];
        ASSERT_NEAR(y[(size_t)(t * m + r)], s, 1e-4 * (1 + std::fabs(s))) << qkind_name(kind);
      }
    }
  }
}

TEST(QMatmul, SimdMatchesScalarOnRaggedShapes) {
  std::vector<Isa> isas;
  if (best_isa() >= Isa::Avx2) isas.push_back(Isa::Avx2);
  if (best_isa() >= Isa::Avx512) isas.push_back(Isa::Avx512);
  if (isas.empty()) GTEST_SKIP();
  Rng rng(3);
  const int64_t shapes[][3] = {{1, 32, 16},  {1, 33, 17},   {2, 64, 5},    {3, 96, 40},   {4, 128, 64},
                               {5, 100, 33}, {7, 896, 130}, {9, 200, 100}, {1, 4864, 80}, {8, 31, 1}};
  for (auto& s : shapes) {
    int64_t n = s[0], k = s[1], m = s[2];
    std::vector<float> w = randn(rng, (size_t)(m * k)), x = randn(rng, (size_t)(n * k), 3);
    QuantActs a;
    quantize_acts(x.data(), n, k, a);
    for (QKind kind : {QKind::Q8, QKind::Q4}) {
      QuantMatrix q = QuantMatrix::quantize(kind, w.data(), m, k);
      std::vector<float> ref((size_t)(n * m)), got((size_t)(n * m));
      qmatmul(a, q, ref.data(), Isa::Scalar);
      for (Isa isa : isas) {
        std::fill(got.begin(), got.end(), NAN);
        qmatmul(a, q, got.data(), isa);
        for (size_t i = 0; i < got.size(); i++)
          ASSERT_NEAR(got[i], ref[i], 1e-4 * (1 + std::fabs(ref[i])))
              << qkind_name(kind) << " " << isa_name(isa) << " n=" << n << " k=" << k << " m=" << m << " i=" << i;
      }
    }
  }
}

// Kernels that must agree bit for bit: `got` against `want` for q8 and q4 (a null `got` is not
// compared), on ragged shapes (decode's 1-3 tokens and every prefill tile width, one and two
// groups) with random operands, and with the largest codes (one 0 a block, for q4's range) against
// activations of +-127: each lane of an int16 sum at 30,480, the edge of its bound.
static void expect_same_bits(kernels::QGroupsFn want_q8, kernels::QGroupsFn want_q4, kernels::QGroupsFn got_q8,
                      kernels::QGroupsFn got_q4, uint64_t seed) {
  Rng rng(seed);
  const int64_t shapes[][3] = {{1, 32, 16}, {2, 64, 5}, {3, 896, 130}, {4, 96, 40}, {7, 100, 33}, {16, 4864, 48}, {33, 160, 50}};
  for (auto& s : shapes) {
    for (bool edge : {false, true}) {
      const int64_t n = s[0], k = s[1], m = s[2];
      std::vector<float> w = randn(rng, (size_t)(m * k)), x = randn(rng, (size_t)(n * k), 3);
      if (edge) {
        for (int64_t i = 0; i < m * k; i++) w[(size_t)i] = i % 32 == 5 ? 0.0f : 1.0f;
        for (int64_t i = 0; i < n * k; i++) x[(size_t)i] = (i / k) % 2 ? -2.5f : 2.5f;
      }
      QuantActs a;
      quantize_acts(x.data(), n, k, a, Isa::Avx512);
      for (QKind kind : {QKind::Q8, QKind::Q4}) {
        kernels::QGroupsFn want = kind == QKind::Q8 ? want_q8 : want_q4, got = kind == QKind::Q8 ? got_q8 : got_q4;
        if (!got) continue;
        const QuantMatrix q = QuantMatrix::quantize(kind, w.data(), m, k);
        std::vector<float> expected((size_t)(n * m), NAN), actual((size_t)(n * m), NAN);
        want(a, q, 0, q.groups(), expected.data());
        got(a, q, 0, q.groups(), actual.data());
        EXPECT_EQ(actual, expected) << qkind_name(kind) << " n=" << n << " k=" << k << " m=" << m << (edge ? " (edge codes)" : "");
      }
    }
  }
}

// The AVX-VNNI tile (Alder Lake and later: AVX2 with vpdpbusd) does each row's float operations
// in the AVX-512 tile's order on the same integer sums, so where the CPU has both they agree bit
// for bit, decode (1-3 tokens, prefetching) and prefill tiles (2 tokens a tile) alike.
TEST(QMatmul, AvxVnniEqualsAvx512BitForBit) {
  if (!cpu_features().avx_vnni || best_isa() < Isa::Avx512 || !cpu_features().avx512vnni)
    GTEST_SKIP() << "SKIPPED: needs AVX-VNNI and AVX-512 VNNI to compare (" << cpu_summary() << ")";
  expect_same_bits(kernels::qgroups_q8_avx512, kernels::qgroups_q4_avx512, kernels::qgroups_q8_avxvnni, kernels::qgroups_q4_avxvnni, 31);
}

// The plain AVX2 q4 tile sums a block's vpmaddubsw pairs in int16 (each lane's eight at most
// 8 x 2 x 15 x 128 < 32,768) before one vpmaddwd: exact, so its rows are the AVX-512 tile's bits.
// A block summed further in int16, or a saturation, would show at the edge codes.
TEST(QMatmul, Avx2Q4SumsInInt16EqualAvx512BitForBit) {
  if (best_isa() < Isa::Avx512 || !cpu_features().avx512vnni)
    GTEST_SKIP() << "SKIPPED: needs AVX-512 VNNI to compare (" << cpu_summary() << ")";
  expect_same_bits(nullptr, kernels::qgroups_q4_avx512, nullptr, kernels::qgroups_q4_avx2, 37);
}

// Without VNNI (Skylake-SP) the AVX-512 tile sums vpmaddubsw pairs in int16, q8's codes as two
// nibbles: exact, so every row is the VNNI tile's, bit for bit; and the dispatcher takes it when
// VNNI is off.
TEST(QMatmul, Avx512WithoutVnniEqualsAvx512BitForBit) {
  if (best_isa() < Isa::Avx512 || !cpu_features().avx512vnni)
    GTEST_SKIP() << "SKIPPED: needs AVX-512 with VNNI to compare (" << cpu_summary() << ")";
  expect_same_bits(kernels::qgroups_q8_avx512, kernels::qgroups_q4_avx512, kernels::qgroups_q8_avx512bw, kernels::qgroups_q4_avx512bw, 41);
  set_avx512_vnni_allowed(false);
  const bool picked = kernels::qgroups_kernel(QKind::Q8, Isa::Avx512) == kernels::qgroups_q8_avx512bw &&
                      kernels::qgroups_kernel(QKind::Q4, Isa::Avx512) == kernels::qgroups_q4_avx512bw;
  set_avx512_vnni_allowed(true);
  EXPECT_TRUE(picked);
  EXPECT_EQ(kernels::qgroups_kernel(QKind::Q8, Isa::Avx512),
            avx512_vnni_enabled() ? kernels::qgroups_q8_avx512 : kernels::qgroups_q8_avx512bw);  // KVAD_ISA=avx512-novnni
}

TEST(QMatmul, MultiEqualsSeparateCalls) {
  Rng rng(9);
  int64_t n = 3, k = 96;
  const int64_t ms[3] = {48, 16, 20};  // unequal, one not a multiple of 16
  std::vector<std::vector<float>> w;
  std::vector<QuantMatrix> q;
  for (int64_t m : ms) {
    w.push_back(randn(rng, (size_t)(m * k)));
    q.push_back(QuantMatrix::quantize(QKind::Q8, w.back().data(), m, k));
  }
  std::vector<float> x = randn(rng, (size_t)(n * k));
  QuantActs a;
  quantize_acts(x.data(), n, k, a);
  std::vector<std::vector<float>> sep(3), multi(3);
  const QuantMatrix* qs[3];
  float* ys[3];
  for (int i = 0; i < 3; i++) {
    sep[(size_t)i].resize((size_t)(n * ms[i]));
    multi[(size_t)i].resize((size_t)(n * ms[i]));
    qmatmul(a, q[(size_t)i], sep[(size_t)i].data());
    qs[i] = &q[(size_t)i];
    ys[i] = multi[(size_t)i].data();
  }
  qmatmul_multi(a, qs, ys, 3);
  for (int i = 0; i < 3; i++) EXPECT_EQ(sep[(size_t)i], multi[(size_t)i]);
  // The dense twin.
  const void* wp[3];
  WType wt[3] = {WType::F32, WType::F32, WType::F32};
  for (int i = 0; i < 3; i++) {
    wp[i] = w[(size_t)i].data();
    matmul(x.data(), n, k, wp[i], WType::F32, ms[i], sep[(size_t)i].data());
  }
  matmul_multi(x.data(), n, k, wp, wt, ms, ys, 3);
  for (int i = 0; i < 3; i++) EXPECT_EQ(sep[(size_t)i], multi[(size_t)i]);
}

TEST(QuantActs, SimdCodesAreBitIdenticalToScalar) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar quantiser runs here";
  Rng rng(13);
  for (int64_t k : {32, 100, 896}) {
    std::vector<float> x = randn(rng, (size_t)(3 * k), 4);
    x[5] = 0;
    // A block whose largest value is 127 (scale 1): its halves are exact ties, to even.
    for (int i = 0; i < 31; i++) x[(size_t)(k + i)] = (float)(i - 16) * 0.5f;
    x[(size_t)(k + 31)] = 127.0f;
    for (int i = 0; i < 32 && 2 * k + 64 <= 3 * k; i++) x[(size_t)(2 * k + 32 + i)] = 0;  // a block of zeros
    QuantActs a;
    quantize_acts(x.data(), 3, k, a, Isa::Scalar);
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
      if (isa > best_isa()) continue;
      QuantActs b;
      quantize_acts(x.data(), 3, k, b, isa);
      EXPECT_EQ(a.q, b.q) << isa_name(isa);
      EXPECT_EQ(a.scale, b.scale) << isa_name(isa);
      EXPECT_EQ(a.sum, b.sum) << isa_name(isa);
    }
  }
}
