// The gated DeltaNet kernel's SIMD row loops against its scalar ones, and its pool split against one
// thread, on a ragged shape (value and key widths that are not whole vectors) with two sequences,
// snapshots and a prefill long enough to run on the pool. The scalar path itself is checked
// against the float64 reference through the Qwen3-Next model tests (models_golden.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/cpu.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/gated_delta.h"
#include "kernels/ops.h"
#include "random_values.h"

using namespace kvad;
using namespace kvad::kernels;

namespace {

struct DeltaRun {
  std::vector<float> out, states, snapshots;
};

// Two sequences: one from a random state over `long_rows` rows (snapshots after its blocks of 16),
// one of a single row; the same inputs whatever the ISA.
DeltaRun run_delta(Isa isa, int64_t long_rows) {
  DeltaNetShape s;
  s.key_heads = 2, s.value_heads = 4, s.key_dim = 12, s.value_dim = 20, s.conv_kernel = 4;
  const int64_t rows = long_rows + 1, sf = s.state_floats();
  Rng rng(77);
  const std::vector<float> qkvz = test::randn(rng, (size_t)(rows * s.qkvz_width())), ba = test::randn(rng, (size_t)(rows * s.ba_width())),
                           conv = test::randn(rng, (size_t)(s.conv_channels() * s.conv_kernel), 0.5),
                           decay = test::randn(rng, (size_t)s.value_heads, 0.3), dt_bias = test::randn(rng, (size_t)s.value_heads),
                           norm = test::randn(rng, (size_t)s.value_dim);
  std::vector<float> neg_decay(decay.size());
  for (size_t i = 0; i < decay.size(); i++) neg_decay[i] = -std::exp(decay[i]);
  DeltaRun r;
  r.states = test::randn(rng, (size_t)(2 * sf), 0.2);
  const int64_t n_blocks = (long_rows + 15) / 16;
  r.snapshots.assign((size_t)(n_blocks * sf), 0.0f);
  std::vector<int32_t> blocks((size_t)n_blocks), snapshot_of_block((size_t)n_blocks);
  for (int64_t b = 0; b < n_blocks; b++) blocks[(size_t)b] = (int32_t)b, snapshot_of_block[(size_t)b] = (int32_t)(n_blocks - 1 - b);
  DeltaNetSpan spans[2];
  spans[0] = {0, long_rows, 0, r.states.data(), blocks.data(), snapshot_of_block.data(), 16, r.snapshots.data()};
  spans[1] = {long_rows, 1, 40, r.states.data() + sf};
  DeltaNetWeights w{conv.data(), neg_decay.data(), dt_bias.data(), norm.data()};
  std::vector<float> scratch((size_t)(rows * s.conv_channels()));
  r.out.assign((size_t)(rows * s.out_width()), 0.0f);
  gated_delta_net(qkvz.data(), s.qkvz_width(), ba.data(), s.ba_width(), spans, 2, s, w, scratch.data(), r.out.data(),
                  s.out_width(), isa);
  return r;
}

double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (float v : b) scale = std::max(scale, (double)std::fabs(v));
  for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::fabs((double)a[i] - b[i]) / scale);
  return worst;
}

}  // namespace

TEST(GatedDelta, SimdRowLoopsMatchTheScalarOnes) {
  const int64_t long_rows = 290;  // x 128 conv channels: past kPoolFrom
  static_assert(290 * 128 >= kernels::kPoolFrom);
  const DeltaRun scalar = run_delta(Isa::Scalar, long_rows);
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (isa > best_isa()) {
      GTEST_LOG_(INFO) << "skipped " << isa_name(isa) << ": this CPU does not have it";
      continue;
    }
    SCOPED_TRACE(isa_name(isa));
    const DeltaRun simd = run_delta(isa, long_rows);
    // FMA and the vector exp against the scalar loops' separate rounding, carried through 290
    // steps of the recurrence: 3.9e-7 of the largest value at both ISAs on a Zen 5.
    EXPECT_LT(worst_relative(simd.out, scalar.out), 5e-6);
    EXPECT_LT(worst_relative(simd.states, scalar.states), 5e-6);
    EXPECT_LT(worst_relative(simd.snapshots, scalar.snapshots), 5e-6);
  }
}

TEST(GatedDelta, ThePoolSplitGivesTheSameBitsAsOneThread) {
  set_threads(1);
  const DeltaRun one = run_delta(best_isa(), 290);
  set_threads(3);
  const DeltaRun three = run_delta(best_isa(), 290);
  set_threads(default_threads());
  EXPECT_EQ(one.out, three.out);
  EXPECT_EQ(one.states, three.states);
  EXPECT_EQ(one.snapshots, three.snapshots);
  double snap = 0;  // the snapshots were written (18 of them), not left zero
  for (float v : one.snapshots) snap = std::max(snap, (double)std::fabs(v));
  EXPECT_GT(snap, 0);
}
