// Dense weights used in place (bf16 as stored: views of the checkpoint's file mapping) copied into
// huge pages at load (LoadOptions::copy_in_place_weights): the same bytes and the same products, a
// copy of its own only for matrices of a huge page or more, one copy of a matrix asked for twice,
// none without the option, and none for K-quants. A matrix converted at load (quantised) leaves
// none of the file's pages resident beside its copy.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/huge_pages.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "models/weight_source.h"
#include "quant/kquant.h"
#include "random_values.h"
#include "resident_memory.h"
#include "test_support.h"

using namespace kvad;

namespace {

std::string bf16_bytes(const std::vector<float>& v) {
  std::string out(v.size() * 2, '\0');
  for (size_t i = 0; i < v.size(); i++) {
    const uint16_t h = f32_to_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

std::vector<float> product(const Weight& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> y((size_t)(n * w.rows()));
  w.matmul(x.data(), n, y.data());
  return y;
}

}  // namespace

TEST(InPlaceWeights, Bf16MatricesOfAHugePageOrMoreGetACopyWithTheSameProducts) {
  Rng rng(3);
  const int64_t rows = 1100, cols = 1024, small_rows = 16;  // 2.15 MB and 32 KB of bf16
  const std::string dir = test::temp_dir("in-place-weights");
  write_safetensors(dir + "/model.safetensors",
                    {{"big", DType::BF16, {rows, cols}, bf16_bytes(test::randn<float>(rng, (size_t)(rows * cols)))},
                     {"small", DType::BF16, {small_rows, cols}, bf16_bytes(test::randn<float>(rng, (size_t)(small_rows * cols)))}});
  SafetensorsCheckpoint ck(dir);
  WeightSource mapped(ck, WeightFormat::AsStored, false), copying(ck, WeightFormat::AsStored, false);
  copying.copy_in_place_weights();
  const TensorView big = ck.get("big");

  const Weight in_place = mapped.matrix("big", rows, cols);
  EXPECT_EQ(in_place.dense_data(), big.data) << "without the option a bf16 matrix is the checkpoint's bytes";
  const Weight copy = copying.matrix("big", rows, cols);
  const std::vector<float> x = test::randn<float>(rng, (size_t)(3 * cols));
  if (!transparent_huge_pages_enabled()) {
    EXPECT_EQ(copy.dense_data(), big.data);
    GTEST_SKIP() << "SKIPPED in part: this machine's transparent huge pages are off, so nothing is copied";
  }
  ASSERT_NE(copy.dense_data(), big.data);
  EXPECT_EQ((uintptr_t)copy.dense_data() % HugePageBuffer::kHugePage, 0u);
  EXPECT_EQ(std::memcmp(copy.dense_data(), big.data, copy.bytes()), 0);
  EXPECT_EQ(product(copy, x, 3), product(in_place, x, 3));
  // Asked for again (a tied matrix read twice): the same copy, not a second one.
  EXPECT_EQ(copying.matrix("big", rows, cols).dense_data(), copy.dense_data());
  // Under a huge page: used in place either way.
  EXPECT_EQ(copying.matrix("small", small_rows, cols).dense_data(), ck.get("small").data);
}

TEST(InPlaceWeights, AKQuantViewStaysInPlace) {
  // K-quant decode is compute bound: a copy in huge pages measured 0.90-1.04x (docs/kernels.md),
  // so a GGUF's K-quant matrices keep using the file's pages.
  Rng rng(4);
  const int64_t rows = 4096, cols = 1024;  // Q4_K: 4096 rows x 4 super-blocks x 144 bytes, 2.4 MB
  const std::vector<float> w = test::randn<float>(rng, (size_t)(rows * cols));
  const KQuantMatrix q = KQuantMatrix::quantize(DType::Q4_K, w.data(), rows, cols);
  TensorView t;
  t.name = "blk.0.ffn_up.weight";
  t.dtype = DType::Q4_K;
  t.shape = {rows, cols};
  t.data = q.row_data(0);
  t.nbytes = q.bytes();
  Weight view = Weight::from_tensor(t, WeightFormat::AsStored);
  ASSERT_GE(view.bytes(), HugePageBuffer::kHugePage);
  EXPECT_FALSE(view.copy_into_huge_pages());
  EXPECT_EQ(view.kquant().row_data(0), t.data);
}

TEST(InPlaceWeights, AMatrixQuantisedAtLoadLeavesNoFilePagesResident) {
  // The first q8 run of a bf16 Qwen2.5-0.5B kept the checkpoint's 1 GB of pages mapped beside
  // the 0.5 GB it quantised them to, until the process ended.
  Rng rng(5);
  const int64_t rows = 2048, cols = 1024;  // 4 MB of bf16
  const std::vector<float> values = test::randn<float>(rng, (size_t)(rows * cols));
  const std::string dir = test::temp_dir("quantised-at-load");
  write_safetensors(dir + "/model.safetensors", {{"w", DType::BF16, {rows, cols}, bf16_bytes(values)}});
  const std::string file = dir + "/model.safetensors";
  SafetensorsCheckpoint ck(dir);
  WeightSource src(ck, WeightFormat::Q8, false);
  const Weight q8 = src.matrix("w", rows, cols);
  const long resident_kb = test::resident_kb_of(file);
  ASSERT_GE(resident_kb, 0) << file << " is not mapped";
  EXPECT_LT(resident_kb, (long)(rows * cols * 2 / 1024 / 10)) << resident_kb << " kB of the checkpoint stay resident";
  // What was released was only the file's pages: the products are those of the same values
  // quantised from memory.
  const Weight reference = Weight::from_f32(to_f32(ck.get("w")), rows, cols, WeightFormat::Q8);
  const std::vector<float> x = test::randn<float>(rng, (size_t)(2 * cols));
  EXPECT_EQ(product(q8, x, 2), product(reference, x, 2));
}
