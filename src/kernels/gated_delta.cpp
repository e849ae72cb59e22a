#include "kernels/gated_delta.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/threads.h"

namespace kvad::kernels {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Where the state after position p is kept, if anywhere (DeltaNetSpan's snapshot rule).
float* snapshot_after(const DeltaNetSpan& s, int64_t p, int64_t state_floats) {
  if (!s.snapshot_of_block || (p + 1) % s.block_size) return nullptr;
  const int32_t slot = s.snapshot_of_block[s.blocks[(p + 1) / s.block_size - 1]];
  return slot < 0 ? nullptr : s.snapshot_base + (int64_t)slot * state_floats;
}

// The conv's input channels [all q | all k | all v] out of one row grouped by key head.
void gather_channels(const float* qkvz, const DeltaNetShape& s, float* x) {
  const int64_t nk = s.key_heads, dk = s.key_dim, vr = s.ratio() * s.value_dim, group = 2 * dk + 2 * vr;
  for (int64_t h = 0; h < nk; h++) {
    const float* g = qkvz + h * group;
    std::memcpy(x + h * dk, g, (size_t)dk * 4);
    std::memcpy(x + nk * dk + h * dk, g + dk, (size_t)dk * 4);
    std::memcpy(x + 2 * nk * dk + h * vr, g + 2 * dk, (size_t)vr * 4);
  }
}

// One span through the causal depthwise conv + SiLU, token by token, advancing its window; then
// q and k l2-normalised per key head (q scaled by key_dim^-0.5). Writes scratch's rows.
void conv_span(const float* qkvz, int64_t qkvz_stride, const DeltaNetSpan& sp, const DeltaNetShape& s,
               const float* conv, float* scratch) {
  const int64_t C = s.conv_channels(), K = s.conv_kernel, nk = s.key_heads, dk = s.key_dim;
  float* window = sp.state;  // [K-1, C]: the inputs of the K-1 positions before this one, oldest first
  for (int64_t t = 0; t < sp.n; t++) {
    const int64_t row = sp.row0 + t;
    float* x = scratch + row * C;
    gather_channels(qkvz + row * qkvz_stride, s, x);
    for (int64_t c = 0; c < C; c++) {
      const float* wc = conv + c * K;
      float acc = wc[K - 1] * x[c];
      for (int64_t j = 0; j < K - 1; j++) acc += wc[j] * window[j * C + c];
      for (int64_t j = 0; j + 1 < K - 1; j++) window[j * C + c] = window[(j + 1) * C + c];
      if (K > 1) window[(K - 2) * C + c] = x[c];
      x[c] = silu(acc);
    }
    if (float* snap = snapshot_after(sp, sp.pos0 + t, s.state_floats()))
      std::memcpy(snap, window, (size_t)s.conv_state_floats() * 4);
    const float q_scale = 1.0f / std::sqrt((float)dk);
    for (int64_t h = 0; h < 2 * nk; h++) {  // the q heads, then the k heads
      float* v = x + h * dk;
      double ss = 0;
      for (int64_t i = 0; i < dk; i++) ss += (double)v[i] * v[i];
      const float inv = (float)(1.0 / std::sqrt(ss + 1e-6)) * (h < nk ? q_scale : 1.0f);
      for (int64_t i = 0; i < dk; i++) v[i] *= inv;
    }
  }
}

// The delta rule of value head j over one span's rows (its S advanced in place); raw o into out.
void delta_rule(const float* ba, int64_t ba_stride, const DeltaNetSpan& sp, int64_t j, const DeltaNetShape& s,
                const DeltaNetWeights& w, const float* scratch, float* out, int64_t out_stride) {
  const int64_t C = s.conv_channels(), nk = s.key_heads, dk = s.key_dim, dv = s.value_dim, r = s.ratio(), h = j / r;
  const int64_t S_offset = s.conv_state_floats() + j * dk * dv;
  float* S = sp.state + S_offset;  // [dk, dv]
  float mem[kMaxDeltaValueDim], delta[kMaxDeltaValueDim], o[kMaxDeltaValueDim];
  for (int64_t t = 0; t < sp.n; t++) {
    const int64_t row = sp.row0 + t;
    const float* x = scratch + row * C;
    const float *q = x + h * dk, *k = x + nk * dk + h * dk, *v = x + 2 * nk * dk + j * dv;
    const float* bar = ba + row * ba_stride + h * 2 * r;
    const float beta = sigmoid(bar[j % r]);
    const float decay = std::exp(w.decay[j] * softplus(bar[r + j % r] + w.dt_bias[j]));
    for (int64_t c = 0; c < dv; c++) mem[c] = 0;
    for (int64_t a = 0; a < dk; a++) {
      float* Sa = S + a * dv;
      const float ka = k[a];
      for (int64_t c = 0; c < dv; c++) {
        Sa[c] *= decay;
        mem[c] += Sa[c] * ka;
      }
    }
    for (int64_t c = 0; c < dv; c++) delta[c] = (v[c] - mem[c]) * beta, o[c] = 0;
    for (int64_t a = 0; a < dk; a++) {
      float* Sa = S + a * dv;
      const float ka = k[a], qa = q[a];
      for (int64_t c = 0; c < dv; c++) {
        Sa[c] += ka * delta[c];
        o[c] += Sa[c] * qa;
      }
    }
    std::memcpy(out + row * out_stride + j * dv, o, (size_t)dv * 4);
    if (float* snap = snapshot_after(sp, sp.pos0 + t, s.state_floats())) std::memcpy(snap + S_offset, S, (size_t)(dk * dv) * 4);
  }
}

// out = rmsnorm(o) * norm * silu(z), per value head of one row.
void gated_norm(const float* qkvz, const DeltaNetShape& s, const DeltaNetWeights& w, float* o) {
  const int64_t dk = s.key_dim, dv = s.value_dim, r = s.ratio(), group = 2 * dk + 2 * r * dv;
  for (int64_t j = 0; j < s.value_heads; j++) {
    float* oj = o + j * dv;
    const float* z = qkvz + (j / r) * group + 2 * dk + r * dv + (j % r) * dv;
    double ss = 0;
    for (int64_t c = 0; c < dv; c++) ss += (double)oj[c] * oj[c];
    const float inv = (float)(1.0 / std::sqrt(ss / (double)dv + (double)s.norm_eps));
    for (int64_t c = 0; c < dv; c++) oj[c] = oj[c] * inv * w.norm[c] * silu(z[c]);
  }
}

}  // namespace

void gated_delta_net(const float* qkvz, int64_t qkvz_stride, const float* ba, int64_t ba_stride,
                     const DeltaNetSpan* spans, int64_t n_spans, const DeltaNetShape& s, const DeltaNetWeights& w,
                     float* scratch, float* out, int64_t out_stride) {
  if (s.key_heads <= 0 || s.value_heads % s.key_heads || s.value_dim > kMaxDeltaValueDim || s.conv_kernel < 1)
    fail("gated_delta_net: unsupported shape ({} key heads, {} value heads, value dim {}, conv {})", s.key_heads,
         s.value_heads, s.value_dim, s.conv_kernel);
  for (int64_t i = 0; i < n_spans; i++) conv_span(qkvz, qkvz_stride, spans[i], s, w.conv, scratch);
  // Every (sequence, value head) is independent: one parallel region over all of them.
  const int64_t nv = s.value_heads;
  pool().parallel_for(n_spans * nv, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) delta_rule(ba, ba_stride, spans[i / nv], i % nv, s, w, scratch, out, out_stride);
  });
  for (int64_t i = 0; i < n_spans; i++)
    for (int64_t t = 0; t < spans[i].n; t++) {
      const int64_t row = spans[i].row0 + t;
      gated_norm(qkvz + row * qkvz_stride, s, w, out + row * out_stride);
    }
}

}  // namespace kvad::kernels
