#include "serve/request_fields.h"

#include <cmath>

#include "serve/openai.h"

namespace kvad::serve {

[[noreturn]] void bad(const std::string& param, const std::string& msg) {
  throw HttpError(400, msg, "invalid_request_error", param, param.empty() ? "" : "invalid_value");
}

bool has(const Json& j, const char* k) { return j.contains(k) && !j[k].is_null(); }

double get_number(const Json& j, const char* key, double lo, double hi, const std::string& prefix) {
  const Json& v = j[key];
  const std::string k = prefix + key;
  if (!v.is_number()) bad(k, fmt::format("'{}' must be a number, got {}", k, json_type_name(v)));
  double x = v.get<double>();
  if (!(x >= lo && x <= hi)) bad(k, fmt::format("'{}' must be between {} and {}, got {}", k, lo, hi, x));
  return x;
}

int64_t get_int(const Json& j, const char* key, int64_t lo, int64_t hi, const std::string& prefix) {
  const Json& v = j[key];
  const std::string k = prefix + key;
  if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
    bad(k, fmt::format("'{}' must be an integer, got {}", k, json_type_name(v)));
  double d = v.get<double>();
  if (!(d >= (double)lo && d <= (double)hi)) bad(k, fmt::format("'{}' must be between {} and {}, got {}", k, lo, hi, d));
  return v.is_number_integer() ? v.get<int64_t>() : (int64_t)d;
}

bool get_bool(const Json& j, const char* key, const std::string& prefix) {
  const std::string k = prefix + key;
  if (!j[key].is_boolean()) bad(k, fmt::format("'{}' must be a boolean, got {}", k, json_type_name(j[key])));
  return j[key].get<bool>();
}

std::string get_string(const Json& j, const char* key, const std::string& prefix) {
  const std::string k = prefix + key;
  if (!j[key].is_string()) bad(k, fmt::format("'{}' must be a string, got {}", k, json_type_name(j[key])));
  return j[key].get<std::string>();
}

}  // namespace kvad::serve
