// Weight::matmul_group and Weight::matmul_jobs over GGUF K-quants: a group (a Q4_K_M layer's
// q/k in Q4_K beside v in Q6_K) and a list of jobs (an MoE's experts, some sharing an input)
// run in one parallel region with the activations quantised once per input, and give exactly
// the products each matrix gives alone, for decode rows (the row kernels) and prefill rows (the
// tiles, whose units are the same groups of 16 rows).
#include <gtest/gtest.h>

#include <vector>

#include "backend/weight.h"
#include "core/rng.h"
#include "random_values.h"

using namespace kvad;

namespace {

Weight kq_group_weight(Rng& rng, int64_t rows, int64_t cols, WeightFormat fmt) {
  return Weight::from_f32(test::randn<float>(rng, (size_t)(rows * cols)), rows, cols, fmt);
}

std::vector<float> kq_product_alone(const Weight& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> y((size_t)(n * w.rows()), NAN);
  w.matmul(x.data(), n, y.data());
  return y;
}

}  // namespace

TEST(WeightGroups, KQuantGroupEqualsEachMatrixAlone) {
  Rng rng(21);
  const int64_t cols = 512;
  Weight q = kq_group_weight(rng, 64, cols, WeightFormat::Q4K), k = kq_group_weight(rng, 32, cols, WeightFormat::Q4K),
         v = kq_group_weight(rng, 37, cols, WeightFormat::Q6K);
  for (int64_t n : {1, 3, 9, 20}) {
    const std::vector<float> x = test::randn<float>(rng, (size_t)(n * cols));
    std::vector<float> yq((size_t)(n * 64), NAN), yk((size_t)(n * 32), NAN), yv((size_t)(n * 37), NAN);
    Weight::matmul_group(x.data(), n, {{&q, yq.data()}, {&k, yk.data()}, {&v, yv.data()}});
    EXPECT_EQ(yq, kq_product_alone(q, x, n)) << "n=" << n;
    EXPECT_EQ(yk, kq_product_alone(k, x, n)) << "n=" << n;
    EXPECT_EQ(yv, kq_product_alone(v, x, n)) << "n=" << n;
  }
}

TEST(WeightGroups, KQuantJobsEqualEachMatrixAlone) {
  Rng rng(22);
  const int64_t cols = 768;
  Weight gate = kq_group_weight(rng, 80, cols, WeightFormat::Q4K), up = kq_group_weight(rng, 80, cols, WeightFormat::Q4K),
         other = kq_group_weight(rng, 45, cols, WeightFormat::Q6K);
  for (int64_t n : {2, 8, 13}) {
    // gate and up over one input (its activations quantised once), another expert's over its own
    // rows, fewer of them.
    const int64_t m = n / 2 + 1;
    const std::vector<float> x = test::randn<float>(rng, (size_t)(n * cols)), x2 = test::randn<float>(rng, (size_t)(m * cols));
    std::vector<float> yg((size_t)(n * 80), NAN), yu((size_t)(n * 80), NAN), yo((size_t)(m * 45), NAN);
    const Weight::Job jobs[3] = {{&gate, x.data(), n, yg.data()}, {&up, x.data(), n, yu.data()}, {&other, x2.data(), m, yo.data()}};
    Weight::matmul_jobs(jobs, 3);
    EXPECT_EQ(yg, kq_product_alone(gate, x, n)) << "n=" << n;
    EXPECT_EQ(yu, kq_product_alone(up, x, n)) << "n=" << n;
    EXPECT_EQ(yo, kq_product_alone(other, x2, m)) << "m=" << m;
  }
}
