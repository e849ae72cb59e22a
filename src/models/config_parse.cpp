#include "models/config_parse.h"

#include "core/error.h"

namespace kvad {

int64_t positive_field(const Json& j, const char* key, const std::string& what) {
  int64_t v = json_int(j, key, what);
  if (v <= 0) fail("{}: field '{}' must be positive, got {}", what, key, v);
  if (v > (int64_t)1 << 31) fail("{}: field '{}' = {} is implausibly large", what, key, v);
  return v;
}

std::vector<int32_t> eos_ids_field(const Json& j, const std::string& what) {
  std::vector<int32_t> out;
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return out;
  if (it->is_number_integer()) {
    out.push_back(it->get<int32_t>());
  } else if (it->is_array()) {
    for (const Json& v : *it) {
      if (!v.is_number_integer()) fail("{}: eos_token_id entries must be integers", what);
      out.push_back(v.get<int32_t>());
    }
  } else {
    fail("{}: eos_token_id must be an integer or a list of integers", what);
  }
  return out;
}

void validate_config(const ModelConfig& c, const std::string& what) {
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", what, c.n_heads, c.n_kv_heads);
  if (c.head_dim % 2 != 0) fail("{}: head_dim ({}) must be even for rotary embeddings", what, c.head_dim);
  if (!(c.norm_eps > 0)) fail("{}: the norm epsilon must be positive", what);
  if (!(c.rope_theta > 0)) fail("{}: rope_theta must be positive", what);
}

}  // namespace kvad
