// Tool calling on the request side: OpenAI's `tools`, `tool_choice` and `parallel_tool_calls`, the
// tool_calls of past assistant turns and the `tool` turns answering them, read into what the chat
// template gets (as transformers' apply_chat_template passes them: tools as the client wrote them,
// call arguments as objects), and the grammar that forces a call. The answer side is tool_calls.h.
#pragma once
#include <string>

#include "core/json.h"
#include "runtime/generate.h"
#include "serve/openai.h"

namespace kvad::serve {

// The request's tools, tool_choice and parallel_tool_calls into r. When a call is forced (required
// or named) each offered schema is compiled once, so one the grammar cannot hold is refused naming
// its field; under auto they only reach the template. Throws HttpError(400) naming the field. `body` is re-read
// in key order: a template shows the schemas with tojson, in the client's order.
void parse_openai_tools(const Json& j, const std::string& body, GenRequest& r);

// A chat message's tool fields into `out` (the message the template gets): an assistant turn's
// tool_calls with their arguments parsed into objects, a tool turn's
// tool_call_id and name. `i` names the message in errors.
void read_message_tool_fields(const Json& m, size_t i, OrderedJson& out);

// How an answer's calls are read for this request on this model (None: not at all), and with
// tool_choice required or named the grammar that makes the answer a call, into opts.constraint.
// Throws HttpError(400) when a call is forced but the template has no call syntax kvad knows.
ToolFamily prepare_tools(const GenRequest& r, const std::string& template_source, GenerateOptions& opts);

}  // namespace kvad::serve
