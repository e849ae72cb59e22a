#include "serve/embeddings.h"

#include <cstring>

#include "core/base64.h"

#include "serve/openai.h"
#include "serve/request_fields.h"

namespace kvad::serve {

namespace {

void read_dimensions(const Json& j, EmbedRequest& r) {
  if (has(j, "dimensions")) r.dimensions = get_int(j, "dimensions", 1, 1 << 20);
}

// One input of token ids: integers in [0, 2^31).
std::vector<int32_t> id_list(const Json& a, const std::string& at) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const Json& t : a) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      bad("input", fmt::format("'{}' must hold token ids (integers from 0), got {}", at, json_snippet(t)));
    ids.push_back((int32_t)t.get<int64_t>());
  }
  return ids;
}

// A string, or a list of strings (Ollama and OpenAI alike).
bool read_texts(const Json& in, EmbedRequest& r) {
  if (in.is_string()) {
    r.texts.push_back(in.get<std::string>());
    return true;
  }
  if (!in.is_array() || in.empty() || !in[0].is_string()) return false;
  for (size_t i = 0; i < in.size(); i++) {
    if (!in[i].is_string()) bad("input", fmt::format("'input[{}]' must be a string like the others, got {}", i, json_snippet(in[i])));
    r.texts.push_back(in[i].get<std::string>());
  }
  return true;
}

void check_count(size_t n) {
  if (n == 0) bad("input", "'input' is empty: give a text or a list of texts");
  if (n > kMaxEmbeddingInputs) bad("input", fmt::format("'input' holds {} items; at most {} per request", n, kMaxEmbeddingInputs));
}

}  // namespace

EmbedRequest parse_openai_embeddings(const std::string& body) {
  Json j = parse_request_body(body);
  EmbedRequest r;
  if (has(j, "model")) r.model = get_string(j, "model");
  if (!has(j, "input")) bad("input", "'input' is required");
  const Json& in = j["input"];
  if (!read_texts(in, r)) {
    if (!in.is_array() || in.empty())
      bad("input", fmt::format("'input' must be a string, a list of strings, a list of token ids or a list of "
                               "such lists, got {}", json_snippet(in)));
    if (in[0].is_array()) {
      for (size_t i = 0; i < in.size() && i <= kMaxEmbeddingInputs; i++) {
        std::string at = fmt::format("input[{}]", i);
        if (!in[i].is_array()) bad("input", fmt::format("'{}' must be a list of token ids like the others", at));
        r.ids.push_back(id_list(in[i], at));
      }
    } else {
      r.ids.push_back(id_list(in, "input"));
    }
  }
  check_count(r.texts.size() + r.ids.size());
  if (has(j, "encoding_format")) {
    std::string f = get_string(j, "encoding_format");
    if (f != "float" && f != "base64")
      bad("encoding_format", fmt::format("'encoding_format' must be float or base64, got '{}'", f.substr(0, 40)));
    r.base64 = f == "base64";
  }
  read_dimensions(j, r);
  return r;
}

EmbedRequest parse_ollama_embed(const std::string& body) {
  Json j = parse_request_body(body);
  EmbedRequest r;
  if (has(j, "model")) r.model = get_string(j, "model");
  if (!has(j, "input") || !read_texts(j["input"], r))
    bad("input", "'input' must be a text or a list of texts");
  check_count(r.texts.size());
  r.truncate = has(j, "truncate") ? get_bool(j, "truncate") : true;  // Ollama's default
  read_dimensions(j, r);
  return r;
}

EmbedRequest parse_ollama_embeddings(const std::string& body) {
  Json j = parse_request_body(body);
  EmbedRequest r;
  if (has(j, "model")) r.model = get_string(j, "model");
  if (!has(j, "prompt")) bad("prompt", "'prompt' is required");
  r.texts.push_back(get_string(j, "prompt"));
  r.truncate = true;
  return r;
}

std::string base64_floats(const std::vector<float>& v) {
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); i++) {  // little-endian float32, as numpy's frombuffer reads it
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; b++) bytes[i * 4 + (size_t)b] = (char)((u >> (8 * b)) & 0xFF);
  }
  return base64_encode(bytes);
}

Json openai_embeddings_json(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                            int64_t tokens) {
  Json data = Json::array();
  for (size_t i = 0; i < vectors.size(); i++)
    data.push_back({{"object", "embedding"},
                    {"index", i},
                    {"embedding", base64 ? Json(base64_floats(vectors[i])) : Json(vectors[i])}});
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

}  // namespace kvad::serve
