#include "quant/packed.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/huge_pages.h"

namespace kvad {

const char* qkind_name(QKind k) { return k == QKind::Q8 ? "q8" : "q4"; }

QuantMatrix QuantMatrix::allocate(QKind kind, int64_t rows, int64_t cols) {
  QuantMatrix q;
  q.kind_ = kind;
  q.rows_ = rows;
  q.cols_ = cols;
  // Zeroed: padding rows and columns have d = m = 0 and contribute nothing.
  std::shared_ptr<uint8_t> buf = allocate_streamed_bytes(q.bytes() + 64);
  q.data_ = buf.get();
  q.storage_ = std::move(buf);
  return q;
}

QuantMatrix QuantMatrix::wrap(QKind kind, int64_t rows, int64_t cols, const uint8_t* data,
                              std::shared_ptr<const void> keep) {
  QuantMatrix q;
  q.kind_ = kind;
  q.rows_ = rows;
  q.cols_ = cols;
  q.data_ = data;
  q.storage_ = std::move(keep);
  return q;
}

void QuantMatrix::put(int64_t r, int64_t b, const uint8_t* codes, float d, float m) {
  uint8_t* rec = const_cast<uint8_t*>(record(r / kRows, b));
  int lane = (int)(r % kRows);
  if (kind_ == QKind::Q8) {
    for (int s = 0; s < 8; s++) std::memcpy(rec + s * 64 + lane * 4, codes + s * 4, 4);
    uint16_t h = f32_to_f16(d);
    std::memcpy(rec + 512 + lane * 2, &h, 2);
  } else {
    for (int p = 0; p < 4; p++)
      for (int j = 0; j < 4; j++) {
        uint8_t lo = codes[(2 * p) * 4 + j] & 15, hi = codes[(2 * p + 1) * 4 + j] & 15;
        rec[p * 64 + lane * 4 + j] = (uint8_t)(lo | (hi << 4));
      }
    uint16_t hd = f32_to_f16(d), hm = f32_to_f16(m);
    std::memcpy(rec + 256 + lane * 2, &hd, 2);
    std::memcpy(rec + 288 + lane * 2, &hm, 2);
  }
}

QuantMatrix QuantMatrix::quantize(QKind kind, const float* w, int64_t rows, int64_t cols) {
  return build(kind, rows, cols, [&](int64_t r, int64_t b, uint8_t* codes, float* d, float* m) {
    const float* x = w + r * cols + b * kBlock;
    int n = (int)std::min<int64_t>(kBlock, cols - b * kBlock);
    if (kind == QKind::Q8) {
      float amax = 0;
      for (int i = 0; i < n; i++) amax = std::max(amax, std::fabs(x[i]));
      // Codes are computed against the f16-rounded scale that will be stored.
      float ds = f16_to_f32(f32_to_f16(amax / 127.0f));
      float inv = ds > 0 ? 1.0f / ds : 0;
      for (int i = 0; i < kBlock; i++) {
        int q = i < n ? (int)std::lrintf(x[i] * inv) : 0;
        codes[i] = (uint8_t)(std::clamp(q, -127, 127) + 128);
      }
      *d = ds;
    } else {
      float lo = x[0], hi = x[0];
      for (int i = 1; i < n; i++) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
      float ms = f16_to_f32(f32_to_f16(lo));
      float ds = f16_to_f32(f32_to_f16((hi - ms) / 15.0f));
      float inv = ds > 0 ? 1.0f / ds : 0;
      for (int i = 0; i < kBlock; i++) {
        int q = i < n ? (int)std::lrintf((x[i] - ms) * inv) : 0;
        codes[i] = (uint8_t)std::clamp(q, 0, 15);
      }
      *d = ds;
      *m = ms;
    }
  });
}

void QuantMatrix::row(int64_t r, float* out) const {
  int lane = (int)(r % kRows);
  for (int64_t b = 0; b < blocks(); b++) {
    const uint8_t* rec = record(r / kRows, b);
    uint16_t hd;
    std::memcpy(&hd, rec + (kind_ == QKind::Q8 ? 512 : 256) + lane * 2, 2);
    float d = f16_to_f32(hd), m;
    uint8_t codes[kBlock];
    if (kind_ == QKind::Q8) {
      for (int s = 0; s < 8; s++) std::memcpy(codes + s * 4, rec + s * 64 + lane * 4, 4);
      m = -128.0f * d;
    } else {
      for (int p = 0; p < 4; p++)
        for (int j = 0; j < 4; j++) {
          uint8_t v = rec[p * 64 + lane * 4 + j];
          codes[(2 * p) * 4 + j] = v & 15;
          codes[(2 * p + 1) * 4 + j] = v >> 4;
        }
      uint16_t hm;
      std::memcpy(&hm, rec + 288 + lane * 2, 2);
      m = f16_to_f32(hm);
    }
    int n = (int)std::min<int64_t>(kBlock, cols_ - b * kBlock);
    for (int i = 0; i < n; i++) out[b * kBlock + i] = d * (float)codes[i] + m;
  }
}

}  // namespace kvad
