// The AMX prefill kernels (kernels/qmatmul_amx.cpp) against the AVX-512 VNNI ones, which do the
// same arithmetic after exact int32 block sums, so the two must agree bit for bit: over the
// software model of the tiles on any AVX-512 CPU, and over the real tiles where the CPU has AMX
// (elsewhere that test says it was skipped, and why).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/amx_tiles.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/qmatmul.h"
#include "quant/activations.h"
#include "quant/packed.h"
#include "amx_available.h"
#include "random_values.h"

using namespace kvad;
using namespace kvad::kernels;
using test::randn;

namespace {

using AmxKernel = void (*)(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);

// Tokens from one tile to several token blocks with a tail (a block is 256 KB of activations:
// 288 tokens at 896 inputs); rows with part groups; inputs with odd and part blocks; and a thread's
// share that starts past group 0.
void expect_equal_to_avx512(AmxKernel q8, AmxKernel q4, const char* label) {
  Rng rng(18);
  const int64_t shapes[][3] = {{16, 32, 16},   {17, 64, 37},  {21, 7 * 32, 40}, {31, 200, 100},
                               {48, 896, 33},  {600, 896, 24}, {40, 4864, 20},  {100, 33, 1}};
  for (auto& s : shapes) {
    const int64_t n = s[0], k = s[1], m = s[2];
    std::vector<float> w = randn(rng, (size_t)(m * k)), x = randn(rng, (size_t)(n * k), 3);
    QuantActs a;
    quantize_acts(x.data(), n, k, a);
    for (QKind kind : {QKind::Q8, QKind::Q4}) {
      QuantMatrix q = QuantMatrix::quantize(kind, w.data(), m, k);
      AmxKernel tiles = kind == QKind::Q8 ? q8 : q4, vector = kind == QKind::Q8 ? qgroups_q8_avx512 : qgroups_q4_avx512;
      for (int64_t g0 : {int64_t{0}, q.groups() / 2}) {
        std::vector<float> want((size_t)(n * m), NAN), got((size_t)(n * m), NAN);
        vector(a, q, g0, q.groups(), want.data());
        tiles(a, q, g0, q.groups(), got.data());
        for (size_t i = 0; i < got.size(); i++) {
          if (std::isnan(want[i])) {  // a row outside this share: the kernel must not write it
            ASSERT_TRUE(std::isnan(got[i])) << label << " wrote outside its groups, i=" << i;
            continue;
          }
          ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
              << label << " " << qkind_name(kind) << " n=" << n << " k=" << k << " m=" << m << " g0=" << g0
              << " token " << (int64_t)i / m << " row " << (int64_t)i % m << ": " << got[i] << " vs " << want[i];
        }
      }
    }
  }
}

}  // namespace

TEST(AmxTiles, EmulatedKernelsEqualAvx512BitForBit) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512 on this CPU (" << cpu_summary() << "): the model runs on it";
  expect_equal_to_avx512(qgroups_q8_amx_emulated, qgroups_q4_amx_emulated, "emulated tiles");
}

TEST(AmxTiles, HardwareKernelsEqualAvx512BitForBit) {
  if (std::string why = test::amx_unavailable(cpu_features().amx_int8, "int8"); !why.empty()) GTEST_SKIP() << why;
  expect_equal_to_avx512(qgroups_q8_amx, qgroups_q4_amx, "AMX tiles");
  EXPECT_TRUE(amx_qgroups_usable()) << "the start-up check refused the tiles the test above accepted";
  EXPECT_EQ(qgroups_kernel(QKind::Q4, Isa::Avx512, kAmxTokens), qgroups_q4_amx) << "prefill does not take the tiles";
  EXPECT_EQ(qgroups_kernel(QKind::Q4, Isa::Avx512, 1), qgroups_q4_avx512) << "decode must stay on the vector kernel";
  set_amx_allowed(false);  // what bench/micro.cpp's comparisons do
  EXPECT_EQ(qgroups_kernel(QKind::Q4, Isa::Avx512, kAmxTokens), qgroups_q4_avx512) << "the tiles were not turned off";
  set_amx_allowed(true);
}

TEST(AmxTiles, ModelMultipliesSignedByUnsignedBytes) {
  // TDPBSUD by its definition: C[m][n] += sum_k int8(A[m][k]) * uint8(B[k/4][4n + k%4]).
  EmulatedTiles::configure([] {
    TileConfig c;
    c.rows[0] = 2, c.colsb[0] = 8;   // A: 2 x 8 signed bytes
    c.rows[1] = 2, c.colsb[1] = 12;  // B: 8 / 4 rows x (3 columns x 4 bytes)
    c.rows[4] = 2, c.colsb[4] = 12;  // C: 2 x 3 int32
    return c;
  }());
  const int8_t a[2][8] = {{-128, 127, 1, -1, 2, 3, -4, 5}, {7, 0, 0, 0, 0, 0, 0, -7}};
  uint8_t b[2][12];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 12; i++) b[r][i] = (uint8_t)(37 * (r * 12 + i) + 200);
  int32_t c[2][3] = {{1, 2, 3}, {4, 5, 6}};
  EmulatedTiles::load<0>(a, 8);
  EmulatedTiles::load<1>(b, 12);
  EmulatedTiles::load<4>(c, 12);
  EmulatedTiles::dpbsud<4, 0, 1>();
  int32_t got[2][3];
  EmulatedTiles::store<4>(got, 12);
  for (int m = 0; m < 2; m++)
    for (int n = 0; n < 3; n++) {
      int32_t want = c[m][n];
      for (int k = 0; k < 8; k++) want += a[m][k] * b[k / 4][4 * n + k % 4];
      EXPECT_EQ(got[m][n], want) << m << "," << n;
    }
  EmulatedTiles::release();
}

TEST(AmxTiles, ModelKeepsTheTilesOnAnUnchangedConfiguration) {
  // As HardwareTiles: an unchanged configuration skips LDTILECFG, so the tiles keep their contents
  // (a kernel must zero or load its accumulators itself); a new one zeroes them, as LDTILECFG does.
  const TileConfig cfg = full_tiles();
  EmulatedTiles::configure(cfg);
  int32_t c[16][16], got[16][16];
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) c[i][j] = 100 * i + j + 1;
  EmulatedTiles::load<4>(c, 64);
  EmulatedTiles::configure(cfg);
  EmulatedTiles::store<4>(got, 64);
  EXPECT_EQ(std::memcmp(got, c, sizeof c), 0);
  TileConfig other = cfg;
  other.rows[7] = 8;
  EmulatedTiles::configure(other);
  EmulatedTiles::store<4>(got, 64);
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) ASSERT_EQ(got[i][j], 0) << i << "," << j;
  EmulatedTiles::release();
}

TEST(AmxTiles, ModelTakesADenormalAccumulatorAsZero) {
  // TDPBF16PS is an FMA with DAZ and FTZ whatever MXCSR says: the f32 accumulator is an input too.
  TileConfig cfg;
  cfg.rows[0] = 1, cfg.colsb[0] = 4;  // A: one pair
  cfg.rows[2] = 1, cfg.colsb[2] = 4;  // B: one pair, one column
  cfg.rows[4] = 1, cfg.colsb[4] = 4;  // C: one f32
  EmulatedTiles::configure(cfg);
  // A = (2^-126, 0), the smallest normal, times B = (1, 1); C = 2^-127, a denormal. With the
  // accumulator read as zero the sum is 2^-126; read as it is, 1.5 x 2^-126 (a normal, not flushed).
  const uint16_t a[2] = {0x0080, 0}, b[2] = {0x3F80, 0x3F80};
  const float smallest_normal = std::ldexp(1.0f, -126), denormal = std::ldexp(1.0f, -127);
  ASSERT_EQ(std::fpclassify(denormal), FP_SUBNORMAL);
  EmulatedTiles::load<0>(a, 4);
  EmulatedTiles::load<2>(b, 4);
  EmulatedTiles::load<4>(&denormal, 4);
  EmulatedTiles::dpbf16ps<4, 0, 2>();
  float got = 0;
  EmulatedTiles::store<4>(&got, 4);
  EXPECT_EQ(got, smallest_normal);
  EmulatedTiles::release();
}

TEST(AmxTilesDeathTest, ModelRefusesWhatTheHardwareFaultsOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TileConfig too_tall;
  too_tall.rows[0] = 17, too_tall.colsb[0] = 64;
  EXPECT_DEATH(EmulatedTiles::configure(too_tall), "out of range");
  // A (tile 0), B (1) and C (4) as {rows, bytes per row}, configured and multiplied.
  auto multiply = [](int a_rows, int a_bytes, int b_rows, int b_bytes, int c_rows, int c_bytes) {
    TileConfig c;
    c.rows[0] = (uint8_t)a_rows, c.colsb[0] = (uint16_t)a_bytes;
    c.rows[1] = (uint8_t)b_rows, c.colsb[1] = (uint16_t)b_bytes;
    c.rows[4] = (uint8_t)c_rows, c.colsb[4] = (uint16_t)c_bytes;
    EmulatedTiles::configure(c);
    EmulatedTiles::dpbsud<4, 0, 1>();
  };
  EXPECT_DEATH(multiply(4, 32, 4, 64, 4, 64), "shapes do not agree");  // K = 32: B needs 8 rows
  // C (and B) rows must be whole dwords: #UD on the hardware.
  EXPECT_DEATH(multiply(2, 4, 1, 6, 2, 6), "shapes do not agree");
  auto zero_released = [] {
    EmulatedTiles::release();
    EmulatedTiles::zero<4>();
  };
  EXPECT_DEATH(zero_released(), "before it was configured");
}

namespace {

using Bf16Block = void (*)(const uint16_t*, int64_t, const kvad::kernels::PackedWeight&, int64_t, int64_t, int64_t,
                           int64_t, float*);

// The bf16 tiles against the scalar reference of the same packed panels. Products of bf16 are
// exact in f32, so the only difference is the order of the f32 sums: bounded by k ulps of the sum
// of |terms|. Shapes: whole and part tiles of rows (32), panels (32 outputs) and steps (16 pairs),
// odd k, a task that starts past row 0 and panel 0.
void expect_bf16_near_scalar(Bf16Block tiles, const char* label) {
  Rng rng(21);
  const int64_t shapes[][3] = {{32, 32, 32}, {45, 70, 83}, {64, 96, 320}, {33, 31, 17}, {96, 64, 2880}, {7, 40, 64}};
  for (auto& s : shapes) {
    const int64_t n = s[0], m = s[1], k = s[2], kp = (k + 1) / 2 * 2, panels = (m + 31) / 32;
    std::vector<float> wf = randn(rng, (size_t)(m * k)), x = randn(rng, (size_t)(n * k));
    const PackedWeight w = PackedWeight::pack_bf16(wf.data(), m, k);
    std::vector<uint16_t> a((size_t)(n * kp), 0);
    for (int64_t r = 0; r < n; r++) to_bf16(x.data() + r * k, k, a.data() + r * kp, Isa::Scalar);
    for (auto [r0, q0] : {std::pair<int64_t, int64_t>{0, 0}, {n / 2, panels / 2}}) {
      std::vector<float> want((size_t)(n * m), NAN), got((size_t)(n * m), NAN);
      gemm_block_scalar(x.data(), w, r0, n, q0, panels, want.data());
      tiles(a.data(), kp, w, r0, n, q0, panels, got.data());
      for (int64_t r = 0; r < n; r++)
        for (int64_t o = 0; o < m; o++) {
          const size_t i = (size_t)(r * m + o);
          if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << label << " wrote outside its task: row " << r << " output " << o;
            continue;
          }
          double magnitude = 0;
          for (int64_t j = 0; j < k; j++) magnitude += std::fabs((double)x[(size_t)(r * k + j)] * wf[(size_t)(o * k + j)]);
          ASSERT_NEAR(got[i], want[i], 1.2e-7 * (double)k * magnitude + 1e-30)
              << label << " n=" << n << " m=" << m << " k=" << k << " row " << r << " output " << o;
        }
    }
  }
}

}  // namespace

TEST(AmxTiles, EmulatedBf16TilesEqualScalarToRounding) {
  expect_bf16_near_scalar(gemm_block_bf16_amx_emulated, "emulated bf16 tiles");
}

TEST(AmxTiles, HardwareBf16TilesEqualScalarToRounding) {
  if (std::string why = test::amx_unavailable(cpu_features().amx_bf16, "bf16"); !why.empty()) GTEST_SKIP() << why;
  expect_bf16_near_scalar(gemm_block_bf16_amx, "AMX bf16 tiles");
  EXPECT_TRUE(amx_bf16_gemm_usable()) << "the start-up check refused the tiles the test above accepted";
}

namespace {

using RowsKernel = void (*)(const float*, int64_t, int64_t, const void*, int64_t, int64_t, int64_t, float*);

// bf16 weights in place against f32 activations split in three bf16 parts: against the float64
// product, each output within f32 summation's bound, and the worst error within 4x the
// scalar f32 kernel's (three parts sum 3k products, not k; two parts would be ~2^7 times worse).
void expect_bf16_rows_as_accurate_as_f32(RowsKernel tiles, const char* label) {
  Rng rng(22);
  const int64_t shapes[][3] = {{16, 32, 32}, {21, 83, 45}, {17, 896, 70}, {48, 64, 33}, {40, 1000, 20}, {33, 2, 3},
                               {40, 4864, 37}};  // the last: three blocks of tokens (16 a block at 4864 inputs)
  for (auto& s : shapes) {
    const int64_t n = s[0], k = s[1], m = s[2];
    std::vector<float> x = randn(rng, (size_t)(n * k), 3), wf = randn(rng, (size_t)(m * k));
    std::vector<uint16_t> w((size_t)(m * k));
    for (size_t i = 0; i < w.size(); i++) w[i] = f32_to_bf16(wf[i]);
    for (auto [rb, re] : {std::pair<int64_t, int64_t>{0, m}, {m / 3, m}}) {
      std::vector<float> got((size_t)(n * m), NAN), f32((size_t)(n * m), NAN);
      tiles(x.data(), n, k, w.data(), m, rb, re, got.data());
      kvad::kernels::rows_bf16_scalar(x.data(), n, k, w.data(), m, rb, re, f32.data());
      double worst_tiles = 0, worst_f32 = 0;
      for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < m; r++) {
          const size_t i = (size_t)(t * m + r);
          if (r < rb) {
            ASSERT_TRUE(std::isnan(got[i])) << label << " wrote outside its rows: token " << t << " row " << r;
            continue;
          }
          double exact = 0, magnitude = 0;
          for (int64_t j = 0; j < k; j++) {
            const double term = (double)x[(size_t)(t * k + j)] * bf16_to_f32(w[(size_t)(r * k + j)]);
            exact += term, magnitude += std::fabs(term);
          }
          ASSERT_NEAR(got[i], exact, 1.2e-7 * (double)(k + 3) * magnitude + 1e-30)
              << label << " n=" << n << " k=" << k << " m=" << m << " token " << t << " row " << r;
          worst_tiles = std::max(worst_tiles, std::fabs(got[i] - exact) / (magnitude + 1e-30));
          worst_f32 = std::max(worst_f32, std::fabs(f32[i] - exact) / (magnitude + 1e-30));
        }
      EXPECT_LE(worst_tiles, 4 * worst_f32 + 1e-9) << label << " n=" << n << " k=" << k << " m=" << m
                                                   << ": less accurate than the f32 kernel";
    }
  }
}

}  // namespace

TEST(AmxTiles, EmulatedBf16RowsAreAsAccurateAsF32) {
  expect_bf16_rows_as_accurate_as_f32(rows_bf16_amx_emulated, "emulated bf16 rows");
}

TEST(AmxTiles, HardwareBf16RowsAreAsAccurateAsF32) {
  if (std::string why = test::amx_unavailable(cpu_features().amx_bf16, "bf16"); !why.empty()) GTEST_SKIP() << why;
  expect_bf16_rows_as_accurate_as_f32(rows_bf16_amx, "AMX bf16 rows");
  EXPECT_TRUE(amx_bf16_rows_usable()) << "the start-up check refused the tiles the test above accepted";
  EXPECT_EQ(rows_kernel(WType::BF16, Isa::Avx512, kAmxBf16Tokens), rows_bf16_amx) << "prefill does not take the tiles";
}
