// The AMX tile unit, two ways: the hardware's instructions, and a software model of the same
// instructions (Intel SDM vol. 2, TILELOADD / TDPBSUD / TILESTORED; the ISA extensions reference,
// ch. 3) that checks every shape the hardware would fault on. A kernel is a template over one of
// them, so its tiling, layouts and tails are tested on any AVX-512 CPU and the instructions
// themselves on a CPU with AMX (tests/kernels_amx.cpp). Include from *_amx.cpp files only.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvad::kernels {

// LDTILECFG's 64-byte operand, palette 1: 8 tiles of up to 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row, tiles 0-15 (palette 1 has 0-7; 8-15 must be zero)
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Every tile 16 rows x 64 bytes: the bf16 kernels' shape for A, B and C alike.
inline TileConfig full_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; t++) c.rows[t] = 16, c.colsb[t] = 64;
  return c;
}

// Every asm statement clobbers memory: the tiles read buffers that plain stores just wrote (and
// GCC 12's own _tile_loadd / _tile_loadconfig do not say they read memory).
// configure() skips LDTILECFG when this thread's tiles already hold that configuration: a
// training micro-kernel configures on every call (a few hundred cycles of work each).
struct HardwareTiles {
  struct Loaded {
    TileConfig cfg;
    bool valid = false;
  };
  static Loaded& loaded() {
    static thread_local Loaded l;
    return l;
  }
  static void configure(const TileConfig& c) {
    Loaded& l = loaded();
    if (l.valid && std::memcmp(&l.cfg, &c, sizeof c) == 0) return;
    asm volatile("ldtilecfg (%0)" ::"r"(&c) : "memory");
    l.cfg = c, l.valid = true;
  }
  static void release() {
    asm volatile("tilerelease" ::: "memory");
    loaded().valid = false;
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
#define KVAD_TILELOAD(n) \
  if constexpr (T == n) asm volatile("tileloadd (%0,%1,1), %%tmm" #n ::"r"(p), "r"(stride) : "memory");
    KVAD_TILELOAD(0) KVAD_TILELOAD(1) KVAD_TILELOAD(2) KVAD_TILELOAD(3)
    KVAD_TILELOAD(4) KVAD_TILELOAD(5) KVAD_TILELOAD(6) KVAD_TILELOAD(7)
#undef KVAD_TILELOAD
  }
  template <int T>
  static void store(void* p, int64_t stride) {
#define KVAD_TILESTORE(n) \
  if constexpr (T == n) asm volatile("tilestored %%tmm" #n ", (%0,%1,1)" ::"r"(p), "r"(stride) : "memory");
    KVAD_TILESTORE(0) KVAD_TILESTORE(1) KVAD_TILESTORE(2) KVAD_TILESTORE(3)
    KVAD_TILESTORE(4) KVAD_TILESTORE(5) KVAD_TILESTORE(6) KVAD_TILESTORE(7)
#undef KVAD_TILESTORE
  }
  template <int T>
  static void zero() {
#define KVAD_TILEZERO(n) \
  if constexpr (T == n) asm volatile("tilezero %%tmm" #n ::: "memory");
    KVAD_TILEZERO(0) KVAD_TILEZERO(1) KVAD_TILEZERO(2) KVAD_TILEZERO(3)
    KVAD_TILEZERO(4) KVAD_TILEZERO(5) KVAD_TILEZERO(6) KVAD_TILEZERO(7)
#undef KVAD_TILEZERO
  }
  // C += A (signed bytes, rows x 4k) . B (unsigned bytes, k rows of 4 x 16 columns), int32 sums.
  // The kernels use two accumulator triples; AT&T order is src2, src1, dst.
  template <int C, int A, int B>
  static void dpbsud() {
    static_assert((C == 4 && A == 0 && B == 1) || (C == 5 && A == 2 && B == 3), "add the triple here");
    if constexpr (C == 4) asm volatile("tdpbsud %%tmm1, %%tmm0, %%tmm4" ::: "memory");
    else asm volatile("tdpbsud %%tmm3, %%tmm2, %%tmm5" ::: "memory");
  }
  // C += A (rows x 2k bf16) . B (k rows of 16 bf16 pairs), f32 sums; A in tiles 0-1, B in 2-3,
  // C in 4-7 as (A0,B0) (A0,B1) (A1,B0) (A1,B1).
  template <int C, int A, int B>
  static void dpbf16ps() {
    static_assert(C == 4 + 2 * A + (B - 2) && A < 2 && B >= 2 && B < 4, "add the triple here");
    if constexpr (C == 4) asm volatile("tdpbf16ps %%tmm2, %%tmm0, %%tmm4" ::: "memory");
    else if constexpr (C == 5) asm volatile("tdpbf16ps %%tmm3, %%tmm0, %%tmm5" ::: "memory");
    else if constexpr (C == 6) asm volatile("tdpbf16ps %%tmm2, %%tmm1, %%tmm6" ::: "memory");
    else asm volatile("tdpbf16ps %%tmm3, %%tmm1, %%tmm7" ::: "memory");
  }
};

// The model: the tile registers of this thread, as bytes. Shapes the hardware would refuse
// (#GP on the configuration, #UD on a product) stop the program with the reason. configure()
// skips an unchanged configuration as HardwareTiles does, keeping the tiles' contents (LDTILECFG
// would zero them): so a kernel that counted on configure() to zero its accumulators fails here
// as it would on the hardware.
struct EmulatedTiles {
  struct State {
    TileConfig cfg;
    bool configured = false;
    uint8_t t[8][16][64];
  };
  static State& state() {
    static thread_local State s;
    return s;
  }
  [[noreturn]] static void fault(const char* what) {
    std::fprintf(stderr, "emulated AMX: %s\n", what);
    std::abort();
  }
  static void configure(const TileConfig& c) {
    State& s = state();
    if (s.configured && std::memcmp(&s.cfg, &c, sizeof c) == 0) return;
    if (c.palette != 1 || c.start_row != 0) fault("palette must be 1 and start_row 0");
    for (int i = 0; i < 16; i++)
      if (i >= 8 ? (c.rows[i] || c.colsb[i]) : (c.rows[i] > 16 || c.colsb[i] > 64 || (!c.rows[i]) != (!c.colsb[i])))
        fault("a tile's rows or bytes are out of range");
    s.cfg = c;
    s.configured = true;
    std::memset(s.t, 0, sizeof s.t);
  }
  static void release() { state().configured = false; }
  static const State& used(int tile) {
    const State& s = state();
    if (!s.configured || !s.cfg.rows[tile]) fault("a tile used before it was configured");
    return s;
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    State& s = state();
    used(T);
    std::memset(s.t[T], 0, sizeof s.t[T]);
    for (int r = 0; r < s.cfg.rows[T]; r++) std::memcpy(s.t[T][r], (const uint8_t*)p + r * stride, s.cfg.colsb[T]);
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    const State& s = used(T);
    for (int r = 0; r < s.cfg.rows[T]; r++) std::memcpy((uint8_t*)p + r * stride, s.t[T][r], s.cfg.colsb[T]);
  }
  template <int T>
  static void zero() {
    used(T);
    std::memset(state().t[T], 0, sizeof state().t[T]);
  }
  template <int C, int A, int B>
  static void dpbsud() {
    State& s = state();
    used(C), used(A), used(B);
    const int m = s.cfg.rows[C], k4 = s.cfg.colsb[A] / 4, n = s.cfg.colsb[C] / 4;
    if (s.cfg.rows[A] != m || s.cfg.rows[B] != k4 || s.cfg.colsb[B] != s.cfg.colsb[C] || s.cfg.colsb[A] % 4 ||
        s.cfg.colsb[C] % 4)
      fault("tdpbsud: the tiles' shapes do not agree");
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        int32_t acc;
        std::memcpy(&acc, &s.t[C][i][4 * j], 4);
        for (int kk = 0; kk < k4; kk++)
          for (int e = 0; e < 4; e++) acc += (int32_t)(int8_t)s.t[A][i][4 * kk + e] * (int32_t)s.t[B][kk][4 * j + e];
        std::memcpy(&s.t[C][i][4 * j], &acc, 4);
      }
  }
  // As the SDM's pseudocode: per pair, the even product then the odd one added in f32 (round to
  // nearest even), denormal inputs (the accumulator too: it is an input of the FMA) and outputs
  // taken as zero. A bf16 x bf16 product is exact in f32, so acc + a * b rounds once, as the FMA.
  template <int C, int A, int B>
  static void dpbf16ps() {
    State& s = state();
    used(C), used(A), used(B);
    const int m = s.cfg.rows[C], k2 = s.cfg.colsb[A] / 4, n = s.cfg.colsb[C] / 4;
    if (s.cfg.rows[A] != m || s.cfg.rows[B] != k2 || s.cfg.colsb[B] != s.cfg.colsb[C] || s.cfg.colsb[A] % 4 ||
        s.cfg.colsb[C] % 4)
      fault("tdpbf16ps: the tiles' shapes do not agree");
    auto widen = [](const uint8_t* p) {
      uint32_t bits = (uint32_t)(p[0] | p[1] << 8) << 16;
      if ((bits & 0x7F800000u) == 0) bits &= 0x80000000u;  // DAZ
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    };
    auto flush = [](float f) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if ((bits & 0x7F800000u) == 0) bits &= 0x80000000u;  // FTZ
      std::memcpy(&f, &bits, 4);
      return f;
    };
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        float acc;
        std::memcpy(&acc, &s.t[C][i][4 * j], 4);
        acc = flush(acc);  // DAZ
        for (int kk = 0; kk < k2; kk++)
          for (int e = 0; e < 2; e++)
            acc = flush(acc + widen(&s.t[A][i][4 * kk + 2 * e]) * widen(&s.t[B][kk][4 * j + 2 * e]));
        std::memcpy(&s.t[C][i][4 * j], &acc, 4);
      }
  }
};

}  // namespace kvad::kernels
