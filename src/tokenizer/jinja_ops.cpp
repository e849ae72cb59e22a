// Python's operators on values: + - * / // % ** with Python's int/float rules (floor division and
// modulo round toward negative infinity, / is always true division), sequence concatenation and
// repetition, printf-style `str % args`, len(), iteration and `in`.
#include <cmath>
#include <cstring>

#include "tokenizer/jinja_ast.h"

namespace kvad::jinja::detail {

namespace {

[[noreturn]] void type_error(const char* op, const Value& a, const Value& b) {
  raise(0, fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

// Jinja's default Undefined refuses arithmetic: the error names what was undefined.
[[noreturn]] void undefined_error(const Value& u) {
  raise(0, u.undefined_hint().empty() ? "Undefined value used in an expression" : u.undefined_hint());
}

// Python ints are unbounded; ours are int64, so overflow is an error rather than a wrap.
void overflow_check(bool overflow) {
  if (overflow) raise(0, "integer overflow (values beyond 64 bits are not supported)");
}

// CPython's float_divmod: the floor quotient and a remainder with the divisor's sign.
void float_divmod(double vx, double wx, double* div, double* mod) {
  if (wx == 0) raise(0, "float division by zero");
  double m = std::fmod(vx, wx);
  double d = (vx - m) / wx;
  if (m != 0) {
    if ((wx < 0) != (m < 0)) {
      m += wx;
      d -= 1.0;
    }
  } else {
    m = std::copysign(0.0, wx);
  }
  double fd;
  if (d != 0) {
    fd = std::floor(d);
    if (d - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  *div = fd;
  *mod = m;
}

Value repeat(Evaluator& ev, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value(std::string()) : Value::list({}, seq.list().tuple);
  if (seq.is_string()) {
    uint64_t total;
    if (__builtin_mul_overflow(uint64_t(seq.str().size()), uint64_t(n), &total)) total = UINT64_MAX;
    ev.check_size(total);
    ev.charge(total);
    std::string out;
    out.reserve(total);
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  const auto& items = seq.list().items;
  uint64_t total;
  if (__builtin_mul_overflow(uint64_t(items.size()), uint64_t(n), &total)) total = UINT64_MAX;
  ev.check_size(total);
  ev.charge(total * 8);
  std::vector<Value> out;
  out.reserve(total);
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.list().tuple);
}

}  // namespace

Value binary_op(Evaluator& ev, BinOp op, const Value& a, const Value& b) {
  if (op == BinOp::Mod && a.is_string()) return py_str_format(ev, a.str(), b);  // str.__mod__ decides
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  bool nums = a.is_number() && b.is_number();
  switch (op) {
    case BinOp::Add:
      if (ints) {
        int64_t r = 0;
        overflow_check(__builtin_add_overflow(a.as_int(), b.as_int(), &r));
        return Value(r);
      }
      if (nums) return Value(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        ev.check_size(a.str().size() + b.str().size());
        ev.charge(a.str().size() + b.str().size());
        return Value(a.str() + b.str());
      }
      if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
        ev.check_size(a.list().items.size() + b.list().items.size());
        ev.charge(8 * (a.list().items.size() + b.list().items.size()));
        std::vector<Value> out = a.list().items;
        out.insert(out.end(), b.list().items.begin(), b.list().items.end());
        return Value::list(std::move(out), a.list().tuple);
      }
      if (a.is_string() || b.is_string())
        raise(0, fmt::format("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name()));
      type_error("+", a, b);
    case BinOp::Sub:
      if (ints) {
        int64_t r = 0;
        overflow_check(__builtin_sub_overflow(a.as_int(), b.as_int(), &r));
        return Value(r);
      }
      if (nums) return Value(a.as_double() - b.as_double());
      type_error("-", a, b);
    case BinOp::Mul:
      if (ints) {
        int64_t r = 0;
        overflow_check(__builtin_mul_overflow(a.as_int(), b.as_int(), &r));
        return Value(r);
      }
      if (nums) return Value(a.as_double() * b.as_double());
      if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(ev, a, b.as_int());
      if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(ev, b, a.as_int());
      type_error("*", a, b);
    case BinOp::Div:
      if (nums) {
        if (b.as_double() == 0) raise(0, "division by zero");
        return Value(a.as_double() / b.as_double());
      }
      type_error("/", a, b);
    case BinOp::FloorDiv:
    case BinOp::Mod:
      if (op == BinOp::Mod && a.is_string()) return py_str_format(ev, a.str(), b);
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) raise(0, op == BinOp::Mod ? "integer modulo by zero" : "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
          if (op == BinOp::Mod) return Value(int64_t(0));
          overflow_check(true);
        }
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          r += y;
          q -= 1;
        }
        return Value(op == BinOp::Mod ? r : q);
      }
      if (nums) {
        double d, m;
        float_divmod(a.as_double(), b.as_double(), &d, &m);
        return Value(op == BinOp::Mod ? m : d);
      }
      type_error(op == BinOp::Mod ? "%" : "//", a, b);
    case BinOp::Pow:
      if (ints) {
        int64_t base = a.as_int(), e = b.as_int();
        if (e < 0) {
          if (base == 0) raise(0, "0.0 cannot be raised to a negative power");
          return Value(std::pow(double(base), double(e)));
        }
        int64_t r = 1;
        while (e > 0) {
          if (e & 1) overflow_check(__builtin_mul_overflow(r, base, &r));
          e >>= 1;
          if (e) overflow_check(__builtin_mul_overflow(base, base, &base));
        }
        return Value(r);
      }
      if (nums) {
        double x = a.as_double(), y = b.as_double();
        if (x == 0 && y < 0) raise(0, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) raise(0, "complex results are not supported");
        return Value(std::pow(x, y));
      }
      type_error("** or pow()", a, b);
  }
  raise(0, "bad operator");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return {};  // Jinja's Undefined iterates as empty
    case Value::Type::List: return v.list().items;
    case Value::Type::Dict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().items.size());
      for (const auto& kv : v.dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Type::String: {
      std::vector<Value> chars;
      const std::string& s = v.str();
      for (size_t i = 0; i < s.size();) {
        size_t n = 1;
        while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xc0) == 0x80) ++n;
        chars.emplace_back(s.substr(i, n));
        i += n;
      }
      return chars;
    }
    default: raise(0, fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

int64_t py_len(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return 0;
    case Value::Type::String: return int64_t(cp_count(v.str()));
    case Value::Type::List: return int64_t(v.list().items.size());
    case Value::Type::Dict: return int64_t(v.dict().items.size());
    default: raise(0, fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

bool py_contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::Undefined: return false;
    case Value::Type::String:
      if (!item.is_string())
        raise(0, fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::List:
      for (const auto& e : container.list().items)
        if (py_equals(e, item)) return true;
      return false;
    case Value::Type::Dict:
      if (item.is_list() || item.is_dict()) raise(0, fmt::format("unhashable type: '{}'", item.type_name()));
      return container.dict().find(item) != nullptr;
    default: raise(0, fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

// printf-style formatting: %s %r %d %i %f %F %e %g %x %o %c %%, with flags/width/precision, and
// %(name)s with a dict argument.
Value py_str_format(Evaluator& ev, const std::string& fmt_str, const Value& args) {
  std::vector<Value> pos;
  const DictObj* named = nullptr;
  if (args.is_list() && args.list().tuple) pos = args.list().items;
  else if (args.is_dict()) named = &args.dict();
  else pos.push_back(args);
  size_t next_arg = 0;
  std::string out;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    char c = fmt_str[i];
    if (c != '%') {
      out += c;
      continue;
    }
    if (++i >= fmt_str.size()) raise(0, "incomplete format");
    if (fmt_str[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (fmt_str[i] == '(') {
      size_t close = fmt_str.find(')', i);
      if (close == std::string::npos) raise(0, "incomplete format key");
      if (!named) raise(0, "format requires a mapping");
      arg = named->find(std::string_view(fmt_str).substr(i + 1, close - i - 1));
      if (!arg) raise(0, "KeyError: " + fmt_str.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    std::string flags;
    while (i < fmt_str.size() && std::strchr("-+ #0", fmt_str[i]) && fmt_str[i]) flags += fmt_str[i++];
    std::string width, prec;
    while (i < fmt_str.size() && isdigit(static_cast<unsigned char>(fmt_str[i]))) width += fmt_str[i++];
    if (i < fmt_str.size() && fmt_str[i] == '.') {
      prec = ".";
      ++i;
      while (i < fmt_str.size() && isdigit(static_cast<unsigned char>(fmt_str[i]))) prec += fmt_str[i++];
    }
    if (width.size() > 4 || prec.size() > 5) raise(0, "format width too large");
    if (i >= fmt_str.size()) raise(0, "incomplete format");
    char conv = fmt_str[i];
    if (!arg) {
      if (next_arg >= pos.size()) raise(0, "not enough arguments for format string");
      arg = &pos[next_arg++];
    }
    std::string spec = "%" + flags + width + prec;
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        std::string s = conv == 's' ? arg->to_str() : arg->repr();
        if (!prec.empty()) s = from_u32(to_u32(s).substr(0, std::atoi(prec.c_str() + 1)));
        size_t w = width.empty() ? 0 : std::atoi(width.c_str());
        size_t n = cp_count(s);
        if (n < w) s = flags.find('-') != std::string::npos ? s + std::string(w - n, ' ') : std::string(w - n, ' ') + s;
        out += s;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!arg->is_number()) raise(0, fmt::format("%{} format: a real number is required, not {}", conv, arg->type_name()));
        long long v = arg->is_float() ? (long long)std::trunc(arg->as_double()) : arg->as_int();
        std::snprintf(buf, sizeof buf, (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), v);
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg->is_number()) raise(0, fmt::format("must be real number, not {}", arg->type_name()));
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), arg->as_double());
        out += buf;
        break;
      }
      case 'c':
        if (arg->is_string() && cp_count(arg->str()) == 1) out += arg->str();
        else if (arg->is_int() && arg->as_int() >= 0 && arg->as_int() <= 0x10ffff) append_utf8(out, char32_t(arg->as_int()));
        else raise(0, "%c requires int or char");
        break;
      default: raise(0, fmt::format("unsupported format character '{}'", conv));
    }
    ev.check_size(out.size());
  }
  // Python treats an argument with __getitem__ (dict, Undefined) as a mapping: no leftover check.
  if (!named && !args.is_undefined() && next_arg < pos.size())
    raise(0, "not all arguments converted during string formatting");
  return Value(std::move(out));
}

}  // namespace kvad::jinja::detail
