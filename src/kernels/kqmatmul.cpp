#include "kernels/kqmatmul.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/threads.h"

namespace kvad::kernels {

namespace {

float f16at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// One row's float sums against one token, in the order of llama.cpp's AVX2 kernels
// (ggml_vec_dot_q*_K_q8_K): 8 float lanes, each over the same values as ggml's int32 lanes; Q4_K's
// mins in 4 more lanes, Q5_K's in one. Every kvad ISA keeps this order too, so they and llama.cpp
// round alike.
struct RowSums {
  float acc[8] = {};
  float accm[4] = {};
};

// Adds one super-block of one row against one token's block to r.
void block_into(DType type, const uint8_t* w, const int8_t* xq, const int16_t* bsums, const int16_t* sums32, float xd,
                RowSums& r) {
  int32_t lane[8] = {};  // ggml's int32 lane j: values 4j .. 4j+3 of every 32 (exact integers)
  if (type == DType::Q6_K) {
    const int8_t* sc = (const int8_t*)(w + 192);
    for (int v = 0; v < 256; v++) {
      const int h = v / 128, i = v % 128, l = i % 32, part = i / 32;  // ql nibble / qh bit pair
      const uint8_t ql = w[64 * h + l + 32 * (part % 2)];
      const int u = ((part < 2 ? ql & 0xF : ql >> 4) | (((w[128 + 32 * h + l] >> (2 * part)) & 3) << 4));
      lane[(v % 32) / 4] += sc[v / 16] * u * xq[v];
    }
    for (int j = 0; j < 8; j++) lane[j] -= 32 * (sc[2 * j] * bsums[2 * j] + sc[2 * j + 1] * bsums[2 * j + 1]);
  } else {
    const bool q5 = type == DType::Q5_K;
    uint8_t sc[8], m[8];
    kquant_unpack_scales(w + 4, sc, m);
    const uint8_t* qh = w + 16;
    const uint8_t* qs = w + (q5 ? 48 : 16);
    for (int v = 0; v < 256; v++) {
      const int c = v / 64, hi = (v % 64) / 32, l = v % 32;
      int u = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
      if (q5) u |= ((qh[l] >> (2 * c + hi)) & 1) << 4;
      lane[l / 4] += sc[2 * c + hi] * u * xq[v];
    }
    int32_t prod[4];  // mins x 32-value sums, two sub-blocks a lane (ggml's hadd + madd)
    for (int i = 0; i < 4; i++) prod[i] = m[2 * i] * sums32[2 * i] + m[2 * i + 1] * sums32[2 * i + 1];
    const float dmin = -xd * f16at(w + 2);
    if (q5) r.accm[0] = std::fma(dmin, (float)(prod[0] + prod[1] + prod[2] + prod[3]), r.accm[0]);
    else
      for (int i = 0; i < 4; i++) r.accm[i] = std::fma(dmin, (float)prod[i], r.accm[i]);
  }
  const float d = xd * f16at(type == DType::Q6_K ? w + 208 : w);
  for (int j = 0; j < 8; j++) r.acc[j] = std::fma(d, (float)lane[j], r.acc[j]);
}

// ggml's hsum_float_8 of acc (high half plus low, lanes 0+2 and 1+3, then those), plus the mins.
float row_total(DType type, const RowSums& r) {
  float s[4];
  for (int i = 0; i < 4; i++) s[i] = r.acc[i + 4] + r.acc[i];
  float total = (s[0] + s[2]) + (s[1] + s[3]);
  if (type == DType::Q4_K) total += (r.accm[0] + r.accm[2]) + (r.accm[1] + r.accm[3]);
  if (type == DType::Q5_K) total += r.accm[0];
  return total;
}

}  // namespace

// Scalar reference: ggml_vec_dot_q*_K_q8_K's integer sums and float order, a super-block at a time.
void krows_scalar(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  const int64_t nb = w.blocks();
  const size_t bb = dtype_block_bytes(w.type());
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t* row = w.row_data(r);
    for (int64_t t = 0; t < x.n; t++) {
      RowSums sums;
      for (int64_t b = 0; b < nb; b++)
        block_into(w.type(), row + (size_t)b * bb, x.codes(t, b), x.bsums.data() + (t * nb + b) * 16,
                   x.sums32.data() + (t * nb + b) * 8, x.d[(size_t)(t * nb + b)], sums);
      y[t * w.rows() + r] = row_total(w.type(), sums);
    }
  }
}

KRowsFn krows_kernel(DType type, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512 && !avx512_vnni_enabled()) {  // Skylake-SP/X: the same rows without vpdpwssd
    if (type == DType::Q4_K) return krows_q4k_avx512bw;
    if (type == DType::Q5_K) return krows_q5k_avx512bw;
    if (type == DType::Q6_K) return krows_q6k_avx512bw;
  }
  if (isa == Isa::Avx512) {
    if (type == DType::Q4_K) return krows_q4k_avx512;
    if (type == DType::Q5_K) return krows_q5k_avx512;
    if (type == DType::Q6_K) return krows_q6k_avx512;
  }
  if (isa == Isa::Avx2) {
    if (type == DType::Q4_K) return krows_q4k_avx2;
    if (type == DType::Q5_K) return krows_q5k_avx2;
    if (type == DType::Q6_K) return krows_q6k_avx2;
  }
#endif
  return krows_scalar;
}

static thread_local bool tiles_allowed = true;
void set_kq_tiles_allowed(bool allowed) { tiles_allowed = allowed; }
bool kq_tiles_allowed() { return tiles_allowed; }

#if defined(__x86_64__)
// The AMX tiles against the AVX-512 ones: 37 rows (a part group), 2 super-blocks, 21 tokens (a
// tail tile), Q4_K and Q6_K (Q5_K differs from Q4_K only in the shared unpacking). Bit for bit.
static bool amx_kq_agree() {
  const int64_t rows = 37, cols = 512, tokens = 21;
  Rng rng(20261205);
  std::vector<float> w((size_t)(rows * cols)), x((size_t)(tokens * cols));
  for (float& v : w) v = (float)(rng.uniform() * 2 - 1);
  for (float& v : x) v = (float)(rng.uniform() * 2 - 1);
  KActs acts;
  quantize_kacts(x.data(), tokens, cols, acts, Isa::Avx512);
  for (DType type : {DType::Q4_K, DType::Q6_K}) {
    const KQuantMatrix q = KQuantMatrix::quantize(type, w.data(), rows, cols);
    std::vector<float> tiles((size_t)(tokens * rows), 1.0f), vector((size_t)(tokens * rows), 2.0f);
    (amx_emulated() ? kgroups_tiles_amx_emulated : kgroups_tiles_amx)(acts, q, 0, (rows + 15) / 16, tiles.data());
    kgroups_tiles_avx512(acts, q, 0, (rows + 15) / 16, vector.data());
    if (std::memcmp(tiles.data(), vector.data(), tiles.size() * sizeof(float)) != 0) return false;
  }
  return true;
}
#endif

bool amx_kq_usable() {
#if defined(__x86_64__)
  if (!amx_allowed()) return false;  // checked first: the first-use check waits for an allowed call
  static const bool usable = amx_usable_for(cpu_features().amx_int8, "K-quant", amx_kq_agree);
  return usable;
#else
  return false;
#endif
}

KGroupsFn kgroups_tiles_kernel(Isa isa, int64_t tokens) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512 && !avx512_vnni_enabled()) return kgroups_tiles_avx512bw;
  if (isa == Isa::Avx512 && tokens >= kAmxKqTokens && amx_kq_usable())
    return amx_emulated() ? kgroups_tiles_amx_emulated : kgroups_tiles_amx;
  if (isa == Isa::Avx512) return kgroups_tiles_avx512;
  if (isa == Isa::Avx2) return avx_vnni_enabled() ? kgroups_tiles_avxvnni : kgroups_tiles_avx2;
#endif
  (void)isa;
  return nullptr;
}

void kqmatmul(const KActs& x, const KQuantMatrix& w, float* y, Isa isa) {
  if (KGroupsFn tiles = kgroups_tiles_kernel(isa, x.n); tiles && x.n >= kKqTileTokens && tiles_allowed) {
    // Groups of 16 rows in pieces of ~32 KB, even on AVX-512, whose tile takes two groups at a time.
    const int64_t group_bytes = 16 * (int64_t)w.row_bytes();
    const int64_t piece = isa == Isa::Avx512 ? ThreadPool::item_pairs_per_piece(group_bytes) : ThreadPool::items_per_piece(group_bytes);
    pool().parallel_for_balanced((w.rows() + 15) / 16, piece, [&](int64_t b, int64_t e) { tiles(x, w, b, e, y); });
    return;
  }
  KRowsFn fn = krows_kernel(w.type(), isa);
  int64_t rows = w.rows();
  if (rows * w.blocks() * x.n < 64) {  // too small to be worth waking the pool
    fn(x, w, 0, rows, y);
    return;
  }
  // Split output rows in pieces of 16k: each thread streams its own part of W once and takes
  // what the other has left when it is done first.
  int64_t piece = 16 * ThreadPool::items_per_piece(16 * (int64_t)w.row_bytes());
  pool().parallel_for_balanced(rows, piece, [&](int64_t b, int64_t e) { fn(x, w, b, e, y); });
}

}  // namespace kvad::kernels
