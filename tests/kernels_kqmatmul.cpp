// ggml K-quant matrices (Q4_K, Q5_K, Q6_K as GGUF stores them) and their kernels: the scalar
// reference against a float64 product of the dequantised operands, every SIMD kernel against the
// scalar one bit for bit on random blocks (every byte random, so every code, scale and min
// occurs), the Q8_K activation quantiser against its definition, and kvad's own Q4_K/Q6_K
// quantisers' error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "core/cpu.h"
#include "core/rng.h"
#include "kernels/kqmatmul.h"
#include "quant/kquant.h"
#include "amx_available.h"
#include "random_values.h"

using namespace kvad;
using test::randn;
using namespace kvad::kernels;

namespace {

const DType kTypes[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Random super-blocks: every byte random except the f16 scales, which are kept finite and small.
std::vector<uint8_t> random_blocks(Rng& rng, DType type, int64_t rows, int64_t cols) {
  size_t bb = dtype_block_bytes(type);
  std::vector<uint8_t> data((size_t)(rows * cols / 256) * bb);
  for (uint8_t& b : data) b = (uint8_t)rng.below(256);
  for (size_t off = 0; off < data.size(); off += bb) {
    auto put = [&](size_t at) {
      uint16_t h = f32_to_f16((float)((rng.uniform() * 2 - 1) * 0.01));
      std::memcpy(&data[off + at], &h, 2);
    };
    if (type == DType::Q6_K) {
      put(208);
    } else {
      put(0);
      put(2);
    }
  }
  return data;
}

// y = W x in float64 over the dequantised weights and the dequantised activations.
std::vector<double> reference(const KQuantMatrix& w, const KActs& a) {
  std::vector<double> y((size_t)(a.n * w.rows()));
  std::vector<float> row((size_t)w.cols());
  for (int64_t r = 0; r < w.rows(); r++) {
    w.row(r, row.data());
    for (int64_t t = 0; t < a.n; t++) {
      double s = 0;
      for (int64_t i = 0; i < w.cols(); i++)
        s += (double)row[(size_t)i] * (double)a.codes(t, i / 256)[i % 256] * a.d[(size_t)(t * a.blocks + i / 256)];
      y[(size_t)(t * w.rows() + r)] = s;
    }
  }
  return y;
}

// Random blocks of `type`, activations of n tokens, and the scalar kernel's products of them.
struct Case {
  std::vector<uint8_t> data;
  KQuantMatrix w;
  KActs a;
  std::vector<float> want;
  Case(Rng& rng, DType type, int64_t rows, int64_t cols, int64_t n) : data(random_blocks(rng, type, rows, cols)) {
    w = KQuantMatrix::wrap(type, rows, cols, data.data(), nullptr);
    std::vector<float> x = randn(rng, (size_t)(n * cols), 3.0);
    quantize_kacts(x.data(), n, cols, a);
    want.resize((size_t)(n * rows));
    krows_scalar(a, w, 0, rows, want.data());
  }
};

}  // namespace

TEST(KQuant, ScalePackingRoundTripsEveryValue) {
  Rng rng(3);
  for (int it = 0; it < 2000; it++) {
    uint8_t sc[8], m[8], packed[12], sc2[8], m2[8];
    for (int j = 0; j < 8; j++) sc[j] = (uint8_t)rng.below(64), m[j] = (uint8_t)rng.below(64);
    kquant_pack_scales(sc, m, packed);
    kquant_unpack_scales(packed, sc2, m2);
    ASSERT_EQ(0, std::memcmp(sc, sc2, 8));
    ASSERT_EQ(0, std::memcmp(m, m2, 8));
  }
}

TEST(KQuant, ActivationsFollowQ8KDefinition) {
  for (Isa isa : {Isa::Scalar, best_isa()}) {
    Rng rng(5);
    int64_t n = 3, k = 512;
    std::vector<float> x = randn(rng, (size_t)(n * k));
    for (int i = 0; i < 256; i++) x[(size_t)(k + i)] = 0;  // an all-zero block: d = 0, codes 0
    x[7] = -9.0f;                                          // the largest magnitude is negative
    KActs a;
    quantize_kacts(x.data(), n, k, a, isa);
    ASSERT_EQ(a.blocks, 2);
    EXPECT_EQ(a.d[2], 0.0f) << isa_name(isa);
    EXPECT_FLOAT_EQ(a.d[0], 9.0f / 127.0f) << isa_name(isa);
    EXPECT_EQ(a.codes(0, 0)[7], -127) << isa_name(isa);  // iscale = -127 / max: the signed max becomes -127
    for (int64_t t = 0; t < n; t++)
      for (int64_t b = 0; b < a.blocks; b++) {
        const int8_t* q = a.codes(t, b);
        for (int j = 0; j < 16; j++) {
          int s = 0;
          for (int i = 0; i < 16; i++) s += q[16 * j + i];
          ASSERT_EQ(s, a.bsums[(size_t)((t * a.blocks + b) * 16 + j)]) << isa_name(isa);
          if (j % 2) {
            int pair = 0;
            for (int i = 0; i < 32; i++) pair += q[16 * (j - 1) + i];
            ASSERT_EQ(pair, a.sums32[(size_t)((t * a.blocks + b) * 8 + j / 2)]) << isa_name(isa);
          }
        }
        float d = a.d[(size_t)(t * a.blocks + b)];
        for (int i = 0; i < 256 && d != 0; i++)
          ASSERT_LE(std::fabs(q[i] * d - x[(size_t)(t * k + b * 256 + i)]), 0.5f * std::fabs(d) * 1.0001f) << isa_name(isa);
      }
  }
}

// The AVX-512 quantiser against the scalar one, bit for bit: ties of the largest magnitude with
// either sign first, halves that round to even, values that reach the clamp, zero blocks.
TEST(KQuant, SimdActivationQuantisationEqualsScalar) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar quantiser runs here";
  Rng rng(17);
  const int64_t n = 9, k = 1024;
  std::vector<float> x = randn(rng, (size_t)(n * k), 2.0);
  for (int i = 0; i < 256; i++) x[(size_t)(256 + i)] = 0;                        // token 0, block 1: zeros
  x[(size_t)(k + 3)] = 50.0f, x[(size_t)(k + 200)] = -50.0f;                     // a tie, positive first
  x[(size_t)(2 * k + 10)] = -60.0f, x[(size_t)(2 * k + 11)] = 60.0f;             // a tie, negative first
  for (int i = 0; i < 256; i++) x[(size_t)(3 * k + i)] = (float)(i % 255 - 127) * 0.5f;  // exact halves
  for (int i = 0; i < 256; i++) x[(size_t)(4 * k + i)] = 1e-30f * (float)(i - 128);       // tiny values
  KActs want;
  quantize_kacts(x.data(), n, k, want, Isa::Scalar);
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (isa > best_isa()) continue;
    KActs got;
    quantize_kacts(x.data(), n, k, got, isa);
    EXPECT_EQ(got.q, want.q) << isa_name(isa);
    EXPECT_EQ(got.bsums, want.bsums) << isa_name(isa);
    EXPECT_EQ(got.sums32, want.sums32) << isa_name(isa);
    ASSERT_EQ(got.d.size(), want.d.size());
    for (size_t i = 0; i < got.d.size(); i++) ASSERT_EQ(got.d[i], want.d[i]) << isa_name(isa) << " block " << i;
  }
}

TEST(KQuant, ScalarKernelEqualsFloat64ProductOfDequantisedOperands) {
  Rng rng(7);
  for (DType type : kTypes) {
    int64_t rows = 19, cols = 768, n = 3;
    std::vector<uint8_t> data = random_blocks(rng, type, rows, cols);
    KQuantMatrix w = KQuantMatrix::wrap(type, rows, cols, data.data(), nullptr);
    std::vector<float> x = randn(rng, (size_t)(n * cols));
    KActs a;
    quantize_kacts(x.data(), n, cols, a);
    std::vector<double> ref = reference(w, a);
    std::vector<float> y((size_t)(n * rows));
    krows_scalar(a, w, 0, rows, y.data());
    for (size_t i = 0; i < y.size(); i++) {
      double scale = 0;
      for (double v : ref) scale = std::max(scale, std::fabs(v));
      ASSERT_NEAR(y[i], ref[i], 1e-5 * scale) << dtype_name(type) << " at " << i;
    }
  }
}

TEST(KQuant, EverySimdKernelMatchesScalar) {
  Rng rng(11);
  std::vector<Isa> isas;
  if (best_isa() >= Isa::Avx2) isas.push_back(Isa::Avx2);
  if (best_isa() >= Isa::Avx512) isas.push_back(Isa::Avx512);
  if (isas.empty()) GTEST_SKIP() << "no SIMD kernels on this CPU";
  for (DType type : kTypes)
    for (int64_t n = 1; n <= 9; n++) {
      const int64_t rows = 21;
      Case c(rng, type, rows, 1024, n);
      const KQuantMatrix& w = c.w;
      const KActs& a = c.a;
      const std::vector<float>& want = c.want;
      for (Isa isa : isas) {
        std::vector<float> got((size_t)(n * rows), NAN);
        krows_kernel(type, isa)(a, w, 0, rows, got.data());
        // Bit for bit: every kernel keeps ggml's float order (kqmatmul.cpp, RowSums).
        for (size_t i = 0; i < got.size(); i++)
          ASSERT_EQ(got[i], want[i]) << dtype_name(type) << " " << isa_name(isa) << " n=" << n << " at " << i;
        // Through the threaded entry point too (below the tiles' token count: the tiles round
        // their own way, TilesMatchScalarToRounding).
        if (n >= kKqTileTokens) continue;
        std::fill(got.begin(), got.end(), NAN);
        kqmatmul(a, w, got.data(), isa);
        for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], want[i]) << isa_name(isa);
      }
    }
}

// Prefill's tiles (a group of 16 rows unpacked once, a row per lane) sum the same exact integers
// as ggml but add the sub-blocks in floats of their own: equal to the scalar reference to a few
// float roundings of the row's magnitude. Ragged rows (a last group of 5 or 13), token counts
// that leave 1-3 over the 4-token tile, and an odd group count, alone and through kqmatmul's
// threads.
TEST(KQuant, TilesMatchScalarToRounding) {
  std::vector<Isa> isas;  // the tiles of every ISA this CPU runs
  if (best_isa() >= Isa::Avx2) isas.push_back(Isa::Avx2);
  if (best_isa() >= Isa::Avx512) isas.push_back(Isa::Avx512);
  if (isas.empty()) GTEST_SKIP() << "the tiles are AVX2 and AVX-512 VNNI; this CPU has " << isa_name(best_isa());
  Rng rng(13);
  for (DType type : kTypes)
    for (auto [rows, cols, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 768, 8}, {16, 256, 9}, {45, 1024, 14}, {80, 512, 33}}) {
      Case c(rng, type, rows, cols, n);
      const KQuantMatrix& w = c.w;
      const KActs& a = c.a;
      const std::vector<float>& want = c.want;
      std::vector<double> ref = reference(w, a);
      for (Isa isa : isas)
      for (int threaded = 0; threaded < 2; threaded++) {
        std::vector<float> got((size_t)(n * rows), NAN);
        if (threaded) kqmatmul(a, w, got.data(), isa);
        else if (isa == Isa::Avx512) kgroups_tiles_avx512(a, w, 0, (rows + 15) / 16, got.data());
        else kgroups_tiles_avx2(a, w, 0, (rows + 15) / 16, got.data());
        // Measured on random blocks: the tiles 0.7-3.0e-7 of the largest output from the scalar
        // kernel and 0.6-2.5e-7 from float64, where the scalar kernel itself is 0.5-1.5e-7 off.
        // A wrong code, scale or min is off by percents.
        double scale = 0, from_scalar = 0, from_f64 = 0;
        for (double v : ref) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < got.size(); i++) {
          ASSERT_TRUE(std::isfinite(got[i])) << dtype_name(type) << " at " << i;
          from_scalar = std::max(from_scalar, std::fabs((double)got[i] - want[i]) / scale);
          from_f64 = std::max(from_f64, std::fabs((double)got[i] - ref[i]) / scale);
        }
        EXPECT_LT(from_scalar, 1e-6) << dtype_name(type) << " " << isa_name(isa) << " rows=" << rows << " n=" << n << " threaded=" << threaded;
        EXPECT_LT(from_f64, 1e-6) << dtype_name(type) << " " << isa_name(isa) << " rows=" << rows << " n=" << n << " threaded=" << threaded;
      }
    }
}

// The AVX-VNNI tiles (Alder Lake and later) sum a sub-block's slots in int32 where the AVX2 ones
// add int16 pairs, the same exact integers scaled the same way: equal bit for bit.
TEST(KQuant, AvxVnniTilesEqualAvx2TilesBitForBit) {
  if (!cpu_features().avx_vnni) GTEST_SKIP() << "SKIPPED: no AVX-VNNI on this CPU (" << cpu_summary() << ")";
  Rng rng(17);
  for (DType type : kTypes)
    for (auto [rows, cols, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 768, 8}, {16, 256, 9}, {80, 512, 33}}) {
      Case c(rng, type, rows, cols, n);
      std::vector<float> vnni((size_t)(n * rows), NAN), plain((size_t)(n * rows), NAN);
      kgroups_tiles_avx2(c.a, c.w, 0, (rows + 15) / 16, plain.data());
      kgroups_tiles_avxvnni(c.a, c.w, 0, (rows + 15) / 16, vnni.data());
      EXPECT_EQ(vnni, plain) << dtype_name(type) << " rows=" << rows << " n=" << n;
    }
}

// Without VNNI (Skylake-SP) the AVX-512 tiles sum a sub-block's vpmaddubsw pairs in int16 while
// exact and widen them with vpmaddwd, and the rows replace vpdpwssd by vpmaddwd and an add: the
// VNNI kernels' integers, so their bits (one and two groups, every token tile width, decode's 1-4
// tokens). With VNNI off, the dispatchers take them.
TEST(KQuant, Avx512WithoutVnniEqualsVnniBitForBit) {
  if (best_isa() < Isa::Avx512 || !cpu_features().avx512vnni)
    GTEST_SKIP() << "SKIPPED: needs AVX-512 with VNNI to compare (" << cpu_summary() << ")";
  Rng rng(19);
  for (DType type : kTypes)
    for (auto [rows, cols, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 768, 8}, {16, 256, 9}, {80, 512, 35}, {45, 1024, 6}}) {
      Case c(rng, type, rows, cols, n);
      std::vector<float> vnni((size_t)(n * rows), NAN), bw((size_t)(n * rows), NAN);
      kgroups_tiles_avx512(c.a, c.w, 0, (rows + 15) / 16, vnni.data());
      kgroups_tiles_avx512bw(c.a, c.w, 0, (rows + 15) / 16, bw.data());
      EXPECT_EQ(bw, vnni) << dtype_name(type) << " rows=" << rows << " n=" << n;
      for (int64_t tokens : {int64_t{1}, std::min<int64_t>(n, 4)}) {  // the rows, over the first tokens
        KActs first = c.a;
        first.n = tokens;
        std::vector<float> rows_vnni((size_t)(tokens * rows), NAN), rows_bw((size_t)(tokens * rows), NAN);
        (type == DType::Q4_K ? krows_q4k_avx512 : type == DType::Q5_K ? krows_q5k_avx512 : krows_q6k_avx512)(
            first, c.w, 0, rows, rows_vnni.data());
        (type == DType::Q4_K ? krows_q4k_avx512bw : type == DType::Q5_K ? krows_q5k_avx512bw : krows_q6k_avx512bw)(
            first, c.w, 0, rows, rows_bw.data());
        EXPECT_EQ(rows_bw, rows_vnni) << "rows " << dtype_name(type) << " rows=" << rows << " tokens=" << tokens;
      }
    }
  set_avx512_vnni_allowed(false);
  const bool picked = kgroups_tiles_kernel(Isa::Avx512, 64) == kgroups_tiles_avx512bw &&
                      krows_kernel(DType::Q4_K, Isa::Avx512) == krows_q4k_avx512bw &&
                      krows_kernel(DType::Q6_K, Isa::Avx512) == krows_q6k_avx512bw;
  set_avx512_vnni_allowed(true);
  EXPECT_TRUE(picked);
}

// The AMX tiles (kqmatmul_amx.cpp) take the AVX-512 tiles' unpacked groups and scale each
// sub-block's exact sums in the same order: equal bit for bit. Over the model of the tiles on any
// AVX-512 CPU, over the real tiles where the CPU has them. Tokens from a part tile to several
// tiles with a tail; a thread's share that starts past group 0 writes nothing outside it.
TEST(KQuant, AmxTilesEqualAvx512TilesBitForBit) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512 on this CPU (" << cpu_summary() << "): the model runs on it";
  const std::string no_hardware = test::amx_unavailable(cpu_features().amx_int8, "int8");
  Rng rng(17);
  for (DType type : kTypes)
    for (auto [rows, cols, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 768, 21}, {16, 256, 16}, {45, 1024, 9}, {80, 512, 40}}) {
      Case c(rng, type, rows, cols, n);
      const int64_t groups = (rows + 15) / 16;
      for (int64_t g0 : {int64_t{0}, groups / 2}) {
        std::vector<float> want((size_t)(n * rows), NAN);
        kgroups_tiles_avx512(c.a, c.w, g0, groups, want.data());
        for (int hardware = 0; hardware < (no_hardware.empty() ? 2 : 1); hardware++) {
          std::vector<float> got((size_t)(n * rows), NAN);
          (hardware ? kgroups_tiles_amx : kgroups_tiles_amx_emulated)(c.a, c.w, g0, groups, got.data());
          for (size_t i = 0; i < got.size(); i++) {
            if (std::isnan(want[i])) {
              ASSERT_TRUE(std::isnan(got[i])) << "wrote outside its groups at " << i;
              continue;
            }
            ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
                << (hardware ? "AMX " : "emulated ") << dtype_name(type) << " rows=" << rows << " n=" << n
                << " g0=" << g0 << " token " << (int64_t)i / rows << " row " << (int64_t)i % rows << ": " << got[i]
                << " vs " << want[i];
          }
        }
      }
    }
  if (!no_hardware.empty()) GTEST_SKIP() << "the model passed; " << no_hardware;
  EXPECT_TRUE(amx_kq_usable()) << "the start-up check refused the tiles the test above accepted";
}

TEST(KQuant, DequantisationFollowsTheLayout) {
  // One Q6_K super-block built by hand: value v = d * sc[v/16] * (u - 32) with u = v % 64.
  uint8_t blk[210] = {};
  uint16_t d = f32_to_f16(0.5f);
  std::memcpy(blk + 208, &d, 2);
  for (int j = 0; j < 16; j++) blk[192 + j] = (uint8_t)(int8_t)(j - 8);
  for (int v = 0; v < 256; v++) {
    int u = v % 64, h = v / 128, i = v % 128, l = i % 32, part = i / 32;  // part: q1..q4
    uint8_t* ql = blk + 64 * h;
    uint8_t* qh = blk + 128 + 32 * h;
    int qlo = u & 0xF, qhi = u >> 4;
    if (part == 0) ql[l] |= (uint8_t)qlo, qh[l] |= (uint8_t)(qhi << 0);
    if (part == 1) ql[l + 32] |= (uint8_t)qlo, qh[l] |= (uint8_t)(qhi << 2);
    if (part == 2) ql[l] |= (uint8_t)(qlo << 4), qh[l] |= (uint8_t)(qhi << 4);
    if (part == 3) ql[l + 32] |= (uint8_t)(qlo << 4), qh[l] |= (uint8_t)(qhi << 6);
  }
  float out[256];
  dequantize_blocks(DType::Q6_K, blk, 256, out);
  for (int v = 0; v < 256; v++) ASSERT_EQ(out[v], 0.5f * (float)(v / 16 - 8) * (float)(v % 64 - 32)) << v;

  // Q4_K: value v = d * sc[j] * q - dmin * m[j] with j = v / 32 and q = v % 16.
  uint8_t k4[144] = {};
  uint16_t h1 = f32_to_f16(0.25f), h2 = f32_to_f16(0.125f);
  std::memcpy(k4, &h1, 2);
  std::memcpy(k4 + 2, &h2, 2);
  uint8_t sc[8] = {1, 2, 3, 4, 60, 61, 62, 63}, m[8] = {63, 17, 0, 5, 32, 33, 48, 1};
  kquant_pack_scales(sc, m, k4 + 4);
  for (int v = 0; v < 256; v++) {
    int c = v / 64, l = v % 32, hi = (v % 64) / 32;
    k4[16 + 32 * c + l] |= (uint8_t)((v % 16) << (4 * hi));
  }
  dequantize_blocks(DType::Q4_K, k4, 256, out);
  for (int v = 0; v < 256; v++)
    ASSERT_EQ(out[v], 0.25f * sc[v / 32] * (float)(v % 16) - 0.125f * m[v / 32]) << v;
}

TEST(KQuant, KvadQuantisersReconstructWithinTheirResolution) {
  Rng rng(13);
  int64_t rows = 64, cols = 512;
  std::vector<float> w = randn(rng, (size_t)(rows * cols), 0.02);
  // llama.cpp's own quantisers reach a relative RMS error of 0.071 (Q4_K) and 0.018 (Q6_K) on
  // such weights (../shared/peer/QUANTIZE.md); ours must be in the same range.
  for (auto [type, bound] : {std::pair{DType::Q4_K, 0.085}, {DType::Q6_K, 0.022}}) {
    KQuantMatrix q = KQuantMatrix::quantize(type, w.data(), rows, cols);
    std::vector<float> row((size_t)cols);
    double err = 0, ref = 0;
    for (int64_t r = 0; r < rows; r++) {
      q.row(r, row.data());
      for (int64_t i = 0; i < cols; i++) {
        double e = row[(size_t)i] - w[(size_t)(r * cols + i)];
        err += e * e;
        ref += (double)w[(size_t)(r * cols + i)] * w[(size_t)(r * cols + i)];
      }
    }
    double rel = std::sqrt(err / ref);
    EXPECT_LT(rel, bound) << dtype_name(type);
    std::printf("%s: relative RMS error %.4f\n", dtype_name(type), rel);
    EXPECT_EQ(q.bytes(), (size_t)(rows * cols / 256) * dtype_block_bytes(type));
  }
}
