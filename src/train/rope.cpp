// Rotary position embedding (rotate-half, as transformers' Llama): the pair (x[i], x[i + hd/2])
// of every q and k head is rotated by pos * theta^(-2i/hd). The rotation is linear and does not
// depend on x, so its backward is the inverse rotation applied to the gradient.
#include <cmath>

#include "core/error.h"
#include "core/threads.h"
#include "train/layers.h"
#include "train/rowops.h"

namespace kvad::train {

template <typename T>
RopeTables<T>::RopeTables(int64_t T_, int64_t hd, double theta, const std::vector<double>& inv_freq) : half(hd / 2) {
  if (!inv_freq.empty() && (int64_t)inv_freq.size() != half)
    fail("rope frequencies: {} given for a head of {}", inv_freq.size(), hd);
  cos.resize((size_t)(T_ * half));
  sin.resize((size_t)(T_ * half));
  for (int64_t p = 0; p < T_; p++)
    for (int64_t i = 0; i < half; i++) {
      // The engine's tables (models/rope.cpp): the angle in double, rounded once.
      double f = inv_freq.empty() ? 1.0 / std::pow(theta, (double)(2 * i) / (double)hd) : inv_freq[(size_t)i];
      double a = (double)p * f;
      cos[(size_t)(p * half + i)] = (T)std::cos(a);
      sin[(size_t)(p * half + i)] = (T)std::sin(a);
    }
}

template <typename T>
void rope_qk(T* qkv, const RopeTables<T>& tab, const AttnShape& s, bool backward) {
  const RowOps<T>& ops = rowops<T>();
  const int64_t ld = s.qkv_width();
  pool().parallel_for(s.B * s.T, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      const int64_t pos = r % s.T;
      const T *c = &tab.cos[(size_t)(pos * tab.half)], *sn = &tab.sin[(size_t)(pos * tab.half)];
      ops.rope(qkv + r * ld, s.H + s.KV, s.hd, c, sn, backward);  // q heads then k heads, adjacent
    }
  });
}

template struct RopeTables<float>;
template struct RopeTables<double>;
template void rope_qk<float>(float*, const RopeTables<float>&, const AttnShape&, bool);
template void rope_qk<double>(double*, const RopeTables<double>&, const AttnShape&, bool);

}  // namespace kvad::train
