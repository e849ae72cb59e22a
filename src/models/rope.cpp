#include "models/rope.h"

#include <cmath>

namespace kvad {

std::vector<double> rope_inv_freq(const ModelConfig& c, int64_t d) {
  std::vector<double> f((size_t)(d / 2));
  for (int64_t i = 0; i < d / 2; i++) f[(size_t)i] = 1.0 / std::pow(c.rope_theta, (double)(2 * i) / (double)d);
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == "linear") {
    for (double& x : f) x /= rs.factor;
  } else if (rs.type == "freq_factors") {
    for (size_t i = 0; i < f.size() && i < rs.freq_factors.size(); i++) f[i] /= rs.freq_factors[i];
  } else if (rs.type == "llama3") {
    // transformers' _compute_llama3_parameters: long wavelengths are divided by `factor`, short
    // ones kept, and the band between is interpolated smoothly.
    double old_len = (double)rs.original_max_positions;
    double low_wl = old_len / rs.low_freq_factor, high_wl = old_len / rs.high_freq_factor;
    for (double& x : f) {
      double wl = 2 * M_PI / x;
      double scaled = wl > low_wl ? x / rs.factor : x;
      bool medium = !(wl < high_wl) && !(wl > low_wl);
      if (medium) {
        double smooth = (old_len / wl - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        scaled = (1 - smooth) * scaled / rs.factor + smooth * scaled;
      }
      x = scaled;
    }
  }
  return f;
}

void rope_tables(const std::vector<double>& inv_freq, int64_t pos, float* cos, float* sin) {
  for (size_t i = 0; i < inv_freq.size(); i++) {
    double a = (double)pos * inv_freq[i];
    cos[i] = (float)std::cos(a);
    sin[i] = (float)std::sin(a);
  }
}

}  // namespace kvad
