// AVX-512 kernels for the packed q8/q4 layout on CPUs without VNNI (Skylake-SP/X: the first
// AVX-512 Xeons): qmatmul_tile_avx512.h's tile with vpmaddubsw sums, the same bits as the VNNI one.
#include "kernels/qmatmul_tile_avx512.h"

namespace kvad::kernels {

void qgroups_q8_avx512bw(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<false, QKind::Q8>(x, w, g0, g1, y);
}

void qgroups_q4_avx512bw(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<false, QKind::Q4>(x, w, g0, g1, y);
}

}  // namespace kvad::kernels
