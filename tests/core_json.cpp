// Outside JSON is parsed with its depth and size bounded, and errors quote a short prefix of a
// bad value without recursing into it (issue 9: deep or huge values crashed listing and loading).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "core/json.h"
#include "test_support.h"

using namespace kvad;
using test::error_of;

namespace {

std::string nested_arrays(size_t depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

// A value nested `depth` levels, built without recursion (as a hostile caller could).
Json deep_value(size_t depth) {
  Json root = Json::array();
  Json* p = &root;
  for (size_t i = 0; i < depth; i++) {
    p->push_back(Json::array());
    p = &(*p)[0];
  }
  return root;
}

}  // namespace

TEST(CoreJson, DeepNestingIsRefusedAtParseTime) {
  for (size_t depth : {129ul, 5000ul, 200000ul}) {
    std::string msg = error_of([&] { parse_json(nested_arrays(depth), "deep.json"); });
    EXPECT_NE(msg.find("deep.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nesting deeper than 128"), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 600u) << "the message must not echo the input";
  }
  std::string objects;
  for (int i = 0; i < 100000; i++) objects += "{\"a\":";
  objects += "1" + std::string(100000, '}');
  EXPECT_NE(error_of([&] { parse_json(objects, "obj.json"); }).find("nesting deeper"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_ordered_json(nested_arrays(100000), "req"); }).find("nesting deeper"),
            std::string::npos);
  // At the bound it parses, and the limit is configurable.
  EXPECT_NO_THROW(parse_json(nested_arrays(128), "ok"));
  EXPECT_THROW(parse_json(nested_arrays(9), "x", JsonLimits{8}), Error);
}

TEST(CoreJson, ErrorsNameThePathAndDoNotEchoTheInput) {
  std::string msg = error_of([] { parse_json(R"({"messages":[{"a":1},{"max_tokens":1e999}]})", "body"); });
  EXPECT_NE(msg.find("number overflow"), std::string::npos) << msg;
  EXPECT_NE(msg.find("messages[1].max_tokens"), std::string::npos) << msg;
  // A syntax error after a huge string token: the message stays short.
  std::string big = "{\"k\": \"" + std::string(1 << 20, 'x') + "\" oops}";
  msg = error_of([&] { parse_json(big, "big"); });
  EXPECT_NE(msg.find("big: invalid JSON"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 600u);
}

TEST(CoreJson, SizeIsBoundedBeforeReading) {
  EXPECT_NE(error_of([] { parse_json("[1,2,3]", "small", JsonLimits{128, 4}); }).find("more than the 4"),
            std::string::npos);
  std::string path = ::testing::TempDir() + "/kvad_core_json_big.json";
  {
    std::ofstream f(path);
    f << "[" << std::string(1000, ' ') << "]";
  }
  std::string msg = error_of([&] { read_json_file(path, JsonLimits{128, 100}); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("1002 bytes"), std::string::npos) << msg;
  std::remove(path.c_str());
}

TEST(CoreJson, SnippetIsShortAndIterativeOnAnyValue) {
  Json deep = deep_value(1000000);  // dump() would overflow the stack here
  auto t0 = std::chrono::steady_clock::now();
  std::string s = json_snippet(deep, 40);
  EXPECT_LE(s.size(), 43u);
  EXPECT_EQ(s.substr(0, 10), "[[[[[[[[[[");
  EXPECT_EQ(s.substr(s.size() - 3), "...");
  Json wide = Json::array();
  for (int i = 0; i < 200000; i++) wide.push_back(i);
  s = json_snippet(wide, 20);
  EXPECT_EQ(s, "[0,1,2,3,4,5,6,7,8,9...");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "the snippet must not walk the whole value";
  EXPECT_EQ(json_snippet(Json::parse(R"({"a":[1,"x"],"b":null})")), R"({"a":[1,"x"],"b":null})");
  s = json_snippet(Json(std::string(100000, 'y')), 10);
  EXPECT_EQ(s, "\"yyyyyyyyyy...\"");
  EXPECT_EQ(json_snippet(Json(std::string("\xC3\xA9\xC3\xA9")), 3), "\"\xC3\xA9...\"");  // no cut code point
  EXPECT_EQ(json_snippet(Json(std::string("\xFF"))), "\"\xEF\xBF\xBD\"");                  // invalid UTF-8 replaced
}

TEST(CoreJson, FieldErrorsQuoteAPrefix) {
  Json j = Json::object();
  j["n"] = deep_value(500000);
  std::string msg = error_of([&] { json_int(j, "n", "config.json"); });
  EXPECT_NE(msg.find("config.json: field 'n' must be an integer"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 200u);
  j["s"] = std::string(1 << 20, 'z');
  EXPECT_LT(error_of([&] { json_bool_or(j, "s", false, "config.json"); }).size(), 200u);
}

TEST(CoreJson, IntegersOutOfRangeAreErrorsNotWraps) {
  Json j = Json::parse(R"({"big":18446744073709551615,"f":1e300,"frac":2.5,"ok":7.0,"neg":-3})");
  EXPECT_NE(error_of([&] { json_int(j, "big", "c"); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { json_int(j, "f", "c"); }).find("must be an integer"), std::string::npos);
  EXPECT_THROW(json_int(j, "frac", "c"), Error);
  EXPECT_EQ(json_int(j, "ok", "c"), 7);
  EXPECT_EQ(json_int(j, "neg", "c"), -3);
}

// Memory amplification (issue 9): `{}` costs 3 bytes of text and ~80 bytes of DOM.
TEST(CoreJson, MemoryAmplificationIsBounded) {
  std::string empties = "[";
  for (int i = 0; i < 3000000; i++) empties += "{},";
  empties.back() = ']';
  std::string msg = error_of([&] { parse_json(empties, "header"); });
  EXPECT_NE(msg.find("header: invalid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MB of memory"), std::string::npos) << msg;
  // A realistic document of the same size parses (a safetensors header: ~6x its text).
  std::string st = "{";
  for (int i = 0; i < 60000; i++)
    st += "\"model.layers." + std::to_string(i) +
          ".mlp.up_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[4096,11008],\"data_offsets\":[1234567890,1234567899]},";
  st.back() = '}';
  EXPECT_NO_THROW(parse_json(st, "st", JsonLimits{128, st.size(), 12 * st.size()}));
  EXPECT_THROW(parse_json(st, "st", JsonLimits{128, st.size(), 2 * st.size()}), Error);
}

namespace {

// Writes the events of the containers it takes as text, to compare with the input.
struct RecordingReader : JsonSideReader {
  std::vector<std::string> wanted;  // the key path to take
  std::string events;
  std::vector<std::string> offered;
  bool take(std::span<const std::string_view> keys, bool array) override {
    std::string path;
    for (std::string_view k : keys) path += "/" + std::string(k);
    offered.push_back(path + (array ? "[" : "{"));
    if (keys.size() != wanted.size() || !std::equal(keys.begin(), keys.end(), wanted.begin())) return false;
    events += array ? "[" : "{";
    return true;
  }
  void start(bool array) override { events += array ? "[" : "{"; }
  void end() override { events += "."; }
  void key(std::string& k) override { events += k + ":"; }
  void string(std::string& s) override { events += "'" + s + "' "; }
  void scalar(const Json& v) override { events += v.dump() + " "; }
};

}  // namespace

// A side reader takes one container out of the DOM as it is parsed (a tokenizer's vocabulary):
// it is offered every container whose ancestors are all objects, sees every event inside the one
// it takes, and the DOM holds null in its place; the bounds still hold inside it.
TEST(CoreJson, ASideReaderTakesOneContainerOutOfTheDom) {
  const std::string text =
      R"({"a": {"b": [1, {"c": "x", "d": [true, null]}, 2.5], "e": 3}, "f": [4, {"g": 5}], "h": {"b": [6]}})";
  RecordingReader r;
  r.wanted = {"a", "b"};
  Json dom = parse_json(text, "doc", {}, &r);
  EXPECT_EQ(r.events, "[1 {c:'x' d:[true null ..2.5 .");
  EXPECT_EQ(dom, Json::parse(R"({"a": {"b": null, "e": 3}, "f": [4, {"g": 5}], "h": {"b": [6]}})"));
  // Offered: a, a/b (taken, so nothing inside it), f (an array: nothing below it), h, h/b.
  EXPECT_EQ(r.offered, (std::vector<std::string>{"/a{", "/a/b[", "/f[", "/h{", "/h/b["}));

  RecordingReader none;
  none.wanted = {"nowhere"};
  EXPECT_EQ(parse_json(text, "doc", {}, &none), Json::parse(text));

  RecordingReader deep;
  deep.wanted = {"a"};
  std::string msg = error_of([&] { parse_json(R"({"a": )" + nested_arrays(200) + "}", "deep.json", {}, &deep); });
  EXPECT_NE(msg.find("nesting deeper than 128"), std::string::npos) << msg;
  msg = error_of([&] { parse_json(R"({"a": {"b": [1, 2,]}})", "bad.json", {}, &r); });
  EXPECT_NE(msg.find("bad.json: invalid JSON"), std::string::npos) << msg;
}
