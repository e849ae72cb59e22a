// AVX-512 VNNI kernels for the packed q8/q4 layout: qmatmul_tile_avx512.h's tile with vpdpbusd
// (Cascade Lake, Ice Lake, Sapphire Rapids, Zen 4 and later).
#include "kernels/qmatmul_tile_avx512.h"

namespace kvad::kernels {

void qgroups_q8_avx512(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<true, QKind::Q8>(x, w, g0, g1, y);
}

void qgroups_q4_avx512(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<true, QKind::Q4>(x, w, g0, g1, y);
}

}  // namespace kvad::kernels
