// Every operation of the Vulkan backend against the CPU backend (which the kernel tests check
// against float64 references), on random inputs and ragged shapes, every weight format, with a
// tolerance per format (as llama.cpp's test-backend-ops does). Inputs reach the device the way a
// model's do (an embedding lookup of a random f32 table) and come back through logit_rows into
// host memory, so each case runs the same calls on both backends.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>

#include "backend/backend.h"
#include "core/dtype.h"
#include "quant/kquant.h"
#include "gpu_device.h"
#include "timing_row.h"
#include "runtime/devices.h"
#include "vulkan/device.h"

using namespace kvad;

namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, (double)std::fabs(x));
  return m;
}

// max |a - b| / max |b|
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); i++) {
    if (!std::isfinite(a[i])) return INFINITY;
    d = std::max(d, (double)std::fabs(a[i] - b[i]));
  }
  return d / std::max(max_abs(b), 1e-30);
}

// One backend's run of a case: a batch of `rows` rows of sequence 0 (tokens 0..rows-1, every row
// wanting output), inputs put on the backend by embedding lookups, the result read back.
class Rig {
 public:
  explicit Rig(Backend& be, int64_t rows, int64_t pos0 = 0) : be_(be) {
    tokens_.resize((size_t)rows);
    std::iota(tokens_.begin(), tokens_.end(), 0);
    blocks_.resize((size_t)((pos0 + rows) / 16 + 1));
    std::iota(blocks_.begin(), blocks_.end(), 0);
    batch_.add(0, tokens_, pos0, blocks_, 16, Logits::All);
    be_.begin_forward(batch_);
  }
  const Batch& batch() const { return batch_; }
  // values [rows, cols] (rows = the batch's) as a backend tensor.
  Tensor input(const std::vector<float>& values, int64_t cols) {
    const int64_t rows = batch_.size();
    tables_.push_back(Weight::from_f32(values, rows, cols, WeightFormat::F32));
    Tensor t = be_.tensor(rows, cols);
    be_.embed(tables_.back(), batch_, t);
    return t;
  }
  std::vector<float> read(Tensor t) {
    std::vector<float> out((size_t)(t.rows * t.cols));
    be_.logit_rows(t, batch_, Tensor::wrap(out.data(), t.rows, t.cols));
    return out;
  }

 private:
  Backend& be_;
  std::vector<int32_t> tokens_, blocks_;
  Batch batch_;
  std::deque<Weight> tables_;  // the backend identifies weights by address: they live as long as it
};

struct Backends {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  std::unique_ptr<Backend> gpu;
};

// Runs `body` on both backends; returns {gpu result, cpu result}.
std::pair<std::vector<float>, std::vector<float>> both(Backends& b, int64_t rows,
                                                       const std::function<std::vector<float>(Backend&, Rig&)>& body,
                                                       int64_t pos0 = 0) {
  Rig rg(*b.gpu, rows, pos0), rc(*b.cpu, rows, pos0);
  auto g = body(*b.gpu, rg);
  auto c = body(*b.cpu, rc);
  return {g, c};
}

}  // namespace

#define GPU_BACKENDS(var)                  \
  KVAD_NEED_GPU(device_);                  \
  Backends var;                            \
  var.gpu = make_backend(device_);         \
  ASSERT_STREQ(var.gpu->name(), "vulkan");

// The products run through both kernel families (tests/support/gpu_device.h): the parameter.
class GpuLinear : public testing::TestWithParam<const char*> {
 protected:
  test::ScopedKernels kernels_{GetParam()};
};
INSTANTIATE_TEST_SUITE_P(Kernels, GpuLinear, testing::ValuesIn(test::kKernelFamilies),
                         [](const auto& info) { return std::string(info.param); });

TEST_P(GpuLinear, MatchesTheCpuInEveryFormatAndRaggedShape) {
  GPU_BACKENDS(b);
  struct Case {
    int64_t n, cols, rows;
  };
  // Ragged widths (f32/bf16 then take matvec.comp's value-at-a-time path) and aligned ones (its
  // 16-byte units), one input row up to two blocks of 8 and a part.
  const Case cases[] = {{1, 7, 5}, {3, 64, 33}, {9, 100, 70}, {17, 33, 129}, {2, 256, 16}, {8, 96, 7}, {19, 160, 45}};
  const std::pair<WeightFormat, double> formats[] = {
      {WeightFormat::F32, 1e-5}, {WeightFormat::BF16, 1e-5}, {WeightFormat::Q8, 3e-2}, {WeightFormat::Q4, 3e-2}};
  std::deque<Weight> keep;
  int seed = 1;
  for (const Case& c : cases)
    for (auto [fmt, tol] : formats) {
      SCOPED_TRACE(testing::Message() << weight_format_name(fmt) << " n=" << c.n << " cols=" << c.cols << " rows=" << c.rows);
      std::vector<float> wv = random_values((size_t)(c.rows * c.cols), seed++, 0.5f);
      keep.push_back(Weight::from_f32(wv, c.rows, c.cols, fmt));
      const Weight& w = keep.back();
      std::vector<float> x = random_values((size_t)(c.n * c.cols), seed++);
      auto [g, cpu] = both(b, c.n, [&](Backend& be, Rig& r) {
        Tensor xt = r.input(x, c.cols), y = be.tensor(c.n, c.rows);
        be.linear(w, xt, y);
        return r.read(y);
      });
      EXPECT_LE(rel_diff(g, cpu), tol);
      // And exactly what the device computes: the dequantised weights times x, in float64. The
      // CPU's q8/q4 path rounds x to int8 first, hence the looser bound above.
      std::vector<float> ref((size_t)(c.n * c.rows)), row((size_t)c.cols);
      for (int64_t j = 0; j < c.rows; j++) {
        w.row(j, row.data());
        for (int64_t i = 0; i < c.n; i++) {
          double s = 0;
          for (int64_t k = 0; k < c.cols; k++) s += (double)row[(size_t)k] * x[(size_t)(i * c.cols + k)];
          ref[(size_t)(i * c.rows + j)] = (float)s;
        }
      }
      EXPECT_LE(rel_diff(g, ref), 1e-5);
    }
}

// KVAD_VULKAN_KERNELS really switches the kernel: the two families sum a row in different orders,
// so some of 64 sums of 512 products differ in their last bits (and agree to rounding).
TEST(GpuOps, TheTwoKernelFamiliesAreDifferentCode) {
  KVAD_NEED_GPU(device);
  const int64_t cols = 512, rows = 64;
  const Weight w = Weight::from_f32(random_values((size_t)(rows * cols), 70), rows, cols, WeightFormat::F32);
  const std::vector<float> x = random_values((size_t)cols, 71);
  std::vector<float> out[2];
  for (int f = 0; f < 2; f++) {
    test::ScopedKernels kernels(test::kKernelFamilies[f]);
    auto be = make_backend(device);
    Rig r(*be, 1);
    Tensor y = be->tensor(1, rows);
    be->linear(w, r.input(x, cols), y);
    out[f] = r.read(y);
  }
  EXPECT_NE(out[0], out[1]);
  EXPECT_LE(rel_diff(out[1], out[0]), 1e-5);
}

// ggml's K-quant super-blocks with random codes and scales (any bytes are valid codes) and sane f16
// d / dmin: every bit of the layout is exercised, including Q5_K, which kvad reads but does not write.
KQuantMatrix random_kquant(DType type, int64_t rows, int64_t cols, uint32_t seed, std::shared_ptr<std::vector<uint8_t>>& keep) {
  const size_t block = dtype_block_bytes(type);
  keep = std::make_shared<std::vector<uint8_t>>((size_t)(rows * cols / 256) * block);
  std::mt19937 rng(seed);
  for (auto& b : *keep) b = (uint8_t)rng();
  for (size_t at = 0; at < keep->size(); at += block) {
    auto put = [&](size_t off, float v) {
      uint16_t h = f32_to_f16(v);
      std::memcpy(keep->data() + at + off, &h, 2);
    };
    if (type == DType::Q6_K) {
      put(208, 0.001f * (float)(rng() % 100 + 1));
    } else {
      put(0, 0.002f * (float)(rng() % 100 + 1));
      put(2, 0.001f * (float)(rng() % 100));
    }
  }
  return KQuantMatrix::wrap(type, rows, cols, keep->data(), keep);
}

TEST_P(GpuLinear, GgufKQuantsInPlace) {
  GPU_BACKENDS(b);
  std::deque<Weight> keep;
  std::shared_ptr<std::vector<uint8_t>> bytes;
  int seed = 50;
  for (DType type : {DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (auto [n, cols, rows] : {std::tuple{1, 256, 3}, std::tuple{5, 512, 19}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(type) << " n=" << n << " cols=" << cols << " rows=" << rows);
      keep.push_back(Weight::from_kquant(random_kquant(type, rows, cols, seed++, bytes)));
      const Weight& w = keep.back();
      std::vector<float> x = random_values((size_t)(n * cols), seed++);
      auto [g, c] = both(b, n, [&](Backend& be, Rig& r) {
        Tensor xt = r.input(x, cols), y = be.tensor(n, rows);
        be.linear(w, xt, y);
        return r.read(y);
      });
      EXPECT_LE(rel_diff(g, c), 3e-2);  // the CPU rounds activations to int8 (llama.cpp's Q8_K)
      std::vector<float> ref((size_t)(n * rows)), row((size_t)cols);
      for (int64_t j = 0; j < rows; j++) {
        w.row(j, row.data());
        for (int64_t i = 0; i < n; i++) {
          double s = 0;
          for (int64_t k = 0; k < cols; k++) s += (double)row[(size_t)k] * x[(size_t)(i * cols + k)];
          ref[(size_t)(i * rows + j)] = (float)s;
        }
      }
      EXPECT_LE(rel_diff(g, ref), 1e-5);
      // The embedding lookup of the same blocks: the numbers the CPU dequantises, exactly.
      auto [ge, ce] = both(b, rows, [&](Backend& be, Rig& r) {
        Tensor t = be.tensor(rows, cols);
        be.embed(w, r.batch(), t);
        return r.read(t);
      });
      EXPECT_EQ(ge, ce);
    }
  // kvad's own quantisers to Q4_K / Q6_K (--quant q4k|q6k) give weights the device reads too.
  for (WeightFormat fmt : {WeightFormat::Q4K, WeightFormat::Q6K}) {
    keep.push_back(Weight::from_f32(random_values(7 * 256, 60), 7, 256, fmt));
    std::vector<float> x = random_values(2 * 256, 61);
    auto [g, c] = both(b, 2, [&](Backend& be, Rig& r) {
      Tensor xt = r.input(x, 256), y = be.tensor(2, 7);
      be.linear(keep.back(), xt, y);
      return r.read(y);
    });
    EXPECT_LE(rel_diff(g, c), 3e-2) << weight_format_name(fmt);
  }
}

TEST_P(GpuLinear, ReadsAStridedInputAndWritesHostMemory) {
  GPU_BACKENDS(b);
  const int64_t n = 5, wide = 48, cols = 20, rows = 11;
  std::deque<Weight> keep;
  keep.push_back(Weight::from_f32(random_values((size_t)(rows * cols), 3), rows, cols, WeightFormat::BF16));
  std::vector<float> x = random_values((size_t)(n * wide), 4);
  auto [g, c] = both(b, n, [&](Backend& be, Rig& r) {
    Tensor xt = r.input(x, wide);
    std::vector<float> host((size_t)(n * rows), NAN);
    be.linear(keep.back(), xt.cols_view(13, cols), Tensor::wrap(host.data(), n, rows));
    return host;
  });
  EXPECT_LE(rel_diff(g, c), 1e-5);
}

TEST(GpuOps, EmbeddingRowsInEveryFormat) {
  GPU_BACKENDS(b);
  std::deque<Weight> keep;
  const int64_t vocab = 37, width = 45;
  for (WeightFormat fmt : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8, WeightFormat::Q4}) {
    SCOPED_TRACE(weight_format_name(fmt));
    keep.push_back(Weight::from_f32(random_values((size_t)(vocab * width), 9), vocab, width, fmt));
    const Weight& table = keep.back();
    std::vector<int32_t> ids = {36, 0, 5, 5, 17, 36, 1};
    std::vector<int32_t> blocks = {0};
    std::vector<float> got[2];
    Backend* bes[2] = {b.gpu.get(), b.cpu.get()};
    for (int k = 0; k < 2; k++) {
      Batch batch;
      batch.add(0, ids, 0, blocks, 16, Logits::All);
      bes[k]->begin_forward(batch);
      Tensor t = bes[k]->tensor((int64_t)ids.size(), width);
      bes[k]->embed(table, batch, t);
      got[k].resize(ids.size() * (size_t)width);
      bes[k]->logit_rows(t, batch, Tensor::wrap(got[k].data(), (int64_t)ids.size(), width));
    }
    EXPECT_EQ(got[0], got[1]);  // a lookup: the same numbers exactly
  }
}

TEST(GpuOps, AnOutOfRangeTokenIsRefused) {
  GPU_BACKENDS(b);
  Weight table = Weight::from_f32(random_values(40, 1), 10, 4, WeightFormat::F32);
  std::vector<int32_t> ids = {3, 10}, blocks = {0};
  Batch batch;
  batch.add(0, ids, 0, blocks, 16, Logits::All);
  b.gpu->begin_forward(batch);
  Tensor t = b.gpu->tensor(2, 4);
  EXPECT_THROW(b.gpu->embed(table, batch, t), Error);
}

TEST(GpuOps, NormsAndElementwiseOps) {
  GPU_BACKENDS(b);
  for (int64_t n : {1, 6}) {
    for (int64_t cols : {1, 31, 300}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " cols=" << cols);
      const size_t sz = (size_t)(n * cols);
      std::vector<float> x = random_values(sz, 11, 2.0f), y = random_values(sz, 12), w = random_values((size_t)cols, 13),
                         bias = random_values((size_t)cols, 14);
      auto check = [&](const char* what, double tol, const std::function<Tensor(Backend&, Rig&)>& op) {
        auto [g, c] = both(b, n, [&](Backend& be, Rig& r) { return r.read(op(be, r)); });
        EXPECT_LE(rel_diff(g, c), tol) << what;
      };
      check("rmsnorm", 1e-5, [&](Backend& be, Rig& r) {
        Tensor t = r.input(x, cols), o = be.tensor(n, cols);
        be.rmsnorm(t, w, 1e-6f, o);
        return o;
      });
      check("rmsnorm in place", 1e-5, [&](Backend& be, Rig& r) {
        Tensor t = r.input(x, cols);
        be.rmsnorm(t, w, 1e-6f, t);
        return t;
      });
      check("layernorm", 1e-5, [&](Backend& be, Rig& r) {
        Tensor t = r.input(x, cols), o = be.tensor(n, cols);
        be.layernorm(t, w, bias, 1e-5f, o);
        return o;
      });
      check("add", 1e-6, [&](Backend& be, Rig& r) {
        Tensor t = r.input(x, cols), u = r.input(y, cols);
        be.add(t, u);
        return t;
      });
      check("add_bias", 1e-6, [&](Backend& be, Rig& r) {
        Tensor t = r.input(x, cols);
        be.add_bias(t, bias);
        return t;
      });
      check("silu_mul", 1e-5, [&](Backend& be, Rig& r) {
        Tensor g = r.input(x, cols), u = r.input(y, cols);
        be.silu_mul(g, u);
        return g;
      });
      check("gelu_tanh", 1e-4,  // GLSL tanh and exp are within a few ulp, not correctly rounded
             [&](Backend& be, Rig& r) {
        Tensor t = r.input(x, cols);
        be.gelu_tanh(t);
        return t;
      });
    }
  }
}

TEST(GpuOps, StridedAddAndAPositionTable) {
  GPU_BACKENDS(b);
  const int64_t n = 4, wide = 24, cols = 10, positions = 64;
  std::vector<float> x = random_values((size_t)(n * wide), 21), y = random_values((size_t)(n * cols), 22),
                     table = random_values((size_t)(positions * cols), 23);
  auto [g, c] = both(
      b, n,
      [&](Backend& be, Rig& r) {
        Tensor t = r.input(x, wide), u = r.input(y, cols);
        be.add(t.cols_view(7, cols), u);
        Tensor v = be.tensor(n, cols);
        be.add(v, v);  // scratch contents are undefined: overwrite through a product below
        be.rmsnorm(u, std::vector<float>((size_t)cols, 1.0f), 1e-6f, v);
        be.add_position_rows(v, table, r.batch());
        std::vector<float> out = r.read(t), tail = r.read(v);
        out.insert(out.end(), tail.begin(), tail.end());
        return out;
      },
      /*pos0=*/40);
  EXPECT_LE(rel_diff(g, c), 1e-5);
}

TEST(GpuOps, RopeTablesAndRotationAtFarPositions) {
  GPU_BACKENDS(b);
  for (int64_t pos0 : {0, 3, 5000}) {
    SCOPED_TRACE(pos0);
    const int64_t n = 5, heads = 3, hd = 16;
    std::vector<double> inv_freq((size_t)(hd / 2));
    for (size_t i = 0; i < inv_freq.size(); i++) inv_freq[i] = std::pow(10000.0, -2.0 * (double)i / (double)hd);
    std::vector<float> x = random_values((size_t)(n * heads * hd), 31);
    auto [g, c] = both(
        b, n,
        [&](Backend& be, Rig& r) {
          Tensor t = r.input(x, heads * hd), table = be.tensor(n, hd);
          be.rope_table(r.batch(), inv_freq, table, 1.0);
          be.rope(t, heads, table);
          std::vector<float> out = r.read(t), angles = r.read(table);
          out.insert(out.end(), angles.begin(), angles.end());
          return out;
        },
        pos0);
    EXPECT_LE(rel_diff(g, c), 1e-5);
  }
}

// Paged attention over several sequences at once: shuffled block tables, blocks of 3 positions,
// grouped-query heads, a first forward that only fills the cache, then a mix of prefill chunks
// and single decode rows; in each cache type (the two backends round to the same bf16 values and
// q8 codes, so they agree as closely).
TEST(GpuOps, PagedAttentionOverManySequences) {
  GPU_BACKENDS(b);
  for (kernels::KvType kv_type : {kernels::KvType::F32, kernels::KvType::BF16, kernels::KvType::Q8})
  for (auto [heads, kv_heads, hd] : {std::tuple{4, 2, 16}, std::tuple{2, 2, 80}, std::tuple{6, 1, 8}}) {
    SCOPED_TRACE(testing::Message() << heads << " heads, " << kv_heads << " kv heads, dim " << hd << ", "
                                    << kernels::kv_type_name(kv_type) << " cache");
    const int64_t bs = 3;
    const int64_t shape[][2] = {{0, 7}, {5, 1}, {11, 4}, {0, 1}, {70, 1}, {2, 9}};
    const int K = 6;
    const int64_t per_seq = 90 / bs, n_blocks = per_seq * K;
    std::vector<int32_t> perm((size_t)n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
    auto table = [&](int i) { return std::span<const int32_t>(perm.data() + i * per_seq, (size_t)per_seq); };
    MemorySpec spec = MemorySpec::attention(2, kv_heads, hd);
    spec.kv_type = kv_type;
    kernels::AttentionShape shape_{heads, kv_heads, hd, (float)(1.0 / std::sqrt((double)hd))};
    std::vector<int32_t> zeros(200, 0);
    std::deque<Weight> keep;
    std::vector<float> result[2];
    Backend* bes[2] = {b.gpu.get(), b.cpu.get()};
    for (int k = 0; k < 2; k++) {
      auto mem = bes[k]->make_memory(spec, n_blocks, bs);
      auto run = [&](const Batch& batch, uint32_t seed) {
        const int64_t n = batch.size();
        bes[k]->begin_forward(batch);
        // Rows as embedding lookups: the batch's tokens are 0, 1, 2, ... in row order.
        auto in = [&](int64_t cols, uint32_t s) {
          keep.push_back(Weight::from_f32(random_values((size_t)(n * cols), s), n, cols, WeightFormat::F32));
          Tensor t = bes[k]->tensor(n, cols);
          bes[k]->embed(keep.back(), batch, t);
          return t;
        };
        Tensor q = in(heads * hd, seed), kk = in(kv_heads * hd, seed + 1), v = in(kv_heads * hd, seed + 2),
               out = bes[k]->tensor(n, heads * hd);
        bes[k]->attention(*mem, 1, batch, shape_, q, kk, v, out);
        std::vector<float> o((size_t)(batch.n_logits() * heads * hd));
        if (batch.n_logits()) bes[k]->logit_rows(out, batch, Tensor::wrap(o.data(), batch.n_logits(), heads * hd));
        return o;
      };
      std::vector<std::vector<int32_t>> ids(K);
      int32_t next = 0;
      Batch held, step;
      for (int i = 0; i < K; i++)
        if (shape[i][0] > 0) {
          ids[i].resize((size_t)shape[i][0]);
          for (auto& t : ids[i]) t = next++;
          held.add(i, ids[i], 0, table(i), bs, Logits::None);
        }
      run(held, 100);
      next = 0;
      std::vector<std::vector<int32_t>> ids2(K);
      for (int i = 0; i < K; i++) {
        ids2[i].resize((size_t)shape[i][1]);
        for (auto& t : ids2[i]) t = next++;
        step.add(i, ids2[i], shape[i][0], table(i), bs, Logits::All);
      }
      result[k] = run(step, 200);
    }
    EXPECT_LE(rel_diff(result[0], result[1]), 1e-5);
  }
}

TEST(GpuOps, OperationsItHasNotAreRefusedByName) {
  GPU_BACKENDS(b);
  Rig r(*b.gpu, 2);
  Tensor t = r.input(random_values(8, 1), 4);
  try {
    b.gpu->sigmoid_gate(t, t);
    FAIL() << "sigmoid_gate ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sigmoid_gate"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.gpu->make_memory(MemorySpec{{MemorySpec::recurrent_layer(16)}}, 4, 16, 2), Error);
  // Head sizes the device's bf16 and q8 caches cannot hold: a word holds two bf16 values or four
  // q8 codes of one head.
  MemorySpec q8 = MemorySpec::attention(1, 2, 18), odd = MemorySpec::attention(1, 2, 15);
  q8.kv_type = kernels::KvType::Q8;
  odd.kv_type = kernels::KvType::BF16;
  for (const MemorySpec* spec : {&q8, &odd}) {
    try {
      b.gpu->make_memory(*spec, 4, 16);
      FAIL() << "made a " << kernels::kv_type_name(spec->kv_type) << " cache";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--kv-type"), std::string::npos) << e.what();
    }
  }
}

TEST(GpuOps, DeviceNamesAreChecked) {
  EXPECT_THROW(make_backend("gpu:99"), Error);
  EXPECT_THROW(make_backend("tpu"), Error);
  EXPECT_THROW(check_device_name("gpu:x"), Error);
  EXPECT_NO_THROW(check_device_name("gpu:1"));
}

// KVAD_VULKAN_PROFILE's table (vulkan/profile.h) counts each dispatch and copy under its shader and
// grid, with a GPU time for each, and is empty when the variable is unset.
TEST(GpuOps, TheProfileTimesEveryCommand) {
  KVAD_NEED_GPU(spec);
  struct ProbeArgs {  // read_probe.comp's push constants
    uint64_t src, sink;
    uint32_t quads;
  };
  auto run = [&](bool profiled) {
    if (profiled) setenv("KVAD_VULKAN_PROFILE", "1", 1);
    std::unique_ptr<vk::Device> dev = vk::Device::open(spec);
    unsetenv("KVAD_VULKAN_PROFILE");
    vk::Buffer src = dev->allocate(size_t{1} << 20, false), sink = dev->allocate(16, false);
    const ProbeArgs a{src.address, sink.address, (1u << 20) / 16};
    for (int i = 0; i < 5; i++) dev->dispatch(vk::Shader::ReadProbe, &a, sizeof a, 64);
    dev->copy(src, 0, src, 4096, 2048);
    dev->dispatch(vk::Shader::ReadProbe, &a, sizeof a, 7);
    dev->submit();
    std::string report = dev->profile_report();
    dev->release(src);
    dev->release(sink);
    return report;
  };
  EXPECT_EQ(run(false), "");
  const std::string report = run(true);
  double ms = 0;
  EXPECT_EQ(test::timing_calls(report, "read_probe 64x1x1", &ms), 5) << report;
  EXPECT_GT(ms, 0) << report;
  EXPECT_EQ(test::timing_calls(report, "read_probe 7x1x1"), 1) << report;
  EXPECT_EQ(test::timing_calls(report, "copy (KiB) 2x1x1"), 1) << report;
  EXPECT_NE(report.find("1 command buffers"), std::string::npos) << report;
}
