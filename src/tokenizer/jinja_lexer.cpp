// Jinja source -> tokens. This follows jinja2/lexer.py (3.1) rule for rule, because whitespace
// handling is where renderings most easily differ by a byte:
//   * newlines (\r\n, \r, \n) are normalized to \n and one trailing newline is dropped
//     (keep_trailing_newline=False);
//   * `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all after it;
//   * trim_blocks: one newline right after `%}` or `#}` is dropped (not after `}}`, not after the
//     `%}` of `{% raw %}`, not after `+%}`);
//   * lstrip_blocks: spaces/tabs between the start of a line and `{%` / `{#` are dropped unless
//     the tag is `{%+`; "start of a line" also holds right after a tag that ended with a newline.
#include <cstring>

#include "tokenizer/jinja_ast.h"

namespace kvad::jinja::detail {

namespace {

// Python's re `\s` on str patterns = str.isspace().
bool ws_at(std::string_view s, size_t i, size_t* len) {
  unsigned char c = s[i];
  if (c < 0x80) {
    *len = 1;
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  }
  std::u32string one = to_u32(s.substr(i, (c >= 0xf0) ? 4 : (c >= 0xe0) ? 3 : 2));
  *len = (c >= 0xf0) ? 4 : (c >= 0xe0) ? 3 : 2;
  return !one.empty() && py_isspace(one[0]);
}

size_t skip_ws(std::string_view s, size_t i) {
  size_t len;
  while (i < s.size() && ws_at(s, i, &len)) i += len;
  return i;
}

// Python's str.rstrip(): trailing Unicode whitespace.
std::string_view rstrip_ws(std::string_view s) {
  std::u32string u = to_u32(s);
  size_t n = u.size();
  while (n > 0 && py_isspace(u[n - 1])) --n;
  if (n == u.size()) return s;
  return s.substr(0, from_u32(std::u32string_view(u).substr(0, n)).size());
}

bool all_ws(std::string_view s) {
  if (s.empty()) return false;  // `\s+` needs one character
  size_t i = 0, len;
  while (i < s.size()) {
    if (!ws_at(s, i, &len)) return false;
    i += len;
  }
  return true;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(unsigned char c) { return is_name_start(c) || is_digit(char(c)); }

// `(\d+_)*\d+` at i; returns the end or npos.
size_t match_digits(std::string_view s, size_t i) {
  if (i >= s.size() || !is_digit(s[i])) return std::string_view::npos;
  while (i < s.size() && is_digit(s[i])) ++i;
  while (i + 1 < s.size() && s[i] == '_' && is_digit(s[i + 1])) {
    ++i;
    while (i < s.size() && is_digit(s[i])) ++i;
  }
  return i;
}

// jinja's float_re: digits, then (.digits)? e[+-]digits, or .digits.
size_t match_float(std::string_view s, size_t i) {
  if (i > 0 && s[i - 1] == '.') return std::string_view::npos;
  size_t p = match_digits(s, i);
  if (p == std::string_view::npos) return p;
  auto exponent = [&](size_t q) -> size_t {
    if (q < s.size() && (s[q] == 'e' || s[q] == 'E')) {
      ++q;
      if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
      return match_digits(s, q);
    }
    return std::string_view::npos;
  };
  if (p < s.size() && s[p] == '.') {
    size_t f = match_digits(s, p + 1);
    if (f != std::string_view::npos) {
      size_t e = exponent(f);
      return e != std::string_view::npos ? e : f;
    }
  }
  return exponent(p);
}

int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// jinja's integer_re; value parsed like Python int(x, 0). Returns end or npos.
size_t match_int(std::string_view s, size_t i, int64_t* value, int line) {
  auto acc = [&](int64_t v, int base, int d) {
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
      raise(line, "integer literal too large");
    return v;
  };
  if (i + 1 < s.size() && s[i] == '0' && std::strchr("bBoOxX", s[i + 1]) && s[i + 1] != 0) {
    int base = (s[i + 1] | 0x20) == 'b' ? 2 : (s[i + 1] | 0x20) == 'o' ? 8 : 16;
    size_t p = i + 2;
    int64_t v = 0;
    bool any = false;
    while (p < s.size()) {
      size_t q = p;
      if (s[q] == '_') ++q;
      int d = q < s.size() ? hex_val(s[q]) : -1;
      if (d < 0 || d >= base) break;
      v = acc(v, base, d);
      any = true;
      p = q + 1;
    }
    if (any) {
      *value = v;
      return p;
    }
  }
  if (i < s.size() && s[i] >= '1' && s[i] <= '9') {
    int64_t v = s[i] - '0';
    size_t p = i + 1;
    while (p < s.size()) {
      size_t q = p;
      if (s[q] == '_') ++q;
      if (q >= s.size() || !is_digit(s[q])) break;
      v = acc(v, 10, s[q] - '0');
      p = q + 1;
    }
    *value = v;
    return p;
  }
  if (i < s.size() && s[i] == '0') {
    size_t p = i + 1;
    while (p < s.size()) {
      size_t q = p;
      if (s[q] == '_') ++q;
      if (q >= s.size() || s[q] != '0') break;
      p = q + 1;
    }
    *value = 0;
    return p;
  }
  return std::string_view::npos;
}

// The body of a string literal decoded like Python's "unicode-escape" codec.
std::string unescape(std::string_view body, int line) {
  std::string out;
  std::u32string one(1, U'\0');
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i >= body.size()) raise(line, "\\ at end of string");
    char e = body[i];
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int k = 0; k < digits; ++k) {
          int d = i + 1 < body.size() ? hex_val(body[i + 1]) : -1;
          if (d < 0) raise(line, fmt::format("truncated \\{}{} escape", e, std::string(digits, 'X')));
          cp = cp * 16 + d;
          ++i;
        }
        if (cp > 0x10ffff) raise(line, "illegal Unicode character");
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;  // lone surrogates cannot be UTF-8
        one[0] = cp;
        out += from_u32(one);
        break;
      }
      case 'N': raise(line, "\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            cp = cp * 8 + (body[++i] - '0');
          one[0] = cp;
          out += from_u32(one);
        } else {
          out += '\\';  // unknown escapes stay as written
          out += e;
        }
    }
  }
  return out;
}

const char* const kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
const char kOps1[] = "+-/*%~[](){}=.:|,;<>";

class Lexer {
 public:
  explicit Lexer(std::string_view src) : s_(src) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      // The next tag start: `{%`, `{{` or `{#`.
      size_t tag = pos;
      while (true) {
        tag = s_.find('{', tag);
        if (tag == std::string_view::npos || tag + 1 >= s_.size()) {
          tag = std::string_view::npos;
          break;
        }
        char k = s_[tag + 1];
        if (k == '%' || k == '{' || k == '#') break;
        ++tag;
      }
      if (tag == std::string_view::npos) {
        emit_data(s_.substr(pos));
        break;
      }
      char kind = s_[tag + 1];
      char sign = tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
      size_t raw_end = kind == '%' ? match_raw_begin(tag) : std::string_view::npos;
      std::string_view text = s_.substr(pos, tag - pos);
      text = apply_lstrip(text, sign, kind != '{', line_starting);
      emit_data(text);
      line_ += count_nl(s_.substr(pos, tag - pos));
      if (raw_end != std::string_view::npos) {
        line_ += count_nl(s_.substr(tag, raw_end - tag));
        pos = lex_raw(raw_end, &line_starting);
      } else if (kind == '#') {
        pos = lex_comment(tag + 2 + (sign ? 1 : 0), &line_starting);
      } else {
        pos = lex_tag(tag, kind, sign, &line_starting);
      }
    }
    out_.push_back(Token{Tok::Eof, line_, "", 0, 0});
    return std::move(out_);
  }

 private:
  std::string_view s_;
  int line_ = 1;
  std::vector<Token> out_;

  static int count_nl(std::string_view t) {
    int n = 0;
    for (char c : t) n += c == '\n';
    return n;
  }

  void emit_data(std::string_view t) {
    if (!t.empty()) out_.push_back(Token{Tok::Data, line_, std::string(t), 0, 0});
  }

  // `-` strips all trailing whitespace; otherwise lstrip_blocks strips the spaces between the
  // last newline (or a line start) and a block/comment tag.
  std::string_view apply_lstrip(std::string_view text, char sign, bool block_or_comment, bool line_starting) {
    if (sign == '-') return rstrip_ws(text);
    if (sign == '+' || !block_or_comment) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting) && all_ws(text.substr(l_pos))) return text.substr(0, l_pos);
    return text;
  }

  // `{%(-|+|)\s*raw\s*(-%}\s*|%})` at p: the end of the match, or npos.
  size_t match_raw_begin(size_t p) {
    size_t i = p + 2;
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) ++i;
    i = skip_ws(s_, i);
    if (s_.substr(i, 3) != "raw") return std::string_view::npos;
    i = skip_ws(s_, i + 3);
    if (s_.substr(i, 3) == "-%}") return skip_ws(s_, i + 3);
    if (s_.substr(i, 2) == "%}") return i + 2;
    return std::string_view::npos;
  }

  // Raw content up to `{%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?)`.
  size_t lex_raw(size_t p, bool* line_starting) {
    bool starting = s_[p - 1] == '\n';
    for (size_t t = s_.find("{%", p); t != std::string_view::npos; t = s_.find("{%", t + 1)) {
      size_t i = t + 2;
      char sign = 0;
      if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) sign = s_[i++];
      i = skip_ws(s_, i);
      if (s_.substr(i, 6) != "endraw") continue;
      i = skip_ws(s_, i + 6);
      size_t end;
      if (s_.substr(i, 3) == "+%}") {
        end = i + 3;
      } else if (s_.substr(i, 3) == "-%}") {
        end = skip_ws(s_, i + 3);
      } else if (s_.substr(i, 2) == "%}") {
        end = i + 2 + (i + 2 < s_.size() && s_[i + 2] == '\n');
      } else {
        continue;
      }
      std::string_view text = s_.substr(p, t - p);
      emit_data(apply_lstrip(text, sign, true, starting));
      line_ += count_nl(s_.substr(p, end - p));
      *line_starting = s_[end - 1] == '\n';
      return end;
    }
    raise(line_, "Missing end of raw directive");
  }

  // Comment body up to the first `+#}`, `-#}\s*` or `#}\n?`.
  size_t lex_comment(size_t p, bool* line_starting) {
    for (size_t i = p; i < s_.size(); ++i) {
      size_t end = std::string_view::npos;
      if (s_.compare(i, 3, "+#}") == 0) end = i + 3;
      else if (s_.compare(i, 3, "-#}") == 0) end = skip_ws(s_, i + 3);
      else if (s_.compare(i, 2, "#}") == 0) end = i + 2 + (i + 2 < s_.size() && s_[i + 2] == '\n');
      if (end != std::string_view::npos) {
        line_ += count_nl(s_.substr(p, end - p));
        *line_starting = s_[end - 1] == '\n';
        return end;
      }
    }
    raise(line_, "Missing end of comment tag");
  }

  // Tokens inside `{% ... %}` or `{{ ... }}`; returns the position after the end tag.
  size_t lex_tag(size_t tag, char kind, char sign, bool* line_starting) {
    bool block = kind == '%';
    out_.push_back(Token{block ? Tok::BlockBegin : Tok::VarBegin, line_, "", 0, 0});
    size_t i = tag + 2 + (sign ? 1 : 0);
    std::string balance;
    while (true) {
      if (i >= s_.size()) raise(line_, block ? "unexpected end of template, expected end of block"
                                             : "unexpected end of template, expected end of print statement");
      if (balance.empty()) {
        size_t end = std::string_view::npos;
        if (block) {
          if (s_.compare(i, 3, "+%}") == 0) end = i + 3;
          else if (s_.compare(i, 3, "-%}") == 0) end = skip_ws(s_, i + 3);
          else if (s_.compare(i, 2, "%}") == 0) end = i + 2 + (i + 2 < s_.size() && s_[i + 2] == '\n');
        } else {
          if (s_.compare(i, 3, "-}}") == 0) end = skip_ws(s_, i + 3);
          else if (s_.compare(i, 2, "}}") == 0) end = i + 2;
        }
        if (end != std::string_view::npos) {
          out_.push_back(Token{block ? Tok::BlockEnd : Tok::VarEnd, line_, "", 0, 0});
          line_ += count_nl(s_.substr(i, end - i));
          *line_starting = s_[end - 1] == '\n';
          return end;
        }
      }
      size_t len;
      if (ws_at(s_, i, &len)) {
        size_t e = skip_ws(s_, i);
        line_ += count_nl(s_.substr(i, e - i));
        i = e;
        continue;
      }
      size_t e = match_float(s_, i);
      if (e != std::string_view::npos) {
        std::string digits;
        for (size_t k = i; k < e; ++k)
          if (s_[k] != '_') digits += s_[k];
        out_.push_back(Token{Tok::Float, line_, digits, 0, std::strtod(digits.c_str(), nullptr)});
        i = e;
        continue;
      }
      int64_t iv;
      e = match_int(s_, i, &iv, line_);
      if (e != std::string_view::npos) {
        out_.push_back(Token{Tok::Int, line_, std::string(s_.substr(i, e - i)), iv, 0});
        i = e;
        continue;
      }
      if (is_name_start(s_[i])) {
        e = i;
        while (e < s_.size() && is_name_char(s_[e])) ++e;
        out_.push_back(Token{Tok::Name, line_, std::string(s_.substr(i, e - i)), 0, 0});
        i = e;
        continue;
      }
      if (s_[i] == '\'' || s_[i] == '"') {
        char q = s_[i];
        size_t k = i + 1;
        while (k < s_.size() && s_[k] != q) k += s_[k] == '\\' ? 2 : 1;
        if (k >= s_.size()) raise(line_, "unexpected char '" + std::string(1, q) + "'");
        int start_line = line_;
        line_ += count_nl(s_.substr(i, k - i));
        out_.push_back(Token{Tok::String, start_line, unescape(s_.substr(i + 1, k - i - 1), start_line), 0, 0});
        i = k + 1;
        continue;
      }
      std::string op;
      for (const char* o : kOps2)
        if (s_.compare(i, 2, o) == 0) op = o;
      if (op.empty() && std::strchr(kOps1, s_[i]) && s_[i] != 0) op = std::string(1, s_[i]);
      if (op.empty()) {
        unsigned char c = s_[i];
        raise(line_, c >= 0x20 && c < 0x7f ? fmt::format("unexpected char '{}'", char(c))
                                           : fmt::format("unexpected char 0x{:02x}", c));
      }
      if (op == "(") balance += ')';
      else if (op == "[") balance += ']';
      else if (op == "{") balance += '}';
      else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty()) raise(line_, fmt::format("unexpected '{}'", op));
        if (balance.back() != op[0])
          raise(line_, fmt::format("unexpected '{}', expected '{}'", op, balance.back()));
        balance.pop_back();
      }
      out_.push_back(Token{Tok::Op, line_, op, 0, 0});
      i += op.size();
    }
  }
};

}  // namespace

void raise(int line, std::string msg) { throw JinjaError{line, std::move(msg)}; }

std::vector<Token> tokenize(std::string_view source) {
  // Normalize newlines and drop one trailing newline, as tokeniter does before lexing.
  std::string norm;
  norm.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      norm += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      norm += source[i];
    }
  }
  if (!norm.empty() && norm.back() == '\n') norm.pop_back();
  return Lexer(norm).run();
}

}  // namespace kvad::jinja::detail
