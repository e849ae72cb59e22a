// The sampler's passes over a vocabulary's logits (runtime/sampler.cpp): a 152k-entry row read
// once or twice per token on the calling thread alone, between two forwards, while the other
// threads wait. As scalar loops they took 0.6 ms (greedy: std::max_element's loop carries a
// load through the pointer to the best so far) to 2.5 ms (top-p: a heap over every token) of a
// 7 ms decode step at Qwen2.5-0.5B; docs/kernels.md "Sampling" has the figures. SIMD versions
// (sampling_<isa>.cpp) beside the scalar reference, tested against it (tests/kernels_sampling.cpp).
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace kvad::kernels {

// The first index of the largest value of x[0, n), n >= 1. NaNs never win; when nothing else
// is there (every value NaN) the answer is 0.
int64_t argmax(const float* x, int64_t n, Isa isa = best_isa());

// The indices i < n with x[i] >= t, in increasing order, written to idx (room for n); returns
// how many. A NaN is never selected.
int64_t select_at_least(const float* x, int64_t n, float t, int32_t* idx, Isa isa = best_isa());

// w[i] = exp(x[i] * scale - shift) for i < n, and their sum (in f32 over runs of kWeightRun, in
// double across runs). With shift = scale * max x every weight is in [0, 1]: a softmax's
// numerators at temperature 1 / scale. The SIMD exp is vexp.h's (about 1 ulp). An argument
// below -87.3 (a weight under 1.2e-38 of the top one's, or a masked -inf) gives 0. run_sums, when
// given (room for ceil(n / kWeightRun)), gets each run's sum: a draw finds its run from them
// instead of walking every weight.
constexpr int64_t kWeightRun = 1024;
double exp_weights(const float* x, int64_t n, float scale, float shift, float* w, float* run_sums = nullptr,
                   Isa isa = best_isa());

}  // namespace kvad::kernels
