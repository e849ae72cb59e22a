// Values with Python semantics: construction, truthiness, str()/repr() exactly as CPython prints
// them (the template output depends on it: `{{ [1, 'a'] }}`, `{{ 0.1 }}`), json.dumps as
// transformers' tojson calls it, equality and ordering, and the UTF-8 / Unicode helpers.
#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"

namespace kvad::jinja {

using detail::raise;

// ---- construction ----

Value::Value(std::string s) : type_(Type::String), ptr_(std::make_shared<std::string>(std::move(s))) {}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.type_ = Type::None;
  return v;
}
namespace {
uint32_t nesting(const Value& v) {
  return v.is_list() ? v.list().depth : v.is_dict() ? v.dict().depth : 0;
}
void check_nesting(uint32_t depth) {
  if (depth > kMaxNesting) raise(0, fmt::format("containers nested deeper than {} levels", kMaxNesting));
}
}  // namespace

Value Value::list(std::vector<Value> items, bool tuple, ListObj::View view) {
  uint32_t depth = 1;
  for (const auto& i : items) depth = std::max(depth, nesting(i) + 1);
  check_nesting(depth);
  Value v;
  v.type_ = Type::List;
  v.ptr_ = std::make_shared<ListObj>(ListObj{std::move(items), tuple, view, depth});
  return v;
}
Value Value::dict(DictObj d) {
  d.depth = 1;
  for (const auto& kv : d.items) d.depth = std::max({d.depth, nesting(kv.first) + 1, nesting(kv.second) + 1});
  check_nesting(d.depth);
  Value v;
  v.type_ = Type::Dict;
  v.ptr_ = std::make_shared<DictObj>(std::move(d));
  return v;
}
Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.type_ = Type::Object;
  v.ptr_ = std::move(o);
  return v;
}
Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.type_ = Type::Function;
  v.ptr_ = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}
Value Value::from_json(const Json& j) { return jinja::from_json(j); }

const std::string& Value::undefined_hint() const {
  static const std::string empty;
  return ptr_ ? *static_cast<const std::string*>(ptr_.get()) : empty;
}

const Value* DictObj::find(const Value& key) const {
  for (const auto& kv : items)
    if (py_equals(kv.first, key)) return &kv.second;
  return nullptr;
}
const Value* DictObj::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first.is_string() && kv.first.str() == key) return &kv.second;
  return nullptr;
}
void DictObj::set(Value key, Value value) {
  if (key.is_list() || key.is_dict() || key.is_undefined())
    raise(0, fmt::format("unhashable type: '{}'", key.type_name()));
  for (auto& kv : items)
    if (py_equals(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* Object::find(std::string_view name) const {
  for (const auto& kv : attrs)
    if (kv.first == name) return &kv.second;
  return nullptr;
}
void Object::set(std::string_view name, Value value) {
  for (auto& kv : attrs)
    if (kv.first == name) {
      kv.second = std::move(value);
      return;
    }
  attrs.emplace_back(std::string(name), std::move(value));
}

Value CallArgs::get(size_t i, std::string_view name, Value dflt) const {
  if (i < pos.size()) return pos[i];
  for (const auto& kv : kw)
    if (kv.first == name) return kv.second;
  return dflt;
}
bool CallArgs::has(size_t i, std::string_view name) const {
  if (i < pos.size()) return true;
  for (const auto& kv : kw)
    if (kv.first == name) return true;
  return false;
}
void CallArgs::check(size_t max_pos, std::initializer_list<std::string_view> names) const {
  if (pos.size() > max_pos)
    raise(0, fmt::format("{}() takes at most {} positional arguments ({} given)", fn_name, max_pos, pos.size()));
  for (const auto& kv : kw) {
    bool ok = false;
    for (auto n : names) ok = ok || n == kv.first;
    if (!ok) raise(0, fmt::format("{}() got an unexpected keyword argument '{}'", fn_name, kv.first));
  }
}

// ---- truthiness and printing ----

bool Value::truthy() const {
  switch (type_) {
    case Type::Undefined:
    case Type::None: return false;
    case Type::Bool:
    case Type::Int: return num_.i != 0;
    case Type::Float: return num_.f != 0;
    case Type::String: return !str().empty();
    case Type::List: return !list().items.empty();
    case Type::Dict: return !dict().items.empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (type_) {
    case Type::Undefined: return "Undefined";
    case Type::None: return "NoneType";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Float: return "float";
    case Type::String: return "str";
    case Type::List: return list().tuple ? "tuple" : "list";
    case Type::Dict: return "dict";
    case Type::Object: return object().kind;
    case Type::Function: return "function";
  }
  return "?";
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then laid out as CPython's float_repr_style 'short' does:
  // positional for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, r.ptr - buf);
  bool neg = sci[0] == '-';
  if (neg) sci.remove_prefix(1);
  size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  int exp = std::atoi(std::string(sci.substr(e + 1)).c_str());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      ip.append(exp + 1 - ip.size(), '0');
      std::string fp = digits.size() > size_t(exp + 1) ? digits.substr(exp + 1) : "0";
      out += ip + "." + fp;
    } else {
      out += "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  }
  return out;
}

namespace {

bool py_isprintable(char32_t c) {
  if (c < 0x20 || c == 0x7f) return false;
  if (c < 0x7f) return true;
  switch (utf8proc_category(int32_t(c))) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

void repr_into(const Value& v, std::string& out, int depth);

void repr_seq(const std::vector<Value>& items, std::string& out, int depth) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    repr_into(items[i], out, depth + 1);
  }
}

void repr_into(const Value& v, std::string& out, int depth) {
  if (depth > 500) raise(0, "maximum recursion depth exceeded while getting the repr of an object");
  // Shared structure ([a, a] with a = [b, b] ...) prints exponentially more than it holds: each
  // element printed is charged, and the output checked as it grows.
  detail::budget_charge(v.is_string() ? v.str().size() : 0);
  detail::budget_check_size(out.size());
  switch (v.type()) {
    case Value::Type::Undefined: out += "Undefined"; return;
    case Value::Type::String: out += detail::py_str_repr(v.str()); return;
    case Value::Type::List: {
      const ListObj& l = v.list();
      static const char* const kViews[] = {"", "dict_keys(", "dict_values(", "dict_items("};
      out += kViews[int(l.view)];
      out += l.tuple ? '(' : '[';
      repr_seq(l.items, out, depth);
      if (l.tuple && l.items.size() == 1) out += ',';
      out += l.tuple ? ')' : ']';
      if (l.view != ListObj::View::None) out += ')';
      return;
    }
    case Value::Type::Dict: {
      out += '{';
      bool first = true;
      for (const auto& kv : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        repr_into(kv.first, out, depth + 1);
        out += ": ";
        repr_into(kv.second, out, depth + 1);
      }
      out += '}';
      return;
    }
    case Value::Type::Object: {
      const Object& o = v.object();
      if (o.kind == "Namespace") {
        out += "<Namespace {";
        bool first = true;
        for (const auto& kv : o.attrs) {
          if (!first) out += ", ";
          first = false;
          out += detail::py_str_repr(kv.first) + ": ";
          repr_into(kv.second, out, depth + 1);
        }
        out += "}>";
      } else if (o.kind == "LoopContext") {
        const Value* idx = o.find("index");
        const Value* len = o.find("length");
        out += fmt::format("<LoopContext {}/{}>", idx ? idx->to_str() : "?", len ? len->to_str() : "?");
      } else {
        out += "<" + o.kind + " object>";
      }
      return;
    }
    case Value::Type::Function: out += "<function " + v.function().name + ">"; return;
    default: out += v.to_str(); return;
  }
}

}  // namespace

std::string Value::to_str() const {
  switch (type_) {
    case Type::Undefined: return "";
    case Type::None: return "None";
    case Type::Bool: return num_.i ? "True" : "False";
    case Type::Int: return std::to_string(num_.i);
    case Type::Float: return py_float_repr(num_.f);
    case Type::String: return str();
    default: {
      std::string out;
      repr_into(*this, out, 0);
      return out;
    }
  }
}

std::string Value::repr() const {
  std::string out;
  repr_into(*this, out, 0);
  return out;
}

// ---- equality and ordering ----

bool py_equals(const Value& a, const Value& b) {
  using T = Value::Type;
  // Comparing shared structure visits every path: each visit is charged.
  detail::budget_charge(a.is_string() && b.is_string() ? std::min(a.str().size(), b.str().size()) : 0);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::Undefined:
    case T::None: return true;
    case T::String: return a.str() == b.str();
    case T::List: {
      const auto& x = a.list();
      const auto& y = b.list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!py_equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case T::Dict: {
      const auto& x = a.dict();
      const auto& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& kv : x.items) {
        const Value* o = y.find(kv.first);
        if (!o || !py_equals(kv.second, *o)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

namespace detail {

int py_compare(const Value& a, const Value& b) {
  detail::budget_charge(a.is_string() && b.is_string() ? std::min(a.str().size(), b.str().size()) : 0);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;  // NaN compares "equal" here; Python gives False for all
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!py_equals(x[i], y[i])) return py_compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  raise(0, fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

std::string py_str_repr(std::string_view s) {
  bool has_sq = s.find('\'') != std::string_view::npos;
  bool has_dq = s.find('"') != std::string_view::npos;
  char q = has_sq && !has_dq ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : to_u32(s)) {
    if (c == char32_t(q) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (py_isprintable(c)) {
      out += from_u32(std::u32string(1, c));
    } else if (c <= 0xff) {
      out += fmt::format("\\x{:02x}", uint32_t(c));
    } else if (c <= 0xffff) {
      out += fmt::format("\\u{:04x}", uint32_t(c));
    } else {
      out += fmt::format("\\U{:08x}", uint32_t(c));
    }
  }
  out += q;
  return out;
}

// ---- UTF-8 and Unicode ----

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (i + n > s.size()) n = 1;
    char32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (s[i + k] & 0x3f);
    if (n == 1 && c >= 0x80) cp = 0xfffd;  // cannot happen on sanitized input
    out += cp;
    i += n;
  }
  return out;
}

std::string from_u32(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t cp_count(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

bool py_isspace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

char32_t cp_upper(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  return char32_t(utf8proc_toupper(int32_t(c)));
}
char32_t cp_lower(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  return char32_t(utf8proc_tolower(int32_t(c)));
}
// str.upper()/lower() use Unicode's full case mappings where one character becomes several
// (SpecialCasing.txt); the common ones are listed, the rest use the simple mapping.
std::string str_upper(std::string_view s) {
  std::u32string u = to_u32(s), out;
  out.reserve(u.size());
  for (char32_t c : u) {
    switch (c) {
      case 0xdf: out += U"SS"; break;
      case 0x149: out += U"\u02bcN"; break;
      case 0x1f0: out += U"J\u030c"; break;
      case 0xfb00: out += U"FF"; break;
      case 0xfb01: out += U"FI"; break;
      case 0xfb02: out += U"FL"; break;
      case 0xfb03: out += U"FFI"; break;
      case 0xfb04: out += U"FFL"; break;
      case 0xfb05:
      case 0xfb06: out += U"ST"; break;
      default: out += cp_upper(c);
    }
  }
  return from_u32(out);
}
std::string str_lower(std::string_view s) {
  std::u32string u = to_u32(s), out;
  out.reserve(u.size());
  for (char32_t c : u) {
    if (c == 0x130) out += U"i\u0307";
    else out += cp_lower(c);
  }
  return from_u32(out);
}

// str.strip/lstrip/rstrip: `chars` none/undefined means whitespace, else a set of code points.
std::string py_strip(std::string_view s, const Value& chars, bool left, bool right) {
  std::u32string u = to_u32(s);
  std::u32string set;
  bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) {
    if (!chars.is_string()) raise(0, "strip arg must be None or str");
    set = to_u32(chars.str());
  }
  auto strip_it = [&](char32_t c) { return ws ? py_isspace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return from_u32(std::u32string_view(u).substr(b, e - b));
}

}  // namespace detail

// ---- JSON (Python's json.dumps) ----

namespace {

void json_str(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (char32_t c : detail::to_u32(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
          if (c > 0xffff) {
            char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", uint32_t(0xd800 | (v >> 10)), uint32_t(0xdc00 | (v & 0x3ff)));
          } else {
            out += fmt::format("\\u{:04x}", uint32_t(c));
          }
        } else {
          append_utf8(out, c);
        }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py_float_repr(d);
}

struct JsonWriter {
  bool ensure_ascii;
  const std::optional<std::string>& indent;
  const std::string& item_sep;
  const std::string& key_sep;
  bool sort_keys;
  std::string out;

  void newline(int level) {
    size_t add = 1 + size_t(level) * indent->size();  // an indent can be any string: check first
    detail::budget_check_size(out.size() + add);
    detail::budget_charge(add);
    out += '\n';
    for (int i = 0; i < level; ++i) out += *indent;
  }

  void write(const Value& v, int level) {
    if (level > 500) raise(0, "maximum recursion depth exceeded while encoding a JSON object");
    // As repr_into: shared structure and long separators cost what they produce.
    detail::budget_charge(item_sep.size() + key_sep.size() + (v.is_string() ? v.str().size() : 0));
    detail::budget_check_size(out.size() + item_sep.size() + key_sep.size());
    switch (v.type()) {
      case Value::Type::None: out += "null"; return;
      case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Type::Int: out += std::to_string(v.as_int()); return;
      case Value::Type::Float: out += json_float(v.as_double()); return;
      case Value::Type::String: json_str(v.str(), ensure_ascii, out); return;
      case Value::Type::List: {
        const auto& items = v.list().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent) newline(level + 1);
          write(items[i], level + 1);
        }
        if (indent) newline(level);
        out += ']';
        return;
      }
      case Value::Type::Dict: {
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : v.dict().items) items.push_back(&kv);
        if (items.empty()) {
          out += "{}";
          return;
        }
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(),
                           [](auto* x, auto* y) { return detail::py_compare(x->first, y->first) < 0; });
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent) newline(level + 1);
          const Value& k = items[i]->first;
          if (k.is_string()) json_str(k.str(), ensure_ascii, out);
          else if (k.is_float()) json_str(json_float(k.as_double()), ensure_ascii, out);
          else if (k.is_bool()) out += k.as_bool() ? "\"true\"" : "\"false\"";
          else if (k.is_int()) out += "\"" + std::to_string(k.as_int()) + "\"";
          else if (k.is_none()) out += "\"null\"";
          else raise(0, fmt::format("keys must be str, int, float, bool or None, not {}", k.type_name()));
          out += key_sep;
          write(items[i]->second, level + 1);
        }
        if (indent) newline(level);
        out += '}';
        return;
      }
      default:
        raise(0, fmt::format("Object of type {} is not JSON serializable", v.type_name()));
    }
  }
};

}  // namespace

std::string py_json_dumps(const Value& v, bool ensure_ascii, const std::optional<std::string>& indent,
                          const std::string& item_sep, const std::string& key_sep, bool sort_keys) {
  JsonWriter w{ensure_ascii, indent, item_sep, key_sep, sort_keys, {}};
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace kvad::jinja
