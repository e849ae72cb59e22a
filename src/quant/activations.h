// Activations quantised for the integer kernels: per token, per block of 32 inputs, int8 codes
// with one f32 scale (sx = max|x| / 127). The kernels also need sx * sum(codes) per block: a
// weight's offset m multiplies the sum of the inputs, so it is computed once here, not per row.
#pragma once
#include <cstdint>
#include <vector>

#include "core/cpu.h"

namespace kvad {

struct QuantActs {
  int64_t n = 0, k = 0, blocks = 0;
  std::vector<int8_t> q;     // [n][blocks * 32], zero-padded
  std::vector<float> scale;  // [n][blocks] sx
  std::vector<float> sum;    // [n][blocks] sx * sum(q)

  const int8_t* codes(int64_t t) const { return q.data() + t * blocks * 32; }
};

// Bit-identical on every ISA (the SIMD path does the scalar arithmetic); runs on the pool for a
// long prompt.
void quantize_acts(const float* x, int64_t n, int64_t k, QuantActs& out, Isa isa = best_isa());

}  // namespace kvad
