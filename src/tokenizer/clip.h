// CLIP's tokenizer as Stable Diffusion pipelines run it: transformers' slow CLIPTokenizer, which
// is what a diffusers `model_index.json` names, read from a diffusers `tokenizer/` folder
// (vocab.json + merges.txt, the pad token from tokenizer_config.json / special_tokens_map.json).
//
// The text path, in the order transformers takes it when ftfy is NOT installed (the plain
// diffusers + transformers install, and what ../shared/peer-image's model goldens use):
//   1. the special tokens <|startoftext|> / <|endoftext|> written in the text are cut out first
//      (they become their own ids), the stretches between them go on;
//   2. BERT's BasicTokenizer cleanup: NUL, U+FFFD and every control/format/unassigned character
//      (category C*, U+200D ZWJ included) removed, white space to " ", spaces around CJK
//      ideographs, NFC, split on white space, lower case; accents are kept;
//   3. CLIP's regex ('s 't 're 've 'm 'll 'd, letter runs, single digits, other runs), each piece
//      as bytes in GPT-2's byte alphabet, byte-level BPE with "</w>" on the piece's last symbol;
//   4. [bos] + ids[:max_length - 2] + [eos], padded to max_length (77) with the pad token.
// The ftfy variant (fix_text: uncurled quotes, &amp; undone, ligatures split) is not done: it
// differs only for such text (../shared/peer-image/goldens/tokens.json, field `agree`).
//
// Why here and not in image/: it is a tokenizer (the regex, the byte alphabet and utf8proc live in
// this layer), and `kvad tokenize` or a CLIP embedding model could use it without the painters.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvad::tok {

class Regex;

class ClipTokenizer {
 public:
  // Reads dir/vocab.json, dir/merges.txt and (when present) tokenizer_config.json and
  // special_tokens_map.json; every error names the file and the field or line.
  static ClipTokenizer from_folder(const std::string& dir);
  // From the two files' contents (`vocab_what` / `merges_what` name them in errors): pad = eos,
  // 77 tokens. For tests and the fuzz target.
  static ClipTokenizer from_texts(std::string_view vocab_json, std::string_view merges_txt,
                                  const std::string& vocab_what, const std::string& merges_what);
  ClipTokenizer(ClipTokenizer&&) noexcept;
  ClipTokenizer& operator=(ClipTokenizer&&) noexcept;
  ~ClipTokenizer();

  // The BPE ids of `text`, without bos/eos and untruncated.
  std::vector<int32_t> encode(std::string_view text) const;
  // The BPE pieces (vocabulary strings, in the byte alphabet: "cafÃ©</w>") of `text`.
  std::vector<std::string> pieces(std::string_view text) const;
  // What the pipelines feed the text encoder: [bos] + encode(text)[:n-2] + [eos], padded to n.
  std::vector<int32_t> encode_padded(std::string_view text) const;

  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_; }
  int64_t max_length() const { return max_length_; }
  size_t vocab_size() const { return vocab_.size(); }

 private:
  ClipTokenizer();
  void read_vocab(std::string_view text, const std::string& what);
  void read_merges(std::string_view text, const std::string& what);
  int32_t id_of(const std::string& piece, const std::string& what, const std::string& field) const;
  // Calls emit(piece) for each BPE piece of one stretch of text without special tokens.
  template <typename Emit>
  void bpe_text(std::string_view text, Emit&& emit) const;
  std::vector<std::string> bpe_word(std::string_view bytes) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::string, uint32_t> ranks_;  // "first second" -> merge rank
  std::unique_ptr<Regex> pattern_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1;
  int64_t max_length_ = 77;
};

// Step 2 alone (BERT's BasicTokenizer as CLIPTokenizer configures it), exposed for the tests:
// the cleaned, NFC, lower-cased words joined by single spaces.
std::string clip_basic_clean(std::string_view text);

}  // namespace kvad::tok
