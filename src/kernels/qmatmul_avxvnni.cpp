// AVX2 kernels for the packed q8/q4 layout with AVX-VNNI's vpdpbusd (Alder Lake and later Intel
// cores, which have no AVX-512): qmatmul_tile_avx2.h's tile, one instruction per 4 inputs x 8
// rows where vpmaddubsw needs two (and q8 three more to move the weights' sign).
#include "kernels/qmatmul_tile_avx2.h"

namespace kvad::kernels {

void qgroups_q8_avxvnni(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<true, QKind::Q8>(x, w, g0, g1, y);
}

void qgroups_q4_avxvnni(const QuantActs& x, const QuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  groups<true, QKind::Q4>(x, w, g0, g1, y);
}

}  // namespace kvad::kernels
