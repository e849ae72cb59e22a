// Structured outputs on the wire (docs/grammar.md has the runtime half): the request fields that ask
// for a grammar constraint, read and compiled on the HTTP thread once per request, so a bad schema
// is a 400 naming its field before anything is queued, and a request's n choices share the one
// compiled grammar (each gets its own matcher in the engine).
#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "core/json.h"
#include "runtime/loader.h"
#include "serve/openai.h"

namespace kvad::serve {

// What one request may make the HTTP thread compile. Real schemas and grammars are a few KiB
// (OpenAI caps a schema's strings at 15,000 characters in all); the grammar layer's own bounds
// (1 MiB of GBNF, 2^20 elements) are for hostile input, not for a request.
inline constexpr size_t kMaxGrammarBytes = 64 << 10;
inline constexpr size_t kMaxSchemaBytes = 64 << 10;

// OpenAI's `response_format` ({"type": "text" | "json_object" | "json_schema"}) and llama-server's
// top-level `grammar` (GBNF) and `json_schema`: at most one of them. Fills r.constraint and
// r.constraint_field; throws HttpError(400) naming the field, a compile error's message included.
// `body` is the request's text: a schema is read from it again in key order, because the parsed
// Json sorts keys and the properties are generated in the order the client wrote them.
void parse_openai_structured(const Json& j, const std::string& body, GenRequest& r);
// Ollama's `format`: "" (none), "json" (any JSON object) or a JSON Schema object.
void parse_ollama_format(const Json& j, const std::string& body, GenRequest& r);

// The grammar vocabulary (runtime grammar_vocab()) of the loaded model, built by the first
// constrained request (~0.1-0.2 s for a 150k vocabulary) and shared by every later one until the
// model changes. Thread-safe: concurrent first requests wait for the one build.
class GrammarVocabCache {
 public:
  std::shared_ptr<const grammar::TokenTrie> get(const std::shared_ptr<const LoadedModel>& m);

 private:
  std::mutex mu_;
  std::weak_ptr<const LoadedModel> model_;  // weak: a cache must not keep an unloaded model alive
  std::shared_ptr<const grammar::TokenTrie> vocab_;
};

}  // namespace kvad::serve
