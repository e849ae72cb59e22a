// AVX-512 VNNI K-quant rows (decode): kqmatmul_rows_avx512.h with vpdpwssd.
#include "kernels/kqmatmul_rows_avx512.h"

namespace kvad::kernels {

void krows_q4k_avx512(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  rows<true, K::Q4>(x, w, r0, r1, y);
}
void krows_q5k_avx512(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  rows<true, K::Q5>(x, w, r0, r1, y);
}
void krows_q6k_avx512(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  rows<true, K::Q6>(x, w, r0, r1, y);
}

}  // namespace kvad::kernels
