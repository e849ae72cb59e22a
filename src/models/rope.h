// Rotary position embedding frequencies, including Llama 3's frequency-dependent scaling.
#pragma once
#include <vector>

#include "models/config.h"

namespace kvad {

// inv_freq[i] = theta^(-2i/d) for i < d/2, scaled as config.rope_scaling says. Computed in double.
std::vector<double> rope_inv_freq(const ModelConfig& c, int64_t rotary_dim);
// cos/sin of pos * inv_freq[i], rounded to float once.
void rope_tables(const std::vector<double>& inv_freq, int64_t pos, float* cos, float* sin);

}  // namespace kvad
