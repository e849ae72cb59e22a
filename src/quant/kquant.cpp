#include "quant/kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/threads.h"

namespace kvad {

namespace {

float f16at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void put_f16(uint8_t* p, float v) {
  uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

}  // namespace

void kquant_unpack_scales(const uint8_t* q, uint8_t sc[8], uint8_t m[8]) {
  for (int j = 0; j < 4; j++) {
    sc[j] = q[j] & 63;
    m[j] = q[j + 4] & 63;
  }
  for (int j = 4; j < 8; j++) {
    sc[j] = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void kquant_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t q[12]) {
  for (int j = 0; j < 4; j++) {
    q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

void dequantize_blocks(DType type, const uint8_t* x, int64_t n, float* y) {
  const int64_t bn = dtype_block_elems(type), bb = (int64_t)dtype_block_bytes(type);
  if (bn <= 1 || n % bn != 0) fail("internal: dequantize_blocks({}, {} values)", dtype_name(type), n);
  for (int64_t i = 0; i < n / bn; i++, x += bb, y += bn) {
    switch (type) {
      case DType::Q8_0: {
        float d = f16at(x);
        for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)x[2 + j] * d;
        break;
      }
      case DType::Q4_0: {
        float d = f16at(x);
        for (int j = 0; j < 16; j++) {
          y[j] = (float)((x[2 + j] & 0xF) - 8) * d;
          y[j + 16] = (float)((x[2 + j] >> 4) - 8) * d;
        }
        break;
      }
      case DType::Q4_1: {
        float d = f16at(x), m = f16at(x + 2);
        for (int j = 0; j < 16; j++) {
          y[j] = (float)(x[4 + j] & 0xF) * d + m;
          y[j + 16] = (float)(x[4 + j] >> 4) * d + m;
        }
        break;
      }
      case DType::Q5_0:
      case DType::Q5_1: {
        bool q51 = type == DType::Q5_1;
        float d = f16at(x), m = q51 ? f16at(x + 2) : 0;
        const uint8_t* qhp = x + (q51 ? 4 : 2);
        const uint8_t* qs = qhp + 4;
        uint32_t qh;
        std::memcpy(&qh, qhp, 4);
        for (int j = 0; j < 16; j++) {
          int x0 = (qs[j] & 0xF) | (int)(((qh >> j) << 4) & 0x10);
          int x1 = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
          if (q51) {
            y[j] = (float)x0 * d + m;
            y[j + 16] = (float)x1 * d + m;
          } else {
            y[j] = (float)(x0 - 16) * d;
            y[j + 16] = (float)(x1 - 16) * d;
          }
        }
        break;
      }
      case DType::Q4_K:
      case DType::Q5_K: {
        bool q5 = type == DType::Q5_K;
        float d = f16at(x), dmin = f16at(x + 2);
        uint8_t sc[8], m[8];
        kquant_unpack_scales(x + 4, sc, m);
        const uint8_t* qh = x + 16;
        const uint8_t* qs = x + (q5 ? 48 : 16);
        for (int c = 0; c < 4; c++) {  // 64-value chunks: low nibbles then high nibbles
          float d1 = d * sc[2 * c], m1 = dmin * m[2 * c], d2 = d * sc[2 * c + 1], m2 = dmin * m[2 * c + 1];
          for (int l = 0; l < 32; l++) {
            int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
            if (q5) {
              lo |= ((qh[l] >> (2 * c)) & 1) << 4;
              hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
            y[64 * c + l] = d1 * (float)lo - m1;
            y[64 * c + 32 + l] = d2 * (float)hi - m2;
          }
        }
        break;
      }
      case DType::Q6_K: {
        const uint8_t* ql = x;
        const uint8_t* qh = x + 128;
        const int8_t* sc = (const int8_t*)(x + 192);
        float d = f16at(x + 208);
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8)
          for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[128 * h + l] = d * (float)sc[is] * (float)q1;
            y[128 * h + l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[128 * h + l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[128 * h + l + 96] = d * (float)sc[is + 6] * (float)q4;
          }
        break;
      }
      default: fail("internal: dequantize_blocks: {} is not a block format", dtype_name(type));
    }
  }
}

KQuantMatrix KQuantMatrix::wrap(DType type, int64_t rows, int64_t cols, const uint8_t* data,
                                std::shared_ptr<const void> keep) {
  if (!supports(type)) fail("internal: KQuantMatrix of {}", dtype_name(type));
  if (cols % kQK != 0) fail("internal: {} matrix with {} columns (not a multiple of 256)", dtype_name(type), cols);
  KQuantMatrix m;
  m.type_ = type;
  m.rows_ = rows;
  m.cols_ = cols;
  m.data_ = data;
  m.storage_ = std::move(keep);
  return m;
}

void KQuantMatrix::row(int64_t r, float* out) const { dequantize_blocks(type_, row_data(r), cols_, out); }

// ------------------------------------------------------------------------------------------------
// Activations (llama.cpp quantize_row_q8_K_ref)

float quantize_kblock_avx512(const float* x, int8_t* q, int16_t* bsums, int16_t* sums32);
float quantize_kblock_avx2(const float* x, int8_t* q, int16_t* bsums, int16_t* sums32);

void quantize_kacts(const float* x, int64_t n, int64_t k, KActs& a, Isa isa) {
  if (k % kQK != 0) fail("internal: K-quant activations of width {} (not a multiple of 256)", k);
  a.n = n;
  a.k = k;
  a.blocks = k / kQK;
  a.q.resize((size_t)(n * k));
  a.d.resize((size_t)(n * a.blocks));
  a.bsums.resize((size_t)(n * a.blocks * 16));
  a.sums32.resize((size_t)(n * a.blocks * 8));
  auto one = [&](int64_t t) {
    for (int64_t b = 0; b < a.blocks; b++) {
      const float* xb = x + t * k + b * kQK;
      int8_t* q = a.q.data() + t * k + b * kQK;
      int16_t* bs = a.bsums.data() + (t * a.blocks + b) * 16;
      int16_t* s32 = a.sums32.data() + (t * a.blocks + b) * 8;
#if defined(__x86_64__)
      if (isa == Isa::Avx512 || isa == Isa::Avx2) {
        a.d[(size_t)(t * a.blocks + b)] = (isa == Isa::Avx512 ? quantize_kblock_avx512 : quantize_kblock_avx2)(xb, q, bs, s32);
        continue;
      }
#endif
      float mx = 0, amax = 0;
      for (int j = 0; j < kQK; j++) {
        float ax = std::fabs(xb[j]);
        if (ax > amax) {
          amax = ax;
          mx = xb[j];
        }
      }
      if (amax == 0) {
        a.d[(size_t)(t * a.blocks + b)] = 0;
        std::memset(q, 0, kQK);
        std::memset(bs, 0, 32);
        std::memset(s32, 0, 16);
        continue;
      }
      const float iscale = -127.f / mx;
      for (int j = 0; j < kQK; j++) q[j] = (int8_t)std::min(127, (int)std::lrintf(iscale * xb[j]));
      for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int i = 0; i < 16; i++) s += q[j * 16 + i];
        bs[j] = (int16_t)s;
      }
      for (int j = 0; j < 8; j++) s32[j] = (int16_t)(bs[2 * j] + bs[2 * j + 1]);
      a.d[(size_t)(t * a.blocks + b)] = 1 / iscale;
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

// ------------------------------------------------------------------------------------------------
// kvad's quantisers (not ggml's: same formats, own search)

namespace {

// Q6_K: per 16 values a signed scale s with x ~ s * q, q in [-32, 31]; the 16 scales then as int8
// times one f16 d.
void quantize_q6k_block(const float* x, uint8_t* out) {
  float scales[16];
  for (int j = 0; j < 16; j++) {
    const float* v = x + 16 * j;
    float amax = 0, mx = 0;
    for (int i = 0; i < 16; i++)
      if (std::fabs(v[i]) > amax) amax = std::fabs(v[i]), mx = v[i];
    if (amax == 0) {
      scales[j] = 0;
      continue;
    }
    // Search the step: a few candidates around "largest magnitude -> -32", each refitted by
    // least squares on its own codes; keep the lowest squared error.
    float best_s = -mx / 32, best_err = INFINITY;
    for (int c = -6; c <= 6; c++) {
      float iscale = -(32.0f + 0.25f * (float)c) / mx;
      float sxq = 0, sqq = 0;
      for (int i = 0; i < 16; i++) {
        float q = (float)std::clamp((int)std::nearbyint(iscale * v[i]), -32, 31);
        sxq += v[i] * q;
        sqq += q * q;
      }
      if (sqq == 0) continue;
      // With the least-squares step s = sxq / sqq: sum (v - s q)^2 = sum v^2 - sxq^2 / sqq, so the
      // best candidate is the one with the largest sxq^2 / sqq.
      float err = -sxq * sxq / sqq;
      if (err < best_err) best_err = err, best_s = sxq / sqq;
    }
    scales[j] = best_s;
  }
  float max_scale = 0, amax_scale = 0;
  for (float s : scales)
    if (std::fabs(s) > amax_scale) amax_scale = std::fabs(s), max_scale = s;
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  int8_t* sc = (int8_t*)(out + 192);
  std::memset(out, 0, 210);
  if (amax_scale == 0) return;  // all zero: d = 0
  float iscale = -128.0f / max_scale;
  float d = f16_to_f32(f32_to_f16(1 / iscale));
  put_f16(out + 208, d);
  uint8_t L[256];
  for (int j = 0; j < 16; j++) {
    int s = std::clamp((int)std::lrintf(iscale * scales[j]), -128, 127);
    sc[j] = (int8_t)s;
    float step = d * (float)s;
    for (int i = 0; i < 16; i++) {
      int q = step != 0 ? std::clamp((int)std::lrintf(x[16 * j + i] / step), -32, 31) : 0;
      L[16 * j + i] = (uint8_t)(q + 32);
    }
  }
  for (int h = 0; h < 2; h++)
    for (int l = 0; l < 32; l++) {
      const uint8_t* Lh = L + 128 * h;
      uint8_t q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
      ql[64 * h + l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[64 * h + l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[32 * h + l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
}

// Q4_K: per 32 values x ~ a * q - b with q in [0, 15], a >= 0, b >= 0 (the sub-block minimum,
// clamped to <= 0, is -b); the 8 a's and b's then as 6-bit multiples of two f16 super-scales.
void fit_affine(const float* v, int n, int qmax, float* a_out, float* b_out) {
  float lo = 0, hi = v[0];
  for (int i = 0; i < n; i++) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
  if (hi <= lo) {
    *a_out = 0;
    *b_out = -lo;
    return;
  }
  float svv = 0, sx = 0;
  for (int i = 0; i < n; i++) svv += v[i] * v[i], sx += v[i];
  float best_a = (hi - lo) / (float)qmax, best_b = -lo, best_err = INFINITY;
  for (int c = -2; c <= 2; c++) {
    float a = (hi - lo) / ((float)qmax + 0.3f * (float)c), b = -lo;
    for (int it = 0; it < 3 && a > 0; it++) {
      // Codes for the current (a, b), then the least-squares (a, c = -b) for those codes.
      float ia = 1.0f / a, sq = 0, sqq = 0, sxq = 0;
      for (int i = 0; i < n; i++) {
        float q = (float)std::clamp((int)((v[i] + b) * ia + 0.5f), 0, qmax);
        sq += q;
        sqq += q * q;
        sxq += v[i] * q;
      }
      // sum (a q - b - v)^2 from the sums
      float err = a * a * sqq + (float)n * b * b + svv - 2 * a * b * sq - 2 * a * sxq + 2 * b * sx;
      if (err < best_err) best_err = err, best_a = a, best_b = b;
      float det = (float)n * sqq - sq * sq;
      if (det <= 0) break;
      float na = ((float)n * sxq - sq * sx) / det, nc = (sx - na * sq) / (float)n;
      if (nc > 0) {  // the offset must not be positive: refit the scale alone
        nc = 0;
        na = sqq > 0 ? sxq / sqq : 0;
      }
      if (!(na > 0)) break;
      a = na;
      b = -nc;
    }
  }
  *a_out = best_a;
  *b_out = best_b;
}

void quantize_q4k_block(const float* x, uint8_t* out) {
  float a[8], b[8];
  for (int j = 0; j < 8; j++) fit_affine(x + 32 * j, 32, 15, &a[j], &b[j]);
  float amax = 0, bmax = 0;
  for (int j = 0; j < 8; j++) amax = std::max(amax, a[j]), bmax = std::max(bmax, b[j]);
  float d = f16_to_f32(f32_to_f16(amax / 63)), dmin = f16_to_f32(f32_to_f16(bmax / 63));
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; j++) {
    sc[j] = d > 0 ? (uint8_t)std::clamp((int)std::lrintf(a[j] / d), 0, 63) : 0;
    m[j] = dmin > 0 ? (uint8_t)std::clamp((int)std::lrintf(b[j] / dmin), 0, 63) : 0;
  }
  std::memset(out, 0, 144);
  put_f16(out, d);
  put_f16(out + 2, dmin);
  kquant_pack_scales(sc, m, out + 4);
  uint8_t* qs = out + 16;
  for (int c = 0; c < 4; c++)
    for (int half = 0; half < 2; half++) {
      int j = 2 * c + half;
      float step = d * (float)sc[j], off = dmin * (float)m[j];
      for (int l = 0; l < 32; l++) {
        int q = step > 0 ? std::clamp((int)std::lrintf((x[32 * j + l] + off) / step), 0, 15) : 0;
        qs[32 * c + l] |= (uint8_t)(q << (4 * half));
      }
    }
}

}  // namespace

KQuantMatrix KQuantMatrix::quantize(DType type, const float* w, int64_t rows, int64_t cols) {
  if (type != DType::Q4_K && type != DType::Q6_K) fail("internal: kvad quantises to Q4_K and Q6_K only");
  if (cols % kQK != 0) fail("{} needs rows of a multiple of 256 values; this matrix has {}", dtype_name(type), cols);
  size_t bb = dtype_block_bytes(type), row_bytes = (size_t)(cols / kQK) * bb;
  auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[row_bytes * (size_t)rows + 64]());
  uint8_t* base = buf.get();
  pool().parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++)
      for (int64_t b = 0; b < cols / kQK; b++) {
        const float* x = w + r * cols + b * kQK;
        uint8_t* o = base + (size_t)r * row_bytes + (size_t)b * bb;
        if (type == DType::Q4_K) quantize_q4k_block(x, o);
        else quantize_q6k_block(x, o);
      }
  });
  return wrap(type, rows, cols, base, buf);
}

}  // namespace kvad
