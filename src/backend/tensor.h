// Tensor: a 2-D f32 activation the backend owns (rows x cols, row stride in floats). Architecture
// files make views of it (a column slice, a reshape) and hand it to backend calls; they never read
// or write its elements, so a backend whose memory is not the host's implements the same calls.
#pragma once
#include <cstdint>

#include "core/error.h"

namespace kvad {

struct Tensor {
  float* data = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;

  static Tensor wrap(float* p, int64_t rows, int64_t cols) { return {p, rows, cols, cols}; }
  bool contiguous() const { return stride == cols; }
  // Columns c0 .. c0+n-1 of every row (GPT-2's q, k, v inside the fused qkv rows).
  Tensor cols_view(int64_t c0, int64_t n) const { return {data + c0, rows, n, stride}; }
  Tensor rows_view(int64_t r0, int64_t n) const { return {data + r0 * stride, n, cols, stride}; }
  // The same contiguous floats as [r, c] (a row of n heads as n rows of one head).
  Tensor reshape(int64_t r, int64_t c) const {
    if (!contiguous() || r * c != rows * cols) fail("Tensor::reshape: [{}, {}] (stride {}) -> [{}, {}]", rows, cols, stride, r, c);
    return {data, r, c, c};
  }
};

}  // namespace kvad
