#include "kernels/sampling.h"

#include <cmath>

namespace kvad::kernels {

int64_t argmax_avx512(const float* x, int64_t n);
int64_t argmax_avx2(const float* x, int64_t n);
int64_t select_at_least_avx512(const float* x, int64_t n, float t, int32_t* idx);
int64_t select_at_least_avx2(const float* x, int64_t n, float t, int32_t* idx);
double exp_weights_avx512(const float* x, int64_t n, float scale, float shift, float* w, float* run_sums);
double exp_weights_avx2(const float* x, int64_t n, float scale, float shift, float* w, float* run_sums);

static int64_t argmax_scalar(const float* x, int64_t n) {
  int64_t best = 0;
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (x[i] > mx) mx = x[i], best = i;
  // Every value -inf (a mask that left nothing) or NaN: the first index, as the SIMD versions.
  return best;
}

static int64_t select_at_least_scalar(const float* x, int64_t n, float t, int32_t* idx) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    if (x[i] >= t) idx[k++] = (int32_t)i;
  return k;
}

static double exp_weights_scalar(const float* x, int64_t n, float scale, float shift, float* w, float* run_sums) {
  double total = 0;
  for (int64_t r = 0; r < n; r += kWeightRun) {
    const int64_t end = r + kWeightRun < n ? r + kWeightRun : n;
    float sum = 0;
    for (int64_t i = r; i < end; i++) {
      const float a = x[i] * scale - shift;
      w[i] = a >= -87.3f ? std::exp(a) : 0.0f;  // as the SIMD versions (their exp clamps there)
      sum += w[i];
    }
    if (run_sums) run_sums[r / kWeightRun] = sum;
    total += sum;
  }
  return total;
}

int64_t argmax(const float* x, int64_t n, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return argmax_avx512(x, n);
  if (isa == Isa::Avx2) return argmax_avx2(x, n);
#endif
  (void)isa;
  return argmax_scalar(x, n);
}

int64_t select_at_least(const float* x, int64_t n, float t, int32_t* idx, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return select_at_least_avx512(x, n, t, idx);
  if (isa == Isa::Avx2) return select_at_least_avx2(x, n, t, idx);
#endif
  (void)isa;
  return select_at_least_scalar(x, n, t, idx);
}

double exp_weights(const float* x, int64_t n, float scale, float shift, float* w, float* run_sums, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return exp_weights_avx512(x, n, scale, shift, w, run_sums);
  if (isa == Isa::Avx2) return exp_weights_avx2(x, n, scale, shift, w, run_sums);
#endif
  (void)isa;
  return exp_weights_scalar(x, n, scale, shift, w, run_sums);
}

}  // namespace kvad::kernels
