// JSON via nlohmann::json, with readers whose errors name the file and the field.
//
// Every document that comes from outside (files, request bodies, the Hub) is parsed through
// parse_json / read_json_file, which bound its nesting depth and size at parse time: deeper values
// would otherwise crash later on the recursive copy, comparison and dump() nlohmann uses. Errors
// never print a whole value: json_snippet quotes a short prefix without recursing.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvad {

using Json = nlohmann::json;
// Keeps object keys in insertion order, as Python dicts do. Used where order is visible in the
// output: chat messages and tools rendered by a template (`tools|tojson`), request bodies. Not
// for big documents: its lookups are linear.
using OrderedJson = nlohmann::ordered_json;

struct JsonLimits {
  // Real documents nest a few levels (tokenizer.json ~6, chat requests ~8); 128 leaves room for
  // tool schemas while keeping every recursive walk of a parsed value shallow.
  size_t max_depth = 128;
  // The largest tokenizer.json files are ~35 MB; a bigger JSON document is not one kvad reads.
  size_t max_bytes = size_t(256) << 20;
  // Estimated memory of the parsed value (nlohmann's nodes: ~24 bytes a scalar, ~56 a container,
  // ~80 an object member, plus long strings). 0: 12 x the text + 64 MiB. Real documents need
  // 4-10x their text (a safetensors header ~6x); `[{},{},...]` needs 30x and is refused.
  size_t max_memory = 0;
};
inline constexpr size_t kJsonMaxDepth = 128;

// Takes the big containers of a document out of its DOM as the parser reads them: a
// tokenizer.json's vocab and merges (150k members each) become the reader's own tables, and the DOM
// holds null in their place. Building nlohmann's DOM of them and freeing it was ~40% of loading a
// tokenizer (docs/tokenizer.md). The reader's methods may throw kvad::Error.
class JsonSideReader {
 public:
  virtual ~JsonSideReader() = default;
  // A container whose ancestors are all objects, `keys` its path from the root (never empty):
  // true to take it. Its events follow, then end() when it closes.
  virtual bool take(std::span<const std::string_view> keys, bool array) = 0;
  // Inside a taken container: containers in it open and close, keys, strings, other scalars
  // (numbers, true/false, null) as a Json.
  virtual void start(bool array) = 0;
  virtual void end() = 0;
  virtual void key(std::string& k) = 0;
  virtual void string(std::string& s) = 0;
  virtual void scalar(const Json& v) = 0;
};

// Parses a JSON file; throws kvad::Error naming the file on I/O or syntax errors, on numbers out
// of range (1e999), on nesting deeper than limits.max_depth and on files over limits.max_bytes
// (checked before reading). `side`: a reader that takes some containers out of the DOM.
Json read_json_file(const std::string& path, const JsonLimits& limits = {}, JsonSideReader* side = nullptr);
Json parse_json(std::string_view text, const std::string& what, const JsonLimits& limits = {},
                JsonSideReader* side = nullptr);
OrderedJson parse_ordered_json(std::string_view text, const std::string& what, const JsonLimits& limits = {});

// At most max_chars characters (plus "...") of v serialised, for error messages. Iterative: safe
// on any depth and any size; never builds more than ~max_chars of output.
std::string json_snippet(const Json& v, size_t max_chars = 60);
std::string json_snippet(const OrderedJson& v, size_t max_chars = 60);
// "a string", "an object", ... for messages.
const char* json_type_name(const Json& v);
const char* json_type_name(const OrderedJson& v);

// Typed field access that reports "<what>: field 'k' ..." on a missing or mistyped field.
int64_t json_int(const Json& j, const char* key, const std::string& what);
int64_t json_int_or(const Json& j, const char* key, int64_t dflt, const std::string& what);
double json_num_or(const Json& j, const char* key, double dflt, const std::string& what);
bool json_bool_or(const Json& j, const char* key, bool dflt, const std::string& what);
std::string json_str_or(const Json& j, const char* key, const std::string& dflt, const std::string& what);

}  // namespace kvad
