#include "models/rope.h"

#include <algorithm>
#include <cmath>

namespace kvad {

namespace {

double get_mscale(double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

// transformers' _compute_yarn_parameters: frequencies that turn fewer than beta_slow times over the
// original context are interpolated (divided by factor), those that turn more than beta_fast times
// are kept, with a linear ramp over the dimensions between.
void yarn_scale(std::vector<double>& f, const RopeScaling& rs, double theta, int64_t d) {
  auto correction_dim = [&](double rotations) {
    return (double)d * std::log((double)rs.original_max_positions / (rotations * 2 * M_PI)) / (2 * std::log(theta));
  };
  double low = correction_dim(rs.beta_fast), high = correction_dim(rs.beta_slow);
  if (rs.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, (double)(d - 1));
  if (low == high) high += 0.001;  // no division by zero in the ramp
  for (size_t i = 0; i < f.size(); i++) {
    double ramp = std::clamp(((double)i - low) / (high - low), 0.0, 1.0);
    f[i] = f[i] / rs.factor * ramp + f[i] * (1 - ramp);
  }
}

}  // namespace

double yarn_attention_factor(const RopeScaling& rs) {
  if (rs.type != "yarn") return 1.0;
  if (rs.attention_factor > 0) return rs.attention_factor;
  if (rs.mscale != 0 && rs.mscale_all_dim != 0)
    return get_mscale(rs.factor, rs.mscale) / get_mscale(rs.factor, rs.mscale_all_dim);
  return get_mscale(rs.factor, 1.0);
}

double yarn_softmax_factor(const RopeScaling& rs) {
  if (rs.type != "yarn" || rs.mscale_all_dim == 0) return 1.0;
  double m = get_mscale(rs.factor, rs.mscale_all_dim);
  return m * m;
}

std::vector<double> rope_inv_freq(const ModelConfig& c, int64_t d) {
  std::vector<double> f((size_t)(d / 2));
  for (int64_t i = 0; i < d / 2; i++) f[(size_t)i] = 1.0 / std::pow(c.rope_theta, (double)(2 * i) / (double)d);
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == "linear") {
    for (double& x : f) x /= rs.factor;
  } else if (rs.type == "freq_factors") {
    for (size_t i = 0; i < f.size() && i < rs.freq_factors.size(); i++) f[i] /= rs.freq_factors[i];
  } else if (rs.type == "yarn") {
    yarn_scale(f, rs, c.rope_theta, d);
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
