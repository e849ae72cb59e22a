// Rotary position embedding frequencies, including Llama 3's frequency-dependent scaling and YaRN
// (DeepSeek V2/V3), whose magnitude terms act on cos/sin and on the softmax scale.
#pragma once
#include <vector>

#include "models/config.h"

namespace kvad {

// inv_freq[i] = theta^(-2i/d) for i < d/2, scaled as config.rope_scaling says. Computed in double.
std::vector<double> rope_inv_freq(const ModelConfig& c, int64_t rotary_dim);
// cos/sin of pos * inv_freq[i], rounded to float once.
void rope_tables(const std::vector<double>& inv_freq, int64_t pos, float* cos, float* sin);

// YaRN's magnitude terms (transformers' _compute_yarn_parameters, DeepSeek's modeling code), with
// get_mscale(f, m) = 0.1 m ln f + 1 for f > 1, else 1:
//   the factor cos and sin are multiplied by: attention_factor when given, else
//     get_mscale(f, mscale) / get_mscale(f, mscale_all_dim) when both are set, else get_mscale(f);
//   the factor the softmax scale is multiplied by: get_mscale(f, mscale_all_dim)^2 when
//     mscale_all_dim is set (DeepSeek; transformers PR 47435 for V2), else 1.
// Both are 1 without YaRN.
double yarn_attention_factor(const RopeScaling& rs);
double yarn_softmax_factor(const RopeScaling& rs);

}  // namespace kvad
