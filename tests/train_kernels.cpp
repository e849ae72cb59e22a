// The training kernels per ISA against their references: the packed gemm in all transpose
// combinations on ragged shapes (with accumulate and bias), and each SIMD row kernel against the
// float64 reference. Plus: gemm results do not depend on the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/amx_tiles.h"
#include "train/gemm.h"
#include "train/layers.h"
#include "train/rowops.h"
#include "amx_available.h"
#include "random_values.h"

using namespace kvad;
using test::randn;
using namespace kvad::train;

namespace {

std::vector<Isa> isas() {
  std::vector<Isa> out = {Isa::Scalar};
  if (best_isa() >= Isa::Avx2) out.push_back(Isa::Avx2);
  if (best_isa() >= Isa::Avx512) out.push_back(Isa::Avx512);
  return out;
}

std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// C [M, ldc] from gemm against the float64 reference Cd, with f32 summation's bound; the padding
// columns past N must be C0's, untouched.
void expect_product(const std::vector<float>& C, const std::vector<float>& C0, const std::vector<double>& Cd, int64_t M,
                    int64_t N, int64_t K, int64_t ldc, const testing::Message& what) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < ldc; n++) {
      size_t i = (size_t)(m * ldc + n);
      if (n >= N) {
        ASSERT_EQ(C[i], C0[i]) << "wrote outside C; " << what;
        continue;
      }
      ASSERT_NEAR(C[i], Cd[i], 1e-5 * std::sqrt((double)K) * 4 + 1e-5 * std::fabs(Cd[i])) << what;
    }
}

}  // namespace

TEST(TrainGemm, EveryIsaMatchesTheReference) {
  Rng r(1);
  const int64_t shapes[][3] = {{1, 1, 1},    {3, 5, 7},     {12, 32, 16},  {13, 33, 17}, {25, 73, 128},
                               {97, 40, 300}, {130, 530, 9}, {64, 64, 520}, {7, 600, 3}};
  for (Isa isa : isas())
    for (auto& sh : shapes)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
          for (int mode = 0; mode < 3; mode++) {  // 0: C = AB, 1: C = AB + bias, 2: C += AB
            int64_t M = sh[0], N = sh[1], K = sh[2];
            int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;  // padded strides
            auto A = randn(r, (size_t)((ta ? K : M) * lda)), B = randn(r, (size_t)((tb ? N : K) * ldb));
            auto bias = randn(r, (size_t)N), C0 = randn(r, (size_t)(M * ldc));
            auto Ad = widen(A), Bd = widen(B), biasd = widen(bias), Cd = widen(C0);
            std::vector<float> C = C0;
            const float* bp = mode == 1 ? bias.data() : nullptr;
            gemm({M, N, K, A.data(), lda, (bool)ta, B.data(), ldb, (bool)tb, C.data(), ldc, mode == 2, bp}, true, isa);
            gemm_ref<double>(M, N, K, Ad.data(), lda, ta, Bd.data(), ldb, tb, Cd.data(), ldc, mode == 2,
                             mode == 1 ? biasd.data() : nullptr);
            expect_product(C, C0, Cd, M, N, K, ldc,
                           testing::Message() << isa_name(isa) << " M=" << M << " N=" << N << " K=" << K
                                              << " ta=" << ta << " tb=" << tb << " mode=" << mode);
          }
}

namespace {

// The bf16 products (kvad train --precision bf16) against float64 sums of the bf16-rounded
// operands: the rounding is the only approximation (the sums are f32), so the bound is the f32 one.
// `uk`: the micro-kernel to run (nullptr: gemm()'s own choice).
void expect_bf16_products(const MicroKernel* uk, const char* label) {
  Rng r(7);
  auto round_bf16 = [](float x) { return bf16_to_f32(f32_to_bf16(x)); };
  const int64_t shapes[][3] = {{1, 1, 1},     {3, 5, 7},     {12, 32, 16},  {13, 33, 17}, {25, 73, 129},
                               {97, 40, 300}, {64, 64, 520}, {33, 65, 800}, {32, 32, 32},
                               {30, 1100, 70}, {70, 530, 390}};  // several NC blocks of columns
  for (auto& sh : shapes)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int mode = 0; mode < 3; mode++) {
          int64_t M = sh[0], N = sh[1], K = sh[2];
          int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
          auto A = randn(r, (size_t)((ta ? K : M) * lda)), B = randn(r, (size_t)((tb ? N : K) * ldb));
          auto bias = randn(r, (size_t)N), C0 = randn(r, (size_t)(M * ldc));
          std::vector<double> Ad, Bd;
          for (float x : A) Ad.push_back(round_bf16(x));
          for (float x : B) Bd.push_back(round_bf16(x));
          auto biasd = widen(bias), Cd = widen(C0);
          std::vector<float> C = C0;
          GemmShape g{M, N, K, A.data(), lda, (bool)ta, B.data(), ldb, (bool)tb, C.data(), ldc, mode == 2,
                      mode == 1 ? bias.data() : nullptr};
          g.bf16 = true;
          if (uk) gemm_with(g, *uk);
          else gemm(g);
          gemm_ref<double>(M, N, K, Ad.data(), lda, ta, Bd.data(), ldb, tb, Cd.data(), ldc, mode == 2,
                           mode == 1 ? biasd.data() : nullptr);
          expect_product(C, C0, Cd, M, N, K, ldc,
                         testing::Message() << label << " M=" << M << " N=" << N << " K=" << K << " ta=" << ta
                                            << " tb=" << tb << " mode=" << mode);
        }
}

}  // namespace

// Reported as skipped where the CPU has no AVX512-BF16, never passed silently.
TEST(TrainGemm, Bf16ProductsMatchTheRoundedReference) {
  if (!bf16_gemm_supported()) GTEST_SKIP() << "SKIPPED: this CPU has no AVX512-BF16 (" << cpu_summary() << ")";
  expect_bf16_products(nullptr, "bf16");
  Rng r(8);
  // And the rounding is really there: the f32 product of the same operands differs.
  auto A = randn(r, 64 * 64), B = randn(r, 64 * 64);
  std::vector<float> c32(64 * 64), c16(64 * 64);
  gemm({64, 64, 64, A.data(), 64, false, B.data(), 64, false, c32.data(), 64, false, nullptr});
  GemmShape g{64, 64, 64, A.data(), 64, false, B.data(), 64, false, c16.data(), 64, false, nullptr};
  g.bf16 = true;
  gemm(g);
  EXPECT_NE(c32, c16);
}

// --precision bf16 rounds every linear layer's forward, the two that add onto the residual stream
// (attention's projection, the MLP's second layer: linear_fwd with accumulate) included: they
// called the f32 product directly until 2026-12-07. y = r + b + round(x) round(W)ᵀ, in float64.
TEST(TrainGemm, Bf16LinearForwardOntoTheStreamRoundsItsOperands) {
  if (!bf16_gemm_supported()) GTEST_SKIP() << "SKIPPED: this CPU has no AVX512-BF16 (" << cpu_summary() << ")";
  Rng r(9);
  auto round_bf16 = [](float v) { return (double)bf16_to_f32(f32_to_bf16(v)); };
  const int64_t rows = 37, in = 300, out = 45;
  auto x = randn(r, (size_t)(rows * in)), w = randn(r, (size_t)(out * in)), b = randn(r, (size_t)out);
  auto stream = randn(r, (size_t)(rows * out));
  std::vector<float> y16 = stream, y32 = stream;
  set_linear_bf16(true);
  linear_fwd<float>(y16.data(), x.data(), w.data(), b.data(), rows, in, out, true);
  set_linear_bf16(false);
  linear_fwd<float>(y32.data(), x.data(), w.data(), b.data(), rows, in, out, true);
  double worst_f32 = 0;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t o = 0; o < out; o++) {
      double want = (double)stream[(size_t)(i * out + o)] + b[(size_t)o], exact = want;
      for (int64_t k = 0; k < in; k++) {
        want += round_bf16(x[(size_t)(i * in + k)]) * round_bf16(w[(size_t)(o * in + k)]);
        exact += (double)x[(size_t)(i * in + k)] * w[(size_t)(o * in + k)];
      }
      const size_t at = (size_t)(i * out + o);
      ASSERT_NEAR(y16[at], want, 1e-4 + 1e-5 * std::fabs(want)) << "row " << i << " output " << o;
      ASSERT_NEAR(y32[at], exact, 1e-4 + 1e-5 * std::fabs(exact)) << "f32: row " << i << " output " << o;
      worst_f32 = std::max(worst_f32, std::fabs(y16[at] - exact));
    }
  EXPECT_GT(worst_f32, 1e-3) << "the bf16 forward equals the f32 product: nothing was rounded";
}

// An AVX-512 CPU without BF16's instructions (Ice Lake, Cascade Lake; here by switching them off)
// trains in f32 on its AVX-512 kernel and refuses --precision bf16 by name, not with a SIGILL.
TEST(TrainGemm, WithoutAvx512Bf16TheF32KernelStaysAndBf16IsRefused) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "SKIPPED: no AVX-512 here (" << cpu_summary() << ")";
  set_avx512_bf16_allowed(false);
  const MicroKernel uk = micro_kernel(Isa::Avx512);
  const bool supported = bf16_gemm_supported();
  std::string why;
  try {
    set_linear_bf16(true);
  } catch (const Error& e) {
    why = e.what();
  }
  set_avx512_bf16_allowed(true);
  set_linear_bf16(false);
  EXPECT_EQ(uk.run_bf16, nullptr);
  EXPECT_EQ(uk.to_pairs, nullptr);
  EXPECT_EQ(uk.mr, 12);  // the AVX-512 tile, not AVX2's
  EXPECT_FALSE(supported);
  EXPECT_NE(why.find("--precision bf16 needs a CPU with AVX512-BF16"), std::string::npos) << why;
  EXPECT_NE(why.find("bf16 unused"), std::string::npos) << why;  // the summary says why
}

// The AMX-BF16 tiles (train/gemm_amx.cpp): over the model of the tiles on any CPU with
// AVX512-BF16 (their B packing is vdpbf16ps's), over the real tiles where the CPU has AMX.
TEST(TrainGemm, EmulatedAmxTilesMatchTheRoundedReference) {
  if (!bf16_gemm_supported()) GTEST_SKIP() << "SKIPPED: this CPU has no AVX512-BF16 (" << cpu_summary() << ")";
  const MicroKernel uk = micro_kernel_amx_emulated();
  expect_bf16_products(&uk, "emulated AMX");
  // And each thread gives the tiles back after its part of a product (MicroKernel::done): tile
  // state left in use costs every context switch 8 KB more.
  EXPECT_FALSE(kernels::EmulatedTiles::state().configured);
}

TEST(TrainGemm, AmxTilesMatchTheRoundedReference) {
  if (std::string why = test::amx_unavailable(cpu_features().amx_bf16, "bf16"); !why.empty()) GTEST_SKIP() << why;
  const MicroKernel uk = micro_kernel_amx();
  expect_bf16_products(&uk, "AMX");
  EXPECT_TRUE(amx_bf16_train_usable()) << "the start-up check refused the tiles the test above accepted";
}

TEST(TrainGemm, CausalTrianglesMatchTheFullProduct) {
  // Square products as attention has them (T x T with T up to past one k-block of 384), with the
  // triangle that the mask zeroes: skipping it must not change what is wanted.
  Rng r(9);
  for (Isa isa : isas())
    for (int64_t T : {5, 13, 50, 97, 400})
      for (int64_t hd : {4, 32}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " T=" + std::to_string(T) + " hd=" + std::to_string(hd));
        auto q = randn(r, (size_t)(T * hd)), k = randn(r, (size_t)(T * hd)), pm = randn(r, (size_t)(T * T));
        for (int64_t i = 0; i < T; i++)
          for (int64_t j = i + 1; j < T; j++) pm[(size_t)(i * T + j)] = 0;  // lower-triangular, as P
        auto qd = widen(q), kd = widen(k), pd = widen(pm);
        // LowerC: S = Q Kᵀ, wanted on and below the diagonal.
        std::vector<float> s((size_t)(T * T), NAN);
        std::vector<double> sd((size_t)(T * T));
        gemm({T, T, hd, q.data(), hd, false, k.data(), hd, true, s.data(), T, false, nullptr, GemmShape::LowerC}, false, isa);
        gemm_ref<double>(T, T, hd, qd.data(), hd, false, kd.data(), hd, true, sd.data(), T, false, nullptr);
        for (int64_t i = 0; i < T; i++)
          for (int64_t j = 0; j <= i; j++) ASSERT_NEAR(s[(size_t)(i * T + j)], sd[(size_t)(i * T + j)], 1e-4);
        // LowerA: O = P V; UpperA: dV = Pᵀ dO (accumulating, as grouped heads do).
        for (auto tri : {GemmShape::LowerA, GemmShape::UpperA}) {
          bool ta = tri == GemmShape::UpperA;
          auto c0 = randn(r, (size_t)(T * hd));
          std::vector<float> c = c0;
          std::vector<double> cd = widen(c0);
          gemm({T, hd, T, pm.data(), T, ta, k.data(), hd, false, c.data(), hd, ta, nullptr, tri}, false, isa);
          gemm_ref<double>(T, hd, T, pd.data(), T, ta, kd.data(), hd, false, cd.data(), hd, ta, nullptr);
          for (size_t i = 0; i < c.size(); i++) ASSERT_NEAR(c[i], cd[i], 1e-4 * std::sqrt((double)T)) << (ta ? "UpperA" : "LowerA");
        }
      }
}

// f32 and bf16 (whose threads round the operand they all read together first), split by rows
// and, for 11 tiles of rows (11 x 12 = 132 rows), by columns.
TEST(TrainGemm, SameBitsForAnyThreadCount) {
  Rng r(2);
  for (int64_t M : {300, 132})
    for (bool bf16 : {false, true}) {
      if (bf16 && !bf16_gemm_supported()) continue;
      const int64_t N = 600, K = 700;
      auto A = randn(r, (size_t)(M * K)), B = randn(r, (size_t)(N * K));
      std::vector<float> c1((size_t)(M * N)), c2((size_t)(M * N)), c3((size_t)(M * N));
      GemmShape g{M, N, K, A.data(), K, false, B.data(), K, true, c1.data(), N};
      g.bf16 = bf16;
      set_threads(1);
      gemm(g);
      set_threads(2);
      g.C = c2.data();
      gemm(g);
      set_threads(3);
      g.C = c3.data();
      gemm(g);
      set_threads(0);
      EXPECT_EQ(c1, c2) << "M=" << M << " bf16=" << bf16;
      EXPECT_EQ(c1, c3) << "M=" << M << " bf16=" << bf16;
    }
}

// ---- row kernels: each ISA's float version against the float64 reference.

namespace {

template <typename Fn>
void for_each_isa(Fn&& fn) {
  for (Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    fn(rowops_f32(isa));
  }
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << "[" << i << "]";
}

}  // namespace

TEST(TrainRowOps, NormsMatchTheReference) {
  const RowOps<double>& ref = rowops_ref<double>();
  for (int64_t C : {1, 7, 16, 33, 128, 385}) {
    Rng r(3 + C);
    const int64_t rows = 5;
    auto x = randn(r, (size_t)(rows * C), 3.0), w = randn(r, (size_t)C), b = randn(r, (size_t)C);
    auto dout = randn(r, (size_t)(rows * C));
    auto xd = widen(x), wd = widen(w), bd = widen(b), dd = widen(dout);
    std::vector<double> yd(x.size()), md(rows), rd(rows), dxd(x.size(), 0.5), dwd(C, 0.0), dbd(C, 0.0);
    ref.layernorm_fwd(yd.data(), md.data(), rd.data(), xd.data(), wd.data(), bd.data(), rows, C, 1e-5);
    ref.layernorm_bwd(dxd.data(), dwd.data(), dbd.data(), dd.data(), xd.data(), md.data(), rd.data(), wd.data(), rows, C);
    std::vector<double> yr(x.size()), rr(rows), dxr(x.size(), 0.5), dwr(C, 0.0);
    ref.rmsnorm_fwd(yr.data(), rr.data(), xd.data(), wd.data(), rows, C, 1e-5);
    ref.rmsnorm_bwd(dxr.data(), dwr.data(), dd.data(), xd.data(), rr.data(), wd.data(), rows, C);
    for_each_isa([&](const RowOps<float>& ops) {
      std::vector<float> y(x.size()), m(rows), rs(rows), dx(x.size(), 0.5f), dw(C, 0.0f), db(C, 0.0f);
      ops.layernorm_fwd(y.data(), m.data(), rs.data(), x.data(), w.data(), b.data(), rows, C, 1e-5f);
      expect_close(y, yd, 1e-5, "layernorm");
      ops.layernorm_bwd(dx.data(), dw.data(), db.data(), dout.data(), x.data(), m.data(), rs.data(), w.data(), rows, C);
      expect_close(dx, dxd, 1e-4, "layernorm dx");
      expect_close(dw, dwd, 1e-4, "layernorm dw");
      expect_close(db, dbd, 1e-5, "layernorm db");
      std::vector<float> y2(x.size()), r2(rows), dx2(x.size(), 0.5f), dw2(C, 0.0f);
      ops.rmsnorm_fwd(y2.data(), r2.data(), x.data(), w.data(), rows, C, 1e-5f);
      expect_close(y2, yr, 1e-5, "rmsnorm");
      ops.rmsnorm_bwd(dx2.data(), dw2.data(), dout.data(), x.data(), r2.data(), w.data(), rows, C);
      expect_close(dx2, dxr, 1e-4, "rmsnorm dx");
      expect_close(dw2, dwr, 1e-4, "rmsnorm dw");
    });
  }
}

TEST(TrainRowOps, ActivationsMatchTheReference) {
  const RowOps<double>& ref = rowops_ref<double>();
  Rng r(4);
  const int64_t rows = 3, I = 37, n = rows * I;
  auto x = randn(r, (size_t)n, 4.0), gu = randn(r, (size_t)(2 * n), 4.0), dout = randn(r, (size_t)n);
  x[0] = 30, x[1] = -30, gu[0] = 90, gu[1] = -90;  // saturation
  auto xd = widen(x), gud = widen(gu), dd = widen(dout);
  std::vector<double> g(n), dg(n), s(n), ds(2 * n);
  ref.gelu_fwd(g.data(), xd.data(), n);
  ref.gelu_bwd(dg.data(), xd.data(), dd.data(), n);
  ref.swiglu_fwd(s.data(), gud.data(), rows, I);
  ref.swiglu_bwd(ds.data(), gud.data(), dd.data(), rows, I);
  for_each_isa([&](const RowOps<float>& ops) {
    std::vector<float> a(n), da(n), b(n), db(2 * n);
    ops.gelu_fwd(a.data(), x.data(), n);
    expect_close(a, g, 2e-6, "gelu");
    ops.gelu_bwd(da.data(), x.data(), dout.data(), n);
    expect_close(da, dg, 2e-6, "gelu'");
    ops.swiglu_fwd(b.data(), gu.data(), rows, I);
    expect_close(b, s, 2e-6, "swiglu");
    ops.swiglu_bwd(db.data(), gu.data(), dout.data(), rows, I);
    expect_close(db, ds, 2e-6, "swiglu'");
  });
}

TEST(TrainRowOps, SoftmaxRopeLossAdamMatchTheReference) {
  const RowOps<double>& ref = rowops_ref<double>();
  Rng r(5);
  for (int64_t T : {1, 5, 17, 40}) {
    const int64_t ld = T + 3;
    auto s = randn(r, (size_t)(T * ld), 5.0), dp = randn(r, (size_t)(T * ld));
    auto sd = widen(s), dpd = widen(dp);
    std::vector<double> p(sd.size()), ds(sd.size());
    ref.causal_softmax_fwd(p.data(), sd.data(), T, ld, 0.3);
    ref.causal_softmax_bwd(ds.data(), p.data(), dpd.data(), T, ld, 0.3);
    for_each_isa([&](const RowOps<float>& ops) {
      std::vector<float> pf(s.size()), dsf(s.size());
      ops.causal_softmax_fwd(pf.data(), s.data(), T, ld, 0.3f);
      ops.causal_softmax_bwd(dsf.data(), pf.data(), dp.data(), T, ld, 0.3f);
      for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) {
          size_t at = (size_t)(i * ld + j);
          ASSERT_NEAR(pf[at], p[at], 1e-6) << "p " << i << "," << j;
          ASSERT_NEAR(dsf[at], ds[at], 1e-5) << "ds " << i << "," << j;
        }
    });
  }
  {  // rope
    const int64_t heads = 3, hd = 40;
    auto x = randn(r, (size_t)(heads * hd)), c = randn(r, (size_t)(hd / 2)), sn = randn(r, (size_t)(hd / 2));
    for (bool inv : {false, true}) {
      auto xd = widen(x), cd = widen(c), snd = widen(sn);
      ref.rope(xd.data(), heads, hd, cd.data(), snd.data(), inv);
      for_each_isa([&](const RowOps<float>& ops) {
        std::vector<float> xf = x;
        ops.rope(xf.data(), heads, hd, c.data(), sn.data(), inv);
        expect_close(xf, xd, 1e-6, "rope");
      });
    }
  }
  for (int64_t V : {2, 16, 73, 100}) {  // cross-entropy; row 3 is not scored (loss and dlogits 0)
    const int64_t rows = 5;
    auto l = randn(r, (size_t)(rows * V), 4.0);
    std::vector<int32_t> tgt = {0, (int32_t)V - 1, (int32_t)(V / 2), -1, 1};
    auto ld_ = widen(l);
    std::vector<double> loss(rows);
    ref.cross_entropy(ld_.data(), loss.data(), tgt.data(), rows, V, 0.25);
    for_each_isa([&](const RowOps<float>& ops) {
      std::vector<float> lf = l, lossf(rows);
      ops.cross_entropy(lf.data(), lossf.data(), tgt.data(), rows, V, 0.25f);
      expect_close(lf, ld_, 1e-6, "dlogits");
      expect_close(lossf, loss, 1e-6, "loss");
    });
  }
  {  // AdamW
    const int64_t n = 45;
    auto p = randn(r, (size_t)n), g = randn(r, (size_t)n), m = randn(r, (size_t)n, 0.1);
    std::vector<float> v(n);
    for (float& x : v) x = (float)std::fabs(0.01 * r.normal());
    auto pd = widen(p), gd = widen(g), md = widen(m), vd = widen(v);
    ref.adamw(pd.data(), gd.data(), md.data(), vd.data(), n, 0.5, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.19, 0.0975);
    for_each_isa([&](const RowOps<float>& ops) {
      std::vector<float> pf = p, mf = m, vf = v;
      ops.adamw(pf.data(), g.data(), mf.data(), vf.data(), n, 0.5f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f, 0.0975f);
      expect_close(pf, pd, 1e-6, "p");
      expect_close(mf, md, 1e-6, "m");
      expect_close(vf, vd, 1e-6, "v");
    });
  }
  {  // sums of squares and row sums
    const int64_t rows = 7, n = 1500;
    auto x = randn(r, (size_t)(rows * n));
    auto xd = widen(x);
    std::vector<double> acc(n, 1.0);
    ref.add_rows(acc.data(), xd.data(), rows, n);
    double ss = ref.sum_squares(xd.data(), rows * n);
    for_each_isa([&](const RowOps<float>& ops) {
      std::vector<float> a(n, 1.0f);
      ops.add_rows(a.data(), x.data(), rows, n);
      expect_close(a, acc, 1e-6, "add_rows");
      EXPECT_NEAR(ops.sum_squares(x.data(), rows * n), ss, 1e-6 * ss);
    });
  }
}
