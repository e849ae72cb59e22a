// libFuzzer: arbitrary bytes as a chat template must render or fail with kvad::Error, never
// crash, hang or exhaust memory. Rendered with a fixed conversation that exercises the usual
// fields (system prompt, tool calls with dict arguments, tool results, reasoning_content, unicode)
// plus tools, and with tighter step/output budgets so each input stays fast.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"

namespace {

const kvad::Json& messages() {
  static const kvad::Json m = kvad::Json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Héllo 👋 \"quoted\" <tag> {{ not a template }}\n\tline"},
    {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nSure.", "reasoning_content": "hmm",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "metric": true, "x": null, "f": 1.5}}}]},
    {"role": "tool", "content": "{\"temp\": 22}"},
    {"role": "user", "content": ["part", {"type": "text", "text": "list content"}]},
    {"role": "assistant", "content": null}
  ])");
  return m;
}

const kvad::Json& extra() {
  static const kvad::Json e = kvad::Json::parse(R"({
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "enable_thinking": false, "__kvad_now": "2025-03-14T09:26:53", "builtin_tools": ["brave_search"]
  })");
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string source(reinterpret_cast<const char*>(data), size);
  // Parsing through the public API (a syntax error must be a kvad::Error)...
  try {
    kvad::ChatTemplate tpl(source, "fuzz");
  } catch (const kvad::Error&) {
  }
  // ...and rendering with the variables ChatTemplate passes, on small budgets so that runaway
  // loops and output growth trip their limits quickly (the defaults allow ~100x more).
  try {
    kvad::jinja::Template t(source, "fuzz");
    kvad::jinja::RenderOptions opts;
    opts.max_output = 1 << 16;
    opts.max_steps = 200000;
    std::tm tm{};
    opts.now = tm;
    std::vector<std::pair<std::string, kvad::jinja::Value>> vars = {
        {"messages", kvad::jinja::Value::from_json(messages())},
        {"add_generation_prompt", kvad::jinja::Value(true)},
        {"bos_token", kvad::jinja::Value("<s>")},
        {"eos_token", kvad::jinja::Value("</s>")},
        {"documents", kvad::jinja::Value::none()},
    };
    for (auto it = extra().begin(); it != extra().end(); ++it)
      if (it.key() != "__kvad_now") vars.emplace_back(it.key(), kvad::jinja::Value::from_json(it.value()));
    t.render(vars, opts);
  } catch (const kvad::Error&) {
  }
  return 0;
}
