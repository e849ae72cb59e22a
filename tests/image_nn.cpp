// The image layers (src/image/nn.h) against plain double-precision loops written from the
// definitions (PyTorch's conv2d / group_norm / scaled_dot_product_attention docs), on random
// ragged shapes: odd sizes, stride 2 with padding, channel counts that are not SIMD multiples.
// The weights come from a safetensors file in the checkpoint's own [C_out, C_in, kh, kw] order, so
// the load-time reorder to channels-last is checked too. Whole-model agreement with diffusers is
// tests/image_unet.cpp's and image_vae.cpp's job.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "image/nn.h"
#include "kernels/ops.h"
#include "io/safetensors.h"
#include "test_support.h"

using namespace kvad;
using namespace kvad::image;

namespace {

std::vector<float> randn(Rng& r, int64_t n, float scale = 1.0f) {
  std::vector<float> v((size_t)n);
  for (float& x : v) x = (float)r.normal() * scale;
  return v;
}

TensorToWrite tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  return {name, DType::F32, std::move(shape), std::string((const char*)v.data(), v.size() * sizeof(float))};
}

std::unique_ptr<SafetensorsCheckpoint> checkpoint_of(const std::vector<TensorToWrite>& t, const std::string& tag) {
  std::string dir = test::temp_dir(tag);
  write_safetensors(dir + "/model.safetensors", t);
  return std::make_unique<SafetensorsCheckpoint>(dir);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); i++) m = std::max(m, std::abs((double)a[i] - b[i]));
  return m;
}

// NCHW conv in double, as torch.nn.functional.conv2d defines it.
std::vector<double> conv_ref(const std::vector<float>& x, int64_t n, int64_t ci, int64_t h, int64_t w,
                             const std::vector<float>& wt, const std::vector<float>& b, int64_t co, int64_t k,
                             int64_t stride, int64_t pad, int64_t& oh, int64_t& ow) {
  oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
  std::vector<double> y((size_t)(n * co * oh * ow));
  for (int64_t bi = 0; bi < n; bi++)
    for (int64_t o = 0; o < co; o++)
      for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++) {
          double s = b[(size_t)o];
          for (int64_t i = 0; i < ci; i++)
            for (int64_t ky = 0; ky < k; ky++)
              for (int64_t kx = 0; kx < k; kx++) {
                int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                s += (double)wt[(size_t)(((o * ci + i) * k + ky) * k + kx)] * x[(size_t)(((bi * ci + i) * h + iy) * w + ix)];
              }
          y[(size_t)(((bi * co + o) * oh + oy) * ow + ox)] = s;
        }
  return y;
}

struct ConvCase {
  int64_t n, ci, co, h, w, k, stride, pad;
};

TEST(ImageNn, Conv2dMatchesTheDefinition) {
  Rng r(7);
  for (ConvCase c : {ConvCase{2, 5, 7, 9, 11, 3, 1, 1}, ConvCase{1, 16, 33, 8, 8, 3, 2, 1}, ConvCase{2, 3, 4, 13, 6, 3, 2, 1},
                     ConvCase{1, 19, 6, 5, 7, 1, 1, 0}, ConvCase{1, 4, 32, 64, 64, 3, 1, 1}}) {
    auto x = randn(r, c.n * c.ci * c.h * c.w);
    auto wt = randn(r, c.co * c.ci * c.k * c.k, 1.0f / std::sqrt((float)(c.ci * c.k * c.k)));
    auto b = randn(r, c.co, 0.1f);
    auto ck = checkpoint_of({tensor("conv.weight", {c.co, c.ci, c.k, c.k}, wt), tensor("conv.bias", {c.co}, b)}, "nn-conv");
    Conv2d conv = Conv2d::load(*ck, "conv", c.co, c.ci, c.k, c.stride, c.pad);
    Map y = conv.apply(from_nchw(x.data(), c.n, c.ci, c.h, c.w));
    int64_t oh, ow;
    auto want = conv_ref(x, c.n, c.ci, c.h, c.w, wt, b, c.co, c.k, c.stride, c.pad, oh, ow);
    ASSERT_EQ(y.h, oh);
    ASSERT_EQ(y.w, ow);
    ASSERT_EQ(y.c, c.co);
    double err = max_abs_diff(to_nchw(y), want);
    EXPECT_LE(err, 2e-5) << "conv " << c.ci << "->" << c.co << " k" << c.k << " s" << c.stride << " on " << c.h << "x" << c.w;
  }
  // The wrong number of input channels is an error, not a read past the map.
  auto ck = checkpoint_of({tensor("c.weight", {2, 3, 3, 3}, std::vector<float>(54, 0.f)), tensor("c.bias", {2}, {0.f, 0.f})},
                          "nn-conv-bad");
  Conv2d conv = Conv2d::load(*ck, "c", 2, 3, 3, 1, 1);
  EXPECT_THROW(conv.apply(Map(1, 4, 4, 5)), Error);
  EXPECT_THROW(Conv2d::load(*ck, "c", 2, 4, 3, 1, 1), Error);  // shape named, not reinterpreted
}

TEST(ImageNn, GroupNormMatchesTheDefinition) {
  Rng r(8);
  struct Case { int64_t n, c, h, w, groups; bool silu; };
  for (Case c : {Case{2, 32, 5, 7, 32, false}, Case{1, 64, 9, 9, 32, true}, Case{2, 24, 3, 11, 8, true}, Case{1, 12, 4, 4, 3, false}}) {
    auto x = randn(r, c.n * c.c * c.h * c.w, 3.0f);
    for (float& v : x) v += 5.0f;  // an offset the statistics must remove
    auto w = randn(r, c.c, 0.1f), b = randn(r, c.c, 0.1f);
    for (float& v : w) v += 1.0f;
    auto ck = checkpoint_of({tensor("gn.weight", {c.c}, w), tensor("gn.bias", {c.c}, b)}, "nn-gn");
    GroupNorm gn = GroupNorm::load(*ck, "gn", c.c, c.groups, 1e-6);
    Map m = from_nchw(x.data(), c.n, c.c, c.h, c.w);
    gn.apply(m, c.silu);
    std::vector<double> want(x.size());
    const int64_t cg = c.c / c.groups, hw = c.h * c.w;
    for (int64_t bi = 0; bi < c.n; bi++)
      for (int64_t g = 0; g < c.groups; g++) {
        double mean = 0, var = 0;
        auto idx = [&](int64_t ch, int64_t p) { return (size_t)((bi * c.c + ch) * hw + p); };
        for (int64_t ch = g * cg; ch < (g + 1) * cg; ch++)
          for (int64_t p = 0; p < hw; p++) mean += x[idx(ch, p)];
        mean /= double(cg * hw);
        for (int64_t ch = g * cg; ch < (g + 1) * cg; ch++)
          for (int64_t p = 0; p < hw; p++) var += (x[idx(ch, p)] - mean) * (x[idx(ch, p)] - mean);
        var /= double(cg * hw);
        for (int64_t ch = g * cg; ch < (g + 1) * cg; ch++)
          for (int64_t p = 0; p < hw; p++) {
            double v = (x[idx(ch, p)] - mean) / std::sqrt(var + 1e-6) * w[(size_t)ch] + b[(size_t)ch];
            want[idx(ch, p)] = c.silu ? v / (1 + std::exp(-v)) : v;
          }
      }
    EXPECT_LE(max_abs_diff(to_nchw(m), want), 2e-5) << c.c << " channels in " << c.groups << " groups";
  }
  auto ck = checkpoint_of({tensor("gn.weight", {6}, std::vector<float>(6, 1.f)), tensor("gn.bias", {6}, std::vector<float>(6, 0.f))},
                          "nn-gn-bad");
  EXPECT_THROW(GroupNorm::load(*ck, "gn", 6, 4, 1e-5), Error);
}

struct AttentionCase { int64_t n_q, n_kv, heads, d; };

// softmax(q k^T / sqrt(d)) v in double, q, k and v read as column slices of fused [n, 3 * width]
// rows. `bf16`: q, k, v and the softmax's numerators rounded to bf16, as the bf16 path rounds them.
std::vector<double> attention_definition(const std::vector<float>& fused_q, const std::vector<float>& fused_kv,
                                         AttentionCase c, bool bf16) {
  const int64_t width = c.heads * c.d, stride = 3 * width;
  auto rd = [&](float x) { return bf16 ? (double)bf16_to_f32(f32_to_bf16(x)) : (double)x; };
  std::vector<double> want((size_t)(c.n_q * width));
  for (int64_t h = 0; h < c.heads; h++)
    for (int64_t i = 0; i < c.n_q; i++) {
      std::vector<double> s((size_t)c.n_kv);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < c.n_kv; j++) {
        double dot = 0;
        for (int64_t e = 0; e < c.d; e++)
          dot += rd(fused_q[(size_t)(i * stride + h * c.d + e)]) * rd(fused_kv[(size_t)(j * stride + width + h * c.d + e)]);
        s[(size_t)j] = dot / std::sqrt((double)c.d);
        mx = std::max(mx, s[(size_t)j]);
      }
      // bf16: the numerators are rounded and the output divided by their (unrounded) sum.
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (double& v : s) v = rd((float)v) / sum;
      for (int64_t e = 0; e < c.d; e++) {
        double acc = 0;
        for (int64_t j = 0; j < c.n_kv; j++) acc += s[(size_t)j] * rd(fused_kv[(size_t)(j * stride + 2 * width + h * c.d + e)]);
        want[(size_t)(i * width + h * c.d + e)] = acc;
      }
    }
  return want;
}

const AttentionCase kAttentionCases[] = {{37, 37, 2, 8}, {100, 77, 5, 16}, {65, 3, 1, 40}, {1, 1, 3, 4}, {130, 301, 2, 40}};

TEST(ImageNn, AttentionMatchesTheDefinition) {
  Rng r(9);
  for (AttentionCase c : kAttentionCases) {
    // q, k and v as column slices of one fused [n, 3 * width] product, as a self-attention computes them.
    const int64_t width = c.heads * c.d, stride = 3 * width;
    auto fused_q = randn(r, c.n_q * stride, 1.5f), fused_kv = randn(r, c.n_kv * stride, 1.5f);
    std::vector<float> out((size_t)(c.n_q * width));
    attention(fused_q.data(), stride, fused_kv.data() + width, fused_kv.data() + 2 * width, stride, c.n_q, c.n_kv,
              c.heads, c.d, out.data());
    EXPECT_LE(max_abs_diff(out, attention_definition(fused_q, fused_kv, c, false)), 1e-5)
        << c.n_q << "x" << c.n_kv << " heads " << c.heads << " d " << c.d;
  }
}

// The bf16 products (odd head widths and key counts padded to pairs, blocks of 48 queries with a
// ragged last one): within bf16's rounding of the definition, and on average ~10x closer to the
// definition on bf16-rounded operands and numerators than to the exact one, so the roundings are
// the ones described (a numerator may still round to the neighbouring bf16: the kernel's exp is
// a polynomial, so the max difference to the rounded definition is not the test).
TEST(ImageNn, AttentionInBf16MatchesTheRoundedDefinition) {
  if (!avx512_bf16_enabled()) GTEST_SKIP() << "no AVX512-BF16 here: bf16 attention runs the f32 path (tested below)";
  Rng r(19);
  auto mean_abs = [](const std::vector<float>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += std::fabs(a[i] - b[i]);
    return s / (double)a.size();
  };
  for (AttentionCase c : {AttentionCase{37, 37, 2, 8}, AttentionCase{100, 77, 5, 16}, AttentionCase{65, 3, 1, 40},
                          AttentionCase{1, 1, 3, 4}, AttentionCase{130, 301, 2, 40}, AttentionCase{49, 20, 1, 7}}) {
    const int64_t width = c.heads * c.d, stride = 3 * width;
    auto fused_q = randn(r, c.n_q * stride, 1.5f), fused_kv = randn(r, c.n_kv * stride, 1.5f);
    std::vector<float> out((size_t)(c.n_q * width));
    attention(fused_q.data(), stride, fused_kv.data() + width, fused_kv.data() + 2 * width, stride, c.n_q, c.n_kv,
              c.heads, c.d, out.data(), /*bf16=*/true);
    const auto exact = attention_definition(fused_q, fused_kv, c, false);
    const auto rounded = attention_definition(fused_q, fused_kv, c, true);
    // Measured 0.008-0.028 max abs (values ~1.5 sigma): bf16's 2^-9 relative on q, k and v.
    EXPECT_LE(max_abs_diff(out, exact), 0.06) << c.n_q << "x" << c.n_kv << " heads " << c.heads << " d " << c.d;
    EXPECT_LT(mean_abs(out, rounded), 0.1 * mean_abs(out, exact)) << c.n_q << "x" << c.n_kv << " heads " << c.heads;
  }
}

// Without AVX512-BF16's instructions (Ice Lake, Cascade Lake; here by switching them off) a bf16
// attention is the f32 one, bit for bit: its rounding is the products', which that CPU lacks.
TEST(ImageNn, AttentionInBf16WithoutBf16ProductsIsTheF32One) {
  Rng r(23);
  const AttentionCase c{100, 77, 5, 16};
  const int64_t width = c.heads * c.d, stride = 3 * width;
  auto fused_q = randn(r, c.n_q * stride, 1.5f), fused_kv = randn(r, c.n_kv * stride, 1.5f);
  std::vector<float> f32((size_t)(c.n_q * width)), bf16(f32.size());
  set_avx512_bf16_allowed(false);
  attention(fused_q.data(), stride, fused_kv.data() + width, fused_kv.data() + 2 * width, stride, c.n_q, c.n_kv, c.heads,
            c.d, f32.data(), /*bf16=*/false);
  attention(fused_q.data(), stride, fused_kv.data() + width, fused_kv.data() + 2 * width, stride, c.n_q, c.n_kv, c.heads,
            c.d, bf16.data(), /*bf16=*/true);
  set_avx512_bf16_allowed(true);
  EXPECT_EQ(f32, bf16);
  EXPECT_LE(max_abs_diff(bf16, attention_definition(fused_q, fused_kv, c, false)), 1e-5);
}

TEST(ImageNn, LinearReadsAOneByOneConvToo) {
  Rng r(10);
  auto w = randn(r, 6 * 5), b = randn(r, 6), x = randn(r, 3 * 5);
  auto ck = checkpoint_of({tensor("lin.weight", {6, 5}, w), tensor("lin.bias", {6}, b), tensor("pc.weight", {6, 5, 1, 1}, w),
                           tensor("pc.bias", {6}, b)},
                          "nn-linear");
  Linear lin = Linear::load(*ck, "lin", 6, 5, true), pc = Linear::load(*ck, "pc", 6, 5, true);
  std::vector<float> y1(18), y2(18);
  lin.apply(x.data(), 3, y1.data());
  pc.apply(x.data(), 3, y2.data());
  std::vector<double> want(18);
  for (int t = 0; t < 3; t++)
    for (int o = 0; o < 6; o++) {
      double s = b[(size_t)o];
      for (int i = 0; i < 5; i++) s += (double)x[(size_t)(t * 5 + i)] * w[(size_t)(o * 5 + i)];
      want[(size_t)(t * 6 + o)] = s;
    }
  EXPECT_LE(max_abs_diff(y1, want), 1e-5);
  EXPECT_LE(max_abs_diff(y2, want), 1e-5);
  EXPECT_THROW(Linear::load(*ck, "lin", 5, 6, true), Error);
}

TEST(ImageNn, ElementwiseAndResampling) {
  Rng r(11);
  auto x = randn(r, 1000, 4.0f), g = randn(r, 1000, 4.0f);
  std::vector<float> s = x, m(x.size());
  silu(s.data(), (int64_t)s.size());
  kernels::gelu_erf_mul(x.data(), g.data(), m.data(), (int64_t)m.size());  // GEGLU's product
  for (size_t i = 0; i < x.size(); i++) {
    double v = x[i], gv = g[i];
    EXPECT_NEAR(s[i], v / (1 + std::exp(-v)), 1e-5);
    EXPECT_NEAR(m[i], v * 0.5 * gv * (1 + std::erf(gv / std::sqrt(2.0))), 1e-4);
  }
  auto img = randn(r, 2 * 3 * 5 * 7);
  Map a = from_nchw(img.data(), 2, 3, 5, 7);
  EXPECT_EQ(to_nchw(a), img);  // the layout change is exact both ways
  Map up = upsample_nearest2x(a);
  ASSERT_EQ(up.h, 10);
  ASSERT_EQ(up.w, 14);
  for (int64_t b = 0; b < 2; b++)
    for (int64_t y = 0; y < 10; y++)
      for (int64_t xx = 0; xx < 14; xx++)
        for (int64_t ch = 0; ch < 3; ch++) ASSERT_EQ(up.at(b, y, xx)[ch], img[(size_t)(((b * 3 + ch) * 5 + y / 2) * 7 + xx / 2)]);
}

}  // namespace
