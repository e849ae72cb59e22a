// The decoder of tokenizer.json, split in two so ids can be decoded one at a time (streaming):
//   what each token turns into wherever it stands (precomputed per id when loading), and
//   what happens once at the start of the text (a leading space removed).
// Supported steps, in any Sequence order HF allows:
//   ByteLevel                  GPT-2's byte alphabet back to bytes
//   Replace {pattern, content} "▁" -> " " (Llama 2 / Mistral / Gemma)
//   ByteFallback               <0xXX> tokens are that byte
//   Fuse                       join the tokens: later steps see the whole text
//   Strip {content, start, stop}  per token before Fuse; after Fuse only at the text's start
//   Metaspace {replacement, prepend_scheme}  "▁" -> " ", first token's leading space dropped
// Steps after Fuse that cannot be expressed per token (ByteFallback, a multi-character Replace,
// a Strip at the end of the text) are refused, naming the field.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pcre_regex.h"
#include "tokenizer/tokenizer_json.h"

namespace kvad::tok {

class Decoder {
 public:
  // `j` is the "decoder" value or nullptr. Without one, byte-level tokenizers still decode their
  // alphabet and others give the pieces as written.
  static Decoder from_json(const Json* j, const Field& f, bool byte_level);

  // The bytes `piece` stands for. `added`: an added token's content (ByteLevel keeps those as they are).
  std::string token_bytes(std::string_view piece, bool added) const;

  // Removed from the start of the decoded text: up to `strip_count()` copies of `strip_text()`.
  const std::string& strip_text() const { return strip_text_; }
  size_t strip_count() const { return strip_count_; }

 private:
  struct Step {
    enum Kind { kByteLevel, kReplace, kByteFallback, kStrip, kMetaspace } kind = kByteLevel;
    std::shared_ptr<const Replacement> replacement;  // kReplace, kMetaspace ("▁" -> " ")
    std::string text;                                // kStrip: content
    size_t start = 0, stop = 0;                      // kStrip
  };
  void add(const Json& j, const Field& f, size_t depth);
  void add_after_fuse(Step step, const Field& f);
  void strip_at_start(std::string text, size_t count, const Field& f);
  static Step read_strip(const Json& j, const Field& f);
  static Step read_metaspace(const Json& j, const Field& f, bool* strips_first);
  static void apply(const Step& step, std::string& token, bool added);

  std::vector<Step> per_token_;
  bool fused_ = false;
  std::string strip_text_;
  size_t strip_count_ = 0;
  size_t steps_ = 0;
};

}  // namespace kvad::tok
