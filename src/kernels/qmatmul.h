// Integer matrix products over quantised weights (quant/packed.h) and quantised activations
// (quant/activations.h): int8 x int8 -> int32 dot products per 32-block, then one multiply by the
// two scales. AVX-512 (with or without VNNI), AVX2 (with or without AVX-VNNI), and a portable scalar
// reference, chosen at run time.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "quant/activations.h"
#include "quant/packed.h"

namespace kvad::kernels {

// y[n, rows] = dequant(W) applied to the activations, on the thread pool.
void qmatmul(const QuantActs& x, const QuantMatrix& w, float* y, Isa isa = best_isa());

// Several matrices over the same activations (q/k/v, gate/up): one parallel region whose work is
// split over the groups of all of them, so a decode step wakes the pool once, not once per matrix.
void qmatmul_multi(const QuantActs& x, const QuantMatrix* const* w, float* const* y, int count, Isa isa = best_isa());

// One thread's share: output groups [g0, g1) for all tokens. With `tokens` from kAmxTokens on, an
// AVX-512 request takes the AMX tiles where amx_qgroups_usable().
using QGroupsFn = void (*)(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y);
QGroupsFn qgroups_kernel(QKind kind, Isa isa, int64_t tokens = 1);

// Prefill only: a tile is 16 tokens, and decode reads each weight once whatever multiplies it.
constexpr int64_t kAmxTokens = 16;
// amx_enabled() and amx_int8 (core/cpu.h), and the AMX kernels reproduced the AVX-512 ones bit for bit on a
// small ragged product at first use, and amx_allowed(); a CPU where they do not gets a warning and the vector kernels.
bool amx_qgroups_usable();

void qgroups_scalar(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q8_avx512(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q4_avx512(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
// AVX-512 without VNNI (qmatmul_avx512.cpp; where !avx512_vnni_enabled()): vpmaddubsw sums, each
// row's result the VNNI kernel's, bit for bit.
void qgroups_q8_avx512bw(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q4_avx512bw(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q8_avx2(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q4_avx2(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
// With AVX-VNNI (qmatmul_avxvnni.cpp; where avx_vnni_enabled()): each row's result is the AVX-512
// kernel's, bit for bit.
void qgroups_q8_avxvnni(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q4_avxvnni(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q8_amx(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q4_amx(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
// The same kernels over a software model of the tiles (kernels/amx_tiles.h), for tests on any
// AVX-512 CPU: their tiling, layouts and tails, not the instructions.
void qgroups_q8_amx_emulated(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q4_amx_emulated(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);

}  // namespace kvad::kernels
