// Ollama's native wire format (its docs/api.md): /api/chat and /api/generate requests become a
// GenRequest, and their answers NDJSON lines — one object per piece of text, then a last one with
// "done": true, the counts and the durations in nanoseconds. Errors are {"error": "message"}.
// Nothing here touches the engine, as with openai.h.
#pragma once
#include <cstdint>
#include <string>

#include "core/json.h"
#include "serve/openai.h"

namespace kvad::serve {

// What a chat or generate request asks beyond the GenRequest.
struct OllamaRequest {
  GenRequest gen;        // chat: messages; generate: the prompt as a user message, or raw text
  bool empty_prompt = false;  // generate with no prompt: Ollama's way to load a model, answered at once
};

// /api/chat: {"model", "messages": [{"role", "content"}], "stream" (default true), "options": {...},
// "keep_alive", "think"}. Throws HttpError(400) naming the field.
OllamaRequest parse_ollama_chat(const std::string& body);
// /api/generate: {"model", "prompt", "system", "raw", "stream", "options", ...}.
OllamaRequest parse_ollama_generate(const std::string& body);

// The model a request names, without Ollama's ":latest" tag (other tags are kept: they are names).
std::string ollama_model_name(const std::string& asked);

// RFC 3339 UTC with nanoseconds, as Ollama writes "created_at".
std::string ollama_timestamp();

// Counts and durations of a finished answer (seconds in; Ollama's nanoseconds out).
struct OllamaFigures {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double total_seconds = 0, prefill_seconds = 0, decode_seconds = 0;
  std::string done_reason = "stop";  // stop | length | load
};

// One streamed piece: chat {"model","created_at","message":{"role":"assistant","content"},"done":false};
// generate {"model","created_at","response","done":false}.
Json ollama_piece(bool chat, const std::string& model, const std::string& text);
// The last line (or the whole answer when not streaming, with the full text).
// message.tool_calls: [{"function": {"name", "arguments": {...}}}].
Json ollama_tool_calls(const std::vector<ToolCall>& calls);
Json ollama_done(bool chat, const std::string& model, const std::string& text, const OllamaFigures& f);

// {"error": "message"}: the shape Ollama's clients read.
inline Json ollama_error(const std::string& message) { return {{"error", message}}; }

// "9.8M", "494M", "1.5B": Ollama's parameter_size.
std::string ollama_parameter_size(int64_t parameters);

}  // namespace kvad::serve
