// Embeddings against the float64 numpy reference (tests/golden/models/embeddings.json, made by
// tools/make_embedding_goldens.py): every pooling the sentence-transformers config can name, with
// and without its Normalize module, on four architectures, inputs of different lengths batched
// into one forward over blocks of 3 positions, and each alone; plus the configs kvad refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "models/registry.h"
#include "models/synth.h"
#include "runtime/embed.h"
#include "test_support.h"

using namespace kvad;

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

// The sentence-transformers files of a model with one pooling mode (and Normalize when asked).
void write_st_config(const std::string& dir, const std::string& mode, bool normalize) {
  Json mods = Json::array({{{"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
                           {{"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}}});
  if (normalize) mods.push_back({{"path", "2_Normalize"}, {"type", "sentence_transformers.models.Normalize"}});
  write_file(dir + "/modules.json", mods.dump());
  Json pooling = {{"word_embedding_dimension", 64}};
  for (const char* k : {"pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                        "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
    pooling[k] = mode == k;
  write_file(dir + "/1_Pooling/config.json", pooling.dump());
}

class EmbedGolden : public ::testing::TestWithParam<int> {};

}  // namespace

TEST_P(EmbedGolden, MatchesNumpyBatchedAndAlone) {
  Json g = read_json_file(test::source_path("tests/golden/models/embeddings.json"));
  const Json& c = g["cases"][(size_t)GetParam()];
  SynthOptions o;
  o.arch = c["arch"];
  o.preset = g["synth"]["preset"];
  o.seed = g["synth"]["seed"];
  o.std = g["synth"]["std"];
  o.norm_jitter = g["synth"]["norm_jitter"];
  o.dtype = DType::BF16;
  o.out = test::temp_dir("embed-" + std::to_string(GetParam()));
  synthesize(o);
  if (!c["pooling"].is_null()) write_st_config(o.out, c["pooling"], c["normalize"]);
  EmbeddingSpec spec = embedding_spec(o.out);
  EXPECT_EQ(spec.normalize, c["normalize"].get<bool>());

  LoadOptions lo;
  lo.format = WeightFormat::F32;
  auto model = load_model_dir(o.out, lo);
  EngineOptions eo;
  eo.block_size = 3;  // inputs of 9, 2 and 19 tokens end mid-block and span several
  Engine engine(*model, eo);
  std::vector<std::vector<int32_t>> inputs = g["inputs"];
  int64_t total = 0;
  for (auto& in : inputs) total += (int64_t)in.size();
  for (int64_t rows : {int64_t{512}, int64_t{1}}) {  // all in one forward; each input alone
    Embeddings e = embed(engine, inputs, spec, 0, rows);
    EXPECT_EQ(e.tokens, total);
    ASSERT_EQ(e.vectors.size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); i++) {
      const Json& want = c["embeddings"][i];
      ASSERT_EQ(e.vectors[i].size(), want.size());
      double worst = 0, scale = 0;
      for (size_t j = 0; j < want.size(); j++) {
        worst = std::max(worst, std::fabs(e.vectors[i][j] - want[j].get<double>()));
        scale = std::max(scale, std::fabs(want[j].get<double>()));
      }
      EXPECT_LE(worst, 1e-3 * scale) << o.arch << " " << pooling_name(spec.pooling) << ", input " << i
                                     << ", rows per forward " << rows;
    }
  }
  EXPECT_EQ(engine.blocks().stats().used, 0) << "an embedding keeps no block";
}

INSTANTIATE_TEST_SUITE_P(Cases, EmbedGolden, ::testing::Range(0, 6));

TEST(Embed, DimensionsKeepThePrefixAndRenormalise) {
  SynthOptions o;
  o.arch = "qwen2";
  o.preset = "tiny";
  o.out = test::temp_dir("embed-dims");
  synthesize(o);
  auto model = load_model_dir(o.out, {});
  Engine engine(*model, EngineOptions{});
  EmbeddingSpec spec = embedding_spec(o.out);  // no config: mean, normalised
  EXPECT_EQ(spec.pooling, Pooling::Mean);
  std::vector<std::vector<int32_t>> in = {{5, 6, 7, 8}};
  std::vector<float> full = embed(engine, in, spec).vectors[0], cut = embed(engine, in, spec, 16).vectors[0];
  ASSERT_EQ(cut.size(), 16u);
  double norm = 0, prefix = 0;
  for (size_t j = 0; j < 16; j++) norm += (double)cut[j] * cut[j], prefix += (double)full[j] * full[j];
  EXPECT_NEAR(norm, 1.0, 1e-5);
  for (size_t j = 0; j < 16; j++) EXPECT_NEAR(cut[j], full[j] / std::sqrt(prefix), 1e-5);
  EXPECT_THROW(embed(engine, in, spec, 65), Error);
  EXPECT_THROW(embed(engine, {{}}, spec), Error);  // an empty input
}

TEST(Embed, ConfigsKvadCannotFollowAreRefusedByName) {
  std::string dir = test::temp_dir("embed-bad");
  write_file(dir + "/modules.json",
             R"([{"path":"","type":"sentence_transformers.models.Transformer"},{"path":"2_Dense","type":"sentence_transformers.models.Dense"}])");
  try {
    embedding_spec(dir);
    FAIL() << "a Dense module was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Dense"), std::string::npos) << e.what();
  }
  write_st_config(dir, "pooling_mode_mean_tokens", true);
  Json two = read_json_file(dir + "/1_Pooling/config.json");
  two["pooling_mode_max_tokens"] = true;
  write_file(dir + "/1_Pooling/config.json", two.dump());
  EXPECT_THROW(embedding_spec(dir), Error);
  write_file(dir + "/modules.json", R"([{"path":"../../etc","type":"sentence_transformers.models.Pooling"}])");
  EXPECT_THROW(embedding_spec(dir), Error);
}
