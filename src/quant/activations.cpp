#include "quant/activations.h"

#include <algorithm>
#include <cmath>

#include "core/threads.h"

namespace kvad {

int32_t quantize_block32_avx512(const float* x, int8_t* q, float* scale);
int32_t quantize_block32_avx2(const float* x, int8_t* q, float* scale);

// The reference: m <= 32 values.
static int32_t quantize_block_scalar(const float* xb, int m, int8_t* q, float* scale) {
  float amax = 0;
  for (int i = 0; i < m; i++) amax = std::max(amax, std::fabs(xb[i]));
  *scale = amax / 127.0f;
  float inv = amax > 0 ? 127.0f / amax : 0;
  int32_t sum = 0;
  for (int i = 0; i < m; i++) {
    int v = (int)std::lrintf(xb[i] * inv);
    q[i] = (int8_t)v;
    sum += v;
  }
  return sum;
}

void quantize_acts(const float* x, int64_t n, int64_t k, QuantActs& a, Isa isa) {
  a.n = n;
  a.k = k;
  a.blocks = (k + 31) / 32;
  a.q.assign((size_t)(n * a.blocks * 32), 0);
  a.scale.resize((size_t)(n * a.blocks));
  a.sum.resize((size_t)(n * a.blocks));
#if defined(__x86_64__)
  auto block32 = isa == Isa::Avx512 ? quantize_block32_avx512 : isa == Isa::Avx2 ? quantize_block32_avx2 : nullptr;
#else
  int32_t (*block32)(const float*, int8_t*, float*) = nullptr;
  (void)isa;
#endif
  auto one = [&](int64_t t) {
    for (int64_t b = 0; b < a.blocks; b++) {
      const float* xb = x + t * k + b * 32;
      int m = (int)std::min<int64_t>(32, k - b * 32);
      int8_t* q = a.q.data() + (t * a.blocks + b) * 32;
      float* sx = &a.scale[(size_t)(t * a.blocks + b)];
      int32_t sum = block32 && m == 32 ? block32(xb, q, sx) : quantize_block_scalar(xb, m, q, sx);
      a.sum[(size_t)(t * a.blocks + b)] = *sx * (float)sum;
    }
  };
  if (n * k < 64 * 1024) {
    for (int64_t t = 0; t < n; t++) one(t);
  } else {
    pool().parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; t++) one(t);
    });
  }
}

}  // namespace kvad
