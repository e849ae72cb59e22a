// The OpenAI request parser (and Ollama's structured-output field) and response builders: every field's checks, in isolation.
#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "serve/ollama.h"
#include "serve/openai.h"
#include "serve/structured_output.h"

using namespace kvad;
using namespace kvad::serve;

namespace {

// The error a parser throws for `body`.
template <typename Parse>
HttpError error_of(Parse parse, const std::string& body) {
  try {
    parse(body);
  } catch (const HttpError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return HttpError(0, "");
}

HttpError chat_error(const std::string& body) { return error_of(parse_chat_request, body); }
HttpError ollama_chat_error(const std::string& body) { return error_of(parse_ollama_chat, body); }

const char* kMsg = R"("messages":[{"role":"user","content":"hi"}])";

// The text the request's constraint admits (empty constraint: none is asked for, so false).
bool admits(const GenRequest& r, const std::string& text) {
  return r.constraint.grammar && grammar::grammar_accepts(*r.constraint.grammar, text);
}

}  // namespace

TEST(ServeOpenai, ChatDefaultsAreOpenAIs) {
  GenRequest r = parse_chat_request(std::string("{") + kMsg + "}");
  EXPECT_TRUE(r.chat);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.messages.size(), 1u);
}

TEST(ServeOpenai, ChatFields) {
  GenRequest r = parse_chat_request(R"({"model":"m","messages":[{"role":"developer","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":null}],
      "stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":7,"temperature":0.5,"top_p":0.9,
      "seed":42,"stop":["x","y"],"presence_penalty":0.5,"frequency_penalty":-0.5,"logprobs":true,"top_logprobs":3,"n":1})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
}

TEST(ServeOpenai, ChatErrorsNameTheField) {
  EXPECT_EQ(chat_error("{").code, "invalid_json");
  EXPECT_EQ(chat_error("[]").status, 400);
  EXPECT_EQ(chat_error("{}").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages":[]})").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user"}]})").param, "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"robot","content":"x"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})").param, "messages[0].content");
  std::string m = std::string("{") + kMsg;
  EXPECT_EQ(chat_error(m + R"(,"temperature":"hot"})").param, "temperature");
  EXPECT_EQ(chat_error(m + R"(,"temperature":3})").param, "temperature");
  EXPECT_EQ(chat_error(m + R"(,"top_p":-1})").param, "top_p");
  EXPECT_EQ(chat_error(m + R"(,"max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(chat_error(m + R"(,"max_tokens":1.5})").param, "max_tokens");
  EXPECT_EQ(chat_error(m + R"(,"stop":["a","b","c","d","e"]})").param, "stop");
  EXPECT_EQ(chat_error(m + R"(,"stop":[1]})").param, "stop");
  EXPECT_EQ(chat_error(m + R"(,"n":0})").param, "n");
  EXPECT_EQ(chat_error(m + R"(,"n":129})").param, "n");
  EXPECT_EQ(parse_chat_request(m + R"(,"n":3})").n, 3);
  EXPECT_EQ(chat_error(m + R"(,"top_logprobs":2})").param, "top_logprobs");
  EXPECT_EQ(chat_error(m + R"(,"stream_options":{"include_usage":true}})").param, "stream_options");
  EXPECT_EQ(chat_error(m + R"(,"tools":[{"type":"function"}]})").param, "tools[0].function");  // tools: serve_tools.cpp
  EXPECT_EQ(chat_error(m + R"(,"seed":"x"})").param, "seed");
}

TEST(ServeOpenai, CompletionPrompts) {
  EXPECT_EQ(parse_completion_request(R"({"prompt":"abc"})").prompt, "abc");
  EXPECT_EQ(parse_completion_request(R"({"prompt":["abc"]})").prompt, "abc");
  GenRequest ids = parse_completion_request(R"({"prompt":[1,2,3],"logprobs":2})");
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(ids.logprobs);
  EXPECT_EQ(ids.top_logprobs, 2);
  EXPECT_TRUE(parse_completion_request(R"({"prompt":[[4,5]]})").prompt_is_ids);
  EXPECT_THROW(parse_completion_request(R"({"prompt":["a","b"]})"), HttpError);
  EXPECT_THROW(parse_completion_request(R"({"prompt":[-1]})"), HttpError);
  EXPECT_THROW(parse_completion_request(R"({"prompt":"a","echo":true})"), HttpError);
  EXPECT_THROW(parse_completion_request(R"({"prompt":"a","logprobs":9})"), HttpError);
}

TEST(ServeOpenai, ResponsesHaveOpenAIsShape) {
  ResponseMeta m{"chatcmpl-x", "tiny", 123};
  Usage u{10, 3, 8};
  Json r = chat_response(m, {{"hi", "stop"}, {"ho", "length"}}, false, u);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][1]["index"], 1);
  EXPECT_EQ(r["choices"][1]["message"]["content"], "ho");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["total_tokens"], 13);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  TokenOut t;
  t.id = 5;
  t.text = "\xE4\xBD";  // half a character: JSON must stay valid UTF-8, the bytes stay exact
  t.piece = "\xE4\xBD";
  t.logprob = -0.5f;
  t.top = {{"a", -0.1f}};
  std::vector<TokenOut> lp{t};
  Json c = chat_chunk(m, 3, std::nullopt, std::string("x"), std::nullopt, &lp, true, true);
  EXPECT_EQ(c["choices"][0]["index"], 3);
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_TRUE(c["usage"].is_null());
  EXPECT_EQ(c["choices"][0]["logprobs"]["content"][0]["bytes"], Json::array({0xE4, 0xBD}));
  EXPECT_NO_THROW(sse(c));
  EXPECT_EQ(sse(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
  Json e = error_json("bad", "invalid_request_error", "n");
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_TRUE(e["error"]["code"].is_null());
  Json legacy = completion_logprobs_json(lp, true, 4);
  EXPECT_EQ(legacy["text_offset"][0], 4);
}

// Issue 9: a small body nested deep crashed an HTTP thread (the value was deep-copied
// recursively); an overflowing number escaped as a 500; the invalid-JSON error echoed the body.
TEST(ServeOpenai, HostileBodiesAre400s) {
  std::string deep = std::string(200000, '[') + "1" + std::string(200000, ']');
  HttpError e(0, "");
  try {
    parse_completion_request(R"({"prompt":)" + deep + "}");
  } catch (const HttpError& x) {
    e = x;
  }
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_NE(std::string(e.what()).find("nesting deeper than 64"), std::string::npos) << e.what();
  EXPECT_LT(std::string(e.what()).size(), 600u);
  EXPECT_EQ(chat_error(std::string("{") + kMsg + R"(,"messages2":)" + deep + "}").status, 400);
  // Overflowing numbers: a 400 naming the field.
  HttpError o = chat_error(std::string("{") + kMsg + R"(,"max_tokens":1e999})");
  EXPECT_EQ(o.status, 400);
  EXPECT_EQ(o.param, "max_tokens");
  EXPECT_NE(std::string(o.what()).find("number overflow"), std::string::npos) << o.what();
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x","n":-1e400}]})").param, "messages[0].n");
  // The body is not echoed back.
  std::string secret(100000, 's');
  HttpError j = chat_error("{\"messages\": \"" + secret + "\" x}");
  EXPECT_EQ(j.code, "invalid_json");
  EXPECT_EQ(std::string(j.what()).find(std::string(200, 's')), std::string::npos);
  EXPECT_LT(std::string(j.what()).size(), 600u);
  // Up to the bound a nested value parses (a named field error comes later, if any).
  EXPECT_NO_THROW(parse_request_body("{\"a\":" + std::string(60, '[') + std::string(60, ']') + "}"));
}

// Structured outputs: each field compiles to the constraint it names, once, in the request's order
// of properties; what cannot compile is a 400 naming the field with the compiler's own message.
TEST(ServeOpenai, StructuredOutputFields) {
  std::string m = std::string("{") + kMsg;
  EXPECT_FALSE(parse_chat_request(m + R"(,"response_format":{"type":"text"}})").constraint.grammar);
  GenRequest obj = parse_chat_request(m + R"(,"response_format":{"type":"json_object"}})");
  EXPECT_EQ(obj.constraint_field, "response_format");
  EXPECT_TRUE(admits(obj, R"({"a": [1, {"b": null}]})"));
  EXPECT_FALSE(admits(obj, "[1]"));
  // Properties in the client's order (the parsed body sorts keys: the schema is read again).
  GenRequest s = parse_chat_request(m + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"p",
      "strict":true,"schema":{"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"boolean"}},
      "required":["zeta","alpha"]}}}})");
  EXPECT_EQ(s.constraint_field, "response_format.json_schema.schema");
  EXPECT_TRUE(admits(s, R"({"zeta": 1, "alpha": true})"));
  EXPECT_FALSE(admits(s, R"({"alpha": true, "zeta": 1})"));
  // No schema is the empty schema: any JSON value.
  EXPECT_TRUE(admits(parse_chat_request(m + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}}})"), "3"));
  // llama-server's fields, on both endpoints; its json_object + schema too.
  GenRequest g = parse_completion_request(R"({"prompt":"a","grammar":"root ::= \"yes\" | \"no\""})");
  EXPECT_EQ(g.constraint_field, "grammar");
  EXPECT_TRUE(admits(g, "no"));
  EXPECT_FALSE(admits(g, "maybe"));
  EXPECT_FALSE(parse_completion_request(R"({"prompt":"a","grammar":""})").constraint.grammar);
  EXPECT_TRUE(admits(parse_completion_request(R"({"prompt":"a","json_schema":{"enum":["x"]}})"), R"("x")"));
  EXPECT_TRUE(admits(parse_completion_request(R"({"prompt":"a","response_format":{"type":"json_object","schema":{"const":2}}})"), "2"));
  EXPECT_TRUE(admits(parse_chat_request(m + R"(,"json_schema":{"type":"integer"}})"), "42"));
}

TEST(ServeOpenai, StructuredOutputErrorsNameTheField) {
  std::string m = std::string("{") + kMsg;
  HttpError k = chat_error(m + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x",
      "schema":{"type":"object","properties":{"a":{"patternProperties":{}}}}}}})");
  EXPECT_EQ(k.status, 400);
  EXPECT_EQ(k.param, "response_format.json_schema.schema");
  EXPECT_STREQ(k.what(), "'response_format.json_schema.schema': json_schema: keyword 'patternProperties' is not "
                         "supported (at #/properties/a)");
  HttpError g = chat_error(m + R"(,"grammar":"root ::= foo"})");
  EXPECT_EQ(g.param, "grammar");
  EXPECT_NE(std::string(g.what()).find("'grammar': grammar: line 1, column"), std::string::npos) << g.what();
  EXPECT_NE(std::string(g.what()).find("'foo'"), std::string::npos) << g.what();
  EXPECT_EQ(chat_error(m + R"(,"json_schema":{"type":"strange"}})").param, "json_schema");
  EXPECT_EQ(chat_error(m + R"(,"json_schema":[1]})").param, "json_schema");
  EXPECT_EQ(chat_error(m + R"(,"response_format":"json"})").param, "response_format");
  EXPECT_EQ(chat_error(m + R"(,"response_format":{}})").param, "response_format.type");
  HttpError t = chat_error(m + R"(,"response_format":{"type":"xml"}})");
  EXPECT_EQ(t.param, "response_format.type");
  EXPECT_EQ(t.code, "unsupported_value");
  EXPECT_EQ(chat_error(m + R"(,"response_format":{"type":"json_schema"}})").param, "response_format.json_schema");
  EXPECT_EQ(chat_error(m + R"(,"response_format":{"type":"json_schema","json_schema":{"strict":1}}})").param,
            "response_format.json_schema.strict");
  // Two fields asking: refused, not a guess at which wins.
  HttpError two = chat_error(m + R"(,"response_format":{"type":"json_object"},"grammar":"root ::= \"a\""})");
  EXPECT_EQ(two.param, "grammar");
  EXPECT_NE(std::string(two.what()).find("'response_format' and 'grammar'"), std::string::npos) << two.what();
  // A grammar ends where it is complete: generating past EOS contradicts it.
  EXPECT_EQ(chat_error(m + R"(,"ignore_eos":true,"response_format":{"type":"json_object"}})").param, "response_format");
  // Sizes are bounded before anything is compiled.
  Json big = Json::parse(m + "}");
  big["grammar"] = "root ::= \"" + std::string(kMaxGrammarBytes, 'a') + "\"";
  HttpError b = chat_error(big.dump());
  EXPECT_EQ(b.param, "grammar");
  EXPECT_NE(std::string(b.what()).find("at most 65536"), std::string::npos) << b.what();
  Json props = Json::object();
  for (int i = 0; i < 4000; i++) props[fmt::format("p{}", i)] = {{"type", "string"}, {"description", "a field"}};
  HttpError sz = chat_error(m + R"(,"json_schema":)" + Json{{"properties", props}}.dump() + "}");
  EXPECT_EQ(sz.param, "json_schema");
  EXPECT_NE(std::string(sz.what()).find("bytes of JSON"), std::string::npos) << sz.what();
}

TEST(ServeOpenai, OllamaFormat) {
  const std::string m = R"({"model":"x","messages":[{"role":"user","content":"hi"}])";
  EXPECT_FALSE(parse_ollama_chat(m + "}").gen.constraint.grammar);
  EXPECT_FALSE(parse_ollama_chat(m + R"(,"format":""})").gen.constraint.grammar);
  GenRequest j = parse_ollama_chat(m + R"(,"format":"json"})").gen;
  EXPECT_EQ(j.constraint_field, "format");
  EXPECT_TRUE(admits(j, R"({"a": 1})"));
  GenRequest s = parse_ollama_generate(R"({"prompt":"p","format":{"type":"object","properties":{"b":{"type":"integer"},
      "a":{"type":"string"}},"required":["b","a"]}})").gen;
  EXPECT_TRUE(admits(s, R"({"b": 2, "a": "x"})"));
  EXPECT_FALSE(admits(s, R"({"a": "x", "b": 2})"));
  EXPECT_EQ(ollama_chat_error(m + R"(,"format":"yaml"})").param, "format");
  HttpError k = ollama_chat_error(m + R"(,"format":{"type":"string","pattern":"a+"}})");
  EXPECT_EQ(k.param, "format");
  EXPECT_STREQ(k.what(), "'format': json_schema: keyword 'pattern' is not supported (at #)");
  EXPECT_EQ(ollama_chat_error(m + R"(,"format":"json","options":{"num_predict":-2}})").param, "format");
}
