// libFuzzer: arbitrary bytes as the request body of every route: the OpenAI parsers
// (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/images/generations), Ollama's (/api/chat, /api/generate,
// /api/embed, /api/embeddings) and
// parse_request_body, which every other route's body goes through (tools and past tool calls
// included, through the chat parsers). A body is accepted or refused with HttpError; never a crash,
// a hang, a deep copy. The same bytes as a model's answer go through the tool-call readers, whole
// and streamed: they never throw.
#include <cstddef>
#include <cstdint>
#include <string>

#include "serve/embeddings.h"
#include "serve/images.h"
#include "serve/ollama.h"
#include "serve/lora_adapters.h"
#include "serve/openai.h"
#include "serve/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string body(reinterpret_cast<const char*>(data), size);
  try {
    kvad::serve::parse_chat_request(body);
  } catch (const kvad::Error&) {
  }
  try {
    kvad::serve::parse_completion_request(body);
  } catch (const kvad::Error&) {
  }
  try {
    kvad::serve::parse_ollama_chat(body);
  } catch (const kvad::Error&) {
  }
  try {
    kvad::serve::parse_ollama_generate(body);
  } catch (const kvad::Error&) {
  }
  for (auto parse : {kvad::serve::parse_openai_embeddings, kvad::serve::parse_ollama_embed,
                     kvad::serve::parse_ollama_embeddings}) {
    try {
      parse(body);
    } catch (const kvad::Error&) {
    }
  }
  try {  // /v1/images/generations, /kvad/images
    (void)kvad::serve::parse_image_request(body);
  } catch (const kvad::Error&) {
  }
  try {
    kvad::Json j = kvad::serve::parse_request_body(body);
    (void)kvad::json_snippet(j, 80);
  } catch (const kvad::Error&) {
  }
  try {  // POST /lora-adapters: a bare list
    (void)kvad::serve::parse_lora_list(kvad::serve::parse_request_json(body), "lora");
  } catch (const kvad::Error&) {
  }
  for (auto f : {kvad::serve::ToolFamily::Hermes, kvad::serve::ToolFamily::Llama3}) {
    (void)kvad::serve::parse_tool_calls(f, body);
    kvad::serve::ToolCallStream s(f);
    for (size_t i = 0; i < body.size(); i += 7) (void)s.feed(body.substr(i, 7));
    (void)s.finish();
  }
  return 0;
}
