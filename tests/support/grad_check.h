// Central-difference gradient checks in float64 (the trainer's layers and LoRA side path):
//   per entry  err = |analytic - numeric| / max(|analytic|, |numeric|, 1e-3)
//   bound      err < 1e-6 for every entry checked (step h = 1e-5; central differences are exact to
//              O(h²) ~ 1e-10 here, far below the bound, and a wrong formula is off by O(1)).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace kvad::test {

inline constexpr double kGradStep = 1e-5, kGradBound = 1e-6, kGradFloor = 1e-3;

// Checks analytic[i] against the central difference of loss() in x[i], for every i (or `limit`
// evenly spaced ones), one failure message per tensor. Returns the worst error.
inline double grad_check(const char* what, std::vector<double>& x, const std::vector<double>& analytic,
                         const std::function<double()>& loss, size_t limit = 0) {
  EXPECT_EQ(x.size(), analytic.size()) << what;
  size_t stride = limit && x.size() > limit ? x.size() / limit : 1;
  double worst = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    double keep = x[i];
    x[i] = keep + kGradStep;
    double up = loss();
    x[i] = keep - kGradStep;
    double down = loss();
    x[i] = keep;
    double num = (up - down) / (2 * kGradStep), an = analytic[i];
    double err = std::fabs(an - num) / std::max({std::fabs(an), std::fabs(num), kGradFloor});
    worst = std::max(worst, err);
    EXPECT_LT(err, kGradBound) << what << "[" << i << "]: analytic " << an << " numeric " << num;
    if (err >= kGradBound) break;
  }
  return worst;
}

}  // namespace kvad::test
