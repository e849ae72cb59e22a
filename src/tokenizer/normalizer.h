// The normalizer of tokenizer.json, applied to each stretch of text between added tokens:
//   NFC / NFD / NFKC / NFKD       Unicode normal forms (utf8proc)
//   Prepend {prepend}             SentencePiece's "▁" before the text (Llama 2, Mistral)
//   Replace {pattern, content}    String or Regex pattern (" " -> "▁", runs of spaces)
//   Lowercase, Strip {strip_left, strip_right}
//   Sequence {normalizers}        the above in order
// Anything else (Precompiled, BertNormalizer, StripAccents...) is refused, naming the field,
// rather than tokenised differently from HF.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pcre_regex.h"
#include "tokenizer/tokenizer_json.h"

namespace kvad::tok {

class Normalizer {
 public:
  // `j` is the "normalizer" value or nullptr when absent/null.
  static Normalizer from_json(const Json* j, const Field& f);
  bool active() const { return !steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  struct Step {
    enum Kind { kUnicodeForm, kPrepend, kReplace, kLowercase, kStrip } kind = kUnicodeForm;
    int utf8proc_options = 0;      // kUnicodeForm
    std::string text;                          // kPrepend: what is prepended
    std::unique_ptr<Replacement> replacement;  // kReplace
    bool left = false, right = false;  // kStrip
  };
  void add(const Json& j, const Field& f, size_t depth = 0);
  static Step read_replace(const Json& j, const Field& f);
  static void apply_step(const Step& step, std::string& text);
  std::vector<Step> steps_;
};

}  // namespace kvad::tok
