// Malformed or unsupported tokenizer.json files: a kvad::Error that names the file and the field.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

using namespace kvad;

namespace {

Json minimal() {
  return Json::parse(R"({
    "version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
  })");
}

// The error message of loading `j`, or "" when it loads.
std::string error_of(const Json& j, const Json& config = Json::object()) {
  try {
    Tokenizer::from_json(j, config, "x/tokenizer.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(j, ...)                                                                   \
  do {                                                                                         \
    std::string msg = error_of(j);                                                             \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(msg.find(part), std::string::npos) << msg; \
  } while (0)

TEST(TokenizerErrors, MinimalLoads) {
  Tokenizer t = Tokenizer::from_json(minimal(), Json::object(), "x");
  EXPECT_EQ(t.encode("ab"), std::vector<int32_t>{2});
  EXPECT_EQ(t.encode("abc"), std::vector<int32_t>{2});  // 'c' has no token and no unk: dropped, as HF does
}

TEST(TokenizerErrors, MissingOrWrongModel) {
  Json j = minimal();
  j.erase("model");
  EXPECT_ERROR(j, "x/tokenizer.json: model: missing");
  j = minimal();
  j["model"]["type"] = "Unigram";
  EXPECT_ERROR(j, "x/tokenizer.json", "model.type", "'Unigram'", "not supported");
  j["model"]["type"] = "WordPiece";
  EXPECT_ERROR(j, "'WordPiece'", "not supported");
  j = minimal();
  j["model"] = "BPE";
  EXPECT_ERROR(j, "model: expected an object");
  j = minimal();
  j["model"].erase("merges");
  EXPECT_ERROR(j, "model.merges: missing");
  j = minimal();
  j["model"]["vocab"] = Json::array();
  EXPECT_ERROR(j, "model.vocab: expected an object");
  EXPECT_ERROR(Json::array(), "x/tokenizer.json: expected a JSON object");
}

TEST(TokenizerErrors, BadMerges) {
  Json j = minimal();
  j["model"]["merges"] = {"a b", "ab"};
  EXPECT_ERROR(j, "model.merges[1]", "two tokens");
  j["model"]["merges"] = {"a b", "a  b"};
  EXPECT_ERROR(j, "model.merges[1]");
  j["model"]["merges"] = {"a c"};
  EXPECT_ERROR(j, "model.merges[0]", "'c' is not in the vocab");
  j["model"]["merges"] = {"b a"};  // "ba" missing
  EXPECT_ERROR(j, "model.merges[0]", "'ba'");
  j["model"]["merges"] = Json::array({Json::array({"a"})});
  EXPECT_ERROR(j, "model.merges[0]");
  j["model"]["merges"] = Json::array({Json::array({"a", 3})});
  EXPECT_ERROR(j, "model.merges[0][1]", "expected a string");
  j["model"]["merges"] = Json::array({7});
  EXPECT_ERROR(j, "model.merges[0]");
  j["model"]["merges"] = "a b";
  EXPECT_ERROR(j, "model.merges: expected an array");
}

TEST(TokenizerErrors, BadIds) {
  Json j = minimal();
  j["model"]["vocab"]["a"] = -1;
  EXPECT_ERROR(j, "model.vocab.a", "out of range");
  j["model"]["vocab"]["a"] = "zero";
  EXPECT_ERROR(j, "model.vocab.a", "integer");
  j["model"]["vocab"]["a"] = 1e12;
  EXPECT_ERROR(j, "model.vocab.a");
  j = minimal();
  j["added_tokens"] = {{{"id", 3}}};
  EXPECT_ERROR(j, "added_tokens[0].content: missing");
  j["added_tokens"] = {{{"id", "3"}, {"content", "<x>"}}};
  EXPECT_ERROR(j, "added_tokens[0].id");
  j["added_tokens"] = {{{"id", 3}, {"content", "<x>"}, {"special", "yes"}}};
  EXPECT_ERROR(j, "added_tokens[0].special");
  j["added_tokens"] = {1, 2};
  EXPECT_ERROR(j, "added_tokens[0]: expected an object");
}

TEST(TokenizerErrors, UnsupportedPipelineParts) {
  Json j = minimal();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_ERROR(j, "pre_tokenizer.type", "'Metaspace'", "not supported");
  j["pre_tokenizer"] = nullptr;
  EXPECT_ERROR(j, "pre_tokenizer: missing");
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
  EXPECT_ERROR(j, "pre_tokenizer", "ByteLevel");
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Sideways"}};
  EXPECT_ERROR(j, "pre_tokenizer.behavior", "Sideways");
  j = minimal();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_ERROR(j, "normalizer.type", "'Lowercase'");
  j = minimal();
  j["decoder"] = {{"type", "Metaspace"}};
  EXPECT_ERROR(j, "decoder.type", "'Metaspace'");
  j = minimal();
  j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", {{"id", "<s>"}}}}}}};
  EXPECT_ERROR(j, "post_processor.special_tokens.<s>", "missing");
  j = minimal();
  j["model"]["end_of_word_suffix"] = "</w>";
  EXPECT_ERROR(j, "model.end_of_word_suffix", "not supported");
  j = minimal();
  j["model"]["dropout"] = 0.1;
  EXPECT_ERROR(j, "model.dropout");
}

TEST(TokenizerErrors, ConfigErrorsNameTheConfig) {
  std::string msg = error_of(minimal(), {{"chat_template", {1, 2}}});
  EXPECT_NE(msg.find("x/tokenizer_config.json: chat_template"), std::string::npos) << msg;
  msg = error_of(minimal(), Json::array());
  EXPECT_NE(msg.find("x/tokenizer_config.json"), std::string::npos) << msg;
}

TEST(TokenizerErrors, FilesThatAreNotJson) {
  std::string dir = test::temp_dir("tok_errors");
  std::string path = dir + "/tokenizer.json";
  std::ofstream(path) << "this is not json {";
  try {
    Tokenizer::load(path, "");
    FAIL() << "loaded garbage";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::load(dir + "/missing.json", ""), Error);
  std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {"a": 1e999}, "merges": []}})";
  EXPECT_THROW(Tokenizer::load(path, ""), Error);  // nlohmann's number overflow, not a parse_error
  std::ofstream(path) << minimal().dump();
  std::ofstream(dir + "/tokenizer_config.json") << "[1, 2";
  try {
    Tokenizer::load(path, dir + "/tokenizer_config.json");
    FAIL() << "loaded a broken config";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
  }
  EXPECT_EQ(Tokenizer::load(path, "").encode("ab"), std::vector<int32_t>{2});
}

}  // namespace
