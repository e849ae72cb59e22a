// tokenizer.json (Hugging Face tokenizers format) as the published models ship it:
//   byte-level BPE (GPT-2, Llama 3, Qwen2/2.5/3): ByteLevel pre-tokenizer (with the GPT-2 regex or
//     after a Split with the model's own), BPE merges by rank, the byte-level decoder;
//   SentencePiece-style BPE (Llama 2, Mistral, Gemma): "▁" for spaces (Prepend/Replace normalizers
//     or a Metaspace pre-tokenizer), byte_fallback to <0xXX> tokens, the Replace/ByteFallback/
//     Fuse/Strip decoder;
//   Unigram (T5-style): scored pieces, best segmentation, WhitespaceSplit + Metaspace.
// Added/special tokens are matched before pre-tokenisation. Ids equal HF tokenizers' ids; any part
// kvad does not implement is a load error naming the field (normalizer.h, pretokenizer.h,
// decoder.h, bpe.h and unigram.h list what each part reads).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace kvad {

namespace tok {
struct BpeTables;
}  // namespace tok

class Tokenizer {
 public:
  // Loads tokenizer.json and (optional, may be "") tokenizer_config.json. Errors name the file and
  // the field that is wrong.
  // Reading the file's text, a BPE vocabulary and its merges go straight into the tokenizer's
  // tables as the parser reads them (no DOM of their 150k entries each): twice as fast to load.
  static Tokenizer load(const std::string& tokenizer_json_path, const std::string& tokenizer_config_path);
  // tokenizer.json's text, the same way; `what` names it in errors.
  static Tokenizer parse(std::string_view tokenizer_json, const Json& tokenizer_config, const std::string& what);
  // A parsed document: the same result and the same errors as its text. `bpe`: a BPE vocabulary and
  // merges held outside the document (a GGUF's arrays, runtime/gguf_loader.h), consumed here.
  static Tokenizer from_json(const Json& tokenizer_json, const Json& tokenizer_config, const std::string& what,
                             tok::BpeTables* bpe = nullptr);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text -> ids. Invalid UTF-8 is first replaced with U+FFFD (WHATWG rule, as a JS/Python
  // "replace" decode would). parse_special: added tokens written in the text become their ids
  // (HF's behaviour); when false they are tokenised as plain text. add_special: prepend BOS when
  // the tokenizer adds it (tokenizer_config add_bos_token / the post_processor's template).
  // max_tokens: stop once the ids outnumber it (the result then holds max_tokens + 1 ids, a prefix
  // of the full encoding), so a server refuses a prompt far over its context without tokenizing
  // all of it.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true, bool add_special = false,
                              size_t max_tokens = SIZE_MAX) const;

  // Raw bytes a token stands for wherever it stands (the decoder applied to it alone: byte-level
  // alphabet undone, "▁" a space, <0xXX> that byte); decode() also strips the text's start.
  const std::string& token_bytes(int32_t id) const;
  // ids -> text; invalid UTF-8 in the bytes is replaced with U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // What decode() drops from the start of the text (the decoder's Strip after Fuse, Metaspace's
  // prefix space): up to decode_strip_count() copies of decode_strip_text(). Not part of token_bytes.
  const std::string& decode_strip_text() const;
  size_t decode_strip_count() const;

  int32_t vocab_size() const;  // 1 + the largest id (model vocab + added tokens)
  std::optional<int32_t> token_id(std::string_view piece) const;  // vocab or added-token string
  const std::string& piece(int32_t id) const;                      // the string as in tokenizer.json
  bool is_special(int32_t id) const;                               // an added token with special=true

  // From tokenizer_config.json (or the added tokens): may be absent.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  const std::string& bos_token() const;  // "" when none
  const std::string& eos_token() const;
  bool adds_bos() const;
  const std::string& chat_template() const;  // "" when tokenizer_config has none
  const Json& config() const;                // tokenizer_config.json as loaded ({} when none)

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of ids into text without ever emitting a split UTF-8 sequence: bytes of an
// incomplete character are held until the next token completes it (or flush() gives them up).
// The pushes add up to decode(ids), leading strip included.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false);
  std::string push(int32_t id);  // text that is now complete (possibly "")
  std::string flush();           // whatever is left, invalid bytes replaced with U+FFFD
 private:
  const Tokenizer& tok_;
  bool skip_special_;
  size_t strip_left_;  // copies of decode_strip_text() still to drop from the start
  std::string pending_;
};

}  // namespace kvad
