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

// The error message of loading `j`, or "" when it loads. Both ways a tokenizer.json is read must
// say the same: from a DOM (Tokenizer::from_json, a GGUF's tokenizer) and from the file, where the
// parser hands a BPE vocab and merges to the tokenizer's tables instead of the DOM.
std::string load_error_of(const Json& j, const Json& config = Json::object()) {
  std::string from_dom, from_file;
  try {
    Tokenizer::from_json(j, config, "x/tokenizer.json");
  } catch (const Error& e) {
    from_dom = e.what();
  }
  const std::string dir = test::temp_dir("tokenizer-errors");
  std::ofstream(dir + "/tokenizer.json") << j.dump();
  std::ofstream(dir + "/tokenizer_config.json") << config.dump();
  try {
    Tokenizer::load(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  } catch (const Error& e) {
    from_file = e.what();
    for (size_t p; (p = from_file.find(dir + "/")) != std::string::npos;) from_file.replace(p, dir.size() + 1, "x/");
  }
  EXPECT_EQ(from_file, from_dom) << j.dump();
  return from_dom;
}

#define EXPECT_ERROR(j, ...)                                                                   \
  do {                                                                                         \
    std::string msg = load_error_of(j);                                                             \
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
  j["model"]["type"] = "WordPiece";
  EXPECT_ERROR(j, "x/tokenizer.json", "model.type", "'WordPiece'", "not supported", "BPE and Unigram");
  j["model"]["type"] = "WordLevel";
  EXPECT_ERROR(j, "'WordLevel'", "not supported");
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
  // The shape of a pair is checked before its elements', as HF's does.
  j["model"]["merges"] = Json::parse(R"([["a", "b"], [1, 2, 3]])");
  EXPECT_ERROR(j, "model.merges[1]", "an array of 3");
  j["model"]["merges"] = Json::parse(R"([["a", ["b"]]])");
  EXPECT_ERROR(j, "model.merges[0][1]", "expected a string, got array");
  j["model"]["merges"] = Json::parse(R"([[{"a": 1}, "b"]])");
  EXPECT_ERROR(j, "model.merges[0][0]", "expected a string, got object");
  j["model"]["merges"] = Json::parse(R"(["a b", {"a": "b"}])");
  EXPECT_ERROR(j, "model.merges[1]", "got object");
  j["model"]["merges"] = Json::parse(R"([null])");
  EXPECT_ERROR(j, "model.merges[0]", "got null");
  // A merges.txt header is not a merge, but still an element: errors after it count it.
  j["model"]["merges"] = Json::parse(R"(["#version: 0.2", "a c"])");
  EXPECT_ERROR(j, "model.merges[1]", "'c' is not in the vocab");
}

// A pair listed twice keeps its last rank and a piece listed twice its last id, as HF's maps do.
TEST(TokenizerErrors, RepeatedEntriesKeepTheLast) {
  Json j = minimal();
  j["model"]["vocab"] = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}};
  j["model"]["merges"] = {"b c", "a b", "b c"};  // "a b" now outranks "b c"
  EXPECT_EQ(load_error_of(j), "");
  EXPECT_EQ(Tokenizer::from_json(j, Json::object(), "x").encode("abc"), (std::vector<int32_t>{3, 2}));
  const std::string dir = test::temp_dir("tokenizer-repeated");
  std::string text = j.dump();
  text.replace(text.find("\"ab\":3"), 6, "\"ab\":9,\"ab\":3");  // the DOM (and HF) keep the last
  std::ofstream(dir + "/tokenizer.json") << text;
  EXPECT_EQ(Tokenizer::load(dir + "/tokenizer.json", "").encode("abc"), (std::vector<int32_t>{3, 2}));
}

TEST(TokenizerErrors, BadIds) {
  Json j = minimal();
  j["model"]["vocab"]["a"] = -1;
  EXPECT_ERROR(j, "model.vocab.a", "out of range");
  j["model"]["vocab"]["a"] = "zero";
  EXPECT_ERROR(j, "model.vocab.a", "integer");
  j["model"]["vocab"]["a"] = 1e12;
  EXPECT_ERROR(j, "model.vocab.a");
  j["model"]["vocab"]["a"] = Json::array({0});
  EXPECT_ERROR(j, "model.vocab.a", "integer", "got array");
  j["model"]["vocab"]["a"] = {{"id", 0}};
  EXPECT_ERROR(j, "model.vocab.a", "integer", "got object");
  j["model"]["vocab"]["a"] = nullptr;
  EXPECT_ERROR(j, "model.vocab.a", "integer", "got null");
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
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_ERROR(j, "pre_tokenizer.type", "'BertPreTokenizer'", "not supported");
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "WhitespaceSplit"}}}}};
  EXPECT_ERROR(j, "pre_tokenizer", "ByteLevel must be the last");
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Sideways"}};
  EXPECT_ERROR(j, "pre_tokenizer.behavior", "Sideways");
  j = minimal();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  EXPECT_ERROR(j, "normalizer.type", "'BertNormalizer'", "not supported");
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "NFKC"}}, {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}}}}};
  EXPECT_ERROR(j, "normalizer.normalizers[1].type", "'Precompiled'", "precompiled_charsmap", "not supported");
  j = minimal();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_ERROR(j, "decoder.type", "'WordPiece'", "not supported");
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

// The SentencePiece-era parts: each wrong or unsupported setting names its field.
TEST(TokenizerErrors, SentencePieceParts) {
  Json j = minimal();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}};
  EXPECT_ERROR(j, "pre_tokenizer.prepend_scheme", "'sometimes'");
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
  EXPECT_ERROR(j, "pre_tokenizer.replacement", "one character");
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"split", "yes"}};
  EXPECT_ERROR(j, "pre_tokenizer.split", "true or false");
  j = minimal();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "x"}};
  EXPECT_ERROR(j, "normalizer.pattern.String", "empty");
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "("}}}, {"content", "x"}};
  EXPECT_ERROR(j, "normalizer.pattern.Regex", "invalid regex");
  j["normalizer"] = {{"type", "Replace"}, {"content", "x"}};
  EXPECT_ERROR(j, "normalizer.pattern", "String");
  j["normalizer"] = {{"type", "Prepend"}, {"prepend", 3}};
  EXPECT_ERROR(j, "normalizer.prepend", "expected a string");
  j = minimal();
  auto decoders = [](Json list) { return Json{{"type", "Sequence"}, {"decoders", std::move(list)}}; };
  j["decoder"] = decoders({{{"type", "Fuse"}}, {{"type", "ByteFallback"}}});
  EXPECT_ERROR(j, "decoder.decoders[1].type", "ByteFallback after Fuse");
  j["decoder"] = decoders({{{"type", "Fuse"}}, {{"type", "Strip"}, {"content", " "}, {"start", 0}, {"stop", 1}}});
  EXPECT_ERROR(j, "decoder.decoders[1].stop", "end of the text");
  j["decoder"] = decoders({{{"type", "Fuse"}}, {{"type", "Replace"}, {"pattern", {{"String", "ab"}}}, {"content", ""}}});
  EXPECT_ERROR(j, "decoder.decoders[1].pattern", "one-character");
  j["decoder"] = decoders({{{"type", "Fuse"}}, {{"type", "Strip"}, {"content", " "}, {"start", 1}}, {{"type", "ByteLevel"}}});
  EXPECT_ERROR(j, "decoder.decoders[2]", "after a Strip at the start");
  j["decoder"] = decoders({{{"type", "Strip"}, {"content", "xy"}, {"start", 1}}});
  EXPECT_ERROR(j, "decoder.decoders[0].content", "one character");
  j["decoder"] = decoders({{{"type", "Strip"}, {"content", " "}, {"start", -1}}});
  EXPECT_ERROR(j, "decoder.decoders[0].start", "non-negative");
}

TEST(TokenizerErrors, BadUnigramModels) {
  Json j = minimal();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  j["decoder"] = {{"type", "Metaspace"}};
  // (Json::parse: an initializer list of [string, x] pairs would be an object.)
  j["model"] = {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", Json::parse(R"([["<unk>", 0.0], ["\u2581a", -1.0]])")}};
  EXPECT_EQ(load_error_of(j), "");
  j["model"]["vocab"] = Json::parse(R"([["<unk>", 0.0], ["a", "high"]])");
  EXPECT_ERROR(j, "model.vocab[1][1]", "expected a number");
  j["model"]["vocab"] = Json::parse(R"([["<unk>", 0.0], ["a"]])");
  EXPECT_ERROR(j, "model.vocab[1]", "[piece, score]");
  j["model"]["vocab"] = Json::array();
  EXPECT_ERROR(j, "model.vocab", "empty");
  j["model"]["vocab"] = {{"a", 1}};
  EXPECT_ERROR(j, "model.vocab", "expected an array of [piece, score]");
  j["model"]["vocab"] = Json::parse(R"([["<unk>", 0.0], ["a", -1.0]])");
  j["model"]["unk_id"] = 2;
  EXPECT_ERROR(j, "model.unk_id", "not in the vocab");
  j["model"].erase("unk_id");
  EXPECT_ERROR(j, "model.unk_id", "missing");
  j["model"]["unk_id"] = 0;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}};
  EXPECT_ERROR(j, "x/tokenizer.json: model", "Unigram model after a ByteLevel");
}

TEST(TokenizerErrors, ConfigErrorsNameTheConfig) {
  std::string msg = load_error_of(minimal(), {{"chat_template", {1, 2}}});
  EXPECT_NE(msg.find("x/tokenizer_config.json: chat_template"), std::string::npos) << msg;
  msg = load_error_of(minimal(), Json::array());
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
