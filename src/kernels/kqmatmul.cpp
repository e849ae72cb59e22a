#include "kernels/kqmatmul.h"

#include <cstring>

#include "core/dtype.h"
#include "core/threads.h"

namespace kvad::kernels {

namespace {

float f16at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// One super-block of one row against one token's block: the float it adds to y.
float block_dot(DType type, const uint8_t* w, const int8_t* xq, const int16_t* bsums, float xd) {
  if (type == DType::Q6_K) {
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const int8_t* sc = (const int8_t*)(w + 192);
    int32_t sumi = 0;
    for (int h = 0; h < 2; h++) {
      int32_t dots[8] = {};
      for (int l = 0; l < 32; l++) {
        int is = l / 16;
        const int8_t* x = xq + 128 * h;
        int u1 = (ql[64 * h + l] & 0xF) | (((qh[32 * h + l] >> 0) & 3) << 4);
        int u2 = (ql[64 * h + l + 32] & 0xF) | (((qh[32 * h + l] >> 2) & 3) << 4);
        int u3 = (ql[64 * h + l] >> 4) | (((qh[32 * h + l] >> 4) & 3) << 4);
        int u4 = (ql[64 * h + l + 32] >> 4) | (((qh[32 * h + l] >> 6) & 3) << 4);
        dots[is + 0] += u1 * x[l];
        dots[is + 2] += u2 * x[l + 32];
        dots[is + 4] += u3 * x[l + 64];
        dots[is + 6] += u4 * x[l + 96];
      }
      for (int j = 0; j < 8; j++) sumi += sc[8 * h + j] * (dots[j] - 32 * bsums[8 * h + j]);
    }
    return xd * f16at(w + 208) * (float)sumi;
  }
  const bool q5 = type == DType::Q5_K;
  uint8_t sc[8], m[8];
  kquant_unpack_scales(w + 4, sc, m);
  const uint8_t* qh = w + 16;
  const uint8_t* qs = w + (q5 ? 48 : 16);
  int32_t sumi = 0, summ = 0;
  for (int c = 0; c < 4; c++) {
    int32_t lo_dot = 0, hi_dot = 0;
    for (int l = 0; l < 32; l++) {
      int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
      if (q5) {
        lo |= ((qh[l] >> (2 * c)) & 1) << 4;
        hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      lo_dot += lo * xq[64 * c + l];
      hi_dot += hi * xq[64 * c + 32 + l];
    }
    sumi += sc[2 * c] * lo_dot + sc[2 * c + 1] * hi_dot;
  }
  for (int j = 0; j < 8; j++) summ += m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return xd * f16at(w) * (float)sumi - xd * f16at(w + 2) * (float)summ;
}

}  // namespace

// Scalar reference: the integer sums of ggml_vec_dot_q*_K_q8_K, one super-block at a time.
void krows_scalar(const KActs& x, const KQuantMatrix& w, int64_t r0, int64_t r1, float* y) {
  const int64_t nb = w.blocks();
  const size_t bb = dtype_block_bytes(w.type());
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t* row = w.row_data(r);
    for (int64_t t = 0; t < x.n; t++) {
      float acc = 0;
      for (int64_t b = 0; b < nb; b++)
        acc += block_dot(w.type(), row + (size_t)b * bb, x.codes(t, b), x.bsums.data() + (t * nb + b) * 16,
                         x.d[(size_t)(t * nb + b)]);
      y[t * w.rows() + r] = acc;
    }
  }
}

KRowsFn krows_kernel(DType type, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) {
    if (type == DType::Q4_K) return krows_q4k_avx512;
    if (type == DType::Q5_K) return krows_q5k_avx512;
    if (type == DType::Q6_K) return krows_q6k_avx512;
  }
  if (isa == Isa::Avx2) {
    if (type == DType::Q4_K) return krows_q4k_avx2;
    if (type == DType::Q5_K) return krows_q5k_avx2;
    if (type == DType::Q6_K) return krows_q6k_avx2;
  }
#endif
  return krows_scalar;
}

void kqmatmul(const KActs& x, const KQuantMatrix& w, float* y, Isa isa) {
  KRowsFn fn = krows_kernel(w.type(), isa);
  int64_t rows = w.rows();
  if (rows * w.blocks() * x.n < 64) {  // too small to be worth waking the pool
    fn(x, w, 0, rows, y);
    return;
  }
  // Split output rows in chunks of 16: each thread streams its own part of W once.
  pool().parallel_for(rows, 16, [&](int64_t b, int64_t e) { fn(x, w, b, e, y); });
}

}  // namespace kvad::kernels
