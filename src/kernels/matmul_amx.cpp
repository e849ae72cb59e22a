// AMX-BF16 tiles for the prefill of bf16 weights as checkpoints store them, W [m, k] row-major.
// A row of W is 16 bf16 pairs per 64 bytes, which is what an A tile reads, so the tiles compute
// yᵀ = W · xᵀ with W in place (no repacking, no second copy of the weights) and the activations
// packed once per call as B tiles ([k/2][16 tokens][2]).
//
// The vector kernel multiplies bf16 weights by f32 activations. Rounding the activations to bf16
// would change prefill's numbers against decode's, so each activation is split into three bf16
// parts, x = hi + mid + lo (each the bf16 rounding of what the parts before it left): 24 bits of
// its mantissa, f32's, in three products whose results are exact in f32. The sums stay f32, in a
// different order from the vector kernel's, so the two agree to f32 rounding.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/amx_tiles.h"
#include "kernels/matmul.h"

namespace kvad::kernels {

namespace {

constexpr int64_t kStep = 16;  // pairs a tile step (32 inputs)
constexpr int kParts = 3;      // hi, mid, lo

// x [n, k] as B tiles: [token tile][part][pair][16 tokens] of u32 pairs, zero past n and k.
struct PackedActs {
  int64_t tiles = 0, steps = 0;
  std::vector<uint32_t> pairs;
  const uint32_t* tile(int64_t token_tile, int part, int64_t step) const {
    return pairs.data() + ((token_tile * kParts + part) * steps + step) * kStep * 16;
  }
};

void pack_acts(const float* x, int64_t n, int64_t k, PackedActs& out) {
  out.tiles = (n + 15) / 16, out.steps = ((k + 1) / 2 + kStep - 1) / kStep;
  out.pairs.assign((size_t)(out.tiles * kParts * out.steps * kStep * 16), 0);
  uint16_t* half = reinterpret_cast<uint16_t*>(out.pairs.data());
  for (int64_t t = 0; t < n; t++)
    for (int64_t i = 0; i < k; i++) {
      float rest = x[t * k + i];
      for (int part = 0; part < kParts; part++) {
        const uint16_t b = f32_to_bf16(rest);
        rest -= bf16_to_f32(b);  // exact: b holds the leading bits of rest
        half[(((t / 16 * kParts + part) * out.steps * kStep + i / 2) * 16 + t % 16) * 2 + i % 2] = b;
      }
    }
}

// y[t, r0..r0+32) for the 16 tokens of `token_tile` (`tokens` of them real, `rows` rows real).
// w32: 32 rows of W, stride ldw; its last partial step comes from w_tail ([32][32] bf16) if any.
template <class Tiles>
void tile_32x16(const uint16_t* w32, int64_t ldw, int64_t full_steps, const uint16_t* w_tail, const PackedActs& a,
                int64_t token_tile, int tokens, int rows, float* y, int64_t m) {
  Tiles::template zero<4>(), Tiles::template zero<5>(), Tiles::template zero<6>(), Tiles::template zero<7>();
  auto step = [&](const uint16_t* a0, const uint16_t* a1, int64_t stride, int64_t s) {
    Tiles::template load<0>(a0, stride);
    Tiles::template load<1>(a1, stride);
    // hi and lo into tiles 4 / 6, mid into 5 / 7 (the four products the tiles name), summed below.
    Tiles::template load<2>(a.tile(token_tile, 0, s), 64);
    Tiles::template dpbf16ps<4, 0, 2>();
    Tiles::template dpbf16ps<6, 1, 2>();
    Tiles::template load<3>(a.tile(token_tile, 1, s), 64);
    Tiles::template dpbf16ps<5, 0, 3>();
    Tiles::template dpbf16ps<7, 1, 3>();
    Tiles::template load<2>(a.tile(token_tile, 2, s), 64);
    Tiles::template dpbf16ps<4, 0, 2>();
    Tiles::template dpbf16ps<6, 1, 2>();
  };
  for (int64_t s = 0; s < full_steps; s++) step(w32 + s * 32, w32 + 16 * ldw + s * 32, ldw * 2, s);
  if (w_tail) step(w_tail, w_tail + 16 * 32, 64, full_steps);
  alignas(64) float c[4][16 * 16];
  Tiles::template store<4>(c[0], 64);
  Tiles::template store<5>(c[1], 64);
  Tiles::template store<6>(c[2], 64);
  Tiles::template store<7>(c[3], 64);
  // c[0] + c[1]: rows 0-15 x tokens, c[2] + c[3]: rows 16-31; y is [token][row].
  for (int t = 0; t < tokens; t++) {
    float* yt = y + (token_tile * 16 + t) * m;
    for (int i = 0; i < rows; i++) {
      const int h = i / 16, r = i % 16;
      yt[i] = c[2 * h][r * 16 + t] + c[2 * h + 1][r * 16 + t];
    }
  }
}

template <class Tiles>
void rows_amx(const float* x, int64_t n, int64_t k, const void* wv, int64_t m, int64_t rb, int64_t re, float* y) {
  const uint16_t* w = static_cast<const uint16_t*>(wv);
  thread_local PackedActs acts;
  thread_local std::vector<uint16_t> rows_copy;  // a last tile of < 32 rows, zero below
  const int64_t full_steps = k / 32, tail = k - full_steps * 32;
  alignas(64) uint16_t w_tail[32 * 32];
  Tiles::configure(full_tiles());
  // Blocks of tokens whose packed activations (6 bytes an input) stay in L2 while every row tile
  // of this thread's W passes over them: all n at once re-read them from memory per 32 rows.
  const int64_t block = std::max<int64_t>(16, (512 * 1024) / (k * 2 * kParts) / 16 * 16);
  for (int64_t t0 = 0; t0 < n; t0 += block) {
    const int64_t count = std::min(block, n - t0);
    pack_acts(x + t0 * k, count, k, acts);
    for (int64_t r = rb; r < re; r += 32) {
      const int rows = (int)std::min<int64_t>(32, re - r);
      const uint16_t* w32 = w + r * k;
      if (rows < 32) {
        rows_copy.assign((size_t)(32 * k), 0);
        std::memcpy(rows_copy.data(), w32, (size_t)(rows * k) * 2);
        w32 = rows_copy.data();
      }
      if (tail) {
        std::memset(w_tail, 0, sizeof w_tail);
        for (int i = 0; i < 32; i++) std::memcpy(w_tail + i * 32, w32 + i * k + full_steps * 32, (size_t)tail * 2);
      }
      for (int64_t tt = 0; tt < acts.tiles; tt++)
        tile_32x16<Tiles>(w32, k, full_steps, tail ? w_tail : nullptr, acts, tt,
                          (int)std::min<int64_t>(16, count - tt * 16), rows, y + t0 * m + r, m);
    }
  }
  Tiles::release();
}

}  // namespace

void rows_bf16_amx(const float* x, int64_t n, int64_t k, const void* w, int64_t m, int64_t rb, int64_t re, float* y) {
  rows_amx<HardwareTiles>(x, n, k, w, m, rb, re, y);
}

void rows_bf16_amx_emulated(const float* x, int64_t n, int64_t k, const void* w, int64_t m, int64_t rb, int64_t re,
                            float* y) {
  rows_amx<EmulatedTiles>(x, n, k, w, m, rb, re, y);
}

}  // namespace kvad::kernels
