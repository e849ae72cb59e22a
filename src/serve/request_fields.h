// Reading one field of a request body with an error that names it: HttpError(400) with the field as
// `param` and what was wrong ("'temperature' must be between 0 and 2, got 3"). Shared by the
// OpenAI and Ollama wire formats. `prefix` names the field's place ("options." for Ollama's).
#pragma once
#include <cstdint>
#include <string>

#include "core/json.h"

namespace kvad::serve {

[[noreturn]] void bad(const std::string& param, const std::string& msg);
// Present and not null.
bool has(const Json& j, const char* k);
double get_number(const Json& j, const char* k, double lo, double hi, const std::string& prefix = "");
int64_t get_int(const Json& j, const char* k, int64_t lo, int64_t hi, const std::string& prefix = "");
bool get_bool(const Json& j, const char* k, const std::string& prefix = "");
std::string get_string(const Json& j, const char* k, const std::string& prefix = "");

}  // namespace kvad::serve
