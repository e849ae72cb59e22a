#include "kernels/gated_delta.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "kernels/ops.h"

namespace kvad::kernels {

void delta_decay_project_avx512(float* S, int64_t dk, int64_t dv, float decay, const float* k, float* mem);
void delta_update_read_avx512(float* S, int64_t dk, int64_t dv, const float* k, const float* delta, const float* q, float* o);
void delta_conv_step_avx512(const float* taps, int64_t K, int64_t nc, float* x, float* win, int64_t C);
void delta_gate_avx512(float* o, const float* z, const float* norm, float inv, int64_t n);
void delta_decay_project_avx2(float* S, int64_t dk, int64_t dv, float decay, const float* k, float* mem);
void delta_update_read_avx2(float* S, int64_t dk, int64_t dv, const float* k, const float* delta, const float* q, float* o);
void delta_conv_step_avx2(const float* taps, int64_t K, int64_t nc, float* x, float* win, int64_t C);
void delta_gate_avx2(float* o, const float* z, const float* norm, float inv, int64_t n);

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

// The row loops, per ISA (gated_delta_<isa>.cpp); the scalar ones here are their references.
//   decay_project  S *= decay, then mem = S^T k                   (S: [dk, dv] row-major)
//   update_read    S += k delta^T, then o = S^T q
//   conv_step      one position of the causal conv over nc channels: x = silu(taps[K-1] x + sum_j
//                  taps[j] win[j]) with the window rows (C apart) moved on by one and x's input
//                  put in the last; taps [K, nc]
//   gate           o = o * inv * norm * silu(z)
struct DeltaLoops {
  void (*decay_project)(float* S, int64_t dk, int64_t dv, float decay, const float* k, float* mem);
  void (*update_read)(float* S, int64_t dk, int64_t dv, const float* k, const float* delta, const float* q, float* o);
  void (*conv_step)(const float* taps, int64_t K, int64_t nc, float* x, float* win, int64_t C);
  void (*gate)(float* o, const float* z, const float* norm, float inv, int64_t n);
};

void decay_project_scalar(float* S, int64_t dk, int64_t dv, float decay, const float* k, float* mem) {
  for (int64_t c = 0; c < dv; c++) mem[c] = 0;
  for (int64_t a = 0; a < dk; a++) {
    float* Sa = S + a * dv;
    const float ka = k[a];
    for (int64_t c = 0; c < dv; c++) {
      Sa[c] *= decay;
      mem[c] += Sa[c] * ka;
    }
  }
}

void update_read_scalar(float* S, int64_t dk, int64_t dv, const float* k, const float* delta, const float* q, float* o) {
  for (int64_t c = 0; c < dv; c++) o[c] = 0;
  for (int64_t a = 0; a < dk; a++) {
    float* Sa = S + a * dv;
    const float ka = k[a], qa = q[a];
    for (int64_t c = 0; c < dv; c++) {
      Sa[c] += ka * delta[c];
      o[c] += Sa[c] * qa;
    }
  }
}

void conv_step_scalar(const float* taps, int64_t K, int64_t nc, float* x, float* win, int64_t C) {
  for (int64_t c = 0; c < nc; c++) {
    float acc = taps[(K - 1) * nc + c] * x[c];
    for (int64_t j = 0; j < K - 1; j++) acc += taps[j * nc + c] * win[j * C + c];
    for (int64_t j = 0; j + 1 < K - 1; j++) win[j * C + c] = win[(j + 1) * C + c];
    if (K > 1) win[(K - 2) * C + c] = x[c];
    x[c] = silu(acc);
  }
}

void gate_scalar(float* o, const float* z, const float* norm, float inv, int64_t n) {
  for (int64_t c = 0; c < n; c++) o[c] = o[c] * inv * norm[c] * silu(z[c]);
}

DeltaLoops delta_loops(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return {delta_decay_project_avx512, delta_update_read_avx512, delta_conv_step_avx512, delta_gate_avx512};
  if (isa == Isa::Avx2) return {delta_decay_project_avx2, delta_update_read_avx2, delta_conv_step_avx2, delta_gate_avx2};
#endif
  (void)isa;
  return {decay_project_scalar, update_read_scalar, conv_step_scalar, gate_scalar};
}

// Channels [c0, c1) of one span through the causal depthwise conv + SiLU, token by token,
// advancing their part of the window (each channel's window is its own, so threads take channel
// ranges); the window's snapshots get the same columns.
void conv_channels(const DeltaNetSpan& sp, const DeltaNetShape& s, const float* conv, int64_t c0, int64_t c1,
                   const DeltaLoops& loops, float* scratch) {
  const int64_t C = s.conv_channels(), K = s.conv_kernel, nc = c1 - c0;
  // The range's taps as [K, nc], so that each step reads every operand in channel order (the
  // checkpoint's [channels, K] strided them K apart).
  thread_local std::vector<float> taps;
  if ((int64_t)taps.size() < K * nc) taps.resize((size_t)(K * nc));
  for (int64_t c = 0; c < nc; c++)
    for (int64_t j = 0; j < K; j++) taps[(size_t)(j * nc + c)] = conv[(c0 + c) * K + j];
  float* win = sp.state + c0;  // the window [K-1, C]: the inputs of the K-1 positions before, oldest first
  for (int64_t t = 0; t < sp.n; t++) {
    loops.conv_step(taps.data(), K, nc, scratch + (sp.row0 + t) * C + c0, win, C);
    if (float* snap = snapshot_after(sp, sp.pos0 + t, s.state_floats()))
      for (int64_t j = 0; j < K - 1; j++) std::memcpy(snap + j * C + c0, win + j * C, (size_t)nc * 4);
  }
}

// q and k of one row l2-normalised per key head (q also scaled by key_dim^-0.5).
void normalize_qk(const DeltaNetShape& s, float* x) {
  const int64_t nk = s.key_heads, dk = s.key_dim;
  const float q_scale = 1.0f / std::sqrt((float)dk);
  for (int64_t h = 0; h < 2 * nk; h++) {  // the q heads, then the k heads
    float* v = x + h * dk;
    double ss = 0;
    for (int64_t i = 0; i < dk; i++) ss += (double)v[i] * v[i];
    const float inv = (float)(1.0 / std::sqrt(ss + 1e-6)) * (h < nk ? q_scale : 1.0f);
    for (int64_t i = 0; i < dk; i++) v[i] *= inv;
  }
}

// The delta rule of value head j over one span's rows (its S advanced in place); raw o into out.
void delta_rule(const float* ba, int64_t ba_stride, const DeltaNetSpan& sp, int64_t j, const DeltaNetShape& s,
                const DeltaNetWeights& w, const DeltaLoops& loops, const float* scratch, float* out, int64_t out_stride) {
  const int64_t C = s.conv_channels(), nk = s.key_heads, dk = s.key_dim, dv = s.value_dim, r = s.ratio(), h = j / r;
  const int64_t S_offset = s.conv_state_floats() + j * dk * dv;
  float* S = sp.state + S_offset;  // [dk, dv]
  float mem[kMaxDeltaValueDim], delta[kMaxDeltaValueDim];
  for (int64_t t = 0; t < sp.n; t++) {
    const int64_t row = sp.row0 + t;
    const float* x = scratch + row * C;
    const float *q = x + h * dk, *k = x + nk * dk + h * dk, *v = x + 2 * nk * dk + j * dv;
    const float* bar = ba + row * ba_stride + h * 2 * r;
    const float beta = sigmoid(bar[j % r]);
    const float decay = std::exp(w.decay[j] * softplus(bar[r + j % r] + w.dt_bias[j]));
    loops.decay_project(S, dk, dv, decay, k, mem);
    for (int64_t c = 0; c < dv; c++) delta[c] = (v[c] - mem[c]) * beta;
    loops.update_read(S, dk, dv, k, delta, q, out + row * out_stride + j * dv);
    if (float* snap = snapshot_after(sp, sp.pos0 + t, s.state_floats())) std::memcpy(snap + S_offset, S, (size_t)(dk * dv) * 4);
  }
}

// out = rmsnorm(o) * norm * silu(z), per value head of one row.
void gated_norm(const float* qkvz, const DeltaNetShape& s, const DeltaNetWeights& w, const DeltaLoops& loops, float* o) {
  const int64_t dk = s.key_dim, dv = s.value_dim, r = s.ratio(), group = 2 * dk + 2 * r * dv;
  for (int64_t j = 0; j < s.value_heads; j++) {
    float* oj = o + j * dv;
    const float* z = qkvz + (j / r) * group + 2 * dk + r * dv + (j % r) * dv;
    double ss = 0;
    for (int64_t c = 0; c < dv; c++) ss += (double)oj[c] * oj[c];
    const float inv = (float)(1.0 / std::sqrt(ss / (double)dv + (double)s.norm_eps));
    loops.gate(oj, z, w.norm, inv, dv);
  }
}

}  // namespace

void gated_delta_net(const float* qkvz, int64_t qkvz_stride, const float* ba, int64_t ba_stride,
                     const DeltaNetSpan* spans, int64_t n_spans, const DeltaNetShape& s, const DeltaNetWeights& w,
                     float* scratch, float* out, int64_t out_stride, Isa isa) {
  if (s.key_heads <= 0 || s.value_heads % s.key_heads || s.value_dim > kMaxDeltaValueDim || s.conv_kernel < 1)
    fail("gated_delta_net: unsupported shape ({} key heads, {} value heads, value dim {}, conv {})", s.key_heads,
         s.value_heads, s.value_dim, s.conv_kernel);
  const DeltaLoops loops = delta_loops(isa);
  const int64_t C = s.conv_channels();
  thread_local std::vector<int64_t> row_list;  // every span's rows (reused: no allocation per step once grown)
  row_list.clear();
  for (int64_t i = 0; i < n_spans; i++)
    for (int64_t t = 0; t < spans[i].n; t++) row_list.push_back(spans[i].row0 + t);
  const std::vector<int64_t>& rows = row_list;  // this thread's list, for the pool's threads too
  const int64_t n = (int64_t)rows.size();
  // Every row's channels and then the conv by channel ranges (each channel's window is its own),
  // then q and k normalised by rows: a prefill's rows on every thread, a decode's one on this one.
  rows_on_pool(n, C, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) gather_channels(qkvz + rows[(size_t)i] * qkvz_stride, s, scratch + rows[(size_t)i] * C);
  });
  rows_on_pool(C, n, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n_spans; i++) conv_channels(spans[i], s, w.conv, c0, c1, loops, scratch);
  });
  rows_on_pool(n, C, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) normalize_qk(s, scratch + rows[(size_t)i] * C);
  });
  // Every (sequence, value head) is independent: one parallel region over all of them.
  const int64_t nv = s.value_heads;
  pool().parallel_for(n_spans * nv, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) delta_rule(ba, ba_stride, spans[i / nv], i % nv, s, w, loops, scratch, out, out_stride);
  });
  rows_on_pool(n, s.out_width(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      const int64_t row = rows[(size_t)i];
      gated_norm(qkvz + row * qkvz_stride, s, w, loops, out + row * out_stride);
    }
  });
}

}  // namespace kvad::kernels
