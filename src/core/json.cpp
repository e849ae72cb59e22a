#include "core/json.h"

#include <sys/stat.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/utf8.h"
#include "core/fs.h"

namespace kvad {

namespace {

// Cuts s to at most n bytes without splitting a UTF-8 sequence.
// nlohmann's DOM builder behind a SAX front that counts depth and keeps the path to the value
// being read (for "at messages[2].content" in errors). The parser itself is iterative; the depth
// bound protects everything that walks the result afterwards.
template <class J>
class BoundedSax {
 public:
  using number_integer_t = typename J::number_integer_t;
  using number_unsigned_t = typename J::number_unsigned_t;
  using number_float_t = typename J::number_float_t;
  using string_t = typename J::string_t;
  using binary_t = typename J::binary_t;

  BoundedSax(J& root, size_t max_depth, size_t max_memory, size_t text_bytes, JsonSideReader* side)
      : dom_(root, false), max_depth_(max_depth), max_memory_(max_memory), text_bytes_(text_bytes), side_(side) {}

  // Scalars go to the DOM, or to the side reader inside a container it took (spending the same:
  // its tables are no larger than the DOM they replace).
  bool null() { return taking() ? side_scalar(J(nullptr)) : scalar(dom_.null()); }
  bool boolean(bool v) { return taking() ? side_scalar(J(v)) : scalar(dom_.boolean(v)); }
  bool number_integer(number_integer_t v) { return taking() ? side_scalar(J(v)) : scalar(dom_.number_integer(v)); }
  bool number_unsigned(number_unsigned_t v) { return taking() ? side_scalar(J(v)) : scalar(dom_.number_unsigned(v)); }
  bool number_float(number_float_t v, const string_t& s) {
    return taking() ? side_scalar(J(v)) : scalar(dom_.number_float(v, s));
  }
  bool string(string_t& v) {
    if (!spend(48 + (v.size() > 15 ? v.size() + 1 : 0))) return false;
    if (!taking()) return scalar(dom_.string(v));
    side_->string(v);
    return scalar(true);
  }
  bool binary(binary_t& v) { return spend(48 + v.size()) && scalar(dom_.binary(v)); }
  bool start_object(std::size_t n) { return start(false) && (taking() || dom_.start_object(n)); }
  bool end_object() { return taking() ? end_taken() : leave() && dom_.end_object(); }
  bool start_array(std::size_t n) { return start(true) && (taking() || dom_.start_array(n)); }
  bool end_array() { return taking() ? end_taken() : leave() && dom_.end_array(); }
  bool key(string_t& k) {
    if (!spend(80 + (k.size() > 15 ? k.size() + 1 : 0))) return false;
    if (!path_.empty()) path_.back().key = utf8_prefix(k, 40);
    if (!taking()) return dom_.key(k);
    side_->key(k);
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) {
    // nlohmann's message quotes the last token read, which can be most of the input: cut it.
    std::string m = ex.what();
    if (auto p = m.find("] "); p != std::string::npos && m.compare(0, 16, "[json.exception.") == 0) m = m.substr(p + 2);
    if (m.size() > 160) m = utf8_prefix(m, 160) + "...";
    error_ = m + where();
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  struct Level {
    bool array;
    size_t index = 0;
    std::string key;
  };
  bool scalar(bool ok) {
    next();
    return spend(24) && ok;  // 16 bytes in the parent, and its spare capacity
  }
  bool taking() const { return taken_at_ != 0; }
  bool side_scalar(const J& v) {
    if constexpr (std::is_same_v<J, Json>) side_->scalar(v);
    return scalar(true);
  }
  // A container opens: inside a taken one it is the side reader's; else the side reader may take
  // it (its ancestors all objects, so the DOM holds null under its key), else it is the DOM's.
  bool start(bool array) {
    if (!spend(56) || !enter(array)) return false;
    if (taking()) {
      side_->start(array);
    } else if (side_ && path_.size() >= 2) {
      std::vector<std::string_view> keys;
      for (size_t i = 0; i + 1 < path_.size(); i++) {
        if (path_[i].array) return true;
        keys.push_back(path_[i].key);
      }
      if (side_->take(keys, array)) taken_at_ = path_.size();
    }
    return true;
  }
  // A container in a taken one closes, or the taken one itself: the DOM saw neither its start nor
  // its end, so its parent holds null under its key.
  bool end_taken() {
    if (path_.size() == taken_at_) taken_at_ = 0;
    side_->end();
    return leave();
  }
  // Memory amplification: a small text must not build a huge DOM.
  bool spend(size_t bytes) {
    memory_ += bytes;
    if (memory_ <= max_memory_) return true;
    error_ = fmt::format("{} bytes of JSON would need more than {} MB of memory in this structure{}", text_bytes_,
                         max_memory_ >> 20, where());
    return false;
  }
  void next() {
    if (!path_.empty() && path_.back().array) path_.back().index++;
  }
  bool enter(bool array) {
    if (path_.size() >= max_depth_) {
      error_ = fmt::format("nesting deeper than {} levels{}", max_depth_, where());
      return false;
    }
    path_.push_back(Level{array, 0, {}});
    return true;
  }
  bool leave() {
    path_.pop_back();
    next();
    return spend(24);  // the container's own node in its parent
  }
  std::string where() const {
    if (path_.empty()) return "";
    std::string p;
    for (const Level& l : path_) {
      if (p.size() > 200) {
        p += "...";
        break;
      }
      if (l.array) p += fmt::format("[{}]", l.index);
      else if (!l.key.empty()) p += (p.empty() ? "" : ".") + l.key;
    }
    return p.empty() ? "" : " at '" + p + "'";
  }

  nlohmann::detail::json_sax_dom_parser<J> dom_;
  size_t max_depth_, max_memory_, text_bytes_, memory_ = 0;
  JsonSideReader* side_;
  size_t taken_at_ = 0;  // the depth (path_.size()) of the container the side reader took; 0: none
  std::vector<Level> path_;
  std::string error_;
};

template <class J>
J parse_bounded(std::string_view text, const std::string& what, const JsonLimits& limits, JsonSideReader* side) {
  if (text.size() > limits.max_bytes)
    fail("{}: {} bytes of JSON is more than the {} accepted", what, text.size(), limits.max_bytes);
  J root;
  size_t max_memory = limits.max_memory ? limits.max_memory : 12 * text.size() + (size_t(64) << 20);
  BoundedSax<J> sax(root, limits.max_depth, max_memory, text.size(), side);
  bool ok = false;
  try {
    ok = J::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json, true, false);
  } catch (const nlohmann::detail::exception& e) {  // the DOM builder's own (object too large, ...)
    fail("{}: invalid JSON: {}", what, utf8_prefix(e.what(), 200));
  }
  if (!ok) fail("{}: invalid JSON: {}", what, sax.error().empty() ? "parse failed" : sax.error());
  return root;
}

template <class J>
void put_string(std::string& out, const typename J::string_t& s, size_t max) {
  if (s.size() <= max) {
    out += J(s).dump(-1, ' ', false, J::error_handler_t::replace);
  } else {
    std::string d = J(utf8_prefix(s, max)).dump(-1, ' ', false, J::error_handler_t::replace);
    d.insert(d.size() - 1, "...");
    out += d;
  }
  // Escapes (\u0001 is 6 bytes) can make the quoted form several times the prefix: cut it again.
  if (out.size() > max + 5) out = utf8_prefix(out, max) + "...\"";
}

template <class J>
std::string snippet(const J& root, size_t max) {
  std::string out;
  struct Frame {
    const J* c;
    typename J::const_iterator it;
    bool first;
  };
  std::vector<Frame> stack;
  auto open = [&](const J& v) {
    if (v.is_object() || v.is_array()) {
      out += v.is_object() ? '{' : '[';
      stack.push_back(Frame{&v, v.cbegin(), true});
    } else if (v.is_string()) {
      put_string<J>(out, v.template get_ref<const typename J::string_t&>(), max);
    } else if (v.is_binary()) {
      out += "<binary>";
    } else {
      out += v.dump();  // a number, a boolean or null: short
    }
  };
  open(root);
  if (stack.empty()) return out;  // a scalar: put_string already cut a long string
  while (!stack.empty() && out.size() <= max) {
    Frame& f = stack.back();
    if (f.it == f.c->cend()) {
      out += f.c->is_object() ? '}' : ']';
      stack.pop_back();
      continue;
    }
    if (!f.first) out += ',';
    f.first = false;
    const J& v = *f.it;
    if (f.c->is_object()) {
      put_string<J>(out, f.it.key(), max);
      out += ':';
    }
    ++f.it;
    open(v);  // may grow the stack: f is not used after this
  }
  if (out.size() > max || !stack.empty()) out = utf8_prefix(out, max) + "...";
  return out;
}

}  // namespace

Json parse_json(std::string_view text, const std::string& what, const JsonLimits& limits, JsonSideReader* side) {
  return parse_bounded<Json>(text, what, limits, side);
}

OrderedJson parse_ordered_json(std::string_view text, const std::string& what, const JsonLimits& limits) {
  return parse_bounded<OrderedJson>(text, what, limits, nullptr);
}

Json read_json_file(const std::string& path, const JsonLimits& limits, JsonSideReader* side) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > limits.max_bytes)
    fail("{}: {} bytes is more than the {} bytes accepted for a JSON file", path, (uint64_t)st.st_size,
         limits.max_bytes);
  return parse_json(read_file(path), path, limits, side);
}

std::string json_snippet(const Json& v, size_t max_chars) { return snippet(v, max_chars); }
std::string json_snippet(const OrderedJson& v, size_t max_chars) { return snippet(v, max_chars); }

template <class J>
static const char* type_name(const J& v) {
  switch (v.type()) {
    case J::value_t::null: return "null";
    case J::value_t::boolean: return "a boolean";
    case J::value_t::string: return "a string";
    case J::value_t::array: return "an array";
    case J::value_t::object: return "an object";
    case J::value_t::binary: return "binary data";
    default: return "a number";
  }
}
const char* json_type_name(const Json& v) { return type_name(v); }
const char* json_type_name(const OrderedJson& v) { return type_name(v); }

static const Json* field(const Json& j, const char* key, const std::string& what) {
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", what, json_type_name(j));
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t json_int(const Json& j, const char* key, const std::string& what) {
  const Json* v = field(j, key, what);
  if (!v) fail("{}: missing field '{}'", what, key);
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > (uint64_t)INT64_MAX) fail("{}: field '{}' = {} is out of range", what, key, v->get<uint64_t>());
    return (int64_t)v->get<uint64_t>();
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    double d = v->get<double>();
    // 2^63 is exact in a double; the range test comes before the cast (a cast out of range is UB).
    if (std::isfinite(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0 && std::floor(d) == d)
      return (int64_t)d;
  }
  fail("{}: field '{}' must be an integer, got {}", what, key, json_snippet(*v));
}

int64_t json_int_or(const Json& j, const char* key, int64_t dflt, const std::string& what) {
  return field(j, key, what) ? json_int(j, key, what) : dflt;
}

double json_num_or(const Json& j, const char* key, double dflt, const std::string& what) {
  const Json* v = field(j, key, what);
  if (!v) return dflt;
  if (!v->is_number()) fail("{}: field '{}' must be a number, got {}", what, key, json_snippet(*v));
  return v->get<double>();
}

bool json_bool_or(const Json& j, const char* key, bool dflt, const std::string& what) {
  const Json* v = field(j, key, what);
  if (!v) return dflt;
  if (!v->is_boolean()) fail("{}: field '{}' must be true or false, got {}", what, key, json_snippet(*v));
  return v->get<bool>();
}

std::string json_str_or(const Json& j, const char* key, const std::string& dflt, const std::string& what) {
  const Json* v = field(j, key, what);
  if (!v) return dflt;
  if (!v->is_string()) fail("{}: field '{}' must be a string, got {}", what, key, json_snippet(*v));
  return v->get<std::string>();
}

}  // namespace kvad
