// The OpenAI wire format: request parsing with errors that name the field, response and stream-chunk
// builders, and the error shape {"error": {"message", "type", "param", "code"}} with its HTTP status.
// Nothing here touches the engine: requests become a GenRequest, results come back as plain values.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "serve/lora_adapters.h"
#include "runtime/generate.h"
#include "serve/tool_calls.h"

namespace kvad::serve {

// An error that becomes an HTTP status and OpenAI's error object.
class HttpError : public Error {
 public:
  HttpError(int status, std::string message, std::string type = "invalid_request_error", std::string param = "",
            std::string code = "")
      : Error(message), status(status), type(std::move(type)), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string type, param, code;
};

// {"error": {...}}; param/code are null when empty.
Json error_json(const std::string& message, const std::string& type, const std::string& param = "",
                const std::string& code = "");
inline Json error_json(const HttpError& e) { return error_json(e.what(), e.type, e.param, e.code); }

// A parsed /v1/chat/completions or /v1/completions request.
struct GenRequest {
  bool chat = true;
  std::string model;            // "" = whatever is loaded
  OrderedJson messages;  // chat: [{"role","content"}] with content flattened to text, + tool_calls / tool_call_id
  std::string prompt;           // completions: text ...
  std::vector<int32_t> prompt_ids;  // ... or token ids
  bool prompt_is_ids = false;
  bool stream = false, include_usage = false;
  std::optional<int64_t> max_tokens;  // none: until the context is full
  SamplingParams sampling;            // OpenAI's defaults: temperature 1, top_p 1, no top-k / min-p
  bool seed_given = false;
  std::vector<std::string> stop;
  bool logprobs = false;
  int top_logprobs = 0;
  bool ignore_eos = false;  // vLLM's and llama.cpp's extension: generate max_tokens whatever the model says
  std::string cache_salt;   // vLLM's: prefix reuse only among requests with the same salt
  std::optional<std::vector<LoraChoice>> lora;  // llama-server's: the adapters and scales (serve/lora_adapters.h)
  std::string user;
  int64_t n = 1;  // choices
  // Structured output (structured_output.h): compiled once here, shared by the request's choices.
  grammar::Constraint constraint;  // empty: free text
  std::string constraint_field;    // the field that asked for it ("response_format.json_schema.schema", ...)
  // Tool calling (tool_request.h). The grammar of a forced call depends on the model's call syntax,
  // so it is built in prepare(); the schemas are checked here.
  OrderedJson tools;  // null: none; else the list the chat template gets, as the client wrote it
  std::vector<ToolSpec> tool_specs;
  enum class ToolChoice { Auto, None, Required, Named } tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;  // Named
  bool parallel_tool_calls = true;
};

// Every request body of every route is parsed by parse_request_body: a JSON object nested at most
// kRequestJsonDepth levels (real requests nest ~8 with tool schemas), numbers in range; otherwise
// HttpError(400, code invalid_json) naming the place and never echoing the body.
inline constexpr size_t kRequestJsonDepth = 64;
Json parse_request_body(const std::string& body);
// The same limits for a body of any JSON type (POST /lora-adapters takes a list).
Json parse_request_json(const std::string& body);

// Parse a body (JSON text); throws HttpError(400) naming the field.
GenRequest parse_chat_request(const std::string& body);
GenRequest parse_completion_request(const std::string& body);

// One generated token as the wire reports it.
struct TokenOut {
  int32_t id = -1;
  std::string text;   // what became final with it (may be empty)
  std::string piece;  // the token's own bytes (for logprobs)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // (piece, logprob)
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int64_t draft_tokens = 0, draft_accepted = 0;  // speculative decoding (0 drafted: not reported)
};

// "chatcmpl-<24 hex>" / "cmpl-<24 hex>".
std::string new_completion_id(bool chat);
// finish_reason as OpenAI names it ("stop" | "length"); a cancelled generation reports "stop".
std::string wire_finish_reason(const std::string& engine_reason);

Json usage_json(const Usage& u);
// chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}; completions: the legacy shape.
Json chat_logprobs_json(const std::vector<TokenOut>& toks, bool with_top);
Json completion_logprobs_json(const std::vector<TokenOut>& toks, bool with_top, size_t text_offset0);

struct ResponseMeta {
  std::string id, model;
  int64_t created = 0;
};
// Full (non-streaming) responses.
// One choice of a whole response.
struct ChoiceOut {
  std::string text, finish;
  const std::vector<TokenOut>* logprobs = nullptr;  // null: "logprobs": null
  int64_t context_full = 0;  // > 0: "length" because the context of this many tokens filled
  std::vector<ToolCall> tool_calls;  // chat: message.tool_calls; then an empty text is "content": null
};
// kvad's extension to a choice that ended because the context filled, beside finish_reason
// "length" (which alone cannot tell a full context from max_tokens):
// "finish_details": {"type": "context_full", "context_length": N}. Absent otherwise.
Json finish_details_json(int64_t context_length);
Json chat_response(const ResponseMeta& m, const std::vector<ChoiceOut>& choices, bool with_top, const Usage& u);
Json completion_response(const ResponseMeta& m, const std::vector<ChoiceOut>& choices, bool with_top, const Usage& u);
// Stream chunks of choice `index`. `delta` is the content piece; role is sent in the first chunk only.
Json chat_chunk(const ResponseMeta& m, int index, const std::optional<std::string>& role,
                const std::optional<std::string>& content, const std::optional<std::string>& finish,
                const std::vector<TokenOut>* logprobs, bool with_top, bool include_usage_null,
                int64_t context_full = 0);
Json completion_chunk(const ResponseMeta& m, int index, const std::string& text, const std::optional<std::string>& finish,
                      const std::vector<TokenOut>* logprobs, bool with_top, size_t text_offset0,
                      bool include_usage_null, int64_t context_full = 0);
// A stream chunk carrying one whole tool call: delta.tool_calls[{index, id, type, function: {name, arguments}}].
Json tool_call_chunk(const ResponseMeta& m, int index, int call_index, const ToolCall& call, bool include_usage_null);
// message.tool_calls / delta.tool_calls entries.
Json tool_call_json(const ToolCall& c);
// The last chunk of a stream with stream_options.include_usage: empty choices + usage.
Json usage_chunk(const ResponseMeta& m, bool chat, const Usage& u);

// "data: <json>\n\n"
std::string sse(const Json& j);
inline const char* sse_done() { return "data: [DONE]\n\n"; }

}  // namespace kvad::serve
