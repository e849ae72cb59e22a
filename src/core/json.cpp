#include "core/json.h"

#include "core/error.h"
#include "core/fs.h"

namespace kvad {

Json parse_json(std::string_view text, const std::string& what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    fail("{}: invalid JSON: {}", what, e.what());
  }
}

Json read_json_file(const std::string& path) { return parse_json(read_file(path), path); }

static const Json* field(const Json& j, const char* key, const std::string& what) {
  if (!j.is_object()) fail("{}: expected a JSON object", what);
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t json_int(const Json& j, const char* key, const std::string& what) {
  const Json* v = field(j, key, what);
  if (!v) fail("{}: missing field '{}'", what, key);
  if (!v->is_number_integer() && !(v->is_number_float() && v->get<double>() == (double)(int64_t)v->get<double>()))
    fail("{}: field '{}' must be an integer, got {}", what, key, v->dump());
  return v->get<int64_t>();
}

int64_t json_int_or(const Json& j, const char* key, int64_t dflt, const std::string& what) {
  return field(j, key, what) ? json_int(j, key, what) : dflt;
}

double json_num_or(const Json& j, const char* key, double dflt, const std::string& what) {
  const Json* v = field(j, key, what);
  if (!v) return dflt;
  if (!v->is_number()) fail("{}: field '{}' must be a number, got {}", what, key, v->dump());
  return v->get<double>();
}

bool json_bool_or(const Json& j, const char* key, bool dflt, const std::string& what) {
  const Json* v = field(j, key, what);
  if (!v) return dflt;
  if (!v->is_boolean()) fail("{}: field '{}' must be true or false, got {}", what, key, v->dump());
  return v->get<bool>();
}

std::string json_str_or(const Json& j, const char* key, const std::string& dflt, const std::string& what) {
  const Json* v = field(j, key, what);
  if (!v) return dflt;
  if (!v->is_string()) fail("{}: field '{}' must be a string, got {}", what, key, v->dump());
  return v->get<std::string>();
}

}  // namespace kvad
