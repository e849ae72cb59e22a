// Jinja2's builtin filters, with the argument names and defaults of jinja2/filters.py, plus
// transformers' tojson (json.dumps with ensure_ascii=False, no HTML
// escaping, indent/separators/sort_keys passed through).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tokenizer/jinja_ast.h"

namespace kvad::jinja::detail {

namespace {

int64_t to_int_arg(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_float()) return int64_t(v.as_double());
  raise(0, fmt::format("'{}' must be an integer, not {}", what, v.type_name()));
}

std::string req_str(const Value& v, const char* what) {
  if (!v.is_string()) raise(0, fmt::format("{} must be a string, not {}", what, v.type_name()));
  return v.str();
}

// jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0, each with getitem semantics.
Value get_attr_path(Evaluator& ev, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return ev.getitem(item, attribute);
  Value cur = item;
  const std::string& path = attribute.str();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits && part.size() < 18 ? ev.getitem(cur, Value(int64_t(std::stoll(part)))) : ev.getitem(cur, Value(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

// sort/min/max/unique compare strings case-insensitively unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(str_lower(v.str())) : v;
}

std::vector<Value> seq_of(const Value& v) { return iterate(v); }

Value f_abs(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) raise(0, "integer overflow");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  raise(0, fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_attr(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(1, {"name"});
  // Python attributes only (getattr), never items: d|attr('key') is undefined for a dict key.
  std::string name = a.get(0, "name").to_str();
  if (v.is_object()) {
    if (const Value* x = v.object().find(name)) return *x;
  } else {
    Value m = bound_method(ev, v, name);
    if (!m.is_undefined()) return m;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", v.type_name(), name));
}

Value f_batch(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(2, {"linecount", "fill_with"});
  int64_t n = to_int_arg(a.get(0, "linecount", Value(1)), "linecount");
  if (n <= 0) raise(0, "batch size must be positive");
  Value fill = a.get(1, "fill_with", Value::none());
  std::vector<Value> out, cur;
  for (auto& item : seq_of(v)) {
    cur.push_back(item);
    if (int64_t(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    if (!fill.is_none())
      while (int64_t(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value::list(std::move(cur)));
  }
  ev.charge(out.size());
  return Value::list(std::move(out));
}

Value f_capitalize(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  std::u32string u = to_u32(v.to_str());
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? cp_upper(u[i]) : cp_lower(u[i]);
  return Value(from_u32(u));
}

Value f_center(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(1, {"width"});
  std::string s = v.to_str();
  int64_t width = to_int_arg(a.get(0, "width", Value(80)), "width");
  int64_t n = int64_t(cp_count(s));
  if (width <= n) return Value(s);
  ev.check_size(size_t(width));
  int64_t pad = width - n;
  int64_t left = pad / 2 + (pad & width & 1);  // CPython's centering rule
  return Value(std::string(size_t(left), ' ') + s + std::string(size_t(pad - left), ' '));
}

Value f_default(Evaluator&, const Value& v, CallArgs& a) {
  a.check(2, {"default_value", "boolean"});
  Value dflt = a.get(0, "default_value", Value(""));
  bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return dflt;
  return v;
}

Value f_dictsort(Evaluator&, const Value& v, CallArgs& a) {
  a.check(3, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) raise(0, "dictsort requires a mapping");
  bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  std::string by = a.get(1, "by", Value("key")).to_str();
  bool rev = a.get(2, "reverse", Value(false)).truthy();
  if (by != "key" && by != "value") raise(0, "You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items;
  for (const auto& kv : v.dict().items) items.push_back(Value::list({kv.first, kv.second}, true));
  size_t idx = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    int c = py_compare(sort_key(x.list().items[idx], cs), sort_key(y.list().items[idx], cs));
    return rev ? c > 0 : c < 0;
  });
  return Value::list(std::move(items));
}

Value f_escape(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  std::string out;
  for (char c : v.to_str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

Value f_first(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  if (v.is_list()) return v.list().items.empty() ? Value::undefined("No first item, sequence was empty.") : v.list().items[0];
  auto items = seq_of(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items[0];
}

Value f_last(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  if (v.is_list()) return v.list().items.empty() ? Value::undefined("No last item, sequence was empty.") : v.list().items.back();
  auto items = seq_of(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

// Python float(str): surrounding whitespace, underscores between digits, inf/nan spellings.
bool parse_py_float(std::string s, double* out) {
  s = py_strip(s, Value::none(), true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !isdigit((unsigned char)s[i - 1]) || !isdigit((unsigned char)s[i + 1]))
        return false;
      continue;
    }
    t += s[i];
  }
  std::string low = str_lower(t);
  std::string body = low.size() && (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double r = body == "nan" ? NAN : INFINITY;
    *out = low[0] == '-' ? -r : r;
    return true;
  }
  if (body.empty() || body.find_first_not_of("0123456789.e+-") != std::string::npos) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end && *end == 0;
}

// Python int(str, base 10): whitespace, sign, underscores between digits.
bool parse_py_int(std::string s, int64_t* out) {
  s = py_strip(s, Value::none(), true, true);
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i >= s.size() || !isdigit((unsigned char)s[i])) return false;
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && i + 1 < s.size() && isdigit((unsigned char)s[i + 1]) && isdigit((unsigned char)s[i - 1])) continue;
    if (!isdigit((unsigned char)s[i])) return false;
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v)) return false;
  }
  *out = neg ? -v : v;
  return true;
}

// int()/float() of an Undefined raise (Undefined.__int__/__float__), unlike most filters.
void no_undefined(const Value& v) {
  if (v.is_undefined()) raise(0, v.undefined_hint().empty() ? "Undefined value used" : v.undefined_hint());
}

Value f_float(Evaluator&, const Value& v, CallArgs& a) {
  a.check(1, {"default"});
  no_undefined(v);
  Value dflt = a.get(0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  double d;
  if (v.is_string() && parse_py_float(v.str(), &d)) return Value(d);
  return dflt;
}

Value f_int(Evaluator&, const Value& v, CallArgs& a) {
  a.check(2, {"default", "base"});
  no_undefined(v);
  Value dflt = a.get(0, "default", Value(0));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    double d = v.as_double();
    if (std::isnan(d) || std::isinf(d)) raise(0, "cannot convert float infinity or NaN to integer");
    if (std::fabs(d) >= 9.2e18) raise(0, "integer overflow");
    return Value(int64_t(d));
  }
  if (v.is_string()) {
    int64_t i;
    if (parse_py_int(v.str(), &i)) return Value(i);
    double d;
    if (parse_py_float(v.str(), &d)) {  // "42.23"|int == 42
      if (std::isnan(d) || std::isinf(d)) return dflt;
      if (std::fabs(d) >= 9.2e18) raise(0, "integer overflow");
      return Value(int64_t(d));
    }
  }
  return dflt;
}

Value f_indent(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(3, {"width", "first", "blank"});
  Value w = a.get(0, "width", Value(4));
  bool first = a.get(1, "first", Value(false)).truthy();
  bool blank = a.get(2, "blank", Value(false)).truthy();
  std::string ind = w.is_string() ? w.str() : std::string(size_t(std::clamp<int64_t>(to_int_arg(w, "width"), 0, 1 << 16)), ' ');
  if (!v.is_string()) raise(0, fmt::format("indent expects a string, not {}", v.type_name()));
  std::string s = v.str();
  std::string nl = "\n";
  s += nl;  // jinja appends a newline, splits into lines, and drops the last one again
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\n') {
      lines.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    bool indent_it = i == 0 ? first : (blank || !py_strip(line, Value::none(), true, true).empty());
    if (i) out += nl;
    if (indent_it) out += ind;
    out += line;
    ev.check_size(out.size());
  }
  return Value(std::move(out));
}

Value f_items(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) raise(0, fmt::format("Can only get item pairs from a mapping, not {}", v.type_name()));
  std::vector<Value> out;
  for (const auto& kv : v.dict().items) out.push_back(Value::list({kv.first, kv.second}, true));
  return Value::list(std::move(out));
}

Value f_join(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(2, {"d", "attribute"});
  std::string sep = a.get(0, "d", Value("")).to_str();
  Value attr = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (auto& item : seq_of(v)) {
    if (!first) out += sep;
    first = false;
    out += (attr.is_none() ? item : get_attr_path(ev, item, attr)).to_str();
    ev.check_size(out.size());
  }
  ev.charge(out.size());
  return Value(std::move(out));
}

Value f_length(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return Value(py_len(v));
}

Value f_list(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return Value::list(seq_of(v));  // a plain list, also from tuples and dict views
}

Value f_lower(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return Value(str_lower(v.to_str()));
}

Value f_upper(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return Value(str_upper(v.to_str()));
}

Value f_map(Evaluator& ev, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  auto items = v.truthy() ? seq_of(v) : std::vector<Value>();  // jinja: `if value: for item in value`
  ev.charge(items.size());
  if (a.pos.empty()) {  // map(attribute='x', default=...)
    Value attr = a.get(99, "attribute");
    if (attr.is_undefined()) raise(0, "map requires a filter name or attribute=");
    Value dflt = a.get(99, "default");
    bool has_default = a.has(99, "default");
    for (const auto& kv : a.kw)
      if (kv.first != "attribute" && kv.first != "default") raise(0, fmt::format("Unexpected keyword argument '{}'", kv.first));
    for (auto& item : items) {
      Value r = get_attr_path(ev, item, attr);
      out.push_back(r.is_undefined() && has_default ? dflt : r);
    }
    return Value::list(std::move(out));
  }
  std::string name = req_str(a.pos[0], "filter name");
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (auto& item : items) {
    CallArgs call = rest;
    out.push_back(ev.apply_filter(name, item, call));
  }
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr share jinja's select_or_reject.
Value select_impl(Evaluator& ev, const Value& v, CallArgs& a, bool by_attr, bool keep) {
  size_t first_test_arg = by_attr ? 1 : 0;
  Value attr;
  if (by_attr) {
    if (a.pos.empty()) raise(0, "Missing parameter for attribute name");
    attr = a.pos[0];
  }
  bool has_test = a.pos.size() > first_test_arg;
  std::string test = has_test ? req_str(a.pos[first_test_arg], "test name") : "";
  CallArgs targs;
  if (has_test) targs.pos.assign(a.pos.begin() + first_test_arg + 1, a.pos.end());
  targs.kw = a.kw;
  std::vector<Value> out;
  auto items = v.truthy() ? seq_of(v) : std::vector<Value>();  // jinja: `if seq: for item in seq`
  ev.charge(items.size());
  for (auto& item : items) {
    Value x = by_attr ? get_attr_path(ev, item, attr) : item;
    bool ok;
    if (has_test) {
      CallArgs call = targs;
      ok = ev.apply_test(test, x, call);
    } else {
      ok = x.truthy();
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, false, true); }
Value f_reject(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, false, false); }
Value f_selectattr(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, true, true); }
Value f_rejectattr(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, true, false); }

Value min_max(Evaluator& ev, const Value& v, CallArgs& a, bool want_max) {
  a.check(2, {"case_sensitive", "attribute"});
  bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attr = a.get(1, "attribute", Value::none());
  auto items = seq_of(v);
  if (items.empty()) return Value::undefined(fmt::format("No aggregated item, sequence was empty."));
  size_t best = 0;
  auto key = [&](const Value& x) { return sort_key(attr.is_none() ? x : get_attr_path(ev, x, attr), cs); };
  Value bk = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    int c = py_compare(k, bk);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      bk = k;
    }
  }
  return items[best];
}
Value f_max(Evaluator& ev, const Value& v, CallArgs& a) { return min_max(ev, v, a, true); }
Value f_min(Evaluator& ev, const Value& v, CallArgs& a) { return min_max(ev, v, a, false); }

Value f_replace(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(3, {"old", "new", "count"});
  std::string s = v.to_str();
  std::string olds = a.get(0, "old").to_str();
  std::string news = a.get(1, "new").to_str();
  Value cnt = a.get(2, "count", Value::none());
  int64_t count = cnt.is_none() ? -1 : to_int_arg(cnt, "count");
  CallArgs m;
  m.pos = {Value(olds), Value(news), Value(count)};
  m.fn_name = "replace";
  Value method = bound_method(ev, Value(s), "replace");
  return ev.call(method, m);
}

Value f_reverse(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  if (v.is_string()) {
    std::u32string u = to_u32(v.str());
    std::reverse(u.begin(), u.end());
    return Value(from_u32(u));
  }
  auto items = seq_of(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

// Python's round(x, n) for floats: correctly rounded, ties to even on the exact binary value,
// which is what printf's %.*f computes.
double py_round(double x, int64_t n) {
  if (std::isnan(x) || std::isinf(x) || n > 300) return x;
  if (n < -308) return std::copysign(0.0, x);
  if (n >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", int(n), x);
    return std::strtod(buf, nullptr);
  }
  double p = std::pow(10.0, double(-n));
  double y = x / p;
  double r = std::nearbyint(y);  // default rounding mode: ties to even
  return r * p;
}

Value f_round(Evaluator&, const Value& v, CallArgs& a) {
  a.check(2, {"precision", "method"});
  int64_t prec = to_int_arg(a.get(0, "precision", Value(0)), "precision");
  std::string method = a.get(1, "method", Value("common")).to_str();
  if (method != "common" && method != "ceil" && method != "floor")
    raise(0, "method must be common, ceil or floor");
  if (!v.is_number()) raise(0, fmt::format("type {} doesn't define __round__ method", v.type_name()));
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());  // round(int, n) stays an int
    return Value(py_round(v.as_double(), prec));
  }
  double p = std::pow(10.0, double(prec));
  double x = v.as_double() * p;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value f_safe(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return v;
}

Value f_slice(Evaluator&, const Value& v, CallArgs& a) {
  a.check(2, {"slices", "fill_with"});
  int64_t slices = to_int_arg(a.get(0, "slices"), "slices");
  if (slices <= 0 || slices > 100000) raise(0, "invalid number of slices");
  Value fill = a.get(1, "fill_with", Value::none());
  auto items = seq_of(v);
  int64_t n = int64_t(items.size());
  int64_t per = n / slices, extra = n % slices, offset = 0;
  std::vector<Value> out;
  for (int64_t i = 0; i < slices; ++i) {
    int64_t start = offset + i * per;
    if (i < extra) ++offset;
    int64_t end = offset + (i + 1) * per;
    std::vector<Value> part(items.begin() + start, items.begin() + end);
    if (!fill.is_none() && i >= extra) part.push_back(fill);
    out.push_back(Value::list(std::move(part)));
  }
  return Value::list(std::move(out));
}

Value f_sort(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(3, {"reverse", "case_sensitive", "attribute"});
  bool rev = a.get(0, "reverse", Value(false)).truthy();
  bool cs = a.get(1, "case_sensitive", Value(false)).truthy();
  Value attr = a.get(2, "attribute", Value::none());
  auto items = seq_of(v);
  std::vector<Value> keys;
  for (auto& x : items) keys.push_back(sort_key(attr.is_none() ? x : get_attr_path(ev, x, attr), cs));
  std::vector<size_t> idx(items.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  ev.charge(items.size() * 8);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
    int c = py_compare(keys[x], keys[y]);
    return rev ? c > 0 : c < 0;
  });
  std::vector<Value> out;
  for (size_t i : idx) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value f_string(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return Value(v.to_str());
}

Value f_sum(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(2, {"attribute", "start"});
  Value attr = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value(0));
  for (auto& x : seq_of(v)) total = binary_op(ev, BinOp::Add, total, attr.is_none() ? x : get_attr_path(ev, x, attr));
  return total;
}

Value f_title(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  // jinja splits on runs of [-\s({\[<] and capitalizes each piece (not Python's str.title()).
  std::u32string u = to_u32(v.to_str());
  auto is_sep = [](char32_t c) { return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  bool start = true;
  for (auto& c : u) {
    if (is_sep(c)) {
      start = true;
      continue;
    }
    c = start ? cp_upper(c) : cp_lower(c);
    start = false;
  }
  return Value(from_u32(u));
}

Value f_tojson(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  bool ascii = a.get(0, "ensure_ascii", Value(false)).truthy();
  Value ind = a.get(1, "indent", Value::none());
  Value seps = a.get(2, "separators", Value::none());
  bool sort = a.get(3, "sort_keys", Value(false)).truthy();
  std::optional<std::string> indent;
  if (ind.is_string()) indent = ind.str();
  else if (ind.is_int() || ind.is_bool()) indent = std::string(size_t(std::clamp<int64_t>(ind.as_int(), 0, 1 << 12)), ' ');
  else if (!ind.is_none()) raise(0, "indent must be an int or a string");
  std::string item_sep = indent ? "," : ", ", key_sep = ": ";
  if (!seps.is_none()) {
    auto parts = seq_of(seps);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
      raise(0, "separators must be a (item_separator, key_separator) pair of strings");
    item_sep = parts[0].str();
    key_sep = parts[1].str();
  }
  std::string out = py_json_dumps(v, ascii, indent, item_sep, key_sep, sort);
  ev.check_size(out.size());
  ev.charge(out.size());
  return Value(std::move(out));
}

Value f_trim(Evaluator&, const Value& v, CallArgs& a) {
  a.check(1, {"chars"});
  return Value(py_strip(v.to_str(), a.get(0, "chars", Value::none()), true, true));
}

Value f_truncate(Evaluator&, const Value& v, CallArgs& a) {
  a.check(4, {"length", "killwords", "end", "leeway"});
  std::u32string s = to_u32(v.to_str());
  int64_t length = to_int_arg(a.get(0, "length", Value(255)), "length");
  bool killwords = a.get(1, "killwords", Value(false)).truthy();
  std::u32string end = to_u32(a.get(2, "end", Value("...")).to_str());
  Value lw = a.get(3, "leeway", Value::none());
  int64_t leeway = lw.is_none() ? 5 : to_int_arg(lw, "leeway");
  if (length < int64_t(end.size())) raise(0, "expected length >= len(end)");
  if (leeway < 0) raise(0, "expected leeway >= 0");
  if (int64_t(s.size()) <= length + leeway) return Value(from_u32(s));
  std::u32string cut = s.substr(0, size_t(length - int64_t(end.size())));
  if (killwords) return Value(from_u32(cut + end));
  size_t sp = cut.rfind(U' ');
  std::u32string result = sp == std::u32string::npos ? std::u32string() : cut.substr(0, sp);
  return Value(from_u32(result + end));
}

Value f_unique(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(2, {"case_sensitive", "attribute"});
  bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attr = a.get(1, "attribute", Value::none());
  std::vector<Value> out, seen;
  auto items = seq_of(v);
  ev.charge(items.size() * items.size() / 8);
  for (auto& x : items) {
    Value k = sort_key(attr.is_none() ? x : get_attr_path(ev, x, attr), cs);
    bool dup = false;
    for (auto& s : seen) dup = dup || py_equals(s, k);
    if (!dup) {
      seen.push_back(k);
      out.push_back(x);
    }
  }
  return Value::list(std::move(out));
}

Value f_wordcount(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  // jinja counts matches of \w+.
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : to_u32(v.to_str())) {
    bool w = c == '_' || (c < 0x80 ? isalnum(int(c)) != 0 : !py_isspace(c) && c > 0xbf);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_format(Evaluator& ev, const Value& v, CallArgs& a) {
  if (!a.pos.empty() && !a.kw.empty()) raise(0, "can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.kw.empty()) {
    DictObj d;
    for (auto& kv : a.kw) d.set(Value(kv.first), kv.second);
    args = Value::dict(std::move(d));
  } else {
    args = Value::list(a.pos, true);
  }
  return py_str_format(ev, v.to_str(), args);
}

Value f_count(Evaluator& ev, const Value& v, CallArgs& a) { return f_length(ev, v, a); }

struct FilterEntry {
  const char* name;
  FilterFn fn;
};
const FilterEntry kFilters[] = {
    {"abs", f_abs},         {"attr", f_attr},           {"batch", f_batch},       {"capitalize", f_capitalize},
    {"center", f_center},   {"count", f_count},         {"d", f_default},         {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},     {"first", f_first},
    {"float", f_float},     {"forceescape", f_escape},  {"format", f_format},     {"indent", f_indent},
    {"int", f_int},         {"items", f_items},         {"join", f_join},         {"last", f_last},
    {"length", f_length},   {"list", f_list},           {"lower", f_lower},       {"map", f_map},
    {"max", f_max},         {"min", f_min},             {"reject", f_reject},     {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse},     {"round", f_round},       {"safe", f_safe},
    {"select", f_select},   {"selectattr", f_selectattr}, {"slice", f_slice},     {"sort", f_sort},
    {"string", f_string},   {"sum", f_sum},             {"title", f_title},       {"tojson", f_tojson},
    {"trim", f_trim},       {"truncate", f_truncate},   {"unique", f_unique},     {"upper", f_upper},
    {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (name == f.name) return f.fn;
  return nullptr;
}

}  // namespace kvad::jinja::detail
