// tokenizer.json files built to exhaust the loader or every later encode (issue 9): deep JSON,
// Sequence pipelines nested deep or listing thousands of steps, post-processors adding thousands
// of tokens to every text. Each is a kvad::Error naming the file and field, in bounded time.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

using namespace kvad;

namespace {

Json minimal_with_digit() {
  return Json::parse(R"({
    "version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "1": 3}, "merges": ["a b"]}
  })");
}

std::string encode_error_of(const Json& j) {
  try {
    Tokenizer t = Tokenizer::from_json(j, Json::object(), "x/tokenizer.json");
    t.encode("ab1ab1");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The error loading a tokenizer.json gives ("" and a test failure when it loads).
std::string load_error(const std::string& path) {
  try {
    Tokenizer::load(path, "");
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << path << " loaded";
  return "";
}

// {"type":"Sequence", key:[ ... depth levels ... [leaf] ]}
Json nested_sequence(const char* key, const Json& leaf, int depth) {
  Json j = leaf;
  for (int i = 0; i < depth; i++) j = Json{{"type", "Sequence"}, {key, Json::array({j})}};
  return j;
}

}  // namespace

TEST(TokenizerHostile, DeepJsonFileIsRefusedByTheParser) {
  std::string dir = test::temp_dir("tok_hostile");
  std::string path = dir + "/tokenizer.json";
  std::string deep;
  for (int i = 0; i < 50000; i++) deep += R"({"type":"Sequence","pretokenizers":[)";
  deep += R"({"type":"ByteLevel"})";
  for (int i = 0; i < 50000; i++) deep += "]}";
  std::string doc = minimal_with_digit().dump();
  doc.replace(doc.find(R"({"add_prefix_space")"), std::string(R"({"add_prefix_space":false,"type":"ByteLevel","use_regex":true})").size(), deep);
  std::ofstream(path) << doc;
  std::string msg = load_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg.substr(0, 300);
  EXPECT_NE(msg.find("nesting deeper than"), std::string::npos) << msg.substr(0, 300);
  EXPECT_LT(msg.size(), 1200u);
}

TEST(TokenizerHostile, NestedSequencesAreBounded) {
  Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  Json j = minimal_with_digit();
  j["pre_tokenizer"] = nested_sequence("pretokenizers", byte_level, 3);
  EXPECT_EQ(encode_error_of(j), "") << "a few levels are fine";
  j["pre_tokenizer"] = nested_sequence("pretokenizers", byte_level, 40);
  std::string msg = encode_error_of(j);
  EXPECT_NE(msg.find("x/tokenizer.json: pre_tokenizer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Sequence nested deeper than 8"), std::string::npos) << msg;
  j = minimal_with_digit();
  j["normalizer"] = nested_sequence("normalizers", Json{{"type", "NFC"}}, 40);
  EXPECT_NE(encode_error_of(j).find("normalizer"), std::string::npos) << encode_error_of(j);
  EXPECT_NE(encode_error_of(j).find("Sequence nested deeper"), std::string::npos) << encode_error_of(j);
  j = minimal_with_digit();
  j["decoder"] = nested_sequence("decoders", Json{{"type", "ByteLevel"}}, 40);
  EXPECT_NE(encode_error_of(j).find("decoder"), std::string::npos) << encode_error_of(j);
  EXPECT_NE(encode_error_of(j).find("Sequence nested deeper"), std::string::npos) << encode_error_of(j);
  j = minimal_with_digit();
  j["post_processor"] = nested_sequence("processors", Json{{"type", "ByteLevel"}}, 40);
  EXPECT_NE(encode_error_of(j).find("post_processor"), std::string::npos) << encode_error_of(j);
  EXPECT_NE(encode_error_of(j).find("Sequence nested deeper"), std::string::npos) << encode_error_of(j);
}

TEST(TokenizerHostile, WidePipelinesAreBounded) {
  auto t0 = std::chrono::steady_clock::now();
  // 200000 Digits steps: each encode would recurse once per step per piece (a stack overflow).
  Json steps = Json::array();
  for (int i = 0; i < 200000; i++) steps.push_back({{"type", "Digits"}});
  steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}});
  Json j = minimal_with_digit();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
  std::string msg = encode_error_of(j);
  EXPECT_NE(msg.find("pre_tokenizer.pretokenizers: more than 64 steps"), std::string::npos) << msg.substr(0, 300);
  Json forms = Json::array();
  for (int i = 0; i < 100000; i++) forms.push_back({{"type", "NFC"}});
  j = minimal_with_digit();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", forms}};
  EXPECT_NE(encode_error_of(j).find("more than 64 steps"), std::string::npos);
  // A post-processor that adds 100000 tokens to every text.
  Json ids = Json::array();
  for (int i = 0; i < 100000; i++) ids.push_back(0);
  j = minimal_with_digit();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "a"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                         {"special_tokens", {{"a", {{"id", "a"}, {"ids", ids}}}}}};
  msg = encode_error_of(j);
  EXPECT_NE(msg.find("post_processor.special_tokens.a.ids: more than 64 ids"), std::string::npos) << msg;
  Json many = Json::array();
  for (int i = 0; i < 60; i++)
    many.push_back({{"type", "TemplateProcessing"},
                    {"single", {{{"SpecialToken", {{"id", "a"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                    {"special_tokens", {{"a", {{"id", "a"}, {"ids", {0, 0}}}}}}});
  j = minimal_with_digit();
  j["post_processor"] = {{"type", "Sequence"}, {"processors", many}};
  EXPECT_NE(encode_error_of(j).find("special tokens to every text"), std::string::npos) << encode_error_of(j);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

// Prepend applies to every stretch between added tokens and Replace to every match: a long
// insertion would multiply every text (a 1 MB Prepend x 10,000 added tokens in a prompt = 10 GB).
TEST(TokenizerHostile, InsertedTextIsBounded) {
  std::string big(100000, 'x');
  Json j = minimal_with_digit();
  j["normalizer"] = {{"type", "Prepend"}, {"prepend", big}};
  std::string msg = encode_error_of(j);
  EXPECT_NE(msg.find("normalizer.prepend: is 100000 bytes long (at most 256)"), std::string::npos) << msg.substr(0, 300);
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", big}};
  EXPECT_NE(encode_error_of(j).find("normalizer.content: is 100000 bytes"), std::string::npos) << encode_error_of(j).substr(0, 300);
  j = minimal_with_digit();
  j["decoder"] = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", big}};
  EXPECT_NE(encode_error_of(j).find("decoder.content"), std::string::npos) << encode_error_of(j).substr(0, 300);
  j["decoder"] = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(256, 'y')}};
  EXPECT_EQ(encode_error_of(j), "");  // up to the bound is fine
}

TEST(TokenizerHostile, OverflowingNumberNamesFileAndField) {
  std::string dir = test::temp_dir("tok_hostile_num");
  std::string path = dir + "/tokenizer.json";
  std::string doc = minimal_with_digit().dump();
  doc.replace(doc.find("\"ab\":2"), 6, "\"ab\":1e999");
  std::ofstream(path) << doc;
  std::string msg = load_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.vocab.ab"), std::string::npos) << msg;
}
