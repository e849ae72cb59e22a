// Python methods reachable from templates (message.content.startswith(...), d.items(), ...) and
// the template globals. Methods index by code point like Python's str, and follow the
// ImmutableSandboxedEnvironment: methods that would mutate a list or dict are refused.
#include <chrono>
#include <cstring>

#include "tokenizer/jinja_ast.h"

namespace kvad::jinja::detail {

namespace {

std::string arg_str(const Value& v, const char* fn) {
  if (!v.is_string()) raise(0, fmt::format("{}() argument must be str, not {}", fn, v.type_name()));
  return v.str();
}

// Python's optional start/end code point bounds, resolved against n.
void bounds(const CallArgs& a, size_t i, int64_t n, int64_t* start, int64_t* end) {
  auto norm = [n](const Value& v, int64_t dflt) {
    if (v.is_none() || v.is_undefined()) return dflt;
    if (!v.is_int() && !v.is_bool()) raise(0, "slice indices must be integers or None");
    int64_t x = v.as_int();
    if (x < 0) x = std::max<int64_t>(0, x + n);
    return std::min(x, n);
  };
  *start = norm(a.get(i, "start", Value::none()), 0);
  *end = norm(a.get(i + 1, "end", Value::none()), n);
}

// Split on runs of whitespace (sep=None) or on an exact separator, like str.split/rsplit.
std::vector<Value> split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    std::u32string u = to_u32(s);
    std::vector<std::u32string> words;
    if (!from_right) {
      size_t i = 0;
      while (i < u.size()) {
        while (i < u.size() && py_isspace(u[i])) ++i;
        if (i >= u.size()) break;
        if (maxsplit >= 0 && int64_t(words.size()) == maxsplit) {
          size_t e = u.size();
          while (e > i && py_isspace(u[e - 1])) --e;
          words.push_back(u.substr(i, e - i));
          break;
        }
        size_t j = i;
        while (j < u.size() && !py_isspace(u[j])) ++j;
        words.push_back(u.substr(i, j - i));
        i = j;
      }
    } else {
      size_t e = u.size();
      while (e > 0) {
        while (e > 0 && py_isspace(u[e - 1])) --e;
        if (e == 0) break;
        if (maxsplit >= 0 && int64_t(words.size()) == maxsplit) {
          size_t b = 0;
          while (b < e && py_isspace(u[b])) ++b;
          words.push_back(u.substr(b, e - b));
          break;
        }
        size_t b = e;
        while (b > 0 && !py_isspace(u[b - 1])) --b;
        words.push_back(u.substr(b, e - b));
        e = b;
      }
      std::reverse(words.begin(), words.end());
    }
    std::vector<Value> out;
    for (auto& w : words) out.emplace_back(from_u32(w));
    return out;
  }
  std::string d = arg_str(sep, "split");
  if (d.empty()) raise(0, "empty separator");
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || int64_t(parts.size()) < maxsplit) {
      size_t p = s.find(d, start);
      if (p == std::string::npos) break;
      parts.push_back(s.substr(start, p - start));
      start = p + d.size();
    }
    parts.push_back(s.substr(start));
  } else {
    size_t end = s.size();
    std::vector<std::string> rev;
    while (maxsplit < 0 || int64_t(rev.size()) < maxsplit) {
      if (end < d.size()) break;
      size_t p = s.rfind(d, end - d.size());
      if (p == std::string::npos) break;
      rev.push_back(s.substr(p + d.size(), end - p - d.size()));
      end = p;
    }
    rev.push_back(s.substr(0, end));
    parts.assign(rev.rbegin(), rev.rend());
  }
  std::vector<Value> out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

std::vector<Value> splitlines(const std::string& s, bool keepends) {
  std::u32string u = to_u32(s);
  std::vector<Value> out;
  size_t i = 0, start = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
           c == 0x85 || c == 0x2028 || c == 0x2029;
  };
  while (i < u.size()) {
    if (is_break(u[i])) {
      size_t eol = i + ((u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1);
      out.emplace_back(from_u32(u.substr(start, (keepends ? eol : i) - start)));
      start = i = eol;
    } else {
      ++i;
    }
  }
  if (start < u.size()) out.emplace_back(from_u32(u.substr(start)));
  return out;
}


Value str_method(Evaluator& ev, const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "startswith" || name == "endswith") {
    a.check(3, {});
    Value what = a.get(0, "prefix");
    std::u32string u = to_u32(s);
    int64_t st, en;
    bounds(a, 1, int64_t(u.size()), &st, &en);
    std::u32string sub = st < en ? u.substr(size_t(st), size_t(en - st)) : std::u32string();
    std::vector<Value> cands = what.is_list() && what.list().tuple ? what.list().items : std::vector<Value>{what};
    for (const auto& c : cands) {
      std::u32string p = to_u32(arg_str(c, name.c_str()));
      if (st > int64_t(u.size())) continue;
      if (p.size() <= sub.size() &&
          (name == "startswith" ? sub.compare(0, p.size(), p) == 0 : sub.compare(sub.size() - p.size(), p.size(), p) == 0))
        return Value(true);
    }
    return Value(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    a.check(1, {});
    return Value(py_strip(s, a.get(0, "chars", Value::none()), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    a.check(2, {"sep", "maxsplit"});
    Value ms = a.get(1, "maxsplit", Value(-1));
    if (!ms.is_int() && !ms.is_bool()) raise(0, "maxsplit must be an integer");
    auto parts = split(s, a.get(0, "sep", Value::none()), ms.as_int(), name == "rsplit");
    ev.charge(parts.size() * 4);
    return Value::list(std::move(parts));
  }
  if (name == "splitlines") {
    a.check(1, {"keepends"});
    return Value::list(splitlines(s, a.get(0, "keepends", Value(false)).truthy()));
  }
  if (name == "upper" || name == "lower") {
    a.check(0, {});
    return Value(name == "upper" ? str_upper(s) : str_lower(s));
  }
  if (name == "title" || name == "capitalize" || name == "swapcase") {
    a.check(0, {});
    std::u32string u = to_u32(s);
    bool prev_cased = false;
    for (size_t i = 0; i < u.size(); ++i) {
      char32_t c = u[i];
      bool cased = cp_upper(c) != c || cp_lower(c) != c;
      if (name == "title") u[i] = prev_cased ? cp_lower(c) : cp_upper(c);
      else if (name == "capitalize") u[i] = i == 0 ? cp_upper(c) : cp_lower(c);
      else u[i] = cp_upper(c) != c ? cp_upper(c) : cp_lower(c);
      prev_cased = cased;
    }
    return Value(from_u32(u));
  }
  if (name == "replace") {
    a.check(3, {"count"});
    std::string olds = arg_str(a.get(0, "old"), "replace"), news = arg_str(a.get(1, "new"), "replace");
    Value cv = a.get(2, "count", Value(-1));
    int64_t count = cv.is_int() || cv.is_bool() ? cv.as_int() : -1;
    std::string out;
    if (olds.empty()) {  // inserts `new` around every code point
      std::u32string u = to_u32(s);
      int64_t done = 0;
      for (size_t i = 0; i <= u.size(); ++i) {
        if (count < 0 || done < count) {
          out += news;
          ++done;
        }
        if (i < u.size()) out += from_u32(u.substr(i, 1));
        ev.check_size(out.size());
      }
    } else {
      size_t start = 0;
      int64_t done = 0;
      while (count < 0 || done < count) {
        size_t p = s.find(olds, start);
        if (p == std::string::npos) break;
        out.append(s, start, p - start);
        out += news;
        ev.check_size(out.size());
        start = p + olds.size();
        ++done;
      }
      out.append(s, start);
    }
    ev.check_size(out.size());
    ev.charge(out.size());
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    a.check(3, {});
    std::u32string u = to_u32(s);
    std::u32string sub = to_u32(arg_str(a.get(0, "sub"), name.c_str()));
    int64_t st, en;
    bounds(a, 1, int64_t(u.size()), &st, &en);
    std::u32string hay = st <= en ? u.substr(size_t(st), size_t(en - st)) : std::u32string();
    if (name == "count") {
      if (st > en) return Value(int64_t(0));
      if (sub.empty()) return Value(int64_t(hay.size() + 1));
      int64_t n = 0;
      for (size_t p = hay.find(sub); p != std::u32string::npos; p = hay.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    size_t p = st > en ? std::u32string::npos : (name[0] == 'r' ? hay.rfind(sub) : hay.find(sub));
    if (p == std::u32string::npos) {
      if (name == "index" || name == "rindex") raise(0, "substring not found");
      return Value(int64_t(-1));
    }
    return Value(int64_t(p) + st);
  }
  if (name == "join") {
    a.check(1, {});
    std::string out;
    bool first = true;
    for (auto& item : iterate(a.get(0, "iterable"))) {
      if (!item.is_string()) raise(0, fmt::format("sequence item: expected str instance, {} found", item.type_name()));
      if (!first) out += s;
      first = false;
      out += item.str();
      ev.check_size(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    a.check(name == "zfill" ? 1 : 2, {});
    Value wv = a.get(0, "width");
    if (!wv.is_int() && !wv.is_bool()) raise(0, "width must be an integer");
    std::string fill = name == "zfill" ? "0" : a.get(1, "fillchar", Value(" ")).to_str();
    if (cp_count(fill) != 1) raise(0, "The fill character must be exactly one character long");
    int64_t n = int64_t(cp_count(s)), w = wv.as_int();
    if (w <= n) return Value(s);
    ev.check_size(size_t(w) * fill.size());
    int64_t pad = w - n, left;
    if (name == "ljust") left = 0;
    else if (name == "rjust" || name == "zfill") left = pad;
    else left = pad / 2 + (pad & w & 1);
    auto rep = [&](int64_t k) {
      std::string r;
      for (int64_t i = 0; i < k; ++i) r += fill;
      return r;
    };
    if (name == "zfill" && !s.empty() && (s[0] == '-' || s[0] == '+')) return Value(s.substr(0, 1) + rep(left) + s.substr(1));
    return Value(rep(left) + s + rep(pad - left));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower" || name == "isnumeric" || name == "isdecimal") {
    a.check(0, {});
    std::u32string u = to_u32(s);
    if (name == "isupper" || name == "islower") {
      bool any = false;
      for (char32_t c : u) {
        bool up = cp_lower(c) != c, low = cp_upper(c) != c;
        if ((name == "isupper" && low) || (name == "islower" && up)) return Value(false);
        any = any || up || low;
      }
      return Value(any);
    }
    if (u.empty()) return Value(false);
    for (char32_t c : u) {
      bool ok;
      if (name == "isspace") ok = py_isspace(c);
      else if (name == "isalpha") ok = c < 0x80 ? isalpha(int(c)) != 0 : cp_upper(c) != cp_lower(c);
      else if (name == "isalnum") ok = c < 0x80 ? isalnum(int(c)) != 0 : cp_upper(c) != cp_lower(c);
      else ok = c >= '0' && c <= '9';
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  if (name == "partition" || name == "rpartition") {
    a.check(1, {});
    std::string sep = arg_str(a.get(0, "sep"), name.c_str());
    if (sep.empty()) raise(0, "empty separator");
    size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos)
      return name == "partition" ? Value::list({Value(s), Value(""), Value("")}, true)
                                 : Value::list({Value(""), Value(""), Value(s)}, true);
    return Value::list({Value(s.substr(0, p)), Value(sep), Value(s.substr(p + sep.size()))}, true);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    a.check(1, {});
    std::string x = arg_str(a.get(0, "prefix"), name.c_str());
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value(s.substr(0, s.size() - x.size()));
    return Value(s);
  }
  raise(0, "unknown str method");
}

const char* const kStrMethods[] = {
    "startswith", "endswith", "strip",   "lstrip",  "rstrip",  "split",      "rsplit",     "splitlines",
    "upper",      "lower",    "title",   "capitalize", "swapcase", "replace", "find",       "rfind",
    "index",      "rindex",   "count",   "join",    "center",  "ljust",      "rjust",      "zfill",
    "isdigit",    "isalpha",  "isalnum", "isspace", "isupper", "islower",    "isnumeric",  "isdecimal",
    "partition",  "rpartition", "removeprefix", "removesuffix",
};
// Attributes the sandbox refuses on mutable containers (modifies_known_mutable).
const char* const kListUnsafe[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", "__setitem__"};
const char* const kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update", "__setitem__"};

template <size_t N>
bool in_list(const char* const (&names)[N], std::string_view n) {
  for (const char* x : names)
    if (n == x) return true;
  return false;
}

Value unsafe(const Value& self, std::string_view name) {
  std::string msg = fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, self.type_name());
  return Value::function(std::string(name), [msg](CallArgs&) -> Value { raise(0, msg); });
}

}  // namespace

Value bound_method(Evaluator& ev, const Value& self, std::string_view name) {
  std::string n(name);
  if (self.is_string()) {
    if (!in_list(kStrMethods, name)) return Value();
    return Value::function(n, [&ev, self, n](CallArgs& a) { return str_method(ev, self.str(), n, a); });
  }
  if (self.is_dict()) {
    if (in_list(kDictUnsafe, name)) return unsafe(self, name);
    if (name == "items" || name == "keys" || name == "values") {
      return Value::function(n, [self, n](CallArgs& a) {
        a.check(0, {});
        std::vector<Value> out;
        for (const auto& kv : self.dict().items)
          out.push_back(n == "keys" ? kv.first : n == "values" ? kv.second : Value::list({kv.first, kv.second}, true));
        return Value::list(std::move(out), false,
                           n == "keys" ? ListObj::View::Keys : n == "values" ? ListObj::View::Values : ListObj::View::Items);
      });
    }
    if (name == "get") {
      return Value::function(n, [self](CallArgs& a) {
        a.check(2, {});
        Value k = a.get(0, "key");
        if (k.is_list() || k.is_dict()) raise(0, fmt::format("unhashable type: '{}'", k.type_name()));
        const Value* v = self.dict().find(k);
        return v ? *v : a.get(1, "default", Value::none());
      });
    }
    if (name == "copy") return Value::function(n, [self](CallArgs&) { return Value::dict(self.dict()); });
    return Value();
  }
  if (self.is_list()) {
    if (!self.list().tuple && in_list(kListUnsafe, name)) return unsafe(self, name);
    if (name == "index" || name == "count") {
      return Value::function(n, [self, n](CallArgs& a) -> Value {
        a.check(1, {});
        Value x = a.get(0, "value");
        int64_t cnt = 0;
        const auto& items = self.list().items;
        for (size_t i = 0; i < items.size(); ++i)
          if (py_equals(items[i], x)) {
            if (n == "index") return Value(int64_t(i));
            ++cnt;
          }
        if (n == "index") raise(0, fmt::format("{} is not in list", x.repr()));
        return Value(cnt);
      });
    }
    if (name == "copy" && !self.list().tuple) return Value::function(n, [self](CallArgs&) { return Value::list(self.list().items); });
    return Value();
  }
  return Value();
}

namespace {

Value g_range(Evaluator& ev, CallArgs& a) {
  if (!a.kw.empty()) raise(0, "range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3) raise(0, "range expected 1 to 3 arguments");
  for (const auto& v : a.pos)
    if (!v.is_int() && !v.is_bool()) raise(0, fmt::format("'{}' object cannot be interpreted as an integer", v.type_name()));
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = a.pos[0].as_int();
  } else {
    start = a.pos[0].as_int();
    stop = a.pos[1].as_int();
    if (a.pos.size() == 3) step = a.pos[2].as_int();
  }
  if (step == 0) raise(0, "range() arg 3 must not be zero");
  // The sandbox caps ranges at MAX_RANGE = 100000 items.
  __int128 count = step > 0 ? (stop > start ? (__int128(stop) - start + step - 1) / step : 0)
                            : (start > stop ? (__int128(start) - stop - step - 1) / -step : 0);
  if (count > 100000) raise(0, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  ev.charge(size_t(count) * 2);
  std::vector<Value> out;
  out.reserve(size_t(count));
  for (__int128 i = 0; i < count; ++i) out.emplace_back(int64_t(start + i * step));
  return Value::list(std::move(out));
}

Value g_strftime_now(Evaluator& ev, CallArgs& a) {
  a.check(1, {});
  std::string f = a.get(0, "format").to_str();
  if (f.size() > 256) raise(0, "strftime format too long");
  std::tm tm{};
  if (ev.options().now) {
    tm = *ev.options().now;
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  // Python's strftime in the C locale is the C library's; an empty result for a non-empty
  // format only happens for formats like "%p" in odd locales, so a large buffer is enough.
  std::string buf(f.size() * 32 + 64, '\0');
  size_t n = f.empty() ? 0 : std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
  buf.resize(n);
  return Value(sanitize_utf8(buf));
}

}  // namespace

Value global_function(Evaluator& ev, std::string_view name) {
  Evaluator* e = &ev;
  if (name == "range") return Value::function("range", [e](CallArgs& a) { return g_range(*e, a); });
  if (name == "namespace")
    return Value::function("namespace", [e](CallArgs& a) {
      auto ns = std::make_shared<Object>();
      ns->kind = "Namespace";
      for (const auto& v : a.pos) {  // namespace(dict) / namespace(other_ns) seed attributes
        if (v.is_dict()) {
          for (const auto& kv : v.dict().items) ns->set(kv.first.to_str(), kv.second);
        } else {
          raise(0, "namespace() positional argument must be a mapping");
        }
      }
      for (const auto& kv : a.kw) ns->set(kv.first, kv.second);
      e->track(ns);
      return Value::object(ns);
    });
  if (name == "dict")
    return Value::function("dict", [](CallArgs& a) {
      DictObj d;
      for (const auto& v : a.pos) {
        if (!v.is_dict()) raise(0, "dict() positional argument must be a mapping");
        for (const auto& kv : v.dict().items) d.set(kv.first, kv.second);
      }
      for (const auto& kv : a.kw) d.set(Value(kv.first), kv.second);
      return Value::dict(std::move(d));
    });
  if (name == "raise_exception")
    return Value::function("raise_exception", [](CallArgs& a) -> Value {
      raise(0, "raise_exception: " + a.get(0, "message", Value("")).to_str());
    });
  if (name == "strftime_now") return Value::function("strftime_now", [e](CallArgs& a) { return g_strftime_now(*e, a); });
  return Value();
}

}  // namespace kvad::jinja::detail
