// AVX-512 K-quant prefill tiles without VNNI (Skylake-SP/X): kqmatmul_tiles_avx512.h with
// vpmaddubsw pairs summed in int16, the VNNI tiles' exact integers and bits.
#include "kernels/kqmatmul_tiles_avx512.h"

namespace kvad::kernels {

void kgroups_tiles_avx512bw(const KActs& x, const KQuantMatrix& w, int64_t g0, int64_t g1, float* y) {
  switch (w.type()) {
    case DType::Q4_K: groups<false, K::Q4>(x, w, g0, g1, y); break;
    case DType::Q5_K: groups<false, K::Q5>(x, w, g0, g1, y); break;
    default: groups<false, K::Q6>(x, w, g0, g1, y); break;
  }
}

}  // namespace kvad::kernels
