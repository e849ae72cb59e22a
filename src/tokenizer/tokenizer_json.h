// Internal to the tokenizer layer: reading tokenizer.json fields with errors that name the file and
// the field path ("tokenizer.json: model.merges[12]: ..."). Every part of the loader goes through
// these so that a malformed file is a kvad::Error, never a nlohmann exception or a crash.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/unicode_chars.h"

namespace kvad::tok {

// Where a JSON value sits: the file (as the caller named it) and the field path inside it.
struct Field {
  const std::string& file;
  std::string path;  // "" for the document itself

  Field at(std::string_view key) const {
    return {file, path.empty() ? std::string(key) : path + "." + std::string(key)};
  }
  Field at(size_t index) const { return {file, path + "[" + std::to_string(index) + "]"}; }

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    std::string msg = fmt::format(f, std::forward<Args>(args)...);
    if (path.empty()) kvad::fail("{}: {}", file, msg);
    kvad::fail("{}: {}: {}", file, path, msg);
  }
};

// JSON type name for messages ("expected a string, got number").
inline const char* json_type(const Json& j) { return j.type_name(); }

// obj[key] or nullptr when absent or null.
inline const Json* find_field(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

inline const Json& require_object(const Json& j, const Field& f) {
  if (!j.is_object()) f.fail("expected an object, got {}", json_type(j));
  return j;
}

inline bool read_bool(const Json& obj, const char* key, bool dflt, const Field& f) {
  const Json* v = find_field(obj, key);
  if (!v) return dflt;
  if (!v->is_boolean()) f.at(key).fail("expected true or false, got {}", json_type(*v));
  return v->get<bool>();
}

inline std::string read_string(const Json& j, const Field& f) {
  if (!j.is_string()) f.fail("expected a string, got {}", json_type(j));
  return j.get<std::string>();
}

inline std::string read_string_or(const Json& obj, const char* key, const std::string& dflt, const Field& f) {
  const Json* v = find_field(obj, key);
  return v ? read_string(*v, f.at(key)) : dflt;
}

// A string field that must be one character (Metaspace's replacement, Strip's content).
inline std::string read_char_or(const Json& obj, const char* key, const std::string& dflt, const Field& f) {
  std::string s = read_string_or(obj, key, dflt, f);
  if (s.empty() || s.size() != utf8_char_len((unsigned char)s[0])) f.at(key).fail("expected one character, got '{}'", s);
  return s;
}

// Bounds on the pipeline a tokenizer.json describes. Real files nest Sequence at most twice and
// have a handful of steps; each step costs a pass (and a stack frame) over every encoded text,
// so a file listing thousands would turn every encode into a stack overflow or a crawl.
constexpr size_t kMaxSequenceDepth = 8;
constexpr size_t kMaxPipelineSteps = 64;
// Text a step inserts every time it applies (Prepend per stretch of text, Replace per match): real
// files insert one "▁"; a long one would multiply the size of every text it touches.
constexpr size_t kMaxInsertedBytes = 256;

// A string field that a step inserts into the text (see kMaxInsertedBytes).
inline std::string read_inserted_or(const Json& obj, const char* key, const std::string& dflt, const Field& f) {
  std::string s = read_string_or(obj, key, dflt, f);
  if (s.size() > kMaxInsertedBytes) f.at(key).fail("is {} bytes long (at most {})", s.size(), kMaxInsertedBytes);
  return s;
}

inline void check_sequence_depth(size_t depth, const Field& f) {
  if (depth > kMaxSequenceDepth) f.fail("Sequence nested deeper than {} levels", kMaxSequenceDepth);
}
inline void check_step_count(size_t steps, const Field& f) {
  if (steps > kMaxPipelineSteps) f.fail("more than {} steps in total", kMaxPipelineSteps);
}

// The items of a Sequence step (obj[key]), each handed to add(item, its field), within the bounds
// above; `steps` is how many steps the pipeline has so far.
template <typename Add>
void for_each_in_sequence(const Json& obj, const char* key, const Field& f, size_t depth, size_t steps, Add&& add) {
  check_sequence_depth(depth + 1, f);
  const Json* list = find_field(obj, key);
  if (!list || !list->is_array()) f.at(key).fail("expected an array");
  check_step_count(steps + list->size(), f.at(key));
  for (size_t i = 0; i < list->size(); i++) add((*list)[i], f.at(key).at(i));
}

// Token ids: non-negative and below a bound that keeps the per-id tables small (the largest real
// vocabularies are ~262k; 2^24 leaves room without letting a hostile file allocate gigabytes).
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// The integer `j` holds (which must be one), unsigned ones past INT64_MAX clamped to it.
inline int64_t integer_value(const Json& j) {
  return j.is_number_unsigned() ? (int64_t)std::min<uint64_t>(j.get<uint64_t>(), INT64_MAX) : j.get<int64_t>();
}

// The token id `j` holds, or -1 where read_id would refuse it: loops over a whole vocabulary build
// an entry's Field (its path string) only for an entry that fails.
inline int32_t valid_id_or_negative(const Json& j) {
  if (!j.is_number_integer()) return -1;
  int64_t v = integer_value(j);
  return v < 0 || v > kMaxTokenId ? -1 : (int32_t)v;
}

inline int32_t read_id(const Json& j, const Field& f) {
  if (int32_t id = valid_id_or_negative(j); id >= 0) return id;
  if (!j.is_number_integer()) f.fail("expected an integer token id, got {}", j.is_number() ? json_snippet(j) : json_type(j));
  f.fail("token id {} is out of range (0..{})", integer_value(j), kMaxTokenId);
}

// read_string without a copy, for loops over a whole file: `field()` makes the error's Field only
// when `j` is not a string.
template <typename MakeField>
const std::string& string_ref(const Json& j, MakeField&& field) {
  if (!j.is_string()) read_string(j, field());  // fails
  return j.get_ref<const std::string&>();
}

}  // namespace kvad::tok
