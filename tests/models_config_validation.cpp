// Numbers and ids from config.json (and GGUF metadata, which arrives in the same shape): each out
// of range value is refused with the file and the field named, never an abort, a wrap or a NaN
// later in the forward pass (issue 9).
#include <gtest/gtest.h>

#include "core/error.h"
#include "models/config_parse.h"
#include "models/registry.h"

using namespace kvad;

namespace {

Json llama() {
  return Json::parse(R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":128,
    "vocab_size":512,"max_position_embeddings":4096,"rms_norm_eps":1e-5,"rope_theta":500000.0,
    "bos_token_id":1,"eos_token_id":[2,3]})");
}

Json gpt2() {
  return Json::parse(R"({"architectures":["GPT2LMHeadModel"],"model_type":"gpt2","n_embd":64,"n_layer":2,
    "n_head":4,"n_positions":256,"vocab_size":512,"bos_token_id":0,"eos_token_id":0})");
}

// The message of parsing `j`, or "" when it parses.
std::string config_error_of(const Json& j) {
  try {
    const Architecture& a = require_architecture(j, "m/config.json");
    a.parse_config(j, "m/config.json");
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT A kvad::Error: ") + e.what();
  }
  return "";
}

#define EXPECT_REFUSED(j, ...)                                                                  \
  do {                                                                                          \
    std::string msg = config_error_of(j);                                                              \
    EXPECT_NE(msg.find("m/config.json"), std::string::npos) << msg;                              \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(msg.find(part), std::string::npos) << msg; \
  } while (0)

}  // namespace

TEST(ConfigValidation, TheBaseConfigsParse) {
  EXPECT_EQ(config_error_of(llama()), "");
  EXPECT_EQ(config_error_of(gpt2()), "");
}

TEST(ConfigValidation, ArchitecturesOfTheWrongType) {
  Json j = llama();
  j["architectures"] = Json::array({7, "LlamaForCausalLM"});
  EXPECT_REFUSED(j, "architectures[0]", "must be a string");  // was nlohmann's type_error
  j["architectures"] = Json::array({Json::object(), "LlamaForCausalLM"});
  EXPECT_REFUSED(j, "architectures[0]");
  EXPECT_EQ(architecture_field(Json::object(), "x"), "");
  EXPECT_THROW(architecture_field(Json{{"architectures", "LlamaForCausalLM"}}, "x"), Error);
}

TEST(ConfigValidation, SizesOutOfRange) {
  for (auto [k, v] : std::vector<std::pair<const char*, Json>>{{"max_position_embeddings", 0},
                                                               {"max_position_embeddings", -5},
                                                               {"max_position_embeddings", int64_t(1) << 40},
                                                               {"max_position_embeddings", 1e300},
                                                               {"max_position_embeddings", "4096"},
                                                               {"vocab_size", int64_t(1) << 30},
                                                               {"hidden_size", int64_t(1) << 30},
                                                               {"num_hidden_layers", 100000},
                                                               {"intermediate_size", int64_t(1) << 31}}) {
    Json j = llama();
    j[k] = v;
    std::string msg = config_error_of(j);
    EXPECT_NE(msg.find("m/config.json"), std::string::npos) << k << " " << v << ": " << msg;
    EXPECT_EQ(msg.find("NOT A kvad::Error"), std::string::npos) << msg;
  }
  Json j = llama();
  j["max_position_embeddings"] = int64_t(1) << 40;
  EXPECT_REFUSED(j, "max_position_embeddings", "out of range");
  j = gpt2();
  j["n_positions"] = int64_t(1) << 31;
  EXPECT_REFUSED(j, "max_position_embeddings");
}

TEST(ConfigValidation, TokenIdsOutsideTheVocabulary) {
  Json j = llama();
  j["bos_token_id"] = 512;
  EXPECT_REFUSED(j, "bos_token_id 512", "vocabulary");
  j = llama();
  j["eos_token_id"] = Json::array({2, 100000});
  EXPECT_REFUSED(j, "eos_token_id 100000", "vocabulary");
  j = llama();
  j["eos_token_id"] = (int64_t(1) << 32) + 2;  // was token 2 after get<int32_t>()
  EXPECT_REFUSED(j, "eos_token_id");
  j = llama();
  j["eos_token_id"] = -1;
  EXPECT_REFUSED(j, "eos_token_id");
  j = gpt2();
  j["eos_token_id"] = 600;
  EXPECT_REFUSED(j, "eos_token_id 600");
}

TEST(ConfigValidation, RopeParametersThatGiveNaN) {
  Json j = llama();
  j["rope_theta"] = 1e-300;  // inv_freq up to 1e300: angles overflow to inf, then sin(inf) = NaN
  EXPECT_REFUSED(j, "rope_theta");
  j["rope_theta"] = -1;
  EXPECT_REFUSED(j, "rope_theta");
  j = llama();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 1e-320}};
  EXPECT_REFUSED(j, "rope_scaling", "factor");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 0}, {"high_freq_factor", 4}};
  EXPECT_REFUSED(j, "rope_scaling");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 1}, {"high_freq_factor", 4},
                       {"original_max_position_embeddings", 0}};
  EXPECT_REFUSED(j, "original_max_position_embeddings");
  j = llama();
  j["rms_norm_eps"] = 1e300;  // inf as a float
  EXPECT_REFUSED(j, "epsilon");
}

TEST(ConfigValidation, ModelConfigChecksOnItsOwn) {
  // What a GGUF loader builds: validate_config is the one place every loader passes through.
  ModelConfig c;
  c.vocab_size = 100, c.hidden = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 16;
  c.intermediate = 128, c.max_positions = 256;
  EXPECT_NO_THROW(validate_config(c, "g.gguf"));
  c.rope_theta = std::nan("");
  EXPECT_THROW(validate_config(c, "g.gguf"), Error);
  c.rope_theta = 10000;
  c.norm_eps = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(validate_config(c, "g.gguf"), Error);
  c.norm_eps = 1e-5f;
  c.bos_id = 100;
  EXPECT_THROW(validate_config(c, "g.gguf"), Error);
}

TEST(ConfigValidation, HelpersForTheFamilyParsersAndTheLoader) {
  EXPECT_EQ(bos_id_field(Json::parse(R"({"bos_token_id":5})"), "c"), 5);
  EXPECT_EQ(bos_id_field(Json::parse(R"({"bos_token_id":null})"), "c"), -1);
  EXPECT_THROW(bos_id_field(Json::parse(R"({"bos_token_id":4294967297})"), "c"), Error);  // not token 1
  EXPECT_THROW(bos_id_field(Json::parse(R"({"bos_token_id":"1"})"), "c"), Error);
  EXPECT_EQ(generation_eos_ids(Json::parse(R"({"eos_token_id":[1,2]})"), 10, "g"), (std::vector<int32_t>{1, 2}));
  EXPECT_THROW(generation_eos_ids(Json::parse(R"({"eos_token_id":[1,20]})"), 10, "g"), Error);
  EXPECT_THROW(generation_eos_ids(Json::parse(R"({"eos_token_id":4294967298})"), 10, "g"), Error);
}
