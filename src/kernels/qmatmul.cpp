#include "kernels/qmatmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/threads.h"

namespace kvad::kernels {

// Scalar reference: y[t, r] = sum_b sx[t,b] * d[r,b] * dot(codes[r,b], xq[t,b]) + m[r,b] * xsum[t,b].
void qgroups_scalar(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  const bool q8 = w.kind() == QKind::Q8;
  for (int64_t g = g0; g < g1; g++)
    for (int64_t t = 0; t < x.n; t++) {
      float acc[16] = {};
      const int8_t* xq = x.codes(t);
      for (int64_t b = 0; b < w.blocks(); b++) {
        const uint8_t* rec = w.record(g, b);
        const int8_t* xb = xq + b * 32;
        float sx = x.scale[(size_t)(t * x.blocks + b)], xs = x.sum[(size_t)(t * x.blocks + b)];
        for (int lane = 0; lane < 16; lane++) {
          int32_t dot = 0;
          if (q8) {
            for (int s = 0; s < 8; s++)
              for (int j = 0; j < 4; j++) dot += (int32_t)rec[s * 64 + lane * 4 + j] * xb[s * 4 + j];
          } else {
            for (int p = 0; p < 4; p++)
              for (int j = 0; j < 4; j++) {
                uint8_t v = rec[p * 64 + lane * 4 + j];
                dot += (int32_t)(v & 15) * xb[(2 * p) * 4 + j] + (int32_t)(v >> 4) * xb[(2 * p + 1) * 4 + j];
              }
          }
          uint16_t hd, hm = 0;
          std::memcpy(&hd, rec + (q8 ? 512 : 256) + lane * 2, 2);
          if (!q8) std::memcpy(&hm, rec + 288 + lane * 2, 2);
          float d = f16_to_f32(hd), m = q8 ? -128.0f * d : f16_to_f32(hm);
          acc[lane] += d * ((float)dot * sx) + m * xs;
        }
      }
      for (int lane = 0; lane < 16; lane++) {
        int64_t r = g * 16 + lane;
        if (r < w.rows()) y[t * w.rows() + r] = acc[lane];
      }
    }
}

#if defined(__x86_64__)
static QGroupsFn amx_qgroups(QKind kind) {
  if (amx_emulated()) return kind == QKind::Q8 ? qgroups_q8_amx_emulated : qgroups_q4_amx_emulated;
  return kind == QKind::Q8 ? qgroups_q8_amx : qgroups_q4_amx;
}

// The AMX kernels against the AVX-512 ones on a ragged product: 37 rows (a part group), 7 blocks
// (an odd count), 21 tokens (a tail tile). Exact int32 sums, the same scaling: equal bit for bit.
static bool amx_qgroups_agree() {
  const int64_t rows = 37, cols = 7 * 32, tokens = 21;
  Rng rng(20261205);
  std::vector<float> w((size_t)(rows * cols)), x((size_t)(tokens * cols));
  for (float& v : w) v = (float)(rng.uniform() * 2 - 1);
  for (float& v : x) v = (float)(rng.uniform() * 2 - 1);
  QuantActs acts;
  quantize_acts(x.data(), tokens, cols, acts, Isa::Avx512);
  for (QKind kind : {QKind::Q8, QKind::Q4}) {
    QuantMatrix q = QuantMatrix::quantize(kind, w.data(), rows, cols);
    std::vector<float> tiles((size_t)(tokens * rows), 1.0f), vector((size_t)(tokens * rows), 2.0f);
    amx_qgroups(kind)(acts, q, 0, q.groups(), tiles.data());
    (kind == QKind::Q8 ? qgroups_q8_avx512 : qgroups_q4_avx512)(acts, q, 0, q.groups(), vector.data());
    if (std::memcmp(tiles.data(), vector.data(), tiles.size() * sizeof(float)) != 0) return false;
  }
  return true;
}
#endif

bool amx_qgroups_usable() {
#if defined(__x86_64__)
  if (!amx_allowed()) return false;  // checked first: the first-use check waits for an allowed call
  static const bool usable = amx_usable_for(cpu_features().amx_int8, "q8/q4", amx_qgroups_agree);
  return usable;
#else
  return false;
#endif
}

QGroupsFn qgroups_kernel(QKind kind, Isa isa, int64_t tokens) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512 && tokens >= kAmxTokens && amx_qgroups_usable()) return amx_qgroups(kind);
  if (isa == Isa::Avx512 && avx512_vnni_enabled()) return kind == QKind::Q8 ? qgroups_q8_avx512 : qgroups_q4_avx512;
  if (isa == Isa::Avx512) return kind == QKind::Q8 ? qgroups_q8_avx512bw : qgroups_q4_avx512bw;
  if (isa == Isa::Avx2 && avx_vnni_enabled()) return kind == QKind::Q8 ? qgroups_q8_avxvnni : qgroups_q4_avxvnni;
  if (isa == Isa::Avx2) return kind == QKind::Q8 ? qgroups_q8_avx2 : qgroups_q4_avx2;
#endif
  return qgroups_scalar;
}

// Groups per piece of a balanced region: ~32 KB of weights, and for prefill an even count, since
// its tile takes two groups at a time (odd pieces, i.e. one-group tiles at every piece's end, were
// 5-18% slower at 128 tokens; even ones equal the halves fixed in advance, kvad_micro BM_qmatmul).
// Larger prefill pieces were slower too: the last piece is one thread's alone.
static int64_t groups_per_piece(const QuantActs& x, int64_t group_bytes) {
  return x.n < 4 ? ThreadPool::items_per_piece(group_bytes) : ThreadPool::item_pairs_per_piece(group_bytes);
}

void qmatmul(const QuantActs& x, const QuantMatrix& w, float* y, Isa isa) {
  QGroupsFn fn = qgroups_kernel(w.kind(), isa, x.n);
  int64_t groups = w.groups();
  if (groups * w.blocks() * x.n < 64) {  // too small to be worth waking the pool
    fn(x, w, 0, groups, y);
    return;
  }
  // Split output groups: each thread streams its own part of W once, whatever n is, and takes
  // what the other has left when it is done first.
  int64_t piece = groups_per_piece(x, (int64_t)(w.bytes() / (size_t)groups));
  pool().parallel_for_balanced(groups, piece, [&](int64_t b, int64_t e) { fn(x, w, b, e, y); });
}

void qmatmul_multi(const QuantActs& x, const QuantMatrix* const* w, float* const* y, int count, Isa isa) {
  int64_t total = 0;
  size_t bytes = 0;
  for (int i = 0; i < count; i++) total += w[i]->groups(), bytes += w[i]->bytes();
  int64_t piece = groups_per_piece(x, (int64_t)bytes / std::max<int64_t>(total, 1));
  pool().parallel_for_balanced(total, piece, [&](int64_t b, int64_t e) {
    int64_t base = 0;  // groups of matrices before w[i] in the combined index
    for (int i = 0; i < count && base < e; i++) {
      int64_t g0 = std::max(b, base) - base, g1 = std::min(e, base + w[i]->groups()) - base;
      if (g0 < g1) qgroups_kernel(w[i]->kind(), isa, x.n)(x, *w[i], g0, g1, y[i]);
      base += w[i]->groups();
    }
  });
}

}  // namespace kvad::kernels
