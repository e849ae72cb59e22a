// JSON via nlohmann::json, with readers whose errors name the file and the field.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace kvad {

using Json = nlohmann::json;
// Keeps object keys in insertion order, as Python dicts do. Used where order is visible in the
// output: chat messages and tools rendered by a template (`tools|tojson`), request bodies. Not
// for big documents: its lookups are linear.
using OrderedJson = nlohmann::ordered_json;

// Parses a JSON file; throws kvad::Error naming the file on I/O or syntax errors.
Json read_json_file(const std::string& path);
Json parse_json(std::string_view text, const std::string& what);

// Typed field access that reports "<what>: field 'k' ..." on a missing or mistyped field.
int64_t json_int(const Json& j, const char* key, const std::string& what);
int64_t json_int_or(const Json& j, const char* key, int64_t dflt, const std::string& what);
double json_num_or(const Json& j, const char* key, double dflt, const std::string& what);
bool json_bool_or(const Json& j, const char* key, bool dflt, const std::string& what);
std::string json_str_or(const Json& j, const char* key, const std::string& dflt, const std::string& what);

}  // namespace kvad
