// A Jinja2 subset engine whose output matches Python's Jinja2 byte for byte on chat templates.
//
// It mirrors the environment transformers' apply_chat_template builds: trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False, the loopcontrols extension, an immutable
// sandbox (list.append & co. are errors), the default Undefined (prints "", errors on attribute
// access / arithmetic), and the globals raise_exception / strftime_now plus transformers' tojson.
//
// Values follow Python semantics because templates are written against Python objects: dicts keep
// insertion order, `{{ [1, 'a'] }}` prints Python's repr, floats print as Python's repr, `1 == 1.0`,
// True is an int, and so on. Where Python has arbitrary-precision ints we have int64 and report
// overflow as an error instead of silently wrapping.
//
// Files: jinja_lexer.cpp (source -> tokens, whitespace control), jinja_parser.cpp (tokens -> AST),
// jinja_scope.cpp (Jinja2's compile-time name resolution), jinja_value.cpp (Value, Python
// str/repr, JSON), jinja_ops.cpp (Python operators, len, iteration, `in`, `%` formatting),
// jinja_eval.cpp (statements, expressions, frames, limits), jinja_filters.cpp (filters),
// jinja_is.cpp (`is` tests), jinja_methods.cpp (str/dict/list methods, globals), jinja_ast.h
// (the internal AST and helpers shared by those files).
#pragma once
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/utf8.h"

namespace kvad::jinja {

class Value;
struct CallArgs;

struct ListObj {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b) instead of [a, b]
  // d.keys() / d.values() / d.items() results print as dict_keys([...]) etc.
  enum class View : uint8_t { None, Keys, Values, Items } view = View::None;
  uint32_t depth = 1;  // nesting depth, bounded so destruction and printing never overflow the stack
};

// Python dict: insertion-ordered; keys compare with Python == (so 1, 1.0 and True are one key).
struct DictObj {
  std::vector<std::pair<Value, Value>> items;
  uint32_t depth = 1;  // set by Value::dict
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

// Attribute bags: jinja's namespace() (mutable through `set ns.x = ...`) and the loop object.
struct Object {
  std::string kind;  // "Namespace", "LoopContext", "Cycler"
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value value);
};

using NativeFn = std::function<Value(CallArgs&)>;
struct Function {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  enum class Type : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Object, Function };

  Value() = default;  // undefined
  Value(bool b) : type_(Type::Bool) { num_.i = b; }
  Value(int v) : type_(Type::Int) { num_.i = v; }
  Value(int64_t v) : type_(Type::Int) { num_.i = v; }
  Value(double v) : type_(Type::Float) { num_.f = v; }
  Value(std::string s);
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}

  // `hint` is what a later error says about it: "'x' is undefined", "'dict object' has no
  // attribute 'y'".
  static Value undefined(std::string hint = "");
  static Value none();
  static Value list(std::vector<Value> items, bool tuple = false, ListObj::View view = ListObj::View::None);
  static Value dict(DictObj d);
  static Value object(std::shared_ptr<Object> o);
  static Value function(std::string name, NativeFn fn);
  // JSON -> Value (see jinja::from_json below).
  static Value from_json(const Json& j);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::Undefined; }
  bool is_none() const { return type_ == Type::None; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_float() const { return type_ == Type::Float; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Float || type_ == Type::Bool; }
  bool is_string() const { return type_ == Type::String; }
  bool is_list() const { return type_ == Type::List; }
  bool is_dict() const { return type_ == Type::Dict; }
  bool is_object() const { return type_ == Type::Object; }
  bool is_function() const { return type_ == Type::Function; }

  bool as_bool() const { return num_.i != 0; }
  int64_t as_int() const { return num_.i; }  // Bool and Int
  double as_double() const { return type_ == Type::Float ? num_.f : double(num_.i); }
  const std::string& str() const { return *static_cast<const std::string*>(ptr_.get()); }
  const ListObj& list() const { return *static_cast<const ListObj*>(ptr_.get()); }
  const DictObj& dict() const { return *static_cast<const DictObj*>(ptr_.get()); }
  Object& object() const { return *static_cast<Object*>(ptr_.get()); }
  const Function& function() const { return *static_cast<const Function*>(ptr_.get()); }
  const std::string& undefined_hint() const;
  bool same_object(const Value& o) const { return ptr_ == o.ptr_; }

  bool truthy() const;
  std::string to_str() const;   // Python str(): what {{ value }} prints
  std::string repr() const;     // Python repr()
  std::string type_name() const;  // Python's type name for messages: 'str', 'int', 'dict', ...

 private:
  Type type_ = Type::Undefined;
  union {
    int64_t i;
    double f;
  } num_{0};
  std::shared_ptr<void> ptr_;  // string / ListObj / DictObj / Object / Function / undefined hint
};

// Arguments of a call: positional then keyword, bound Python-style by `get`.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  std::string fn_name;  // for messages

  // The argument at position i or named `name`; `dflt` when neither is given.
  Value get(size_t i, std::string_view name, Value dflt = Value()) const;
  bool has(size_t i, std::string_view name) const;
  // Errors on more positional arguments than `max_pos` or keywords outside `names`.
  void check(size_t max_pos, std::initializer_list<std::string_view> names) const;
};

// JSON -> Value for any nlohmann basic_json (json or ordered_json): integers stay ints, floats stay
// floats (as Python's json.loads would), objects keep the order the JSON type iterates in (sorted
// for nlohmann::json, insertion order for ordered_json). Strings are made valid UTF-8 (ill-formed
// bytes become U+FFFD) so the engine can rely on that everywhere.
// Containers nested deeper than this are refused (from JSON input or built by a template).
constexpr uint32_t kMaxNesting = 512;

template <class J>
Value from_json(const J& j, uint32_t depth = 0) {
  if (depth >= kMaxNesting) throw Error(fmt::format("JSON nested deeper than {} levels", kMaxNesting));
  switch (j.type()) {
    case J::value_t::null: return Value::none();
    case J::value_t::boolean: return Value(j.template get<bool>());
    case J::value_t::number_integer: return Value(j.template get<int64_t>());
    case J::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value(int64_t(u)) : Value(double(u));
    }
    case J::value_t::number_float: return Value(j.template get<double>());
    case J::value_t::string: return Value(sanitize_utf8(j.template get_ref<const std::string&>()));
    case J::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case J::value_t::object: {
      DictObj d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d.items.emplace_back(Value(sanitize_utf8(it.key())), from_json(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default: return Value::none();  // binary / discarded: nothing a template can use
  }
}

// Python's == between values (1 == 1.0 == True, lists/dicts element-wise).
bool py_equals(const Value& a, const Value& b);
// Python's float repr ('1.0', '1e+16', '0.1').
std::string py_float_repr(double d);
// Python's json.dumps(v, ensure_ascii=..., indent=..., separators=..., sort_keys=...). indent is
// the indent string (std::nullopt: single line). Throws kvad::Error for values JSON can't hold.
std::string py_json_dumps(const Value& v, bool ensure_ascii, const std::optional<std::string>& indent,
                          const std::string& item_sep, const std::string& key_sep, bool sort_keys);

struct RenderOptions {
  // The time strftime_now() formats; unset: the current local time (Python's datetime.now()).
  std::optional<std::tm> now;
  size_t max_output = size_t(64) << 20;  // bytes of output (and of any one string built)
  // Evaluation steps, so no template can run forever. Building a string or container charges one
  // step per 32 bytes/items, so the steps also bound the bytes built in total (~640 MB).
  uint64_t max_steps = 20'000'000;
  // Wall-clock limit on one render; real chat templates render in well under 10 ms.
  double max_seconds = 10;
};

class Template {
 public:
  // Parses the template. A syntax error, an unknown filter or test throws kvad::Error
  // "<name>:<line>: <what is wrong>".
  Template(std::string_view source, std::string name);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the given variables on top of the globals (range, namespace, dict, cycler,
  // joiner, raise_exception, strftime_now). Errors (undefined misuse, type errors,
  // raise_exception) throw kvad::Error "<name>:<line>: ...".
  std::string render(const std::vector<std::pair<std::string, Value>>& vars,
                     const RenderOptions& opts = RenderOptions()) const;

  const std::string& name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvad::jinja
