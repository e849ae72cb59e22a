// AMX-BF16 tiles for the bf16 panels of kernels/gemm.h. A panel is [k/2][32 outputs][2], i.e. a
// row of 16 bf16 pairs is 64 bytes of B tile for outputs 0-15 followed by 64 for 16-31, so the
// tiles read the panels as they are; the activations [n, kp] are A tiles of 16 rows x 16 pairs.
// A tile of 32 rows x 32 outputs keeps its four f32 accumulators in tiles over the whole of k
// (two A and two B tiles feed four TDPBF16PS a step). The pairs past the last full step of 16,
// and a last tile of fewer than 32 rows, are copied zero-padded, so one tile shape serves all.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/amx_tiles.h"
#include "kernels/gemm.h"

namespace kvad::kernels {

namespace {

constexpr int64_t kPanel = 32, kStep = 16;  // outputs a panel, pairs a tile step
constexpr int kA0 = 0, kA1 = 1, kB0 = 2, kB1 = 3;

// C[32][32] (row stride ldc floats) = rows of a (stride lda bf16) . panel b over `steps` full
// steps, then the tail step from the zero-padded copies when there is one.
template <class Tiles>
void tile_32x32(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t steps, const uint16_t* a_tail,
                const uint16_t* b_tail, float* c, int64_t ldc) {
  Tiles::template zero<4>(), Tiles::template zero<5>(), Tiles::template zero<6>(), Tiles::template zero<7>();
  auto step = [](const uint16_t* a0, const uint16_t* a1, int64_t a_stride, const uint16_t* b0) {
    Tiles::template load<kA0>(a0, a_stride);
    Tiles::template load<kA1>(a1, a_stride);
    Tiles::template load<kB0>(b0, kPanel * 4);
    Tiles::template load<kB1>(b0 + 32, kPanel * 4);
    Tiles::template dpbf16ps<4, kA0, kB0>();
    Tiles::template dpbf16ps<5, kA0, kB1>();
    Tiles::template dpbf16ps<6, kA1, kB0>();
    Tiles::template dpbf16ps<7, kA1, kB1>();
  };
  for (int64_t s = 0; s < steps; s++)
    step(a + s * kStep * 2, a + 16 * lda + s * kStep * 2, lda * 2, b + s * kStep * kPanel * 2);
  if (a_tail) step(a_tail, a_tail + 16 * kStep * 2, kStep * 4, b_tail);
  Tiles::template store<4>(c, ldc * 4);
  Tiles::template store<5>(c + 16, ldc * 4);
  Tiles::template store<6>(c + 16 * ldc, ldc * 4);
  Tiles::template store<7>(c + 16 * ldc + 16, ldc * 4);
}

template <class Tiles>
void block(const uint16_t* a, int64_t kp, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0, int64_t p1,
           float* c) {
  const int64_t k2 = kp / 2, m = w.m, steps = k2 / kStep, tail = k2 - steps * kStep;
  thread_local std::vector<uint16_t> rows_copy;  // a last tile of < 32 rows, zero below
  alignas(64) uint16_t a_tail[32 * kStep * 2], b_tail[kStep * kPanel * 2];
  alignas(64) float out[32 * 32];
  Tiles::configure(full_tiles());
  for (int64_t r = r0; r < r1; r += 32) {
    const int64_t rows = std::min<int64_t>(32, r1 - r);
    const uint16_t* ar = a + r * kp;
    if (rows < 32) {
      rows_copy.assign((size_t)(32 * kp), 0);
      std::memcpy(rows_copy.data(), ar, (size_t)(rows * kp) * 2);
      ar = rows_copy.data();
    }
    if (tail) {
      std::memset(a_tail, 0, sizeof a_tail);
      for (int64_t i = 0; i < 32; i++) std::memcpy(a_tail + i * kStep * 2, ar + i * kp + steps * kStep * 2, (size_t)tail * 4);
    }
    for (int64_t p = p0; p < p1; p++) {
      const uint16_t* panel = w.b16.data() + p * k2 * kPanel * 2;
      if (tail) {
        std::memset(b_tail, 0, sizeof b_tail);
        std::memcpy(b_tail, panel + steps * kStep * kPanel * 2, (size_t)(tail * kPanel) * 4);
      }
      const int64_t cols = std::min<int64_t>(kPanel, m - p * kPanel);
      float* dst = c + r * m + p * kPanel;
      if (rows == 32 && cols == kPanel) {
        tile_32x32<Tiles>(ar, kp, panel, steps, tail ? a_tail : nullptr, b_tail, dst, m);
        continue;
      }
      tile_32x32<Tiles>(ar, kp, panel, steps, tail ? a_tail : nullptr, b_tail, out, 32);
      for (int64_t i = 0; i < rows; i++) std::memcpy(dst + i * m, out + i * 32, (size_t)cols * 4);
    }
  }
  Tiles::release();
}

}  // namespace

void gemm_block_bf16_amx(const uint16_t* a, int64_t kp, const PackedWeight& w, int64_t r0, int64_t r1, int64_t p0,
                         int64_t p1, float* c) {
  block<HardwareTiles>(a, kp, w, r0, r1, p0, p1, c);
}

void gemm_block_bf16_amx_emulated(const uint16_t* a, int64_t kp, const PackedWeight& w, int64_t r0, int64_t r1,
                                  int64_t p0, int64_t p1, float* c) {
  block<EmulatedTiles>(a, kp, w, r0, r1, p0, p1, c);
}

}  // namespace kvad::kernels
