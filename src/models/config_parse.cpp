#include "models/config_parse.h"

#include <cmath>

#include "core/error.h"
#include "models/rope.h"

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
  auto id = [&](const Json& v) -> int32_t {
    // get<int32_t>() of 2^32 + 2 would be token 2: the range is checked on the full value.
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t)INT32_MAX) ||
        v.get<int64_t>() < 0 || v.get<int64_t>() >= ConfigBounds::kMaxVocab)
      fail("{}: field 'eos_token_id' must hold token ids (0 to {}), got {}", what, ConfigBounds::kMaxVocab - 1,
           json_snippet(v));
    return (int32_t)v.get<int64_t>();
  };
  if (it->is_number()) {
    out.push_back(id(*it));
  } else if (it->is_array()) {
    if (it->size() > 1024) fail("{}: field 'eos_token_id' lists {} ids (at most 1024)", what, it->size());
    for (const Json& v : *it) out.push_back(id(v));
  } else {
    fail("{}: field 'eos_token_id' must be an integer or a list of integers, got {}", what, json_snippet(*it));
  }
  return out;
}

int32_t bos_id_field(const Json& j, const std::string& what) {
  if (!j.is_object()) return -1;
  auto v = j.find("bos_token_id");
  if (v == j.end() || v->is_null()) return -1;
  if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT32_MAX) ||
      v->get<int64_t>() < 0 || v->get<int64_t>() >= ConfigBounds::kMaxVocab)
    fail("{}: field 'bos_token_id' must be a token id (0 to {}), got {}", what, ConfigBounds::kMaxVocab - 1,
         json_snippet(*v));
  return (int32_t)v->get<int64_t>();
}

std::vector<int32_t> generation_eos_ids(const Json& g, int64_t vocab_size, const std::string& what) {
  if (!g.is_object()) return {};
  std::vector<int32_t> ids = eos_ids_field(g, what);
  for (int32_t id : ids)
    if (id >= vocab_size)
      fail("{}: eos_token_id {} is not a token of the vocabulary (0 to {})", what, id, vocab_size - 1);
  return ids;
}

std::string architecture_field(const Json& j, const std::string& what) {
  if (!j.is_object()) return "";
  auto a = j.find("architectures");
  if (a == j.end() || a->is_null()) return "";
  if (!a->is_array()) fail("{}: field 'architectures' must be a list of names, got {}", what, json_snippet(*a));
  if (a->empty()) return "";
  if (!(*a)[0].is_string())
    fail("{}: field 'architectures[0]' must be a string, got {}", what, json_snippet((*a)[0]));
  const std::string& s = (*a)[0].get_ref<const std::string&>();
  if (s.size() > 256) fail("{}: field 'architectures[0]' is {} bytes long", what, s.size());
  return s;
}

namespace {

// One of weight_block_size's two counts (a block of at most 2^20 values a side).
int64_t block_count(const Json& v, const std::string& where) {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t(1) << 20))
    fail("{}: weight_block_size entries must be counts from 1 to 2^20, got {}", where, json_snippet(v));
  return v.get<int64_t>();
}

}  // namespace

Fp8Blocks quantization_field(const Json& j, const std::string& what) {
  if (!j.is_object()) return {};
  auto q = j.find("quantization_config");
  if (q == j.end() || q->is_null()) return {};
  const std::string where = what + ": quantization_config";
  if (!q->is_object()) fail("{}: must be an object, got {}", where, json_snippet(*q));
  const std::string method = json_str_or(*q, "quant_method", "", where);
  if (method.empty()) fail("{}: no quant_method (kvad reads quant_method 'fp8')", where);
  if (method != "fp8")
    fail("{}: quant_method '{}' is a format kvad does not read (it reads FP8 checkpoints, quant_method 'fp8', "
         "with weight_block_size); use the unquantised checkpoint, or a GGUF file of the model",
         where, method);
  if (std::string fmt = json_str_or(*q, "fmt", "e4m3", where); fmt != "e4m3")
    fail("{}: fmt '{}' is not read (kvad reads FP8 weights in e4m3)", where, fmt);
  // "static" would come with input_scale tensors for FP8 activations; kvad keeps activations in
  // f32, which only "dynamic" (scales computed at run time) allows without losing a tensor.
  if (std::string act = json_str_or(*q, "activation_scheme", "dynamic", where); act != "dynamic")
    fail("{}: activation_scheme '{}' is not read (only 'dynamic')", where, act);
  auto b = q->find("weight_block_size");
  if (b == q->end() || b->is_null())
    fail("{}: no weight_block_size; kvad reads FP8 weights scaled per block ([rows, cols], DeepSeek-V3's [128, 128])",
         where);
  if (!b->is_array() || b->size() != 2)
    fail("{}: weight_block_size must be [rows, cols], got {}", where, json_snippet(*b));
  return {block_count((*b)[0], where), block_count((*b)[1], where)};
}

namespace {

void in_range(int64_t v, int64_t hi, const char* field, const std::string& what) {
  if (v <= 0 || v > hi) fail("{}: {} = {} is out of range (1 to {})", what, field, v, hi);
}

}  // namespace

void validate_config(const ModelConfig& c, const std::string& what) {
  in_range(c.vocab_size, ConfigBounds::kMaxVocab, "vocab_size", what);
  in_range(c.hidden, ConfigBounds::kMaxHidden, "the hidden size", what);
  in_range(c.intermediate, ConfigBounds::kMaxIntermediate, "the intermediate size", what);
  in_range(c.n_layers, ConfigBounds::kMaxLayers, "the number of layers", what);
  in_range(c.n_heads, ConfigBounds::kMaxHeads, "the number of attention heads", what);
  in_range(c.n_kv_heads, ConfigBounds::kMaxHeads, "the number of key/value heads", what);
  in_range(c.head_dim, ConfigBounds::kMaxHeadDim, "head_dim", what);
  in_range(c.max_positions, ConfigBounds::kMaxPositions, "max_position_embeddings (the context length)", what);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", what, c.n_heads, c.n_kv_heads);
  if (c.head_dim % 2 != 0) fail("{}: head_dim ({}) must be even for rotary embeddings", what, c.head_dim);
  // Products the loader and the KV cache compute: elements of the largest matrices and bytes of a
  // full-context f32 KV cache. Within the bounds above none overflows; a file that gets there is
  // refused here rather than by an allocation.
  uint64_t kv_bytes = 1;
  for (uint64_t f : {(uint64_t)c.n_layers, (uint64_t)c.max_positions, (uint64_t)c.kv_dim(), uint64_t(2 * 4)})
    if (mul_overflows(kv_bytes, f, &kv_bytes)) fail("{}: the KV cache for the full context overflows 64 bits", what);
  uint64_t elems;
  if (mul_overflows((uint64_t)c.vocab_size, (uint64_t)c.hidden, &elems) || elems > (uint64_t(1) << 40))
    fail("{}: vocab_size x hidden size ({} x {}) is implausibly large", what, c.vocab_size, c.hidden);
  if (!std::isfinite(c.norm_eps) || !(c.norm_eps > 0) || c.norm_eps >= 1)
    fail("{}: the norm epsilon must be a small positive number, got {}", what, c.norm_eps);
  if (!std::isfinite(c.rope_theta) || !(c.rope_theta > 1))
    fail("{}: rope_theta must be a finite number greater than 1, got {}", what, c.rope_theta);
  const RopeScaling& rs = c.rope_scaling;
  if (!rs.type.empty()) {
    std::string where = what + ": rope_scaling";
    if (!std::isfinite(rs.factor) || !(rs.factor > 0) || rs.factor > 1e6)
      fail("{}: factor must be a positive number up to 1e6, got {}", where, rs.factor);
    if (rs.type == "llama3") {
      if (!std::isfinite(rs.low_freq_factor) || !(rs.low_freq_factor > 0) || !std::isfinite(rs.high_freq_factor) ||
          !(rs.high_freq_factor > rs.low_freq_factor))
        fail("{}: low_freq_factor ({}) and high_freq_factor ({}) must be finite, positive and increasing", where,
             rs.low_freq_factor, rs.high_freq_factor);
      in_range(rs.original_max_positions, ConfigBounds::kMaxPositions, "rope_scaling.original_max_position_embeddings",
               what);
    }
    if (rs.type == "yarn") {
      in_range(rs.original_max_positions, ConfigBounds::kMaxPositions, "rope_scaling.original_max_position_embeddings",
               what);
      if (!std::isfinite(rs.beta_fast) || !std::isfinite(rs.beta_slow) || !(rs.beta_slow > 0) ||
          !(rs.beta_fast > rs.beta_slow))
        fail("{}: beta_fast ({}) and beta_slow ({}) must be finite, positive and beta_fast > beta_slow", where,
             rs.beta_fast, rs.beta_slow);
      for (double m : {rs.mscale, rs.mscale_all_dim, rs.attention_factor})
        if (!std::isfinite(m) || m < 0 || m > 1e3)
          fail("{}: mscale, mscale_all_dim and attention_factor must be numbers from 0 to 1e3, got {}", where, m);
    }
    for (double x : rs.freq_factors)
      if (!std::isfinite(x) || !(x > 0)) fail("{}: factors must be finite positive numbers, got {}", where, x);
  }
  // Whatever combination of the above, the rotary angles over the whole context must be finite:
  // a NaN or inf here is NaN in every attention score.
  std::vector<double> inv = rope_inv_freq(c, c.head_dim);
  for (size_t i = 0; i < inv.size(); i++) {
    double angle = inv[i] * (double)c.max_positions;
    if (!std::isfinite(inv[i]) || !(inv[i] >= 0) || !std::isfinite(angle))
      fail("{}: rope_theta {} with rope_scaling '{}' (factor {}) gives rotary frequency {} = {}: not finite over {} "
           "positions",
           what, c.rope_theta, rs.type.empty() ? "none" : rs.type, rs.factor, i, inv[i], c.max_positions);
  }
  if (c.bos_id != -1 && (c.bos_id < 0 || c.bos_id >= c.vocab_size))
    fail("{}: bos_token_id {} is not a token of the vocabulary (0 to {})", what, c.bos_id, c.vocab_size - 1);
  for (int32_t id : c.eos_ids)
    if (id < 0 || id >= c.vocab_size)
      fail("{}: eos_token_id {} is not a token of the vocabulary (0 to {})", what, id, c.vocab_size - 1);
}

}  // namespace kvad
