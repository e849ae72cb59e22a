// Token embedding (+ learned position embedding for GPT-2):
//   forward   x[b, t] = wte[token[b, t]] + wpe[t]
//   backward  dwte[v] += Σ_{(b,t): token = v} dx[b, t],   dwpe[t] = Σ_b dx[b, t]
// The scatter into dwte runs over column blocks, each thread taking whole columns in row order,
// so the sums do not depend on the thread count.
#include <algorithm>
#include <cstring>

#include "core/threads.h"
#include "train/layers.h"

namespace kvad::train {

template <typename T>
void embedding_fwd(T* x, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t T_, int64_t C,
                   int64_t V) {
  pool().parallel_for(B * T_, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      int32_t tok = tokens[r];
      if (tok < 0 || tok >= V) tok = 0;  // callers validate ids; never read outside the table
      const T* e = wte + (int64_t)tok * C;
      T* o = x + r * C;
      if (wpe) {
        const T* p = wpe + (r % T_) * C;
        for (int64_t i = 0; i < C; i++) o[i] = e[i] + p[i];
      } else {
        std::memcpy(o, e, (size_t)C * sizeof(T));
      }
    }
  });
}

template <typename T>
void embedding_bwd(T* dwte, T* dwpe, const T* dx, const int32_t* tokens, int64_t B, int64_t T_, int64_t C) {
  constexpr int64_t kCols = 16;
  pool().parallel_for(C, kCols, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < B * T_; r++) {
      T* d = dwte + (int64_t)tokens[r] * C;
      const T* g = dx + r * C;
      for (int64_t i = c0; i < c1; i++) d[i] += g[i];
    }
    if (dwpe)
      for (int64_t t = 0; t < T_; t++) {
        T* d = dwpe + t * C;
        for (int64_t i = c0; i < c1; i++) d[i] = dx[t * C + i];
        for (int64_t b = 1; b < B; b++)
          for (int64_t i = c0; i < c1; i++) d[i] += dx[(b * T_ + t) * C + i];
      }
  });
}

#define KVAD_INSTANTIATE(T)                                                                          \
  template void embedding_fwd<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, int64_t, \
                                 int64_t);                                                          \
  template void embedding_bwd<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t);
KVAD_INSTANTIATE(float)
KVAD_INSTANTIATE(double)
#undef KVAD_INSTANTIATE

}  // namespace kvad::train
