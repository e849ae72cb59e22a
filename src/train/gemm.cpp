#include "train/gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"

namespace kvad::train {

namespace {

// Block sizes (tuned on Zen 4 for the shapes of docs/training.md): a KC x MR strip of A (18 KB)
// stays in L1 while the KC x NC panel of B (<= 768 KB) is read from L2.
constexpr int64_t KC = 384;
constexpr int64_t MC = 96;
constexpr int64_t NC = 512;

struct AlignedBuf {
  float* p = nullptr;
  size_t cap = 0;
  ~AlignedBuf() { std::free(p); }
  float* get(size_t n) {
    if (n > cap) {
      std::free(p);
      cap = (n + 1023) & ~size_t{1023};
      p = static_cast<float*>(std::aligned_alloc(64, cap * sizeof(float)));
      if (!p) throw std::bad_alloc();
    }
    return p;
  }
};

// n floats, n small: the sizes of the micro-tiles get constant-size copies (a few vector moves)
// instead of a call to memcpy per row piece.
inline void copy_floats(float* d, const float* s, int64_t n) {
  switch (n) {
    case 32: std::memcpy(d, s, 32 * sizeof(float)); return;
    case 16: std::memcpy(d, s, 16 * sizeof(float)); return;
    case 12: std::memcpy(d, s, 12 * sizeof(float)); return;
    case 8: std::memcpy(d, s, 8 * sizeof(float)); return;
    case 6: std::memcpy(d, s, 6 * sizeof(float)); return;
    case 4: std::memcpy(d, s, 4 * sizeof(float)); return;
    default:
      for (int64_t i = 0; i < n; i++) d[i] = s[i];
  }
}

// Ap: ceil(mc/MR) panels of kc x MR (for each k, MR consecutive rows), zero rows past mc.
void pack_a(const GemmShape& g, int64_t m0, int64_t mc, int64_t k0, int64_t kc, int MR, float* Ap) {
  if (g.trans_a) {
    // A stored [K, M]: walk each stored row once, left to right, handing MR values to each panel
    // (panel by panel down the rows would stride through memory and thrash L1's sets).
    for (int64_t k = 0; k < kc; k++) {
      const float* src = g.A + (k0 + k) * g.lda + m0;
      for (int64_t p = 0; p < mc; p += MR) {
        int64_t rows = std::min<int64_t>(MR, mc - p);
        float* d = Ap + p * kc + k * MR;
        copy_floats(d, src + p, rows);
        for (int64_t i = rows; i < MR; i++) d[i] = 0;
      }
    }
    return;
  }
  for (int64_t p = 0; p < mc; p += MR) {  // A stored [M, K]: read each row along k
    int64_t rows = std::min<int64_t>(MR, mc - p);
    float* dst = Ap + p * kc;
    for (int64_t i = 0; i < MR; i++) {
      if (i < rows) {
        const float* src = g.A + (m0 + p + i) * g.lda + k0;
        for (int64_t k = 0; k < kc; k++) dst[k * MR + i] = src[k];
      } else {
        for (int64_t k = 0; k < kc; k++) dst[k * MR + i] = 0;
      }
    }
  }
}

// Bp: ceil(nc/NR) panels of kc x NR (for each k, NR consecutive columns), zero columns past nc.
void pack_b(const GemmShape& g, const MicroKernel& uk, int64_t n0, int64_t nc, int64_t k0, int64_t kc, float* Bp) {
  const int NR = uk.nr;
  if (!g.trans_b) {  // B stored [K, N]: each stored row once, NR values to each panel
    for (int64_t k = 0; k < kc; k++) {
      const float* src = g.B + (k0 + k) * g.ldb + n0;
      for (int64_t p = 0; p < nc; p += NR) {
        int64_t cols = std::min<int64_t>(NR, nc - p);
        float* d = Bp + p * kc + k * NR;
        copy_floats(d, src + p, cols);
        for (int64_t j = cols; j < NR; j++) d[j] = 0;
      }
    }
    return;
  }
  for (int64_t p = 0; p < nc; p += NR) {  // B stored [N, K]: read each column (a stored row) along k
    int64_t cols = std::min<int64_t>(NR, nc - p);
    float* dst = Bp + p * kc;
    if (uk.pack_bt) {
      uk.pack_bt(g.B + (n0 + p) * g.ldb + k0, g.ldb, cols, kc, dst);
      continue;
    }
    for (int64_t j = 0; j < NR; j++) {
      if (j < cols) {
        const float* src = g.B + (n0 + p + j) * g.ldb + k0;
        for (int64_t k = 0; k < kc; k++) dst[k * NR + j] = src[k];
      } else {
        for (int64_t k = 0; k < kc; k++) dst[k * NR + j] = 0;
      }
    }
  }
}

// ---- The bf16 form (GemmShape::bf16): each operand rounded to bf16 pairs once per product.
//
// An operand every thread reads (B when the threads split C by rows, A when by columns), and A when
// C has several NC blocks of columns, is rounded first, by all threads together, into one buffer
// (`SharedPairs`); an operand only one thread reads, once, is rounded block by block as it is used.
// Measured on Zen 4 in docs/training.md, "Each value rounded once".

// Pairs a k block of KC values takes (zero pairs pad it to the kernel's pair_align).
int64_t pairs_in(const MicroKernel& uk, int64_t kc) {
  return ((kc + 1) / 2 + uk.pair_align - 1) / uk.pair_align * uk.pair_align;
}

// The pairs of n rows (of A) or columns (of B) from i0 on, values k0..k0+kc, in panels of `width`
// (panel q at dst + q * width * kp): straight from storage by its layout (MicroKernel::to_pairs /
// rows_to_pairs).
void to_panels(const MicroKernel& uk, const float* X, int64_t ld, bool k_by_k, int64_t i0, int64_t n, int64_t k0,
               int64_t kc, int width, int64_t kp, uint32_t* dst) {
  if (k_by_k) return uk.to_pairs(X + k0 * ld + i0, ld, (int)n, kc, width, kp * width, dst);
  for (int64_t i = 0; i < n; i += width)
    uk.rows_to_pairs(X + (i0 + i) * ld + k0, ld, (int)std::min<int64_t>(width, n - i), kc, width, dst + i * kp);
}

// B's columns [n0, n0 + nc) for one k block, panel by panel from dst, pad pairs zeroed.
void b_panels(const GemmShape& g, const MicroKernel& uk, int64_t n0, int64_t nc, int64_t k0, int64_t kc, uint32_t* dst) {
  const int64_t kp = pairs_in(uk, kc), written = (kc + 1) / 2;
  to_panels(uk, g.B, g.ldb, !g.trans_b, n0, nc, k0, kc, uk.nr, kp, dst);
  for (int64_t j = 0; j < nc; j += uk.nr)
    std::memset(dst + j * kp + written * uk.nr, 0, (size_t)((kp - written) * uk.nr) * 4);
}

// A's rows [m0, m0 + mc) for one k block, in MR-wide panels from dst; AMX's A pairs (to_pair_rows)
// from an f32 panel packed as for f32, MC rows at a time.
void a_pairs(const GemmShape& g, const MicroKernel& uk, int64_t m0, int64_t mc, int64_t k0, int64_t kc, uint32_t* dst) {
  const int64_t kp = pairs_in(uk, kc);
  if (!uk.to_pair_rows) return to_panels(uk, g.A, g.lda, g.trans_a, m0, mc, k0, kc, uk.mr, kp, dst);
  thread_local AlignedBuf abuf;
  float* Ap = abuf.get((size_t)(KC * (MC + uk.mr)));
  for (int64_t b = 0; b < mc; b += MC) {
    const int64_t rows = std::min(MC, mc - b);
    pack_a(g, m0 + b, rows, k0, kc, uk.mr, Ap);
    for (int64_t i = 0; i < rows; i += uk.mr) uk.to_pair_rows(Ap + i * kc, kc, uk.mr, kp, dst + (b + i) * kp);
  }
}

// One operand's pairs for every k block: block kb's row (or column) i at base + kb * block + i * kp.
struct SharedPairs {
  uint32_t* base = nullptr;
  int64_t block = 0;
  uint32_t* at(int64_t kb, int64_t i, int64_t kp) const { return base + kb * block + i * kp; }
};

// C[m_begin..m_end, n_begin..n_end) with A's or B's pairs in `shared` (the other rounded here).
void gemm_block_bf16(const GemmShape& g, const MicroKernel& uk, int64_t m_begin, int64_t m_end, int64_t n_begin,
                     int64_t n_end, const SharedPairs& shared_a, const SharedPairs& shared_b) {
  thread_local AlignedBuf a16, b16;
  const int MR = uk.mr, NR = uk.nr;
  const int64_t max_kp = pairs_in(uk, KC);
  uint32_t* Bq = shared_b.base ? nullptr : reinterpret_cast<uint32_t*>(b16.get((size_t)(max_kp * (NC + NR))));
  uint32_t* Aq = shared_a.base ? nullptr : reinterpret_cast<uint32_t*>(a16.get((size_t)(max_kp * (MC + MR))));
  for (int64_t n0 = n_begin; n0 < n_end; n0 += NC) {
    const int64_t nc = std::min(NC, n_end - n0);
    for (int64_t k0 = 0, kb = 0; k0 < g.K; k0 += KC, kb++) {
      const int64_t kc = std::min(KC, g.K - k0), kp = pairs_in(uk, kc);
      if (!shared_b.base) b_panels(g, uk, n0, nc, k0, kc, Bq);
      const uint32_t* B = shared_b.base ? shared_b.at(kb, n0, kp) : Bq;
      const bool add_c = g.accumulate || k0 > 0;
      const float* bias = k0 == 0 && g.bias ? g.bias + n0 : nullptr;
      for (int64_t m0 = m_begin; m0 < m_end; m0 += MC) {
        const int64_t mc = std::min(MC, m_end - m0);
        if (!shared_a.base) a_pairs(g, uk, m0, mc, k0, kc, Aq);
        const uint32_t* A = shared_a.base ? shared_a.at(kb, m0, kp) : Aq;
        for (int64_t i = 0; i < mc; i += MR) {
          const int mr = (int)std::min<int64_t>(MR, mc - i);
          float* C = g.C + (m0 + i) * g.ldc + n0;
          for (int64_t j = 0; j < nc; j += NR)
            uk.run_bf16(kp, A + i * kp, B + j * kp, C + j, g.ldc, mr, (int)std::min<int64_t>(NR, nc - j), add_c,
                        bias ? bias + j : nullptr);
        }
      }
    }
  }
}

// Rounds rows [i_begin, i_end) of A (a) or columns of B (!a), every k block, into `shared`.
void share_pairs(const GemmShape& g, const MicroKernel& uk, bool a, int64_t i_begin, int64_t i_end,
                 const SharedPairs& shared) {
  for (int64_t k0 = 0, kb = 0; k0 < g.K; k0 += KC, kb++) {
    const int64_t kc = std::min(KC, g.K - k0), kp = pairs_in(uk, kc);
    if (a) a_pairs(g, uk, i_begin, i_end - i_begin, k0, kc, shared.at(kb, i_begin, kp));
    else b_panels(g, uk, i_begin, i_end - i_begin, k0, kc, shared.at(kb, i_begin, kp));
  }
}

// C[m_begin..m_end, n_begin..n_end) on the calling thread.
void gemm_block(const GemmShape& g, const MicroKernel& uk, int64_t m_begin, int64_t m_end, int64_t n_begin,
                int64_t n_end) {
  thread_local AlignedBuf abuf, bbuf;
  const int MR = uk.mr, NR = uk.nr;
  if (g.K == 0) {  // no product: C = bias or 0 (or unchanged when accumulating)
    for (int64_t m = m_begin; m < m_end; m++)
      for (int64_t n = n_begin; n < n_end; n++) {
        float b = g.bias ? g.bias[n] : 0.0f;
        g.C[m * g.ldc + n] = g.accumulate ? g.C[m * g.ldc + n] + b : b;
      }
    return;
  }
  float* Bp = bbuf.get((size_t)(KC * (NC + NR)));
  float* Ap = abuf.get((size_t)(KC * (MC + MR)));
  for (int64_t n0 = n_begin; n0 < n_end; n0 += NC) {
    int64_t nc = std::min(NC, n_end - n0);
    for (int64_t k0 = 0; k0 < g.K; k0 += KC) {
      int64_t kc = std::min(KC, g.K - k0);
      pack_b(g, uk, n0, nc, k0, kc, Bp);
      bool add_c = g.accumulate || k0 > 0;
      const float* bias = k0 == 0 && g.bias ? g.bias + n0 : nullptr;
      const bool direct = !g.trans_a && uk.run_rows;  // A's rows read in place, not packed
      for (int64_t m0 = m_begin; m0 < m_end; m0 += MC) {
        int64_t mc = std::min(MC, m_end - m0);
        // In place needs whole tiles: a ragged last tile of rows is packed.
        int64_t whole = direct ? mc / MR * MR : 0;
        if (whole < mc) pack_a(g, m0 + whole, mc - whole, k0, kc, MR, Ap);
        for (int64_t i = 0; i < mc; i += MR) {
          int mr = (int)std::min<int64_t>(MR, mc - i);
          float* C = g.C + (m0 + i) * g.ldc + n0;
          // The k range this tile needs (all of the block unless a triangle cuts it).
          const int64_t r0 = m0 + i, r1 = r0 + mr;
          int64_t ks = 0, ke = kc;
          if (g.triangle == GemmShape::LowerA) ke = std::clamp<int64_t>(r1 - k0, 0, kc);
          if (g.triangle == GemmShape::UpperA) ks = std::clamp<int64_t>(r0 - k0, 0, kc);
          if (ks >= ke) {
            if (add_c) continue;  // adds nothing
            ks = ke = 0;          // still writes C = 0 (+ bias)
          }
          for (int64_t j = 0; j < nc; j += NR) {
            if (g.triangle == GemmShape::LowerC && n0 + j >= r1) break;  // the rest is above the diagonal
            int nr = (int)std::min<int64_t>(NR, nc - j);
            const float* b = bias ? bias + j : nullptr;
            if (i < whole)
              uk.run_rows(ke - ks, g.A + r0 * g.lda + k0 + ks, g.lda, Bp + j * kc + ks * NR, C + j, g.ldc, nr, add_c, b);
            else
              uk.run(ke - ks, Ap + (i - whole) * kc + ks * MR, Bp + j * kc + ks * NR, C + j, g.ldc, mr, nr, add_c, b);
          }
        }
      }
    }
  }
}

void ukernel_scalar(int64_t kc, const float* A, const float* B, float* C, int64_t ldc, int mr, int nr, bool add_c,
                    const float* bias) {
  constexpr int MR = 4, NR = 8;
  float acc[MR][NR] = {};
  for (int64_t k = 0; k < kc; k++, A += MR, B += NR)
    for (int i = 0; i < MR; i++)
      for (int j = 0; j < NR; j++) acc[i][j] += A[i] * B[j];
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) {
      float v = acc[i][j] + (bias ? bias[j] : 0.0f);
      C[i * ldc + j] = add_c ? C[i * ldc + j] + v : v;
    }
}

// How the threads share C: by rows (each thread then reads only its rows of A), unless that leaves
// them unevenly loaded (e.g. 11 tiles of rows for 2 threads) and columns divide better. Boundaries
// fall on whole micro-tiles so no tile is computed twice.
struct ThreadSplit {
  int64_t M, N, mtiles, ntiles;
  int mr, nr, threads;
  bool by_rows;
  // Thread t of n's rows (rows) or columns of C, [first, second): also its share of an operand's
  // rounding, so a thread rounds the rows of A it then multiplies.
  std::pair<int64_t, int64_t> range(int t, int n, bool rows) const {
    const int64_t tiles = rows ? mtiles : ntiles, step = rows ? mr : nr;
    return {tiles * t / n * step, std::min(tiles * (t + 1) / n * step, rows ? M : N)};
  }
};

ThreadSplit split_of(const GemmShape& g, const MicroKernel& uk, int nt) {
  const int64_t mtiles = (g.M + uk.mr - 1) / uk.mr, ntiles = (g.N + uk.nr - 1) / uk.nr;
  auto imbalance = [nt](int64_t tiles) { return (double)((tiles + nt - 1) / nt) * nt / (double)tiles; };
  const bool by_rows = nt == 1 || imbalance(mtiles) <= 1.05 || imbalance(mtiles) <= imbalance(ntiles);
  return {g.M, g.N, mtiles, ntiles, uk.mr, uk.nr, nt, by_rows};
}

// bf16: rounds once, before any product and by all threads, an operand more than one thread reads
// (B when they split C by rows, A by columns), and A when C has several NC blocks of columns (it
// would be rounded again for each). The buffers are the calling thread's; its workers fill them.
void round_shared(const GemmShape& g, const MicroKernel& uk, const ThreadSplit& split, SharedPairs& a, SharedPairs& b) {
  const bool share_b = split.by_rows && split.threads > 1, share_a = !split.by_rows || g.N > NC;
  if (!share_a && !share_b) return;
  thread_local AlignedBuf a_buf, b_buf;
  const int64_t k_blocks = (g.K + KC - 1) / KC;
  if (share_a) {
    a.block = split.mtiles * uk.mr * pairs_in(uk, KC);
    a.base = reinterpret_cast<uint32_t*>(a_buf.get((size_t)(a.block * k_blocks)));
  }
  if (share_b) {
    b.block = split.ntiles * uk.nr * pairs_in(uk, KC);
    b.base = reinterpret_cast<uint32_t*>(b_buf.get((size_t)(b.block * k_blocks)));
  }
  auto round = [&](int t, int n) {
    if (auto [i0, i1] = split.range(t, n, true); share_a && i0 < i1) share_pairs(g, uk, true, i0, i1, a);
    if (auto [i0, i1] = split.range(t, n, false); share_b && i0 < i1) share_pairs(g, uk, false, i0, i1, b);
  };
  if (split.threads == 1) round(0, 1);
  else pool().run(round);
}

}  // namespace

MicroKernel micro_kernel_scalar() { return {4, 8, ukernel_scalar, nullptr, nullptr}; }

MicroKernel micro_kernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return micro_kernel_avx512();
  if (isa == Isa::Avx2) return micro_kernel_avx2();
#endif
  return micro_kernel_scalar();
}

namespace {
std::atomic<bool> g_linear_bf16{false};
}

void set_linear_bf16(bool on) {
  if (on && !bf16_gemm_supported())
    fail("--precision bf16 needs a CPU with AVX512-BF16 (this one: {}); use --precision f32", cpu_summary());
  g_linear_bf16 = on;
}
bool linear_bf16() { return g_linear_bf16; }
bool bf16_gemm_supported() { return micro_kernel(best_isa()).run_bf16 != nullptr; }

#if defined(__x86_64__)
static MicroKernel amx_micro_kernel() { return amx_emulated() ? micro_kernel_amx_emulated() : micro_kernel_amx(); }

// The tiles against vdpbf16ps on a ragged product (45 x 70 x 83: part tiles, an odd k, a part
// step); both sum bf16 products in f32, in different orders.
static bool amx_bf16_train_agrees() {
  const int64_t M = 45, N = 70, K = 83;
  Rng rng(20261205);
  std::vector<float> a((size_t)(M * K)), b((size_t)(K * N)), tiles((size_t)(M * N)), vector((size_t)(M * N));
  for (float& v : a) v = (float)(rng.uniform() * 2 - 1);
  for (float& v : b) v = (float)(rng.uniform() * 2 - 1);
  GemmShape g{M, N, K, a.data(), K, false, b.data(), N, false, tiles.data(), N, false, nullptr};
  g.bf16 = true;
  gemm_with(g, amx_micro_kernel(), false);
  g.C = vector.data();
  gemm_with(g, micro_kernel_avx512(), false);
  for (size_t i = 0; i < tiles.size(); i++)
    if (!(std::fabs(tiles[i] - vector[i]) <= 1e-4f * (1 + std::fabs(vector[i])))) return false;
  return true;
}
#endif

bool amx_bf16_train_usable() {
#if defined(__x86_64__)
  // Checked first: the first-use check waits for an allowed call. The tiles take B's pairs from
  // the AVX512-BF16 kernel (micro_kernel_avx512().to_pairs / rows_to_pairs).
  if (!amx_allowed() || !avx512_bf16_enabled()) return false;
  static const bool usable = amx_usable_for(cpu_features().amx_bf16, "training bf16", amx_bf16_train_agrees);
  return usable;
#else
  return false;
#endif
}

MicroKernel bf16_micro_kernel(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512 && amx_bf16_train_usable()) return amx_micro_kernel();
#endif
  return micro_kernel(isa);
}

void gemm(const GemmShape& g, bool parallel, Isa isa) {
  if (g.M <= 0 || g.N <= 0) return;
  gemm_with(g, g.bf16 ? bf16_micro_kernel(isa) : micro_kernel(isa), parallel);
}

void gemm_with(const GemmShape& g, const MicroKernel& uk, bool parallel) {
  if (g.M <= 0 || g.N <= 0) return;
  if (g.bf16 && (!uk.run_bf16 || g.triangle != GemmShape::Full))
    fail("internal: a bf16 product needs AVX512-BF16 and a full triangle");
  ThreadPool& tp = pool();
  int nt = parallel ? tp.size() : 1;
  double flops = 2.0 * (double)g.M * (double)g.N * (double)g.K;
  if (nt > 1 && flops < 2e5) nt = 1;  // waking the pool costs more than it saves
  const ThreadSplit split = split_of(g, uk, nt);
  const bool bf16 = g.bf16 && g.K > 0;
  SharedPairs shared_a, shared_b;
  if (bf16) round_shared(g, uk, split, shared_a, shared_b);
  auto block = [&](int64_t m_begin, int64_t m_end, int64_t n_begin, int64_t n_end) {
    if (bf16) gemm_block_bf16(g, uk, m_begin, m_end, n_begin, n_end, shared_a, shared_b);
    else gemm_block(g, uk, m_begin, m_end, n_begin, n_end);
    if (uk.done) uk.done();
  };
  if (nt == 1) return block(0, g.M, 0, g.N);
  tp.run([&](int t, int n) {
    auto [b, e] = split.range(t, n, split.by_rows);
    if (b >= e) return;
    if (split.by_rows) block(b, e, 0, g.N);
    else block(0, g.M, b, e);
  });
}

void matmul_fwd(float* y, const float* x, const float* w, const float* b, int64_t n, int64_t in, int64_t out) {
  gemm({n, out, in, x, in, false, w, in, true, y, out, false, b});
}

void matmul_dx(float* dx, const float* dy, const float* w, int64_t n, int64_t in, int64_t out, bool accumulate) {
  gemm({n, in, out, dy, out, false, w, in, false, dx, in, accumulate, nullptr});
}

void matmul_dw(float* dw, const float* dy, const float* x, int64_t n, int64_t in, int64_t out, bool accumulate) {
  gemm({out, in, n, dy, out, true, x, in, false, dw, in, accumulate, nullptr});
}

}  // namespace kvad::train
