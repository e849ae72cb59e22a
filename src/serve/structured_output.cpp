#include "serve/structured_output.h"

#include <initializer_list>

#include "runtime/generate.h"
#include "serve/request_fields.h"

namespace kvad::serve {

namespace {

// The value at `path` in the body read again as OrderedJson (its keys in the client's order). The
// body already parsed as Json under these limits, so it parses again.
OrderedJson ordered_at(const std::string& body, std::initializer_list<const char*> path) {
  OrderedJson v = parse_ordered_json(body, "the request body", JsonLimits{kRequestJsonDepth, body.size()});
  for (const char* k : path) v = OrderedJson(std::move(v[k]));
  return v;
}

// The one field that asks for a constraint. A second one is refused, before it is compiled: which
// of them should win would be a guess.
void claim(GenRequest& r, const std::string& field) {
  if (!r.constraint_field.empty())
    bad(field, fmt::format("'{}' and '{}' both ask for a constrained output: send one of them", r.constraint_field, field));
  r.constraint_field = field;
}

// A compile error is the client's: a 400 naming the field, with the compiler's message (which says
// where in the grammar or schema).
template <typename F>
void compile(GenRequest& r, F&& compiler) {
  try {
    r.constraint = compiler();
  } catch (const Error& e) {
    bad(r.constraint_field, fmt::format("'{}': {}", r.constraint_field, e.what()));
  }
}

// `v` is the schema as parsed (for its type and size); the compiler reads it again in key order.
void schema(GenRequest& r, const std::string& field, const Json& v, const std::string& body,
            std::initializer_list<const char*> path) {
  claim(r, field);
  if (!v.is_object()) bad(field, fmt::format("'{}' must be a JSON Schema object, got {}", field, json_type_name(v)));
  if (size_t n = v.dump(-1, ' ', false, Json::error_handler_t::replace).size(); n > kMaxSchemaBytes)
    bad(field, fmt::format("'{}' is {} bytes of JSON; at most {} are accepted", field, n, kMaxSchemaBytes));
  OrderedJson ordered = ordered_at(body, path);
  compile(r, [&] { return grammar::compile_json_schema(ordered); });
}

void gbnf(GenRequest& r, const std::string& field, const std::string& text) {
  claim(r, field);
  if (text.size() > kMaxGrammarBytes)
    bad(field, fmt::format("'{}' is {} bytes; at most {} are accepted", field, text.size(), kMaxGrammarBytes));
  compile(r, [&] { return grammar::compile_gbnf(text); });
}

void any_object(GenRequest& r, const std::string& field) {
  claim(r, field);
  r.constraint = grammar::json_object();
}

// {"type": "text"} | {"type": "json_object"} | {"type": "json_schema", "json_schema": {"name",
// "schema", "strict", "description"}}. llama-server's {"type": "json_object", "schema": {...}} is
// read too. A json_schema without a schema is the empty schema: any JSON value, as the spec says.
void response_format(const Json& j, const std::string& body, GenRequest& r) {
  const Json& f = j["response_format"];
  if (!f.is_object()) bad("response_format", fmt::format("'response_format' must be an object, got {}", json_type_name(f)));
  if (!has(f, "type") || !f["type"].is_string())
    bad("response_format.type", "'response_format.type' is required: \"text\", \"json_object\" or \"json_schema\"");
  const std::string& type = f["type"].get_ref<const std::string&>();
  if (type == "text") return;
  if (type == "json_object") {
    if (has(f, "schema")) schema(r, "response_format.schema", f["schema"], body, {"response_format", "schema"});
    else any_object(r, "response_format");
    return;
  }
  if (type != "json_schema")
    throw HttpError(400, fmt::format("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got '{}'", type),
                    "invalid_request_error", "response_format.type", "unsupported_value");
  if (!has(f, "json_schema") || !f["json_schema"].is_object())
    bad("response_format.json_schema", "'response_format.json_schema' must be an object holding the 'schema'");
  const Json& js = f["json_schema"];
  const std::string at = "response_format.json_schema.";
  if (has(js, "name")) get_string(js, "name", at);
  if (has(js, "description")) get_string(js, "description", at);
  if (has(js, "strict")) get_bool(js, "strict", at);  // either way the output is held to the schema
  if (has(js, "schema")) {
    schema(r, at + "schema", js["schema"], body, {"response_format", "json_schema", "schema"});
  } else {
    claim(r, at + "schema");
    compile(r, [] { return grammar::compile_json_schema(Json::object()); });
  }
}

// A grammar ends where its text is complete; generating past the end of sequence contradicts it.
void refuse_ignore_eos(const GenRequest& r) {
  if (!r.constraint_field.empty() && r.ignore_eos)
    bad(r.constraint_field, fmt::format("'{}' cannot be combined with generating past the end of sequence ('ignore_eos', "
                                        "or Ollama's num_predict -2): the output ends where the grammar is complete",
                                        r.constraint_field));
}

}  // namespace

void parse_openai_structured(const Json& j, const std::string& body, GenRequest& r) {
  if (has(j, "response_format")) response_format(j, body, r);
  if (has(j, "grammar")) {  // llama-server's; "" is no grammar there
    std::string text = get_string(j, "grammar");
    if (!text.empty()) gbnf(r, "grammar", text);
  }
  if (has(j, "json_schema")) schema(r, "json_schema", j["json_schema"], body, {"json_schema"});
  refuse_ignore_eos(r);
}

void parse_ollama_format(const Json& j, const std::string& body, GenRequest& r) {
  if (has(j, "format")) {
    const Json& f = j["format"];
    if (f.is_string() && f.get_ref<const std::string&>() == "json") any_object(r, "format");
    else if (f.is_object()) schema(r, "format", f, body, {"format"});
    else if (!(f.is_string() && f.get_ref<const std::string&>().empty()))
      bad("format", fmt::format("'format' must be \"json\" or a JSON Schema object, got {}", json_snippet(f, 40)));
  }
  refuse_ignore_eos(r);
}

std::shared_ptr<const grammar::TokenTrie> GrammarVocabCache::get(const std::shared_ptr<const LoadedModel>& m) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!vocab_ || model_.lock() != m) {
    vocab_.reset();  // the old model's trie goes before the new one is built
    vocab_ = grammar_vocab(*m->tokenizer, m->eos_ids);
    model_ = m;
  }
  return vocab_;
}

}  // namespace kvad::serve
