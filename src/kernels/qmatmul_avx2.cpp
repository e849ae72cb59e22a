// AVX2 kernels for the packed q8/q4 layout, for CPUs without AVX-512 VNNI or AVX-VNNI (Haswell to
// Zen 3): the tile is qmatmul_tile_avx2.h's, with vpmaddubsw + vpmaddwd.
#include "kernels/qmatmul_tile_avx2.h"

namespace kvad::kernels {

void qgroups_q8_avx2(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<false, QKind::Q8>(x, w, g0, g1, y);
}

void qgroups_q4_avx2(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<false, QKind::Q4>(x, w, g0, g1, y);
}

}  // namespace kvad::kernels
