// The trainer's bf16 products on AMX-BF16 tiles (`kvad train --precision bf16` on a CPU with AMX).
// The driver (gemm.cpp) packs B as for vdpbf16ps, [k/2][32] pairs, which is two B tiles a row of
// pairs; A's pairs go row by row ([32 rows][k/2]) as A tiles read them, both padded with zero pairs
// to a multiple of 16 (a tile step). A tile of 32 x 32 of C keeps its four f32 accumulators in
// tiles for the whole k block; sums stay f32, master weights too (train/gemm.h).
#include <immintrin.h>

#include <cstring>

#include "core/dtype.h"
#include "kernels/amx_tiles.h"
#include "train/gemm.h"

namespace kvad::train {

namespace {

using kernels::EmulatedTiles;
using kernels::HardwareTiles;
using kernels::full_tiles;

constexpr int MR = 32, NR = 32, kStep = 16;  // kStep: pairs per tile step

// A packed f32 panel [kc][width] as rows of bf16 pairs [width][kpa]: row r, pair p holds (k = 2p,
// 2p + 1) of row r, rounded to nearest even; pairs past kc are zero.
void to_pair_rows(const float* src, int64_t kc, int width, int64_t kpa, uint32_t* dst) {
  for (int r = 0; r < width; r++)
    for (int64_t p = 0; p < kpa; p++) {
      const int64_t k = 2 * p;
      const uint32_t lo = k < kc ? f32_to_bf16(src[k * width + r]) : 0;
      const uint32_t hi = k + 1 < kc ? f32_to_bf16(src[(k + 1) * width + r]) : 0;
      dst[r * kpa + p] = lo | hi << 16;
    }
}

// C[0..mr, 0..nr) (+)= A . B (+ bias) over kpa pairs, kpa a multiple of kStep.
template <class Tiles>
void tile_bf16(int64_t kpa, const uint32_t* A, const uint32_t* B, float* C, int64_t ldc, int mr, int nr, bool add_c,
               const float* bias) {
  Tiles::configure(full_tiles());
  alignas(64) float buf[MR * NR];
  const bool direct = mr == MR && nr == NR && !bias;  // the tiles load and store C in place
  float* out = direct ? C : buf;
  const int64_t ldo = direct ? ldc : NR;
  if (!direct)
    for (int i = 0; i < MR; i++)
      for (int j = 0; j < NR; j++)
        buf[i * NR + j] = i < mr && j < nr ? (add_c ? C[i * ldc + j] : 0.0f) + (bias ? bias[j] : 0.0f) : 0.0f;
  if (add_c || !direct) {
    Tiles::template load<4>(out, ldo * 4);
    Tiles::template load<5>(out + 16, ldo * 4);
    Tiles::template load<6>(out + 16 * ldo, ldo * 4);
    Tiles::template load<7>(out + 16 * ldo + 16, ldo * 4);
  } else {
    Tiles::template zero<4>(), Tiles::template zero<5>(), Tiles::template zero<6>(), Tiles::template zero<7>();
  }
  for (int64_t p = 0; p < kpa; p += kStep) {
    Tiles::template load<0>(A + p, kpa * 4);
    Tiles::template load<1>(A + 16 * kpa + p, kpa * 4);
    Tiles::template load<2>(B + p * NR, NR * 4);
    Tiles::template load<3>(B + p * NR + 16, NR * 4);
    Tiles::template dpbf16ps<4, 0, 2>();
    Tiles::template dpbf16ps<5, 0, 3>();
    Tiles::template dpbf16ps<6, 1, 2>();
    Tiles::template dpbf16ps<7, 1, 3>();
  }
  Tiles::template store<4>(out, ldo * 4);
  Tiles::template store<5>(out + 16, ldo * 4);
  Tiles::template store<6>(out + 16 * ldo, ldo * 4);
  Tiles::template store<7>(out + 16 * ldo + 16, ldo * 4);
  if (!direct)
    for (int i = 0; i < mr; i++) std::memcpy(C + i * ldc, buf + i * NR, (size_t)nr * 4);
}

MicroKernel amx_kernel(decltype(MicroKernel::run_bf16) run, void (*release)()) {
  MicroKernel uk = micro_kernel_avx512();  // its B packing (and to_pairs for B's pairs)
  uk.mr = MR, uk.nr = NR;
  uk.run = nullptr, uk.run_rows = nullptr;  // bf16 only
  uk.to_pair_rows = to_pair_rows;
  uk.pair_align = kStep;
  uk.run_bf16 = run;
  uk.done = release;
  return uk;
}

}  // namespace

MicroKernel micro_kernel_amx() { return amx_kernel(tile_bf16<HardwareTiles>, HardwareTiles::release); }
MicroKernel micro_kernel_amx_emulated() { return amx_kernel(tile_bf16<EmulatedTiles>, EmulatedTiles::release); }

}  // namespace kvad::train
