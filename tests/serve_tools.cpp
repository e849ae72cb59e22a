// Tool calling: the request fields (tools, tool_choice, past calls and tool turns) as the chat
// template gets them, checked against Python Jinja2's renderings of real templates (the goldens of
// tools/make_chat_goldens.py, sent here the way OpenAI clients send them: arguments as JSON text);
// the answer's calls parsed whole and streamed; the grammar of a forced call.
#include <gtest/gtest.h>

#include "core/fs.h"
#include "grammar/grammar.h"
#include "serve/ollama.h"
#include "serve/openai.h"
#include "serve/tool_calls.h"
#include "serve/tool_request.h"
#include "test_support.h"
#include "tokenizer/chat_template.h"

using namespace kvad;
using namespace kvad::serve;

namespace {

std::string slurp(const std::string& rel) { return read_file(test::source_path(rel)); }

HttpError tools_chat_error(const std::string& body) {
  try {
    parse_chat_request(body);
  } catch (const HttpError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return HttpError(0, "");
}

const char* kTool = R"({"type":"function","function":{"name":"get_weather","description":"Weather now",
  "parameters":{"type":"object","properties":{"location":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["location"]}}})";
std::string with_tools(const std::string& rest) {
  return std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":[)") + kTool + "]" + rest + "}";
}

// A golden's messages as an OpenAI client sends them: call arguments as JSON text.
OrderedJson openai_messages(const OrderedJson& messages) {
  OrderedJson out = messages;
  for (auto& m : out)
    if (m.contains("tool_calls"))
      for (auto& c : m["tool_calls"])
        if (c["function"]["arguments"].is_object()) c["function"]["arguments"] = c["function"]["arguments"].dump();
  return out;
}

// Only what the OpenAI API can say: string (or null) content, the roles it has, no extra kwargs.
bool openai_expressible(const OrderedJson& c) {
  if (c.contains("error")) return false;
  for (auto it = c["kwargs"].begin(); it != c["kwargs"].end(); ++it)
    if (it.key() != "add_generation_prompt" && it.key() != "tools" && it.key() != "bos_token" && it.key() != "eos_token")
      return false;
  for (const auto& m : c["messages"]) {
    if (!m["content"].is_string() && !m["content"].is_null()) return false;
    if (m.contains("reasoning_content") || m["role"] == "ipython") return false;
    if (m.contains("tool_calls"))
      for (const auto& t : m["tool_calls"])
        if (!t["function"]["arguments"].is_object()) return false;
  }
  return true;
}

}  // namespace

// The request's messages and tools, rendered by the model's template as the server renders them,
// equal Python Jinja2's rendering of the same conversation through transformers.
TEST(ServeTools, RequestRendersLikeTransformers) {
  int checked = 0;
  for (const char* name : {"qwen2.5-7b-instruct", "qwen3", "llama-3.1-8b-instruct", "llama-3.2-1b-instruct"}) {
    ChatTemplate tpl(slurp(std::string("tests/fixtures/chat_templates/") + name + ".jinja"), name);
    auto golden = OrderedJson::parse(slurp(std::string("tests/fixtures/chat_goldens/") + name + ".json"));
    for (const auto& c : golden["cases"]) {
      if (!openai_expressible(c) || !c["kwargs"].contains("tools")) continue;
      OrderedJson body = {{"messages", openai_messages(c["messages"])}, {"tools", c["kwargs"]["tools"]}};
      GenRequest r = parse_chat_request(body.dump());
      OrderedJson extra = {{"tools", r.tools}, {"__kvad_now", golden["now"]}};
      bool agp = c["kwargs"].value("add_generation_prompt", false);
      const auto& kw = c["kwargs"];
      EXPECT_EQ(tpl.render(r.messages, agp, kw.value("bos_token", ""), kw.value("eos_token", ""), extra),
                c["expected"].get<std::string>())
          << name << "/" << c["name"];
      checked++;
    }
  }
  EXPECT_GE(checked, 10);
}

TEST(ServeTools, RequestFields) {
  GenRequest r = parse_chat_request(with_tools(R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false)"));
  ASSERT_EQ(r.tool_specs.size(), 1u);
  EXPECT_EQ(r.tool_specs[0].name, "get_weather");
  EXPECT_EQ(r.tool_choice, GenRequest::ToolChoice::Named);
  EXPECT_FALSE(r.parallel_tool_calls);
  // The schema keeps the client's key order (templates show it with tojson).
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"].begin().key(), "location");
  EXPECT_EQ(parse_chat_request(with_tools(R"(,"tool_choice":"required")")).tool_choice, GenRequest::ToolChoice::Required);
  EXPECT_EQ(parse_chat_request(with_tools(R"(,"tool_choice":"none")")).tool_choice, GenRequest::ToolChoice::None);
  EXPECT_EQ(parse_chat_request(with_tools("")).tool_choice, GenRequest::ToolChoice::Auto);
  EXPECT_TRUE(parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}],"tools":[]})").tools.is_null());
}

TEST(ServeTools, PastCallsAndToolTurns) {
  GenRequest r = parse_chat_request(R"({"messages":[{"role":"user","content":"hi"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"b\": 1, \"a\": [2]}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"42"}]})");
  const OrderedJson& a = r.messages[1];
  EXPECT_EQ(a["content"], "");  // null: Qwen3's template tests '</think>' in it, which None fails
  EXPECT_EQ(a["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(a["tool_calls"][0]["function"]["arguments"].dump(), R"({"b":1,"a":[2]})");  // an object, in order
  EXPECT_EQ(r.messages[2]["tool_call_id"], "call_1");
  EXPECT_EQ(r.messages[2]["content"], "42");
}

TEST(ServeTools, RefusalsNameTheField) {
  EXPECT_EQ(tools_chat_error(R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"description":"x"}}]})").param,
            "tools[0].function.name");
  EXPECT_EQ(tools_chat_error(R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a b"}}]})").param,
            "tools[0].function.name");
  EXPECT_EQ(tools_chat_error(R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"retrieval"}]})").param, "tools[0].type");
  EXPECT_EQ(tools_chat_error(R"({"messages":[{"role":"user","content":"hi"}],"tools":{}})").param, "tools");
  // A schema is compiled where the call is forced; under auto it is only shown to the model.
  const std::string loose = R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","patternProperties":{}}}}])";
  EXPECT_EQ(parse_chat_request(loose + "}").tool_specs.size(), 1u);
  HttpError e = tools_chat_error(loose + R"(,"tool_choice":"required"})");
  EXPECT_EQ(e.param, "tools[0].function.parameters");
  EXPECT_NE(std::string(e.what()).find("patternProperties"), std::string::npos) << e.what();
  EXPECT_EQ(tools_chat_error(with_tools(R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})")).param, "tool_choice.function.name");
  EXPECT_EQ(tools_chat_error(with_tools(R"(,"tool_choice":"sometimes")")).param, "tool_choice");
  EXPECT_EQ(tools_chat_error(R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"required"})").param, "tool_choice");
  EXPECT_EQ(tools_chat_error(with_tools(R"(,"tool_choice":"required","response_format":{"type":"json_object"})")).param, "tool_choice");
  EXPECT_EQ(tools_chat_error(with_tools(R"(,"parallel_tool_calls":1)")).param, "parallel_tool_calls");
  std::string two = std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":[)") + kTool + "," + kTool + "]}";
  EXPECT_EQ(tools_chat_error(two).param, "tools[1].function.name");  // two functions of one name
}

TEST(ServeTools, PastCallRefusals) {
  EXPECT_EQ(tools_chat_error(R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{not json"}}]}]})").param,
            "messages[0].tool_calls[0].function.arguments");
  EXPECT_EQ(tools_chat_error(R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"arguments":"{}"}}]}]})").param,
            "messages[0].tool_calls[0].function.name");
  EXPECT_EQ(tools_chat_error(R"({"messages":[{"role":"user","content":"x","tool_calls":[{"function":{"name":"f"}}]}]})").param, "messages[0].tool_calls");
  EXPECT_FALSE(parse_chat_request(R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})").messages[0].contains("tool_calls"));
}

TEST(ServeTools, FamilyFromTheTemplate) {
  EXPECT_EQ(tool_family(slurp("tests/fixtures/chat_templates/qwen2.5-7b-instruct.jinja")), ToolFamily::Hermes);
  EXPECT_EQ(tool_family(slurp("tests/fixtures/chat_templates/qwen3.jinja")), ToolFamily::Hermes);
  EXPECT_EQ(tool_family(slurp("tests/fixtures/chat_templates/llama-3.1-8b-instruct.jinja")), ToolFamily::Llama3);
  EXPECT_EQ(tool_family(slurp("tests/fixtures/chat_templates/llama-3.2-1b-instruct.jinja")), ToolFamily::Llama3);
  EXPECT_EQ(tool_family(slurp("tests/fixtures/chat_templates/llama-3-instruct.jinja")), ToolFamily::None);
  EXPECT_EQ(tool_family(slurp("tests/fixtures/chat_templates/chatml-default.jinja")), ToolFamily::None);
}

TEST(ServeTools, HermesWhole) {
  ParsedAnswer a = parse_tool_calls(ToolFamily::Hermes,
                                    "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n"
                                    "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {}}\n</tool_call>");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.content, "Let me check.");
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, R"({"location":"Paris","unit":"c"})");  // the model's key order
  EXPECT_EQ(a.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(a.calls[0].id.size(), 29u);
  EXPECT_NE(a.calls[0].id, a.calls[1].id);
  EXPECT_EQ(a.calls[1].arguments, "{}");
}

TEST(ServeTools, MalformedCallsStayContent) {
  for (const char* text : {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>",  // unclosed object
                           "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                          // no name
                           "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",         // not an object
                           "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n",                       // never closed
                           "I would call <tool_call> but no.", "plain text"}) {
    ParsedAnswer a = parse_tool_calls(ToolFamily::Hermes, text);
    EXPECT_TRUE(a.calls.empty()) << text;
    EXPECT_EQ(a.content, text);
  }
  ParsedAnswer a = parse_tool_calls(ToolFamily::Hermes, "<tool_call>\nnope\n</tool_call><tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, R"({"x":1})");  // arguments written as JSON text are read too
  EXPECT_EQ(a.content, "<tool_call>\nnope\n</tool_call>");
}

TEST(ServeTools, Llama3Whole) {
  ParsedAnswer a = parse_tool_calls(ToolFamily::Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, R"({"location":"Paris"})");
  EXPECT_EQ(a.content, "");
  a = parse_tool_calls(ToolFamily::Llama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "f");
  for (const char* text : {"The answer is {\"name\": \"f\"}", "{\"name\": \"f\", \"parameters\": {", "{\"x\": 1}"}) {
    a = parse_tool_calls(ToolFamily::Llama3, text);
    EXPECT_TRUE(a.calls.empty()) << text;
    EXPECT_EQ(a.content, text);
  }
  EXPECT_EQ(parse_tool_calls(ToolFamily::None, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>").calls.size(), 0u);
}

namespace {

// The text fed in pieces of `step` bytes: the content sent and the calls, as a stream delivers them.
ParsedAnswer streamed(ToolFamily f, const std::string& text, size_t step) {
  ToolCallStream s(f);
  ParsedAnswer out;
  auto take = [&](std::vector<ToolCallStream::Piece> ps) {
    for (auto& p : ps) {
      if (p.call) out.calls.push_back(*p.call);
      else out.content += p.content;
    }
  };
  for (size_t i = 0; i < text.size(); i += step) take(s.feed(text.substr(i, step)));
  take(s.finish());
  return out;
}

}  // namespace

TEST(ServeTools, StreamedEqualsWhole) {
  const std::vector<std::pair<ToolFamily, std::string>> texts = {
      {ToolFamily::Hermes, "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"<tool_call>\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>"},
      {ToolFamily::Hermes, "text <tool_c then more < and <tool_call>broken</tool_call> end <tool_"},
      {ToolFamily::Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n"},
      {ToolFamily::Llama3, "  <|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": [1, 2]}}"},
      {ToolFamily::Llama3, "<|python_ta"},
      {ToolFamily::Llama3, "Hello {\"name\": \"a\", \"parameters\": {}}"},
  };
  for (const auto& [f, text] : texts)
    for (size_t step : {1, 2, 3, 7, 1000}) {
      ParsedAnswer whole = parse_tool_calls(f, text), s = streamed(f, text, step);
      ASSERT_EQ(s.calls.size(), whole.calls.size()) << text << " step " << step;
      for (size_t i = 0; i < s.calls.size(); i++) {
        EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments);
      }
      if (whole.calls.empty()) {
        EXPECT_EQ(s.content, text) << "step " << step;
      }
    }
}

TEST(ServeTools, StreamSendsProseAtOnce) {
  ToolCallStream s(ToolFamily::Hermes);
  auto ps = s.feed("Hello there <tool");
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].content, "Hello there ");  // "<tool" may open a call: held
  ps = s.feed("s are fun");
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].content, "<tools are fun");
  ToolCallStream l(ToolFamily::Llama3);
  EXPECT_EQ(l.feed("Hi").at(0).content, "Hi");  // prose from the first character: not a call
}

TEST(ServeTools, ForcedCallGrammar) {
  std::vector<ToolSpec> tools = {
      {"get_weather", OrderedJson::parse(R"({"type":"object","properties":{"location":{"type":"string"},"when":{"type":"string","format":"date"}},"required":["location","when"],"additionalProperties":false})")},
      {"count", OrderedJson::parse(R"({"type":"object","properties":{"n":{"type":"integer"},"d":{"type":"string","format":"date"}},"required":["n"],"additionalProperties":false})")},
      {"free", OrderedJson::object()}};
  auto g = grammar::compile_gbnf(tool_call_gbnf(ToolFamily::Hermes, tools, true));
  auto accepts = [&](const std::string& t) { return grammar::grammar_accepts(*g.grammar, t); };
  EXPECT_TRUE(accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"when\": \"2024-02-29\"}}\n</tool_call>"));
  EXPECT_TRUE(accepts("<tool_call>\n{\"name\": \"count\", \"arguments\": {\"n\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"free\", \"arguments\": {\"z\": [1]}}\n</tool_call>"));
  EXPECT_FALSE(accepts("<tool_call>\n{\"name\": \"count\", \"arguments\": {\"n\": \"3\"}}\n</tool_call>"));  // schema
  EXPECT_FALSE(accepts("<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));             // unknown name
  EXPECT_FALSE(accepts("hello"));
  auto one = grammar::compile_gbnf(tool_call_gbnf(ToolFamily::Hermes, tools, false));
  EXPECT_FALSE(grammar::grammar_accepts(*one.grammar, "<tool_call>\n{\"name\": \"count\", \"arguments\": {\"n\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"count\", \"arguments\": {\"n\": 3}}\n</tool_call>"));
  auto llama = grammar::compile_gbnf(tool_call_gbnf(ToolFamily::Llama3, {tools[1]}, true));
  EXPECT_TRUE(grammar::grammar_accepts(*llama.grammar, "{\"name\": \"count\", \"parameters\": {\"n\": -2}}"));
  EXPECT_FALSE(grammar::grammar_accepts(*llama.grammar, "{\"name\": \"count\", \"arguments\": {\"n\": -2}}"));
}

TEST(ServeTools, PrepareForcesACallInTheFamilysSyntax) {
  GenRequest r = parse_chat_request(with_tools(R"(,"tool_choice":"required")"));
  GenerateOptions opts;
  EXPECT_EQ(prepare_tools(r, slurp("tests/fixtures/chat_templates/qwen3.jinja"), opts), ToolFamily::Hermes);
  ASSERT_TRUE(opts.constraint.grammar);
  EXPECT_TRUE(grammar::grammar_accepts(*opts.constraint.grammar,
                                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"x\"}}\n</tool_call>"));
  GenerateOptions none;
  try {
    prepare_tools(r, slurp("tests/fixtures/chat_templates/chatml-default.jinja"), none);
    ADD_FAILURE() << "no error";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.param, "tool_choice");
  }
  GenRequest n = parse_chat_request(with_tools(R"(,"tool_choice":"none")"));
  EXPECT_EQ(prepare_tools(n, slurp("tests/fixtures/chat_templates/qwen3.jinja"), none), ToolFamily::None);
  EXPECT_FALSE(none.constraint.grammar);
}

// Ollama's /api/chat: OpenAI's tools, past calls with object arguments, a tool turn's tool_name;
// /api/generate has no tools.
TEST(ServeTools, OllamaChat) {
  OllamaRequest q = parse_ollama_chat(std::string(R"({"model":"m","tools":[)") + kTool + R"(],"messages":[{"role":"user","content":"hi"},
    {"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"location":"Paris"}}}]},
    {"role":"tool","content":"22","tool_name":"get_weather"}]})");
  ASSERT_EQ(q.gen.tool_specs.size(), 1u);
  EXPECT_EQ(q.gen.messages[1]["tool_calls"][0]["function"]["arguments"]["location"], "Paris");
  EXPECT_EQ(q.gen.messages[2]["name"], "get_weather");
  try {
    parse_ollama_generate(std::string(R"({"model":"m","prompt":"x","tools":[)") + kTool + "]}");
    ADD_FAILURE() << "generate took tools";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.param, "tools");
  }
  Json calls = ollama_tool_calls({ToolCall{"call_x", "f", R"({"a":[1]})"}});
  EXPECT_EQ(calls.dump(), R"([{"function":{"arguments":{"a":[1]},"name":"f"}}])");
}
