// How the SIMD K-quant kernels (kqmatmul_avx2/avx512vnni.cpp and the prefill tiles) name the three
// formats and walk a 256-value super-block. Internal to those files (an anonymous namespace, as
// x86_helpers.h).
#pragma once
#include "core/dtype.h"

namespace kvad::kernels {
namespace {

enum class K { Q4, Q5, Q6 };
template <K KIND>
constexpr DType kType = KIND == K::Q4 ? DType::Q4_K : KIND == K::Q5 ? DType::Q5_K : DType::Q6_K;

// Per super-block: J sub-blocks of S four-value slots; P int16 pairs of the correction term
// (Q4_K/Q5_K: the mins against the activations' 32-value sums; Q6_K: the scales against their
// 16-value sums, for the codes' -32).
template <K KIND>
struct Shape {
  static constexpr int J = KIND == K::Q6 ? 16 : 8;  // sub-blocks (of 16 or 32 values)
  static constexpr int S = 64 / J;                  // 4-value slots per sub-block
  static constexpr int P = KIND == K::Q6 ? 8 : 4;
};

// Slots whose vpmaddubsw pairs may be added as int16 before the scale (the tiles without a VNNI
// dot product): a pair is at most 2 * 15 * 128 (Q4), 2 * 31 * 128 (Q5), 2 * 63 * 128 (Q6), and
// their sum must stay <= 32767.
template <K KIND>
constexpr int kInt16Slots = KIND == K::Q4 ? 8 : KIND == K::Q5 ? 4 : 2;

}  // namespace
}  // namespace kvad::kernels
