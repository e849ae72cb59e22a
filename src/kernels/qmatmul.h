// Integer matrix products over quantised weights (quant/packed.h) and quantised activations
// (quant/activations.h): int8 x int8 -> int32 dot products per 32-block, then one multiply by the
// two scales. AVX-512 VNNI, AVX2, and a portable scalar reference, chosen at run time.
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

// One thread's share: output groups [g0, g1) for all tokens.
using QGroupsFn = void (*)(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y);
QGroupsFn qgroups_kernel(QKind kind, Isa isa);

void qgroups_scalar(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q8_avx512(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q4_avx512(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q8_avx2(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);
void qgroups_q4_avx2(const QuantActs&, const QuantMatrix&, int64_t, int64_t, float*);

}  // namespace kvad::kernels
