// AVX-512 K-quant rows (decode) without VNNI (Skylake-SP/X): kqmatmul_rows_avx512.h with vpmaddwd
// and an add where the VNNI rows have vpdpwssd; the same bits.
#include "kernels/kqmatmul_rows_avx512.h"

namespace kvad::kernels {

void krows_q4k_avx512bw(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  rows<false, K::Q4>(x, w, r0, r1, y);
}
void krows_q5k_avx512bw(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  rows<false, K::Q5>(x, w, r0, r1, y);
}
void krows_q6k_avx512bw(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  rows<false, K::Q6>(x, w, r0, r1, y);
}

}  // namespace kvad::kernels
