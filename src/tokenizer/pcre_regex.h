// The pre-tokenizer regexes (GPT-2's, Llama 3's, Qwen's, any Split pattern in tokenizer.json),
// compiled with PCRE2 (UTF + Unicode properties, JIT when available). HF tokenizers compiles these
// with Oniguruma; the few places where the two dialects differ are translated (see the .cpp).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer_json.h"

namespace kvad::tok {

class Regex {
 public:
  // `pattern` in Oniguruma syntax (a tokenizer.json "Regex"); errors name the field `where`.
  Regex(std::string_view pattern, const Field& where);
  // A literal string (a tokenizer.json Split "String" pattern).
  static Regex literal(std::string_view text, const Field& where);
  Regex(Regex&& o) noexcept : code_(o.code_) { o.code_ = nullptr; }
  Regex& operator=(Regex&& o) noexcept;
  Regex(const Regex&) = delete;
  ~Regex();

  // Finds the next non-empty match at or after byte `from` of `text` (valid UTF-8). Empty matches
  // are skipped, as the splitters that use them drop empty pieces anyway. Throws kvad::Error when
  // the match gives up (a pattern that backtracks without bound).
  bool find(std::string_view text, size_t from, size_t* start, size_t* end) const;

 private:
  Regex() = default;
  void compile(const std::string& pcre_pattern, const Field& where);
  void* code_ = nullptr;  // pcre2_code_8*, kept out of this header
};

// A Replace step's pattern ({"String": "..."} or {"Regex": "..."}, in a normalizer, a
// pre-tokenizer or a decoder) and what it turns matches into.
class Replacement {
 public:
  // `j` is the Replace object (with "pattern" and "content"); errors name fields under `f`.
  static Replacement from_json(const Json& j, const Field& f);
  static Replacement literal(std::string from, std::string to);
  // `text` with every non-overlapping match replaced, left to right.
  std::string apply(std::string_view text) const;
  // The pattern is one literal code point: replacing token by token equals replacing in the
  // joined text (a match cannot straddle two tokens).
  bool is_single_char() const;

 private:
  std::string literal_;            // String pattern
  std::unique_ptr<Regex> regex_;   // Regex pattern
  std::string content_;
};

// Oniguruma (Ruby syntax, as HF tokenizers uses it) -> PCRE2. Exposed for the tests.
std::string onig_to_pcre2(std::string_view pattern);

}  // namespace kvad::tok
