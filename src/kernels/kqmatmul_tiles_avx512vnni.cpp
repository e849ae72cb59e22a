// AVX-512 VNNI K-quant prefill tiles: kqmatmul_tiles_avx512.h with vpdpbusd / vpdpwssd.
#include "kernels/kqmatmul_tiles_avx512.h"

namespace kvad::kernels {

void kgroups_tiles_avx512(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  switch (w.type()) {
    case DType::Q4_K: groups<true, K::Q4>(x, w, g0, g1, y); break;
    case DType::Q5_K: groups<true, K::Q5>(x, w, g0, g1, y); break;
    default: groups<true, K::Q6>(x, w, g0, g1, y); break;
  }
}

}  // namespace kvad::kernels
