// The SIMD activations (vectorised exp) against the scalar reference.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/cpu.h"
#include "core/rng.h"
#include "kernels/ops.h"

using namespace kvad;

TEST(Ops, SimdActivationsMatchScalar) {
  Rng rng(11);
  std::vector<float> g(1003), u(1003);
  for (size_t i = 0; i < g.size(); i++) g[i] = (float)(rng.normal() * 6), u[i] = (float)rng.normal();
  g[0] = -100, g[1] = 100, g[2] = 0;  // saturation and zero
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (isa > best_isa()) continue;
    std::vector<float> a = g, b = g;
    kernels::silu_mul(a.data(), u.data(), (int64_t)a.size(), Isa::Scalar);
    kernels::silu_mul(b.data(), u.data(), (int64_t)b.size(), isa);
    for (size_t i = 0; i < a.size(); i++) ASSERT_NEAR(b[i], a[i], 2e-6 * (1 + std::fabs(a[i]))) << isa_name(isa) << i;
    a = g, b = g;
    kernels::gelu_tanh(a.data(), (int64_t)a.size(), Isa::Scalar);
    kernels::gelu_tanh(b.data(), (int64_t)b.size(), isa);
    for (size_t i = 0; i < a.size(); i++) ASSERT_NEAR(b[i], a[i], 2e-6 * (1 + std::fabs(a[i]))) << isa_name(isa) << i;
  }
}

// axpy (the LoRA side path's B^T rows) against the sum in double, over lengths around its 8 lanes.
TEST(Ops, AxpyAddsTheScaledVector) {
  Rng rng(3);
  for (int64_t n : {0, 1, 7, 8, 9, 16, 4864 + 3}) {
    std::vector<float> x((size_t)n), y((size_t)n);
    for (int64_t i = 0; i < n; i++) x[(size_t)i] = (float)rng.normal(), y[(size_t)i] = (float)rng.normal();
    std::vector<float> y0 = y;
    kernels::axpy(y.data(), -0.75f, x.data(), n);
    for (int64_t i = 0; i < n; i++)
      ASSERT_NEAR(y[(size_t)i], (double)y0[(size_t)i] - 0.75 * (double)x[(size_t)i], 1e-6 * (1 + std::fabs(y0[(size_t)i]))) << n << " " << i;
  }
}
