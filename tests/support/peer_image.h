// ../shared/peer-image (tiny SD 1.5 / SDXL pipelines and diffusers' float32 goldens, see its
// README): where it is, and its golden .safetensors read back through kvad's own reader.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/weight.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "test_support.h"

namespace kvad::test {

// The copy in tests/fixtures/peer-image (its models, goldens and README, so CI on a clean clone runs
// these tests), else ../shared/peer-image beside the repository.
inline std::string peer_image(const std::string& rel = "") {
  std::string root = source_path("tests/fixtures/peer-image");
  if (!file_exists(root + "/README.md")) root = source_path("../shared/peer-image");
  return rel.empty() ? root : root + "/" + rel;
}

// A prompt the goldens were made from (goldens/tokens.json's "texts"), by name.
inline std::string golden_text(const std::string& name) {
  static const Json gold = read_json_file(peer_image("goldens/tokens.json"));
  return gold["texts"][name]["text"];
}

// In a test body: skips (saying why) when the peer folder is not beside the repository.
#define KVAD_REQUIRE_PEER_IMAGE()                                                                  \
  do {                                                                                             \
    if (!kvad::file_exists(kvad::test::peer_image("README.md")))                                   \
      GTEST_SKIP() << "tests/fixtures/peer-image is absent (diffusers goldens for SD 1.5 / SDXL)"; \
  } while (0)

class Goldens {
 public:
  explicit Goldens(const std::string& rel) : file_(peer_image("goldens/" + rel)) {}
  const TensorView& view(const std::string& name) const {
    for (const TensorView& t : file_.tensors())
      if (t.name == name) return t;
    throw std::runtime_error(file_.path() + ": no tensor " + name);
  }
  std::vector<float> floats(const std::string& name) const { return to_f32(view(name)); }
  const std::vector<TensorView>& tensors() const { return file_.tensors(); }
  std::vector<int32_t> ids(const std::string& name) const {
    const TensorView& t = view(name);
    if (t.dtype != DType::I64) throw std::runtime_error(name + " is not I64");
    std::vector<int32_t> out((size_t)t.numel());
    for (size_t i = 0; i < out.size(); i++) {
      int64_t v;
      std::memcpy(&v, t.data + i * 8, 8);
      out[i] = (int32_t)v;
    }
    return out;
  }

 private:
  SafetensorsFile file_;
};

// max |got - want| and that over max |want| (the README's "rel. error" of its bug table).
struct Deviation {
  double abs = 0, rel = 0;
};
inline Deviation deviation(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double m = 0, scale = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); i++) {
    m = std::max(m, (double)std::fabs(got[i] - want[i]));
    scale = std::max(scale, (double)std::fabs(want[i]));
  }
  return {m, scale > 0 ? m / scale : m};
}

}  // namespace kvad::test
