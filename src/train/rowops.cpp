// The reference kernels: the formulas written out once, in plain loops, for float and double.
#include "train/rowops.h"

#include <algorithm>
#include <cmath>

namespace kvad::train {

namespace {

template <typename T>
void layernorm_fwd(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows, int64_t C, T eps) {
  for (int64_t r = 0; r < rows; r++) {
    const T* xr = x + r * C;
    T s = 0;
    for (int64_t i = 0; i < C; i++) s += xr[i];
    T mu = s / (T)C, v = 0;
    for (int64_t i = 0; i < C; i++) v += (xr[i] - mu) * (xr[i] - mu);
    T rs = (T)1 / std::sqrt(v / (T)C + eps);
    for (int64_t i = 0; i < C; i++) out[r * C + i] = (xr[i] - mu) * rs * w[i] + b[i];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// With xhat = (x - mean) * rstd and g = dout * w:  dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <typename T>
void layernorm_bwd(T* dx, T* dw, T* db, const T* dout, const T* x, const T* mean, const T* rstd, const T* w,
                   int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; r++) {
    const T *xr = x + r * C, *dr = dout + r * C;
    T mg = 0, mgx = 0;
    for (int64_t i = 0; i < C; i++) {
      T xh = (xr[i] - mean[r]) * rstd[r], g = dr[i] * w[i];
      mg += g;
      mgx += g * xh;
    }
    mg /= (T)C;
    mgx /= (T)C;
    for (int64_t i = 0; i < C; i++) {
      T xh = (xr[i] - mean[r]) * rstd[r], g = dr[i] * w[i];
      dw[i] += dr[i] * xh;
      db[i] += dr[i];
      dx[r * C + i] += rstd[r] * (g - mg - xh * mgx);
    }
  }
}

template <typename T>
void rmsnorm_fwd(T* out, T* rstd, const T* x, const T* w, int64_t rows, int64_t C, T eps) {
  for (int64_t r = 0; r < rows; r++) {
    const T* xr = x + r * C;
    T ss = 0;
    for (int64_t i = 0; i < C; i++) ss += xr[i] * xr[i];
    T rs = (T)1 / std::sqrt(ss / (T)C + eps);
    for (int64_t i = 0; i < C; i++) out[r * C + i] = xr[i] * rs * w[i];
    rstd[r] = rs;
  }
}

// With xhat = x * rstd and g = dout * w:  dx = rstd * (g - xhat * mean(g * xhat)).
template <typename T>
void rmsnorm_bwd(T* dx, T* dw, const T* dout, const T* x, const T* rstd, const T* w, int64_t rows, int64_t C) {
  for (int64_t r = 0; r < rows; r++) {
    const T *xr = x + r * C, *dr = dout + r * C;
    T mgx = 0;
    for (int64_t i = 0; i < C; i++) mgx += dr[i] * w[i] * xr[i] * rstd[r];
    mgx /= (T)C;
    for (int64_t i = 0; i < C; i++) {
      T xh = xr[i] * rstd[r];
      dw[i] += dr[i] * xh;
      dx[r * C + i] += rstd[r] * (dr[i] * w[i] - xh * mgx);
    }
  }
}

constexpr double kGeluS = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluC = 0.044715;

template <typename T>
void gelu_fwd(T* out, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    T v = x[i];
    out[i] = (T)0.5 * v * ((T)1 + std::tanh((T)kGeluS * (v + (T)kGeluC * v * v * v)));
  }
}

template <typename T>
void gelu_bwd(T* dx, const T* x, const T* dout, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    T v = x[i], t = std::tanh((T)kGeluS * (v + (T)kGeluC * v * v * v));
    T d = (T)0.5 * ((T)1 + t) + (T)0.5 * v * ((T)1 - t * t) * (T)kGeluS * ((T)1 + (T)(3 * kGeluC) * v * v);
    dx[i] = dout[i] * d;
  }
}

template <typename T>
void swiglu_fwd(T* out, const T* gu, int64_t rows, int64_t I) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < I; i++) {
      T g = gu[r * 2 * I + i], u = gu[r * 2 * I + I + i];
      out[r * I + i] = g / ((T)1 + std::exp(-g)) * u;
    }
}

// d/dg silu(g) = s (1 + g (1 - s)) with s = sigmoid(g).
template <typename T>
void swiglu_bwd(T* dgu, const T* gu, const T* dout, int64_t rows, int64_t I) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < I; i++) {
      T g = gu[r * 2 * I + i], u = gu[r * 2 * I + I + i], d = dout[r * I + i];
      T s = (T)1 / ((T)1 + std::exp(-g));
      dgu[r * 2 * I + i] = d * u * s * ((T)1 + g * ((T)1 - s));
      dgu[r * 2 * I + I + i] = d * g * s;
    }
}

template <typename T>
void causal_softmax_fwd(T* p, const T* s, int64_t Tn, int64_t ld, T scale) {
  for (int64_t i = 0; i < Tn; i++) {
    const T* sr = s + i * ld;
    T* pr = p + i * ld;
    T mx = sr[0] * scale;
    for (int64_t j = 1; j <= i; j++) mx = std::max(mx, sr[j] * scale);
    T sum = 0;
    for (int64_t j = 0; j <= i; j++) sum += pr[j] = std::exp(sr[j] * scale - mx);
    for (int64_t j = 0; j <= i; j++) pr[j] /= sum;
    for (int64_t j = i + 1; j < Tn; j++) pr[j] = 0;
  }
}

template <typename T>
void causal_softmax_bwd(T* ds, const T* p, const T* dp, int64_t Tn, int64_t ld, T scale) {
  for (int64_t i = 0; i < Tn; i++) {
    const T *pr = p + i * ld, *dr = dp + i * ld;
    T dot = 0;
    for (int64_t j = 0; j <= i; j++) dot += pr[j] * dr[j];
    T* o = ds + i * ld;
    for (int64_t j = 0; j <= i; j++) o[j] = scale * pr[j] * (dr[j] - dot);
    for (int64_t j = i + 1; j < Tn; j++) o[j] = 0;
  }
}

template <typename T>
void rope(T* x, int64_t heads, int64_t hd, const T* cos, const T* sin, bool inverse) {
  int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; h++) {
    T* v = x + h * hd;
    for (int64_t i = 0; i < half; i++) {
      T c = cos[i], s = inverse ? -sin[i] : sin[i], a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

template <typename T>
void cross_entropy(T* logits, T* loss, const int32_t* targets, int64_t rows, int64_t V, T grad_scale) {
  for (int64_t r = 0; r < rows; r++) {
    T* l = logits + r * V;
    if (targets[r] < 0) {  // not scored
      loss[r] = 0;
      std::fill(l, l + V, (T)0);
      continue;
    }
    T mx = l[0];
    for (int64_t j = 1; j < V; j++) mx = std::max(mx, l[j]);
    T sum = 0;
    for (int64_t j = 0; j < V; j++) sum += std::exp(l[j] - mx);
    T lse = mx + std::log(sum);
    loss[r] = lse - l[targets[r]];
    for (int64_t j = 0; j < V; j++) l[j] = (std::exp(l[j] - lse) - (j == targets[r] ? (T)1 : (T)0)) * grad_scale;
  }
}

template <typename T>
void adamw(T* p, const T* g, T* m, T* v, int64_t n, T gscale, T lr, T b1, T b2, T eps, T wd, T bc1, T bc2) {
  T step = lr / bc1, sbc2 = std::sqrt(bc2);
  for (int64_t i = 0; i < n; i++) {
    T gi = g[i] * gscale;
    p[i] *= (T)1 - lr * wd;
    m[i] = b1 * m[i] + ((T)1 - b1) * gi;
    v[i] = b2 * v[i] + ((T)1 - b2) * gi * gi;
    p[i] -= step * m[i] / (std::sqrt(v[i]) / sbc2 + eps);
  }
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
  return s;
}

template <typename T>
void add_rows(T* acc, const T* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < n; j++) acc[j] += x[r * n + j];
}

template <typename T>
RowOps<T> make_ref() {
  return {layernorm_fwd<T>, layernorm_bwd<T>, rmsnorm_fwd<T>, rmsnorm_bwd<T>, gelu_fwd<T>,
          gelu_bwd<T>,      swiglu_fwd<T>,    swiglu_bwd<T>,  causal_softmax_fwd<T>, causal_softmax_bwd<T>,
          rope<T>,          cross_entropy<T>, adamw<T>,       sum_squares<T>, add_rows<T>};
}

}  // namespace

template <typename T>
const RowOps<T>& rowops_ref() {
  static const RowOps<T> ops = make_ref<T>();
  return ops;
}
template const RowOps<float>& rowops_ref<float>();
template const RowOps<double>& rowops_ref<double>();

const RowOps<float>& rowops_f32(Isa isa) {
#if defined(__x86_64__)
  // Built only when chosen: the ISA files may use their instructions even to fill the table.
  if (isa == Isa::Avx512) {
    static const RowOps<float> ops = rowops_avx512();
    return ops;
  }
  if (isa == Isa::Avx2) {
    static const RowOps<float> ops = rowops_avx2();
    return ops;
  }
#endif
  return rowops_ref<float>();
}

}  // namespace kvad::train
