// Tool calls in a model's output: which syntax the model's chat template teaches (its family), the
// calls parsed out of a whole answer or out of a stream as it arrives, and the grammar that makes
// an answer a well-formed call (tool_choice required or named). Text that is not a well-formed call
// stays content: a model that writes "<tool_call>" and then prose has not called anything.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace kvad::serve {

enum class ToolFamily {
  None,    // the template teaches no call syntax kvad knows: calls are not parsed
  Hermes,  // Qwen2.5 / Qwen3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, several possible
  Llama3,  // Llama 3.1+: {"name": ..., "parameters": {...}} as the whole answer, maybe after <|python_tag|>
};

// Chosen from the template's text: the syntax it renders past calls in is the one the model writes.
ToolFamily tool_family(const std::string& template_source);

struct ToolCall {
  std::string id;         // "call_<24 alphanumerics>"
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI sends it
};

struct ParsedAnswer {
  std::string content;  // the text outside the calls
  std::vector<ToolCall> calls;
};

std::string new_tool_call_id();

// A whole answer.
ParsedAnswer parse_tool_calls(ToolFamily f, const std::string& text);

// The same parse over a stream: feed() each piece as it arrives and gets what can be sent now;
// finish() at the end gets the rest. Text that may still become a call is held back until it is
// known either way; a call is sent whole (id, name and arguments in one delta) once it closed.
class ToolCallStream {
 public:
  struct Piece {
    std::string content;          // when !call
    std::optional<ToolCall> call;
  };
  explicit ToolCallStream(ToolFamily f) : family_(f) {}
  std::vector<Piece> feed(const std::string& text);
  std::vector<Piece> finish();
  bool called() const { return calls_ > 0; }

 private:
  void drain(std::vector<Piece>& out, bool end);
  void content(std::vector<Piece>& out, std::string text);
  ToolFamily family_;
  std::string held_;   // text not yet sent
  bool started_ = false;  // any non-space text seen (Llama's call is the whole answer)
  bool prose_ = false;    // Llama: the answer is prose, not a call
  int calls_ = 0;
};

// One function a request offers: its name and its parameters schema, keys in the client's order.
struct ToolSpec {
  std::string name;
  OrderedJson parameters;  // {} when the client gave none: any object
};

// GBNF for an answer that is one call (or, with `parallel`, one or more) of one of `tools` in the
// family's syntax, arguments held to the tool's schema. Throws kvad::Error from the schema compiler
// naming the tool's index ("tools[1]: json_schema: ..."). f must not be None.
std::string tool_call_gbnf(ToolFamily f, const std::vector<ToolSpec>& tools, bool parallel);

}  // namespace kvad::serve
