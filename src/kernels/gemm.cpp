#include "kernels/gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/threads.h"

namespace kvad::kernels {

constexpr int64_t kPanel = 32;

PackedWeight PackedWeight::pack_f32(const float* w, int64_t m, int64_t k) {
  PackedWeight p;
  p.m = m, p.k = k;
  const int64_t panels = (m + kPanel - 1) / kPanel;
  p.f32.assign((size_t)(panels * k * kPanel), 0.0f);
  for (int64_t o = 0; o < m; o++)
    for (int64_t i = 0; i < k; i++) p.f32[(size_t)(((o / kPanel) * k + i) * kPanel + o % kPanel)] = w[o * k + i];
  return p;
}

PackedWeight PackedWeight::pack_bf16(const float* w, int64_t m, int64_t k) { return pack_bf16_strided(w, m, k, k, false); }

PackedWeight PackedWeight::pack_bf16_strided(const float* w, int64_t m, int64_t k, int64_t ld, bool transposed) {
  PackedWeight p;
  p.m = m, p.k = k, p.bf16 = true;
  const int64_t panels = (m + kPanel - 1) / kPanel, k2 = (k + 1) / 2;
  p.b16.assign((size_t)(panels * k2 * kPanel * 2), 0);
  // W[o][i] goes to panel o / 32, pair i / 2, lane o % 32, half i % 2; the source is read along
  // its rows either way (an attention head packs 2 x 4,096 x 40 values per call).
  for (int64_t pn = 0; pn < panels; pn++) {
    uint16_t* panel = p.b16.data() + pn * k2 * kPanel * 2;
    const int64_t o0 = pn * kPanel, lanes = std::min(kPanel, m - o0);
    if (transposed) {
      for (int64_t i = 0; i < k; i++) {
        const float* src = w + i * ld + o0;
        uint16_t* dst = panel + (i / 2) * kPanel * 2 + i % 2;
        for (int64_t j = 0; j < lanes; j++) dst[2 * j] = f32_to_bf16(src[j]);
      }
    } else {
      for (int64_t j = 0; j < lanes; j++) {
        const float* src = w + (o0 + j) * ld;
        uint16_t* dst = panel + 2 * j;
        for (int64_t i = 0; i < k; i++) dst[(i / 2) * kPanel * 2 + i % 2] = f32_to_bf16(src[i]);
      }
    }
  }
  return p;
}

// The reference: the same products from the packed layout, one output at a time (a bf16 panel's
// activations rounded as the SIMD path rounds them).
void gemm_block_scalar(const float* a, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* c) {
  const int64_t k = w.k, k2 = (k + 1) / 2;
  for (int64_t r = r0; r < r1; r++)
    for (int64_t o = p0 * kPanel; o < std::min(w.m, p1 * kPanel); o++) {
      const int64_t p = o / kPanel, j = o % kPanel;
      float s = 0;
      for (int64_t i = 0; i < k; i++) {
        const float x = a[r * k + i];
        s += w.bf16 ? bf16_to_f32(f32_to_bf16(x)) * bf16_to_f32(w.b16[(size_t)(((p * k2 + i / 2) * kPanel + j) * 2 + i % 2)])
                    : x * w.f32[(size_t)((p * k + i) * kPanel + j)];
      }
      c[r * w.m + o] = s;
    }
}

namespace {

// The pool's tasks of a product: blocks of rows x groups of panels.
template <typename Body>
void for_each_task(int64_t n, const PackedWeight& w, const Body& body) {
  const int64_t panels = (w.m + kPanel - 1) / kPanel;
  const int64_t rows_per_task = 96, panels_per_task = 8;
  const int64_t row_tasks = (n + rows_per_task - 1) / rows_per_task;
  const int64_t panel_tasks = (panels + panels_per_task - 1) / panels_per_task;
  pool().parallel_for(row_tasks * panel_tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
      const int64_t rb = t / panel_tasks, pb = t % panel_tasks;
      body(rb * rows_per_task, std::min(n, (rb + 1) * rows_per_task), pb * panels_per_task,
           std::min(panels, (pb + 1) * panels_per_task));
    }
  });
}

#if defined(__x86_64__)
// The f32 activations of a bf16-panel product on a CPU without bf16 products, [n][kp]: one buffer
// per thread, grown to the largest product once.
float* widened_scratch(int64_t size) {
  thread_local std::vector<float> af;
  af.resize((size_t)size);
  return af.data();
}

// C = A W^T for bf16 panels in f32 products: A [n, kp] already holds bf16 values as f32.
void bf16_panels_in_f32(const float* af, int64_t n, int64_t kp, const PackedWeight& w, float* c, Isa isa) {
  auto block = isa == Isa::Avx512 ? gemm_block_bf16w_avx512 : gemm_block_bf16w_avx2;
  for_each_task(n, w, [&](int64_t r0, int64_t r1, int64_t q0, int64_t q1) { block(af, kp, w, r0, r1, q0, q1, c); });
}
#endif

}  // namespace

void to_bf16(const float* x, int64_t n, uint16_t* out, Isa isa) {
#if defined(__x86_64__)
  if (bf16_products(isa)) return bf16_rows_avx512(x, 1, n, n, out);
  if (isa == Isa::Avx512 || isa == Isa::Avx2) return bf16_rows_avx2(x, 1, n, n, out);
#endif
  (void)isa;
  for (int64_t i = 0; i < n; i++) out[i] = f32_to_bf16(x[i]);
}

#if defined(__x86_64__)
// The bf16 tiles against the AVX-512 kernel on a ragged product: 45 rows (a part tile), 70 outputs
// (a part panel), 83 inputs (a part step, odd k). Equal to f32 rounding: the sums' order differs.
static bool amx_bf16_gemm_agrees() {
  const int64_t n = 45, m = 70, k = 83, kp = 84;
  Rng rng(20261205);
  std::vector<float> wf((size_t)(m * k));
  std::vector<uint16_t> a((size_t)(n * kp), 0);
  for (float& v : wf) v = (float)(rng.uniform() * 2 - 1);
  for (int64_t r = 0; r < n; r++)
    for (int64_t i = 0; i < k; i++) a[(size_t)(r * kp + i)] = f32_to_bf16((float)(rng.uniform() * 2 - 1));
  const PackedWeight w = PackedWeight::pack_bf16(wf.data(), m, k);
  const int64_t panels = (m + kPanel - 1) / kPanel;
  std::vector<float> tiles((size_t)(n * m)), vector((size_t)(n * m));
  (amx_emulated() ? gemm_block_bf16_amx_emulated : gemm_block_bf16_amx)(a.data(), kp, w, 0, n, 0, panels, tiles.data());
  gemm_block_bf16_avx512(a.data(), kp, w, 0, n, 0, panels, vector.data());
  for (size_t i = 0; i < tiles.size(); i++)
    if (!(std::fabs(tiles[i] - vector[i]) <= 1e-4f * (1 + std::fabs(vector[i])))) return false;
  return true;
}
#endif

bool amx_bf16_gemm_usable() {
#if defined(__x86_64__)
  // Checked first: the first-use check waits for an allowed call; it compares with the
  // AVX512-BF16 kernel.
  if (!amx_allowed() || !avx512_bf16_enabled()) return false;
  static const bool usable = amx_usable_for(cpu_features().amx_bf16, "bf16", amx_bf16_gemm_agrees);
  return usable;
#else
  return false;
#endif
}

void gemm_packed_bf16(const uint16_t* a, int64_t n, int64_t kp, const PackedWeight& w, float* c, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512 && n >= kAmxGemmRows && amx_bf16_gemm_usable()) {
    auto block = amx_emulated() ? gemm_block_bf16_amx_emulated : gemm_block_bf16_amx;
    for_each_task(n, w, [&](int64_t r0, int64_t r1, int64_t q0, int64_t q1) { block(a, kp, w, r0, r1, q0, q1, c); });
    return;
  }
  if (bf16_products(isa)) {
    for_each_task(n, w, [&](int64_t r0, int64_t r1, int64_t q0, int64_t q1) { gemm_block_bf16_avx512(a, kp, w, r0, r1, q0, q1, c); });
    return;
  }
  if (isa == Isa::Avx512 || isa == Isa::Avx2) {  // no bf16 products: the activations widened to f32 once (exact)
    float* af = widened_scratch(n * kp);
    pool().parallel_for(n, 64, [&](int64_t b, int64_t e) { widen_bf16_rows_avx2(a + b * kp, e - b, kp, af + b * kp); });
    return bf16_panels_in_f32(af, n, kp, w, c, isa);
  }
#endif
  // The reference: back to f32 (exact) and the scalar blocks, which round it again (a no-op).
  std::vector<float> af((size_t)(n * w.k));
  for (int64_t r = 0; r < n; r++)
    for (int64_t i = 0; i < w.k; i++) af[(size_t)(r * w.k + i)] = bf16_to_f32(a[r * kp + i]);
  for_each_task(n, w, [&](int64_t r0, int64_t r1, int64_t q0, int64_t q1) { gemm_block_scalar(af.data(), w, r0, r1, q0, q1, c); });
}

void gemm_packed(const float* a, int64_t n, const PackedWeight& w, float* c, Isa isa) {
#if defined(__x86_64__)
  if ((isa == Isa::Avx512 || isa == Isa::Avx2) && w.bf16) {
    // The activations rounded to bf16 once, rows padded to an even k: as bf16 for bf16 products,
    // else as the f32 values of those bf16 (one pass, not a bf16 copy widened back).
    const int64_t kp = (w.k + 1) / 2 * 2;
    if (!bf16_products(isa)) {
      float* af = widened_scratch(n * kp);
      pool().parallel_for(n, 64, [&](int64_t b, int64_t e) { bf16_rounded_rows_avx2(a + b * w.k, e - b, w.k, kp, af + b * kp); });
      return bf16_panels_in_f32(af, n, kp, w, c, isa);
    }
    thread_local std::vector<uint16_t> ab;
    ab.resize((size_t)(n * kp));
    uint16_t* abp = ab.data();
    pool().parallel_for(n, 64, [&](int64_t b, int64_t e) { bf16_rows_avx512(a + b * w.k, e - b, w.k, kp, abp + b * kp); });
    return gemm_packed_bf16(abp, n, kp, w, c, isa);
  }
  if (isa == Isa::Avx512) {
    for_each_task(n, w, [&](int64_t r0, int64_t r1, int64_t q0, int64_t q1) { gemm_block_f32_avx512(a, w, r0, r1, q0, q1, c); });
    return;
  }
  if (isa == Isa::Avx2) {
    for_each_task(n, w, [&](int64_t r0, int64_t r1, int64_t q0, int64_t q1) { gemm_block_f32_avx2(a, w, r0, r1, q0, q1, c); });
    return;
  }
#endif
  for_each_task(n, w, [&](int64_t r0, int64_t r1, int64_t q0, int64_t q1) { gemm_block_scalar(a, w, r0, r1, q0, q1, c); });
}

}  // namespace kvad::kernels
