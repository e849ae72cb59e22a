// The UNet's and VAE's layers (nn.h) on channels-last maps. The convolutions and projections are
// kvad's matrix products (kernels/gemm.h, q8 through Weight); attention runs the single-threaded kernels per
// block of queries inside one parallel region; the norms and activations are plain loops.
#include "image/nn.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/threads.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace kvad::image {

Map from_nchw(const float* x, int64_t n, int64_t c, int64_t h, int64_t w) {
  Map m(n, h, w, c);
  for (int64_t b = 0; b < n; b++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t y = 0; y < h; y++)
        for (int64_t xx = 0; xx < w; xx++) m.at(b, y, xx)[ch] = x[((b * c + ch) * h + y) * w + xx];
  return m;
}

std::vector<float> to_nchw(const Map& m) {
  std::vector<float> out(m.v.size());
  for (int64_t b = 0; b < m.n; b++)
    for (int64_t ch = 0; ch < m.c; ch++)
      for (int64_t y = 0; y < m.h; y++)
        for (int64_t x = 0; x < m.w; x++) out[(size_t)(((b * m.c + ch) * m.h + y) * m.w + x)] = m.at(b, y, x)[ch];
  return out;
}

// A bf16 layer takes bf16 activations too (kernels/gemm.h): twice the f32 rate; the activations of
// a UNet come out of GroupNorms and LayerNorms in a range bf16 keeps to 3 significant digits, as
// PyTorch's bf16 path does.
void LayerWeight::product(const float* x, int64_t n, float* y) const {
  if (!packed.empty()) kernels::gemm_packed(x, n, packed, y);
  else q.matmul(x, n, y);
}

LayerWeight LayerWeight::from_f32(const std::vector<float>& v, int64_t rows, int64_t cols, WeightFormat fmt) {
  LayerWeight l;
  l.rows = rows, l.cols = cols;
  if (fmt == WeightFormat::F32) l.packed = kernels::PackedWeight::pack_f32(v.data(), rows, cols);
  else if (fmt == WeightFormat::BF16) l.packed = kernels::PackedWeight::pack_bf16(v.data(), rows, cols);
  else if (fmt == WeightFormat::Q8) l.q = Weight::from_f32(v, rows, cols, fmt);
  else fail("image layers run in f32, bf16 or q8, not {}", weight_format_name(fmt));
  return l;
}

void Linear::apply_group(const float* x, int64_t n, std::initializer_list<std::pair<const Linear*, float*>> outs) {
  bool all_q8 = true;
  for (auto& [l, y] : outs) all_q8 = all_q8 && l->w.packed.empty() && l->b.empty();
  if (all_q8 && outs.size() <= 3) {
    const Linear* ls[3];
    float* ys[3];
    size_t i = 0;
    for (auto& [l, y] : outs) ls[i] = l, ys[i++] = y;
    if (i == 2) return Weight::matmul_group(x, n, {{&ls[0]->w.q, ys[0]}, {&ls[1]->w.q, ys[1]}});
    if (i == 3) return Weight::matmul_group(x, n, {{&ls[0]->w.q, ys[0]}, {&ls[1]->w.q, ys[1]}, {&ls[2]->w.q, ys[2]}});
  }
  for (auto& [l, y] : outs) l->apply(x, n, y);
}

void Linear::apply(const float* x, int64_t n, float* y) const {
  w.product(x, n, y);
  if (!b.empty()) kernels::add_bias(y, b.data(), n, out());
}

Linear Linear::load(Checkpoint& ck, const std::string& name, int64_t out, int64_t in, bool bias, WeightFormat fmt) {
  Linear l;
  std::string wn = name + ".weight";
  // A 1x1 convolution's [out, in, 1, 1] weight (SD 1.5's proj_in / proj_out) is the same product
  // on each pixel.
  bool conv1x1 = ck.get(wn).shape.size() == 4;
  TensorView t = ck.get(wn, conv1x1 ? std::vector<int64_t>{out, in, 1, 1} : std::vector<int64_t>{out, in});
  l.w = LayerWeight::from_f32(to_f32(t), out, in, fmt);
  ck.release(t);  // copied: the file's pages need not stay resident beside the copy
  if (bias) l.b = to_f32(ck.get(name + ".bias", {out}));
  return l;
}

Conv2d Conv2d::load(Checkpoint& ck, const std::string& name, int64_t cout, int64_t cin, int64_t k, int64_t stride,
                    int64_t pad, WeightFormat fmt) {
  Conv2d c;
  c.cin = cin, c.cout = cout, c.k = k, c.stride = stride, c.pad = pad;
  TensorView t = ck.get(name + ".weight", {cout, cin, k, k});
  std::vector<float> w = to_f32(t);
  ck.release(t);  // reordered below: the file's pages need not stay resident beside the copy
  // [cout, cin, ky, kx] -> [cout, ky, kx, cin]: a patch row of im2col is k*k pixels of cin channels.
  std::vector<float> packed(w.size());
  for (int64_t o = 0; o < cout; o++)
    for (int64_t i = 0; i < cin; i++)
      for (int64_t ky = 0; ky < k; ky++)
        for (int64_t kx = 0; kx < k; kx++)
          packed[(size_t)(((o * k + ky) * k + kx) * cin + i)] = w[(size_t)(((o * cin + i) * k + ky) * k + kx)];
  c.w = LayerWeight::from_f32(packed, cout, k * k * cin, fmt);
  c.b = to_f32(ck.get(name + ".bias", {cout}));
  return c;
}

namespace {

// im2col in chunks of output pixels, so the patch matrix stays a few MB whatever the image size:
// each pixel's k x k patch of cin channels written as a row of `row_len` T (`put` converts a run
// of channels; padding and a row's tail are zeros), then `product(col, rows, first_pixel)`.
template <typename T, typename Put, typename Product>
void im2col_chunks(const Conv2d& c, const Map& x, int64_t row_len, const Put& put, const Product& product) {
  const int64_t oh = c.out_size(x.h), ow = c.out_size(x.w), total = x.n * oh * ow;
  const int64_t chunk = std::max<int64_t>(64, std::min<int64_t>(total, (int64_t(8) << 20) / (row_len * (int64_t)sizeof(T))));
  std::vector<T> col((size_t)(chunk * row_len));
  for (int64_t p0 = 0; p0 < total; p0 += chunk) {
    const int64_t rows = std::min(chunk, total - p0);
    pool().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) {
        int64_t p = p0 + r, b = p / (oh * ow), oy = p / ow % oh, ox = p % ow;
        T* dst = col.data() + r * row_len;
        for (int64_t ky = 0; ky < c.k; ky++) {
          int64_t iy = oy * c.stride - c.pad + ky;
          for (int64_t kx = 0; kx < c.k; kx++, dst += c.cin) {
            int64_t ix = ox * c.stride - c.pad + kx;
            if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) std::fill(dst, dst + c.cin, T(0));
            else put(x.at(b, iy, ix), c.cin, dst);
          }
        }
        std::fill(dst, col.data() + (r + 1) * row_len, T(0));
      }
    });
    product(col.data(), rows, p0);
  }
}

}  // namespace

Map Conv2d::apply(const Map& x) const {
  if (x.c != cin) fail("conv2d: input has {} channels, the weight expects {}", x.c, cin);
  const int64_t oh = out_size(x.h), ow = out_size(x.w);
  Map y(x.n, oh, ow, cout);
  const int64_t K = k * k * cin;
  if (k == 1 && stride == 1 && pad == 0) {
    w.product(x.v.data(), x.pixels(), y.v.data());
  } else if (w.packed.bf16) {
    // Patches written straight in bf16 (rows padded to an even length, as gemm_packed_bf16 takes
    // them): half the bytes of f32 patches and no second pass to round them.
    const int64_t Kp = (K + 1) / 2 * 2;
    im2col_chunks<uint16_t>(
        *this, x, Kp, [](const float* src, int64_t n, uint16_t* dst) { kernels::to_bf16(src, n, dst); },
        [&](const uint16_t* col, int64_t rows, int64_t p0) {
          kernels::gemm_packed_bf16(col, rows, Kp, w.packed, y.v.data() + p0 * cout);
        });
  } else {
    im2col_chunks<float>(
        *this, x, K, [](const float* src, int64_t n, float* dst) { std::copy_n(src, n, dst); },
        [&](const float* col, int64_t rows, int64_t p0) { w.product(col, rows, y.v.data() + p0 * cout); });
  }
  kernels::add_bias(y.v.data(), b.data(), y.pixels(), cout);
  return y;
}

static inline float silu1(float v) { return v / (1.0f + std::exp(-v)); }

void GroupNorm::apply(Map& x, bool then_silu) const {
  if (x.c % groups) fail("group norm: {} channels do not split into {} groups", x.c, groups);
  const int64_t C = x.c, cg = C / groups, hw = x.h * x.w;
  const int nt = pool().size();
  // Per image: per-channel sums over the pixels (rows contiguous in channels, so the SIMD runs
  // across channels), folded into the groups: first the mean, then the squared deviations about
  // it (two passes, as before, so a large mean costs no precision); then one scale and shift per
  // channel, with the SiLU that follows in a ResNet.
  std::vector<double> part((size_t)(nt * 2 * C));
  std::vector<float> center((size_t)C), scale((size_t)C), shift((size_t)C);
  std::vector<double> mean((size_t)groups), inv((size_t)groups);
  for (int64_t img = 0; img < x.n; img++) {
    float* base = x.v.data() + img * hw * C;
    for (int pass = 0; pass < 2; pass++) {
      std::fill(part.begin(), part.end(), 0.0);
      pool().run([&](int t, int n) {
        const int64_t r0 = hw * t / n, r1 = hw * (t + 1) / n;
        double* s = part.data() + (size_t)t * 2 * C;
        kernels::channel_moments(base + r0 * C, r1 - r0, C, center.data(), s, s + C);
      });
      for (int64_t g = 0; g < groups; g++) {
        double s1 = 0, s2 = 0;
        for (int t = 0; t < nt; t++)
          for (int64_t ch = g * cg; ch < (g + 1) * cg; ch++) s1 += part[(size_t)(t * 2 * C + ch)], s2 += part[(size_t)(t * 2 * C + C + ch)];
        if (pass == 0) mean[(size_t)g] = s1 / double(hw * cg);
        else {  // about the mean rounded to f32: the remaining offset s1 / N comes out exactly
          const double N = double(hw * cg), off = s1 / N;
          inv[(size_t)g] = 1.0 / std::sqrt(std::max(0.0, s2 / N - off * off) + eps);
          mean[(size_t)g] = center[(size_t)(g * cg)] + off;
        }
      }
      for (int64_t ch = 0; ch < C; ch++) center[(size_t)ch] = pass == 0 ? (float)mean[(size_t)(ch / cg)] : 0.0f;
    }
    for (int64_t ch = 0; ch < C; ch++) {
      const int64_t g = ch / cg;
      scale[(size_t)ch] = (float)(inv[(size_t)g] * w[(size_t)ch]);
      shift[(size_t)ch] = (float)(b[(size_t)ch] - mean[(size_t)g] * inv[(size_t)g] * w[(size_t)ch]);
    }
    pool().parallel_for(hw, 256, [&](int64_t r0, int64_t r1) {
      kernels::channel_affine(base + r0 * C, r1 - r0, C, scale.data(), shift.data(), then_silu);
    });
  }
}

GroupNorm GroupNorm::load(Checkpoint& ck, const std::string& name, int64_t c, int64_t groups, double eps) {
  if (groups < 1 || c % groups) fail("{}: {} channels do not split into {} groups", name, c, groups);
  GroupNorm g;
  g.groups = groups, g.eps = eps;
  g.w = to_f32(ck.get(name + ".weight", {c}));
  g.b = to_f32(ck.get(name + ".bias", {c}));
  return g;
}

void LayerNorm::apply(float* x, int64_t n) const {
  const int64_t c = (int64_t)w.size();
  pool().parallel_for(n, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) kernels::layernorm(x + r * c, w.data(), b.data(), (float)eps, c, x + r * c);
  });
}

LayerNorm LayerNorm::load(Checkpoint& ck, const std::string& name, int64_t c, double eps) {
  LayerNorm l;
  l.eps = eps;
  l.w = to_f32(ck.get(name + ".weight", {c}));
  l.b = to_f32(ck.get(name + ".bias", {c}));
  return l;
}

void silu(float* x, int64_t n) {
  pool().parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) x[i] = silu1(x[i]);
  });
}

Map upsample_nearest2x(const Map& x) {
  Map y(x.n, x.h * 2, x.w * 2, x.c);
  for (int64_t b = 0; b < x.n; b++)
    for (int64_t yy = 0; yy < y.h; yy++)
      for (int64_t xx = 0; xx < y.w; xx++) std::copy_n(x.at(b, yy / 2, xx / 2), x.c, y.at(b, yy, xx));
  return y;
}

namespace {

#if defined(__x86_64__)
// The bf16 form on gemm.h's packed panels: per head, K [n_kv, d] is packed as the "weight" of the
// scores (q_block K^T, outputs = keys) and V^T [d, n_kv] as that of the output (p_block V,
// outputs = the head's d), each once, read in place from the projections; every block of queries
// is then two calls of the 12 x 32 vdpbf16ps tile around one pass that turns a row of scores into
// bf16 numerators (softmax_numerators_bf16), the row's 1/sum applied to its output. At SD 1.5's
// 4,096 pixels a head's panels are 320 KB each, in L2.
void attention_bf16(const float* q, int64_t q_stride, const float* k, const float* v, int64_t kv_stride, int64_t n_q,
                    int64_t n_kv, int64_t heads, int64_t d, float* out) {
  const float scale = 1.0f / std::sqrt((float)d);
  const int64_t block = 48;  // 4 tiles of 12 rows
  const int64_t width = heads * d, dp = (d + 1) / 2 * 2, kvp = (n_kv + 1) / 2 * 2;
  const int64_t key_panels = (n_kv + 31) / 32, out_panels = (d + 31) / 32;
  const int nt = pool().size();
  const size_t per_thread = (size_t)(block * n_kv + block * d + block);  // scores, output block, 1/sums (f32)
  const size_t per_thread16 = (size_t)(block * dp + block * kvp);       // queries, numerators (bf16)
  std::vector<float> scratch((size_t)nt * per_thread);
  std::vector<uint16_t> scratch16((size_t)nt * per_thread16);
  // Every head's panels first, split over the pool (5 MB at SD 1.5's first level).
  std::vector<kernels::PackedWeight> packed((size_t)(2 * heads));
  pool().parallel_for(2 * heads, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      const int64_t h = i / 2;
      packed[(size_t)i] = i % 2 == 0 ? kernels::PackedWeight::pack_bf16_strided(k + h * d, n_kv, d, kv_stride, false)
                                     : kernels::PackedWeight::pack_bf16_strided(v + h * d, d, n_kv, kv_stride, true);
    }
  });
  for (int64_t h = 0; h < heads; h++) {
    const kernels::PackedWeight& keys = packed[(size_t)(2 * h)];
    const kernels::PackedWeight& values = packed[(size_t)(2 * h + 1)];
    const int64_t blocks = (n_q + block - 1) / block;
    pool().run([&](int t, int n) {
      float* s = scratch.data() + (size_t)t * per_thread;
      float* ob = s + block * n_kv;
      float* inv = ob + block * d;
      uint16_t* qb = scratch16.data() + (size_t)t * per_thread16;
      uint16_t* pb = qb + block * dp;
      for (int64_t bi = t; bi < blocks; bi += n) {
        const int64_t i0 = bi * block, m = std::min(block, n_q - i0);
        for (int64_t r = 0; r < m; r++) kernels::bf16_rows_avx512(q + (i0 + r) * q_stride + h * d, 1, d, dp, qb + r * dp);
        kernels::gemm_block_bf16_avx512(qb, dp, keys, 0, m, 0, key_panels, s);
        for (int64_t r = 0; r < m; r++)
          inv[r] = 1.0f / kernels::softmax_numerators_bf16(s + r * n_kv, n_kv, scale, pb + r * kvp, kvp, Isa::Avx512);
        kernels::gemm_block_bf16_avx512(pb, kvp, values, 0, m, 0, out_panels, ob);
        for (int64_t r = 0; r < m; r++) {
          float* o = out + (i0 + r) * width + h * d;
          for (int64_t e = 0; e < d; e++) o[e] = ob[r * d + e] * inv[r];
        }
      }
    });
  }
}
#endif

}  // namespace

void attention(const float* q, int64_t q_stride, const float* k, const float* v, int64_t kv_stride, int64_t n_q,
               int64_t n_kv, int64_t heads, int64_t d, float* out, bool bf16) {
#if defined(__x86_64__)
  if (bf16 && bf16_products(best_isa())) return attention_bf16(q, q_stride, k, v, kv_stride, n_q, n_kv, heads, d, out);
#endif
  (void)bf16;
  // Per head: K transposed to [d, n_kv] and V packed [n_kv, d]. Both products are then matmul_nn's
  // broadcast form: the scores q_block K^T a short k (the head) against long rows of keys, and
  // out_block = p V a long k (the keys) into one head's width; neither spends time in horizontal
  // sums, and both read their right-hand side from cache once per block of 32 queries.
  const Isa isa = best_isa();
  const float scale = 1.0f / std::sqrt((float)d);
  const int64_t block = 32;
  const int64_t width = heads * d;
  std::vector<float> kt((size_t)(d * n_kv)), vh((size_t)(n_kv * d));
  const int nt = pool().size();
  std::vector<float> scratch((size_t)(nt * block * (n_kv + 2 * d)));
  for (int64_t h = 0; h < heads; h++) {
    for (int64_t j = 0; j < n_kv; j++) {
      for (int64_t i = 0; i < d; i++) kt[(size_t)(i * n_kv + j)] = k[j * kv_stride + h * d + i];
      std::copy_n(v + j * kv_stride + h * d, d, vh.data() + j * d);
    }
    const int64_t blocks = (n_q + block - 1) / block;
    pool().run([&](int t, int n) {
      float* s = scratch.data() + (size_t)t * block * (n_kv + 2 * d);
      float* qb = s + block * n_kv;
      float* ob = qb + block * d;
      for (int64_t bi = t; bi < blocks; bi += n) {
        const int64_t i0 = bi * block, m = std::min(block, n_q - i0);
        for (int64_t r = 0; r < m; r++) std::copy_n(q + (i0 + r) * q_stride + h * d, d, qb + r * d);
        kernels::matmul_nn(qb, m, d, kt.data(), n_kv, s, isa);
        for (int64_t r = 0; r < m; r++) kernels::softmax_scaled(s + r * n_kv, n_kv, scale, isa);
        kernels::matmul_nn(s, m, n_kv, vh.data(), d, ob, isa);
        for (int64_t r = 0; r < m; r++) std::copy_n(ob + r * d, d, out + (i0 + r) * width + h * d);
      }
    });
  }
}

}  // namespace kvad::image
