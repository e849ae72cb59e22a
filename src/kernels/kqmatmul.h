// Matrix products over ggml K-quant weights (quant/kquant.h: Q4_K, Q5_K, Q6_K, in GGUF's block
// layout) and activations quantised per 256 like llama.cpp's Q8_K: per super-block, integer dot
// products of the codes, the sub-block scales applied in integers, then one float multiply by
// d_w * d_x (and the mins for Q4_K/Q5_K through the activations' 16-value sums), as
// ggml_vec_dot_q*_K_q8_K does. AVX-512 VNNI, AVX2 and a portable scalar reference. Prefill on
// AVX-512 (kKqTileTokens rows or more) unpacks groups of rows once and runs a tile instead.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "quant/kquant.h"

namespace kvad::kernels {

// y[n, rows] = W applied to the activations, on the thread pool. From kKqTileTokens tokens on
// AVX-512 or AVX2 it runs the ISA's tiles (prefill), below that the row kernels.
void kqmatmul(const KActs& x, const KQuantMatrix& w, float* y, Isa isa = best_isa());

// Tokens from which prefill unpacks groups of rows once instead of running the row kernel 4
// tokens at a time (docs/kernels.md, "K-quant prefill").
inline constexpr int64_t kKqTileTokens = 8;

// Whether K-quant products of kKqTileTokens rows or more may take the tiles on this thread (yes
// unless turned off). A forward whose rows must each equal a one-row forward bit for bit
// (speculative verification: AttentionSpan::rowwise) turns them off for its products, since the
// tiles add in an order of their own and the row kernels in ggml's whatever the row count.
void set_kq_tiles_allowed(bool allowed);
bool kq_tiles_allowed();

// One thread's share: output rows [r0, r1) for all tokens.
using KRowsFn = void (*)(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y);
KRowsFn krows_kernel(DType type, Isa isa);

void krows_scalar(const KActs&, const KQuantMatrix&, int64_t, int64_t, float*);
void krows_q4k_avx512(const KActs&, const KQuantMatrix&, int64_t, int64_t, float*);
void krows_q5k_avx512(const KActs&, const KQuantMatrix&, int64_t, int64_t, float*);
void krows_q6k_avx512(const KActs&, const KQuantMatrix&, int64_t, int64_t, float*);
// Without VNNI (kqmatmul_avx512.cpp; Skylake-SP/X): the same results, bit for bit.
void krows_q4k_avx512bw(const KActs&, const KQuantMatrix&, int64_t, int64_t, float*);
void krows_q5k_avx512bw(const KActs&, const KQuantMatrix&, int64_t, int64_t, float*);
void krows_q6k_avx512bw(const KActs&, const KQuantMatrix&, int64_t, int64_t, float*);
void krows_q4k_avx2(const KActs&, const KQuantMatrix&, int64_t, int64_t, float*);
void krows_q5k_avx2(const KActs&, const KQuantMatrix&, int64_t, int64_t, float*);
void krows_q6k_avx2(const KActs&, const KQuantMatrix&, int64_t, int64_t, float*);
// Prefill's kernel (AVX-512 VNNI): groups [g0, g1) of 16 rows for all tokens, each group unpacked
// once to int8 codes and float scales and run through a tokens x groups tile. Its float order is its
// own: it agrees with krows_scalar to rounding, not bit for bit.
void kgroups_tiles_avx512(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y);
// Without VNNI (kqmatmul_tiles_avx512.cpp; Skylake-SP/X, where !avx512_vnni_enabled()): the same
// results, bit for bit.
void kgroups_tiles_avx512bw(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y);
// The same plan on AVX2 (vpmaddubsw, sub-block scales by vpmaddwd): groups [g0, g1) of 16 rows, one
// at a time, 2 tokens x 16 rows a tile. Agrees with krows_scalar to rounding.
void kgroups_tiles_avx2(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y);
// With AVX-VNNI (kqmatmul_tiles_avxvnni.cpp; where avx_vnni_enabled()): the same results, bit for bit.
void kgroups_tiles_avxvnni(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y);
// The tiles of an ISA (nullptr where there are none: scalar), for prefill's kKqTileTokens rows or
// more; its units are groups of 16 rows.
using KGroupsFn = void (*)(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y);
// From kAmxKqTokens `tokens` on, AVX-512 takes the AMX tiles where amx_kq_usable().
KGroupsFn kgroups_tiles_kernel(Isa isa, int64_t tokens = kKqTileTokens);
inline constexpr int64_t kAmxKqTokens = 16;
// AMX int8 (kqmatmul_amx.cpp): the AVX-512 tiles' unpacked groups as B tiles, a sub-block a
// TDPBSUD; bit for bit the AVX-512 tiles' results. The emulated one runs the same code over
// kernels/amx_tiles.h's model of the tiles, for tests on CPUs without AMX.
void kgroups_tiles_amx(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y);
void kgroups_tiles_amx_emulated(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y);
// amx_enabled() and amx_int8 (core/cpu.h), and the tiles equalled the AVX-512 ones on a small
// ragged product at first use, and amx_allowed().
bool amx_kq_usable();

}  // namespace kvad::kernels
