// AVX2 prefill tiles for ggml K-quant weights without AVX-VNNI (Haswell to Zen 3): the tiles of
// kqmatmul_tiles_avx2.h with vpmaddubsw's int16 pairs.
#include "kernels/kqmatmul_tiles_avx2.h"

namespace kvad::kernels {

void kgroups_tiles_avx2(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  switch (w.type()) {
    case DType::Q4_K: groups<false, K::Q4>(x, w, g0, g1, y); break;
    case DType::Q5_K: groups<false, K::Q5>(x, w, g0, g1, y); break;
    default: groups<false, K::Q6>(x, w, g0, g1, y); break;
  }
}

}  // namespace kvad::kernels
