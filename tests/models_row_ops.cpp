// The CPU backend's row-wise operations on a prefill's many rows, where they split the rows over
// the pool (kernels::rows_on_pool): every row must be done exactly once, and the result must not
// depend on the thread count. The small shapes of the model tests stay under the pool threshold,
// so these run the split itself: a dropped share, a row done twice or a race shows here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "backend/batch.h"
#include "core/threads.h"
#include "kernels/ops.h"
#include "random_values.h"

using namespace kvad;

namespace {

std::vector<float> row_ops_random(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  return test::randn(rng, n, scale);
}

// Runs fn once on a pool of `threads` and puts the default pool back.
template <typename F>
auto with_threads(int threads, F&& fn) {
  set_threads(threads);
  auto out = fn();
  set_threads(default_threads());
  return out;
}

// The token of row r in RowOpsRig's batch.
int64_t rig_token(int64_t r) { return (r * 7 + 3) % 50; }

// A batch of `rows` rows of one sequence at positions pos0.. (the rope table and the position rows
// read them).
struct RowOpsRig {
  std::vector<int32_t> tokens, blocks;
  Batch batch;
  RowOpsRig(int64_t rows, int64_t pos0) {
    for (int64_t r = 0; r < rows; r++) tokens.push_back((int32_t)rig_token(r));
    blocks.resize((size_t)((pos0 + rows + 15) / 16));
    std::iota(blocks.begin(), blocks.end(), 0);
    batch.add(0, tokens, pos0, blocks, 16, Logits::None);
  }
};

constexpr int64_t kRows = 300;  // x 200 columns: past kernels::kPoolFrom, ragged over 3 threads
constexpr int64_t kCols = 200;
static_assert(kRows * kCols >= kernels::kPoolFrom);

}  // namespace

TEST(CpuRowOps, EachRowOnceWhateverTheThreadCount) {
  const std::vector<float> x0 = row_ops_random((size_t)(kRows * kCols), 1), y0 = row_ops_random(x0.size(), 2),
                           bias = row_ops_random((size_t)kCols, 3), w = row_ops_random((size_t)kCols, 4),
                           positions = row_ops_random((size_t)(400 * kCols), 5), table = row_ops_random((size_t)(50 * kCols), 6);
  const int64_t pos0 = 37;
  auto run = [&](int threads) {
    return with_threads(threads, [&] {
      std::unique_ptr<Backend> be = make_cpu_backend();
      RowOpsRig rig(kRows, pos0);
      be->begin_forward(rig.batch);
      std::vector<std::vector<float>> outs;
      std::vector<float> x = x0, y = y0;
      Tensor tx = Tensor::wrap(x.data(), kRows, kCols), ty = Tensor::wrap(y.data(), kRows, kCols);
      be->add(tx, ty);
      outs.push_back(x);
      x = x0;
      be->add(tx.cols_view(10, 150), ty.cols_view(40, 150));  // strided rows
      outs.push_back(x);
      x = x0;
      be->add_bias(tx, bias);
      outs.push_back(x);
      x = x0;
      std::vector<float> o((size_t)(kRows * kCols));
      be->layernorm(tx, w, bias, 1e-5f, Tensor::wrap(o.data(), kRows, kCols));
      outs.push_back(o);
      be->sigmoid_gate(tx, ty);
      outs.push_back(x);
      x = x0;
      be->sigmoid_gate(tx, ty.cols_view(0, 1));
      outs.push_back(x);
      x = x0;
      be->add_position_rows(tx, positions, rig.batch);
      outs.push_back(x);
      Weight emb = Weight::from_f32(table, 50, kCols, WeightFormat::F32);
      be->embed(emb, rig.batch, Tensor::wrap(o.data(), kRows, kCols));
      outs.push_back(o);
      // rope over 5 heads of 40, then a part of each head in adjacent pairs
      std::vector<double> inv_freq(20);
      for (size_t i = 0; i < inv_freq.size(); i++) inv_freq[i] = std::pow(10000.0, -2.0 * (double)i / 40.0);
      std::vector<float> rt((size_t)(kRows * 40));
      be->rope_table(rig.batch, inv_freq, Tensor::wrap(rt.data(), kRows, 40), 1.0);
      outs.push_back(rt);
      x = x0;
      be->rope(tx, 5, Tensor::wrap(rt.data(), kRows, 40));
      outs.push_back(x);
      x = x0;
      std::vector<float> part((size_t)(kRows * 16));
      be->rope_table(rig.batch, std::vector<double>(inv_freq.begin(), inv_freq.begin() + 8), Tensor::wrap(part.data(), kRows, 16), 1.0);
      be->rope_part(tx, 5, 4, 16, RopePairs::Adjacent, Tensor::wrap(part.data(), kRows, 16));
      outs.push_back(x);
      return outs;
    });
  };
  const auto one = run(1), three = run(3);
  ASSERT_EQ(one.size(), three.size());
  for (size_t i = 0; i < one.size(); i++) {
    SCOPED_TRACE(testing::Message() << "operation " << i);
    ASSERT_EQ(one[i].size(), three[i].size());
    EXPECT_EQ(0, std::memcmp(one[i].data(), three[i].data(), one[i].size() * sizeof(float)));
  }
  // And against the formulas, so that both cannot be wrong together (e.g. every row done twice).
  for (int64_t r = 0; r < kRows; r++)
    for (int64_t c = 0; c < kCols; c++) {
      const size_t i = (size_t)(r * kCols + c);
      ASSERT_EQ(one[0][i], x0[i] + y0[i]);
      const bool in_view = c >= 10 && c < 160;
      ASSERT_EQ(one[1][i], in_view ? x0[i] + y0[(size_t)(r * kCols + c + 30)] : x0[i]);
      ASSERT_EQ(one[2][i], x0[i] + bias[(size_t)c]);
      ASSERT_NEAR(one[4][i], x0[i] / (1.0 + std::exp(-(double)y0[i])), 1e-5 * (1 + std::fabs(x0[i])));
      ASSERT_NEAR(one[5][i], x0[i] / (1.0 + std::exp(-(double)y0[(size_t)(r * kCols)])), 1e-5 * (1 + std::fabs(x0[i])));
      ASSERT_EQ(one[6][i], x0[i] + positions[(size_t)((pos0 + r) * kCols + c)]);
      ASSERT_EQ(one[7][i], table[(size_t)(rig_token(r) * kCols + c)]);
    }
  for (int64_t r = 0; r < kRows; r++) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < kCols; c++) mean += x0[(size_t)(r * kCols + c)];
    mean /= kCols;
    for (int64_t c = 0; c < kCols; c++) var += std::pow(x0[(size_t)(r * kCols + c)] - mean, 2);
    var /= kCols;
    for (int64_t c = 0; c < kCols; c++) {
      const double want = (x0[(size_t)(r * kCols + c)] - mean) / std::sqrt(var + 1e-5) * w[(size_t)c] + bias[(size_t)c];
      ASSERT_NEAR(one[3][(size_t)(r * kCols + c)], want, 1e-4 * (1 + std::fabs(want)));
    }
    for (int64_t i = 0; i < 20; i++) {
      const double a = (double)(pos0 + r) * std::pow(10000.0, -2.0 * (double)i / 40.0);
      ASSERT_NEAR(one[8][(size_t)(r * 40 + i)], std::cos(a), 1e-6);
      ASSERT_NEAR(one[8][(size_t)(r * 40 + 20 + i)], std::sin(a), 1e-6);
    }
    for (int64_t h = 0; h < 5; h++)  // rotate-half over the first 5 heads of 40 columns
      for (int64_t i = 0; i < 20; i++) {
        const double a = (double)x0[(size_t)(r * kCols + h * 40 + i)], b = (double)x0[(size_t)(r * kCols + h * 40 + 20 + i)];
        const double cs = one[8][(size_t)(r * 40 + i)], sn = one[8][(size_t)(r * 40 + 20 + i)];
        ASSERT_NEAR(one[9][(size_t)(r * kCols + h * 40 + i)], a * cs - b * sn, 1e-5 * (1 + std::fabs(a) + std::fabs(b)));
        ASSERT_NEAR(one[9][(size_t)(r * kCols + h * 40 + 20 + i)], b * cs + a * sn, 1e-5 * (1 + std::fabs(a) + std::fabs(b)));
      }
  }
}

// A mixture-of-experts layer's last step (each row's weighted sum of its experts' outputs, in
// expert order) splits the output rows over the pool: the same bits on 1 and 3 threads, and each
// row what the layer gives that token alone (one row: no split, and the one-token input path).
TEST(CpuRowOps, MoeRowsSumTheirExpertsWhateverTheThreadCount) {
  const int64_t n = 160, H = 128, I = 64, E = 4;  // n x top_k x H = 40,960 values: past kPoolFrom
  MoeWeights m;
  m.router = row_ops_random((size_t)(E * H), 10);
  for (int64_t e = 0; e < E; e++)
    m.experts.push_back({Weight::from_f32(row_ops_random((size_t)(I * H), 11 + (uint64_t)e, 0.1f), I, H, WeightFormat::F32),
                         Weight::from_f32(row_ops_random((size_t)(I * H), 21 + (uint64_t)e, 0.1f), I, H, WeightFormat::F32),
                         Weight::from_f32(row_ops_random((size_t)(H * I), 31 + (uint64_t)e, 0.1f), H, I, WeightFormat::F32)});
  kernels::Routing routing;
  routing.top_k = 2;
  routing.renormalize = true;
  const std::vector<float> x = row_ops_random((size_t)(n * H), 40);
  auto run = [&](int threads, int64_t row0, int64_t rows) {
    return with_threads(threads, [&] {
      std::unique_ptr<Backend> be = make_cpu_backend();
      RowOpsRig rig(rows, 0);
      be->begin_forward(rig.batch);
      std::vector<float> in(x.begin() + row0 * H, x.begin() + (row0 + rows) * H), out((size_t)(rows * H));
      be->moe(m, routing, Tensor::wrap(in.data(), rows, H), Tensor::wrap(out.data(), rows, H));
      return out;
    });
  };
  const std::vector<float> one = run(1, 0, n), three = run(3, 0, n);
  EXPECT_EQ(0, std::memcmp(one.data(), three.data(), one.size() * sizeof(float)));
  for (int64_t r = 0; r < n; r++) {
    SCOPED_TRACE(r);
    const std::vector<float> alone = run(1, r, 1);
    double scale = 0;
    for (float v : alone) scale = std::max(scale, (double)std::fabs(v));
    ASSERT_GT(scale, 0);
    for (int64_t c = 0; c < H; c++) ASSERT_NEAR(three[(size_t)(r * H + c)], alone[(size_t)c], 1e-5 * scale);
  }
}
