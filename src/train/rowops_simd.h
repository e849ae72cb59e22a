// The SIMD row kernels, written once with GCC vector extensions and compiled per ISA: the including
// file (rowops_avx512.cpp, rowops_avx2.cpp) defines the lane count W, the vector types V (float)
// and VI (int32) of W lanes, and vsqrt(V), then includes this inside no namespace. Everything here
// has internal linkage, so each ISA gets its own copy. Formulas as in rowops.cpp (the reference);
// exp is a Cephes-style polynomial (about 1 ulp), tanh and sigmoid are built on it.
//
// A row's ragged end is loaded into a padded vector and computed like the rest, so every element
// goes through the same arithmetic wherever it sits.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>

#include "train/rowops.h"

namespace {

using kvad::train::RowOps;

inline V splat(float x) { return V{} + x; }
inline V ld(const float* p, int64_t n, float pad = 0.0f) {
  V v;
  if (n >= W) {
    std::memcpy(&v, p, sizeof v);
  } else {
    v = splat(pad);
    std::memcpy(&v, p, (size_t)n * sizeof(float));
  }
  return v;
}
inline void st(float* p, V v, int64_t n) { std::memcpy(p, &v, (size_t)(n >= W ? W : n) * sizeof(float)); }
inline float hsum(V v) {
  float s = 0;
  for (int i = 0; i < W; i++) s += v[i];
  return s;
}
inline float hmax(V v) {
  float s = v[0];
  for (int i = 1; i < W; i++) s = s > v[i] ? s : v[i];
  return s;
}
inline V vmax(V a, V b) { return a > b ? a : b; }
inline V vmin(V a, V b) { return a < b ? a : b; }

// exp(x) for x in float range; large negative x gives ~0, large positive is clamped.
inline V vexp(V x) {
  x = vmin(vmax(x, splat(-87.33f)), splat(88.7f));
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  V n = (x * 1.44269504088896341f + magic) - magic;
  V r = x - n * 0.693359375f - n * -2.12194440e-4f;
  V p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  VI e = (__builtin_convertvector(n, VI) + 127) << 23;
  V scale;
  std::memcpy(&scale, &e, sizeof scale);
  return p * scale;
}
inline V vtanh(V x) {
  x = vmin(vmax(x, splat(-10.0f)), splat(10.0f));  // tanh is exactly ±1 in float beyond
  return 1.0f - 2.0f / (vexp(x + x) + 1.0f);
}
inline V vsigmoid(V x) { return 1.0f / (1.0f + vexp(-x)); }

// Lanes i < n are -1 (true), the rest 0: keeps padding out of sums that are not zero-safe.
inline VI lanes_below(int64_t n) {
  VI idx;
  for (int i = 0; i < W; i++) idx[i] = i;
  return idx < (int)(n < W ? n : W);
}

void layernorm_fwd(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                   int64_t rows, int64_t C, float eps) {
  for (int64_t r = 0; r < rows; r++) {
    const float* xr = x + r * C;
    V s = {};
    for (int64_t i = 0; i < C; i += W) s += ld(xr + i, C - i);
    float mu = hsum(s) / (float)C;
    V v = {};
    for (int64_t i = 0; i < C; i += W) {
      V d = ld(xr + i, C - i) - mu;
      v += lanes_below(C - i) ? d * d : V{};
    }
    float rs = 1.0f / std::sqrt(hsum(v) / (float)C + eps);
    for (int64_t i = 0; i < C; i += W)
      st(out + r * C + i, (ld(xr + i, C - i) - mu) * rs * ld(w + i, C - i) + ld(b + i, C - i), C - i);
    mean[r] = mu;
    rstd[r] = rs;
  }
}

void layernorm_bwd(float* dx, float* dw, float* db, const float* dout, const float* x, const float* mean,
                   const float* rstd, const float* w, int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * C, *dr = dout + r * C;
    float mu = mean[r], rs = rstd[r];
    V mg = {}, mgx = {};
    for (int64_t i = 0; i < C; i += W) {
      V xh = (ld(xr + i, C - i) - mu) * rs, g = ld(dr + i, C - i) * ld(w + i, C - i);
      mg += g;
      mgx += g * xh;
    }
    float a = hsum(mg) / (float)C, c = hsum(mgx) / (float)C;
    for (int64_t i = 0; i < C; i += W) {
      int64_t n = C - i;
      V xh = (ld(xr + i, n) - mu) * rs, d = ld(dr + i, n), g = d * ld(w + i, n);
      st(dw + i, ld(dw + i, n) + d * xh, n);
      st(db + i, ld(db + i, n) + d, n);
      st(dx + r * C + i, ld(dx + r * C + i, n) + rs * (g - a - xh * c), n);
    }
  }
}

void rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w, int64_t rows, int64_t C, float eps) {
  for (int64_t r = 0; r < rows; r++) {
    const float* xr = x + r * C;
    V ss = {};
    for (int64_t i = 0; i < C; i += W) {
      V v = ld(xr + i, C - i);
      ss += v * v;
    }
    float rs = 1.0f / std::sqrt(hsum(ss) / (float)C + eps);
    for (int64_t i = 0; i < C; i += W) st(out + r * C + i, ld(xr + i, C - i) * rs * ld(w + i, C - i), C - i);
    rstd[r] = rs;
  }
}

void rmsnorm_bwd(float* dx, float* dw, const float* dout, const float* x, const float* rstd, const float* w,
                 int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * C, *dr = dout + r * C;
    float rs = rstd[r];
    V m = {};
    for (int64_t i = 0; i < C; i += W) m += ld(dr + i, C - i) * ld(w + i, C - i) * ld(xr + i, C - i) * rs;
    float c = hsum(m) / (float)C;
    for (int64_t i = 0; i < C; i += W) {
      int64_t n = C - i;
      V xh = ld(xr + i, n) * rs, d = ld(dr + i, n);
      st(dw + i, ld(dw + i, n) + d * xh, n);
      st(dx + r * C + i, ld(dx + r * C + i, n) + rs * (d * ld(w + i, n) - xh * c), n);
    }
  }
}

constexpr float kGeluS = 0.7978845608028654f, kGeluC = 0.044715f;

void gelu_fwd(float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += W) {
    V v = ld(x + i, n - i);
    st(out + i, 0.5f * v * (1.0f + vtanh(kGeluS * (v + kGeluC * v * v * v))), n - i);
  }
}

void gelu_bwd(float* dx, const float* x, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; i += W) {
    V v = ld(x + i, n - i), t = vtanh(kGeluS * (v + kGeluC * v * v * v));
    V d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluS * (1.0f + (3 * kGeluC) * v * v);
    st(dx + i, ld(dout + i, n - i) * d, n - i);
  }
}

void swiglu_fwd(float* out, const float* gu, int64_t rows, int64_t I) {
  for (int64_t r = 0; r < rows; r++) {
    const float *g = gu + r * 2 * I, *u = g + I;
    for (int64_t i = 0; i < I; i += W) {
      V gv = ld(g + i, I - i);
      st(out + r * I + i, gv * vsigmoid(gv) * ld(u + i, I - i), I - i);
    }
  }
}

void swiglu_bwd(float* dgu, const float* gu, const float* dout, int64_t rows, int64_t I) {
  for (int64_t r = 0; r < rows; r++) {
    const float *g = gu + r * 2 * I, *u = g + I, *d = dout + r * I;
    float *dg = dgu + r * 2 * I, *du = dg + I;
    for (int64_t i = 0; i < I; i += W) {
      int64_t n = I - i;
      V gv = ld(g + i, n), uv = ld(u + i, n), dv = ld(d + i, n), s = vsigmoid(gv);
      st(dg + i, dv * uv * s * (1.0f + gv * (1.0f - s)), n);
      st(du + i, dv * gv * s, n);
    }
  }
}

void causal_softmax_fwd(float* p, const float* s, int64_t Tn, int64_t ld_, float scale) {
  const float neg_inf = -INFINITY;
  for (int64_t i = 0; i < Tn; i++) {
    const float* sr = s + i * ld_;
    float* pr = p + i * ld_;
    int64_t n = i + 1;
    V mx = splat(neg_inf);
    for (int64_t j = 0; j < n; j += W) mx = vmax(mx, ld(sr + j, n - j, neg_inf) * scale);
    float m = hmax(mx);
    V sum = {};
    for (int64_t j = 0; j < n; j += W) {
      V e = lanes_below(n - j) ? vexp(ld(sr + j, n - j) * scale - m) : V{};
      st(pr + j, e, n - j);
      sum += e;
    }
    float inv = 1.0f / hsum(sum);
    for (int64_t j = 0; j < n; j += W) st(pr + j, ld(pr + j, n - j) * inv, n - j);
    if (Tn > n) std::memset(pr + n, 0, (size_t)(Tn - n) * sizeof(float));
  }
}

void causal_softmax_bwd(float* ds, const float* p, const float* dp, int64_t Tn, int64_t ld_, float scale) {
  for (int64_t i = 0; i < Tn; i++) {
    const float *pr = p + i * ld_, *dr = dp + i * ld_;
    float* o = ds + i * ld_;
    int64_t n = i + 1;
    V dot = {};
    for (int64_t j = 0; j < n; j += W) dot += ld(pr + j, n - j) * ld(dr + j, n - j);
    float d = hsum(dot);
    for (int64_t j = 0; j < n; j += W) st(o + j, scale * ld(pr + j, n - j) * (ld(dr + j, n - j) - d), n - j);
    if (Tn > n) std::memset(o + n, 0, (size_t)(Tn - n) * sizeof(float));
  }
}

void rope(float* x, int64_t heads, int64_t hd, const float* cos, const float* sin, bool inverse) {
  int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; h++) {
    float* v = x + h * hd;
    for (int64_t i = 0; i < half; i += W) {
      int64_t n = half - i;
      V c = ld(cos + i, n), s = ld(sin + i, n), a = ld(v + i, n), b = ld(v + half + i, n);
      if (inverse) s = -s;
      st(v + i, a * c - b * s, n);
      st(v + half + i, b * c + a * s, n);
    }
  }
}

void cross_entropy(float* logits, float* loss, const int32_t* targets, int64_t rows, int64_t V_, float grad_scale) {
  const float neg_inf = -INFINITY;
  for (int64_t r = 0; r < rows; r++) {
    float* l = logits + r * V_;
    int32_t t = targets[r];
    if (t < 0) {  // not scored
      loss[r] = 0;
      std::fill(l, l + V_, 0.0f);
      continue;
    }
    V mx = splat(neg_inf);
    for (int64_t j = 0; j < V_; j += W) mx = vmax(mx, ld(l + j, V_ - j, neg_inf));
    float m = hmax(mx);
    V sum = {};
    for (int64_t j = 0; j < V_; j += W) sum += lanes_below(V_ - j) ? vexp(ld(l + j, V_ - j) - m) : V{};
    float lse = m + std::log(hsum(sum));
    loss[r] = lse - l[t];
    for (int64_t j = 0; j < V_; j += W) st(l + j, vexp(ld(l + j, V_ - j) - lse) * grad_scale, V_ - j);
    l[t] -= grad_scale;
  }
}

void adamw(float* p, const float* g, float* m, float* v, int64_t n, float gscale, float lr, float b1, float b2,
           float eps, float wd, float bc1, float bc2) {
  float step = lr / bc1, inv_sbc2 = 1.0f / std::sqrt(bc2), decay = 1.0f - lr * wd;
  for (int64_t i = 0; i < n; i += W) {
    int64_t k = n - i;
    V gv = ld(g + i, k) * gscale;
    V mv = b1 * ld(m + i, k) + (1.0f - b1) * gv;
    V vv = b2 * ld(v + i, k) + (1.0f - b2) * gv * gv;
    V pv = ld(p + i, k) * decay;
    st(p + i, pv - step * mv / (vsqrt(vv) * inv_sbc2 + eps), k);
    st(m + i, mv, k);
    st(v + i, vv, k);
  }
}

// Sums of squares in float lanes over blocks of 1024 values, each block added in double.
double sum_squares(const float* x, int64_t n) {
  double total = 0;
  for (int64_t b = 0; b < n; b += 1024) {
    int64_t e = b + 1024 < n ? b + 1024 : n;
    V s = {};
    for (int64_t i = b; i < e; i += W) {
      V v = ld(x + i, e - i);
      s += v * v;
    }
    total += (double)hsum(s);
  }
  return total;
}

void add_rows(float* acc, const float* x, int64_t rows, int64_t n) {
  for (int64_t j = 0; j < n; j += W) {
    V s = ld(acc + j, n - j);
    for (int64_t r = 0; r < rows; r++) s += ld(x + r * n + j, n - j);
    st(acc + j, s, n - j);
  }
}

RowOps<float> make_simd_rowops() {
  return {layernorm_fwd, layernorm_bwd, rmsnorm_fwd, rmsnorm_bwd, gelu_fwd,  gelu_bwd,     swiglu_fwd,
          swiglu_bwd,    causal_softmax_fwd, causal_softmax_bwd, rope, cross_entropy, adamw,
          sum_squares,   add_rows};
}

}  // namespace
