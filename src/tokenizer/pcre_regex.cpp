#include "tokenizer/pcre_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/unicode_chars.h"

namespace kvad::tok {

namespace {

// Unicode White_Space: what Oniguruma's \s matches for UTF-8 text (and what the JS port rewrites \s
// to). PCRE2's own \s under UCP also matches U+180E, which stopped being a space in Unicode 6.3.
// The property escapes work both inside and outside a character class.
constexpr const char* kSpace = "\\p{White_Space}";
constexpr const char* kNotSpace = "\\P{White_Space}";

std::string pcre_error_text(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "error " + std::to_string(code) : std::string((const char*)buf);
}

// Per-thread match state: pcre2_code is shared and read-only, match data is not.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);  // only the whole match is needed
    ctx = pcre2_match_context_create(nullptr);
    // Bounds on work per match call, so a hostile pattern fails with an error instead of hanging.
    // Real patterns need a handful of steps per character.
    pcre2_set_match_limit(ctx, 50'000'000);
    pcre2_set_depth_limit(ctx, 1'000'000);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (jit_stack) pcre2_jit_stack_assign(ctx, nullptr, jit_stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(ctx);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); i++) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[++i];
      switch (n) {
        case 's': out += kSpace; break;
        case 'S': out += kNotSpace; break;
        // Oniguruma's \h is a hex digit (PCRE2's is horizontal space).
        case 'h': out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]"; break;
        case 'H':
          if (in_class) out += "\\H";  // no in-class complement; PCRE2's meaning, rare enough
          else out += "[^0-9a-fA-F]";
          break;
        default: out += c, out += n;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += "\\]", i++;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(std::string_view pattern, const Field& where) { compile(onig_to_pcre2(pattern), where); }

Regex Regex::literal(std::string_view text, const Field& where) {
  std::string escaped;
  for (char c : text) {
    unsigned char u = (unsigned char)c;
    if (u < 0x80 && !std::isalnum(u)) escaped += '\\';
    escaped += c;
  }
  // Escaping control bytes such as NUL keeps them literal; PCRE2 accepts "\<char>" for any
  // non-alphanumeric ASCII character.
  Regex r;
  r.compile(escaped, where);
  return r;
}

void Regex::compile(const std::string& pcre_pattern, const Field& where) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  // MULTILINE: in Oniguruma's Ruby syntax ^ and $ are line anchors.
  uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NEVER_BACKSLASH_C;
  pcre2_code* code = pcre2_compile((PCRE2_SPTR)pcre_pattern.data(), pcre_pattern.size(), opts, &err, &offset, nullptr);
  if (!code) where.fail("invalid regex at offset {}: {}", offset, pcre_error_text(err));
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // failure is fine: the interpreter is used then
  code_ = code;
}

Regex& Regex::operator=(Regex&& o) noexcept {
  if (this != &o) {
    pcre2_code_free((pcre2_code*)code_);
    code_ = o.code_;
    o.code_ = nullptr;
  }
  return *this;
}

Regex::~Regex() { pcre2_code_free((pcre2_code*)code_); }

bool Regex::find(std::string_view text, size_t from, size_t* start, size_t* end) const {
  MatchState& st = match_state();
  const auto* subject = (PCRE2_SPTR)(text.data() ? text.data() : "");
  while (from <= text.size()) {
    // The text was validated once up front; without NO_UTF_CHECK PCRE2 would re-check the whole
    // rest of the subject on every call (quadratic on long inputs).
    uint32_t opts = PCRE2_NO_UTF_CHECK;
    int rc = pcre2_match((pcre2_code*)code_, subject, text.size(), from, opts, st.data, st.ctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // very long backtracking: the interpreter keeps its stack on the heap
      rc = pcre2_match((pcre2_code*)code_, subject, text.size(), from, opts | PCRE2_NO_JIT, st.data, st.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) fail("tokenizer regex: matching failed: {}", pcre_error_text(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    if (ov[1] > ov[0] && ov[0] >= from) {
      *start = ov[0];
      *end = ov[1];
      return true;
    }
    // Empty match: move one character on and look again.
    size_t at = std::max<size_t>(from, ov[0]) + 1;
    while (at < text.size() && ((unsigned char)text[at] & 0xC0) == 0x80) at++;
    from = at;
  }
  return false;
}

Replacement Replacement::from_json(const Json& j, const Field& f) {
  Replacement r;
  r.content_ = read_inserted_or(j, "content", "", f);
  const Json* pat = find_field(j, "pattern");
  Field pf = f.at("pattern");
  if (!pat || !pat->is_object()) pf.fail("expected an object {{\"String\": ...}} or {{\"Regex\": ...}}");
  if (const Json* s = find_field(*pat, "String")) {
    r.literal_ = read_string(*s, pf.at("String"));
    // An empty literal would match between every two characters: no real file has one.
    if (r.literal_.empty()) pf.at("String").fail("an empty pattern is not supported");
  } else if (const Json* re = find_field(*pat, "Regex")) {
    r.regex_ = std::make_unique<Regex>(read_string(*re, pf.at("Regex")), pf.at("Regex"));
  } else {
    pf.fail("expected a \"String\" or \"Regex\" member");
  }
  return r;
}

Replacement Replacement::literal(std::string from, std::string to) {
  Replacement r;
  r.literal_ = std::move(from);
  r.content_ = std::move(to);
  return r;
}

std::string Replacement::apply(std::string_view text) const {
  // A decoder may hand over a lone byte (ByteFallback): the regex engine needs valid UTF-8.
  if (regex_ && !is_valid_utf8(text)) return std::string(text);
  std::string out;
  size_t pos = 0, s, e;
  auto next = [&] {
    if (regex_) return regex_->find(text, pos, &s, &e);
    s = text.find(literal_, pos);
    e = s + literal_.size();
    return s != std::string_view::npos;
  };
  while (pos < text.size() && next()) {
    out.append(text, pos, s - pos);
    out += content_;
    pos = e;
  }
  out.append(text, pos);
  return out;
}

bool Replacement::is_single_char() const {
  return !regex_ && literal_.size() == utf8_char_len((unsigned char)literal_[0]);
}

}  // namespace kvad::tok
