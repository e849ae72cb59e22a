// AVX2 prefill tiles for ggml K-quant weights with AVX-VNNI (Alder Lake and later Intel cores):
// the tiles of kqmatmul_tiles_avx2.h with vpdpbusd's int32 sums.
#include "kernels/kqmatmul_tiles_avx2.h"

namespace kvad::kernels {

void kgroups_tiles_avxvnni(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  switch (w.type()) {
    case DType::Q4_K: groups<true, K::Q4>(x, w, g0, g1, y); break;
    case DType::Q5_K: groups<true, K::Q5>(x, w, g0, g1, y); break;
    default: groups<true, K::Q6>(x, w, g0, g1, y); break;
  }
}

}  // namespace kvad::kernels
