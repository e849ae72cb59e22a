// fp8_e4m3_to_f32 (core/dtype.h) on every one of the 256 bytes against values computed from the bit
// layout with Python floats (tools/make_fp8_goldens.py -> tests/golden/fp8_e4m3.json): no code shared.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/json.h"
#include "test_support.h"

using namespace kvad;

TEST(Fp8E4M3, EveryByteIsTheReferencesValue) {
  Json j = read_json_file(test::source_path("tests/golden/fp8_e4m3.json"));
  ASSERT_EQ(j["values"].size(), 256u);
  int nans = 0;
  for (int b = 0; b < 256; b++) {
    const float got = fp8_e4m3_to_f32((uint8_t)b);
    const Json& want = j["values"][(size_t)b];
    if (want.is_null()) {  // S.1111.111, the format's only NaNs
      EXPECT_TRUE(std::isnan(got)) << "byte " << b;
      nans++;
      continue;
    }
    // Exact: every e4m3 value (4 significant bits, 2^-9 .. 448) is an f32; the sign of zero too.
    EXPECT_EQ((double)got, want.get<double>()) << "byte " << b;
    EXPECT_EQ(std::signbit(got), std::signbit(want.get<double>())) << "byte " << b;
  }
  EXPECT_EQ(nans, 2);
}

TEST(Fp8E4M3, ReadsAsASingleByteType) {
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
  EXPECT_STREQ(dtype_name(DType::F8_E4M3), "F8_E4M3");  // safetensors' dtype string
  EXPECT_FALSE(dtype_is_block(DType::F8_E4M3));  // its scales are separate tensors, not inline blocks
}
