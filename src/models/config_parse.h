// Helpers shared by the families' config.json parsers.
#pragma once
#include <string>
#include <vector>

#include "core/json.h"
#include "models/config.h"

namespace kvad {

// A required positive integer field.
int64_t positive_field(const Json& j, const char* key, const std::string& what);
// eos_token_id may be an int or a list of ints.
std::vector<int32_t> eos_ids_field(const Json& j, const std::string& what);
// Checks the relations between fields that the forward pass relies on.
void validate_config(const ModelConfig& c, const std::string& what);

}  // namespace kvad
