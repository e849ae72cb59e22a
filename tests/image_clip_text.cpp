// CLIP text encoders (src/image/clip_text.h) and the conditioning (src/image/prompt.h) against
// transformers / diffusers in float32 (../shared/peer-image/goldens): every output of both SD 1.5
// and SDXL encoders for every golden text, SDXL's concatenated prompt embeddings and zero
// negatives, the pipelines' recorded encoder_hidden_states / text_embeds; bad folders.
//
// Tolerance: float32 against float32 computed in another order. The README measured float32 vs
// float64 of the same encoders at <= 3e-6 absolute. kvad against diffusers (2026-12-02, printed by
// these tests): at most 5.7e-6 absolute (SDXL te2 penultimate, prompt_unicode, values up to ~4.5),
// 2.0e-6 relative to the largest value. 2e-5 absolute is 3.5x that, and 400x below the smallest
// bug the README's bug_visibility table lists (gelu for quick_gelu: 8e-3 relative).
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "image/clip_text.h"
#include "image/pipeline_config.h"
#include "image/prompt.h"
#include "peer_image.h"
#include "test_support.h"

using namespace kvad;
using namespace kvad::image;

namespace {

constexpr double kTol = 2e-5;
const char* kTexts[] = {"negative_empty", "prompt_astronaut", "prompt_long", "prompt_unicode"};

// The texts themselves (tokens.json), for encode_prompt.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  test::Deviation d = test::deviation(got, want);
  std::printf("  %-58s max abs %.2e  rel %.2e\n", what.c_str(), d.abs, d.rel);
  EXPECT_LE(d.abs, kTol) << what;
}

const PromptEncoder& encoder(const char* model) {
  static std::map<std::string, PromptEncoder> cache;
  auto it = cache.find(model);
  if (it == cache.end())
    it = cache.emplace(model, PromptEncoder::load(read_pipeline_folder(test::peer_image(std::string("models/") + model))))
             .first;
  return it->second;
}

}  // namespace

TEST(ImageClipText, Sd15EveryOutputEveryText) {
  KVAD_REQUIRE_PEER_IMAGE();
  const ClipTextEncoder& te = encoder("sd15-tiny").encoders[0];
  test::Goldens g("sd15_text_encoder.safetensors");
  for (std::string t : kTexts) {
    ClipTextOutput o = te.encode(g.ids(t + ".input_ids"));
    expect_close(o.last_hidden_state, g.floats(t + ".last_hidden_state"), "sd15 " + t + ".last_hidden_state");
    expect_close(o.penultimate, g.floats(t + ".hidden_state_penultimate"), "sd15 " + t + ".penultimate");
    expect_close(o.pooled, g.floats(t + ".pooler_output"), "sd15 " + t + ".pooler_output");
    EXPECT_TRUE(o.text_embeds.empty());
  }
}

TEST(ImageClipText, SdxlBothEncodersEveryText) {
  KVAD_REQUIRE_PEER_IMAGE();
  const PromptEncoder& pe = encoder("sdxl-tiny");
  test::Goldens g("sdxl_text_encoders.safetensors");
  for (std::string t : kTexts) {
    ClipTextOutput a = pe.encoders[0].encode(g.ids(t + ".input_ids_1"));
    ClipTextOutput b = pe.encoders[1].encode(g.ids(t + ".input_ids_2"));
    expect_close(a.penultimate, g.floats(t + ".te1.hidden_state_penultimate"), "sdxl " + t + ".te1.penultimate");
    expect_close(a.last_hidden_state, g.floats(t + ".te1.last_hidden_state"), "sdxl " + t + ".te1.last_hidden_state");
    expect_close(b.penultimate, g.floats(t + ".te2.hidden_state_penultimate"), "sdxl " + t + ".te2.penultimate");
    expect_close(b.last_hidden_state, g.floats(t + ".te2.last_hidden_state"), "sdxl " + t + ".te2.last_hidden_state");
    expect_close(b.text_embeds, g.floats(t + ".te2.text_embeds"), "sdxl " + t + ".te2.text_embeds");
    // The tokenizers give the ids the goldens were computed from.
    EXPECT_EQ(pe.tokenizers[0].encode_padded(test::golden_text(t)), g.ids(t + ".input_ids_1"));
    EXPECT_EQ(pe.tokenizers[1].encode_padded(test::golden_text(t)), g.ids(t + ".input_ids_2"));
    // encode_prompt's prompt row (row 1) is prompt_embeds.
    Conditioning c = encode_prompt(pe, test::golden_text(t), std::string(""));
    std::vector<float> row1(c.context.begin() + c.tokens * c.width, c.context.end());
    expect_close(row1, g.floats(t + ".prompt_embeds"), "sdxl " + t + ".prompt_embeds");
  }
  // negative_prompt=None with force_zeros_for_empty_prompt: zeros, exactly.
  Conditioning c = encode_prompt(pe, test::golden_text("prompt_astronaut"), std::nullopt);
  std::vector<float> row0(c.context.begin(), c.context.begin() + c.tokens * c.width);
  EXPECT_EQ(row0, g.floats("encode_prompt.negative_prompt_None.negative_prompt_embeds"));
  EXPECT_EQ(std::vector<float>(c.pooled.begin(), c.pooled.begin() + c.pooled_width),
            g.floats("encode_prompt.negative_prompt_None.negative_pooled_prompt_embeds"));
}

// The conditioning the recorded 4-step generations fed their UNets: [negative, prompt].
TEST(ImageClipText, ConditioningAsThePipelinesRecordedIt) {
  KVAD_REQUIRE_PEER_IMAGE();
  std::string prompt = test::golden_text("prompt_astronaut");
  {
    test::Goldens g("sd15_pipeline.safetensors");
    Conditioning c = encode_prompt(encoder("sd15-tiny"), prompt, std::string(""));
    EXPECT_EQ(c.batch, 2);
    EXPECT_EQ(c.tokens, 77);
    EXPECT_EQ(c.width, 8);
    EXPECT_EQ(c.pooled_width, 0);
    expect_close(c.context, g.floats("encoder_hidden_states"), "sd15_pipeline encoder_hidden_states");
    // No negative: SD 1.5 encodes "" (the same conditioning).
    EXPECT_EQ(encode_prompt(encoder("sd15-tiny"), prompt, std::nullopt).context, c.context);
  }
  for (auto [file, negative] : {std::pair<const char*, std::optional<std::string>>{"sdxl_pipeline.safetensors", std::nullopt},
                                {"sdxl_pipeline_neg_empty.safetensors", std::string("")}}) {
    test::Goldens g(file);
    Conditioning c = encode_prompt(encoder("sdxl-tiny"), prompt, negative);
    EXPECT_EQ(c.width, 16);
    EXPECT_EQ(c.pooled_width, 8);
    expect_close(c.context, g.floats("encoder_hidden_states"), std::string(file) + " encoder_hidden_states");
    expect_close(c.pooled, g.floats("text_embeds"), std::string(file) + " text_embeds");
  }
}

TEST(ImageClipText, BadFoldersNameTheFile) {
  KVAD_REQUIRE_PEER_IMAGE();
  std::string dir = test::temp_dir("clip-text");
  auto err = [&] { return test::error_of([&] { ClipTextEncoder::load(dir); }); };
  EXPECT_NE(err().find(join_path(dir, "config.json")), std::string::npos) << err();
  std::string cfg = read_file(test::peer_image("models/sd15-tiny/text_encoder/config.json"));
  std::ofstream(join_path(dir, "config.json")) << cfg;
  EXPECT_NE(err().find("no weights"), std::string::npos) << err();
  // A config whose sizes do not match the weights: the tensor and both shapes are named.
  Json j = parse_json(cfg, "cfg");
  j["intermediate_size"] = 36;
  std::ofstream(join_path(dir, "config.json")) << j.dump();
  std::filesystem::create_symlink(test::peer_image("models/sd15-tiny/text_encoder/model.safetensors"),
                                  join_path(dir, "model.safetensors"));
  EXPECT_NE(err().find("mlp.fc1.weight"), std::string::npos) << err();
  j["intermediate_size"] = 37;
  j["num_hidden_layers"] = 4;  // layer 4's tensors are then never read
  std::ofstream(join_path(dir, "config.json")) << j.dump();
  EXPECT_NE(err().find("layers.4"), std::string::npos) << err();
  j["num_hidden_layers"] = 5;
  j["hidden_act"] = "relu";
  EXPECT_NE(test::error_of([&] { parse_clip_text_config(j, "te/config.json"); }).find("te/config.json: 'hidden_act'"),
            std::string::npos);
  j["hidden_act"] = "gelu";
  j["num_attention_heads"] = 3;
  EXPECT_NE(test::error_of([&] { parse_clip_text_config(j, "te/config.json"); }).find("num_attention_heads"),
            std::string::npos);
  // Ids the encoder cannot take.
  const ClipTextEncoder& te = encoder("sd15-tiny").encoders[0];
  EXPECT_NE(test::error_of([&] { te.encode({49406, 49408}); }).find("49408"), std::string::npos);
  EXPECT_NE(test::error_of([&] { te.encode(std::vector<int32_t>(78, 1)); }).find("78 tokens"), std::string::npos);
}
