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
