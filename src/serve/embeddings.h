// The embedding requests' wire formats: OpenAI's /v1/embeddings ({"input": text, [texts], [ids] or
// [[ids]], "encoding_format": float|base64, "dimensions"}) and Ollama's /api/embed ({"input": text
// or [texts], "truncate", "dimensions"}) and older /api/embeddings ({"prompt": text}). Parsing
// names the field that is wrong; the vectors come from runtime/embed.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"

namespace kvad::serve {

inline constexpr size_t kMaxEmbeddingInputs = 2048;  // OpenAI's cap per request

struct EmbedRequest {
  std::string model;                        // "" = whatever is loaded
  std::vector<std::string> texts;           // to tokenize ...
  std::vector<std::vector<int32_t>> ids;    // ... or already token ids (OpenAI's form)
  bool base64 = false;                      // encoding_format "base64": little-endian float32 bytes
  int64_t dimensions = 0;                   // 0 = the model's width
  bool truncate = false;                    // Ollama: cut an input at the context instead of refusing it
};

EmbedRequest parse_openai_embeddings(const std::string& body);
EmbedRequest parse_ollama_embed(const std::string& body);       // /api/embed
EmbedRequest parse_ollama_embeddings(const std::string& body);  // /api/embeddings (one "prompt")

// OpenAI's {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}.
Json openai_embeddings_json(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                            int64_t tokens);
std::string base64_floats(const std::vector<float>& v);

}  // namespace kvad::serve
