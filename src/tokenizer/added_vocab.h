// Added tokens (tokenizer.json "added_tokens"): strings such as <|im_start|> or <think> that are
// found in the text before normalisation and pre-tokenisation and become their id directly.
// Matching follows HF tokenizers' AddedVocabulary: leftmost-longest over all tokens, tokens with
// normalized=false matched in the raw text, normalized=true ones in the normalised text, and the
// lstrip / rstrip / single_word flags applied to each match.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvad::tok {

class Normalizer;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// A stretch of the text: plain text (id < 0) or an added token.
struct Span {
  size_t start, end;
  int32_t id;
};

class AddedVocab {
 public:
  void build(std::vector<AddedToken> tokens, const Normalizer& normalizer);
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Splits `text` at the tokens of one kind (normalized=false when `normalized_kind` is false).
  // parse_special=false: special tokens are left in the text (HF's encode_special_tokens).
  void split(std::string_view text, bool normalized_kind, bool parse_special, std::vector<Span>& out) const;

 private:
  struct Trie {
    struct Node {
      int32_t token = -1;  // index into tokens_ of the token ending here
      std::vector<std::pair<unsigned char, int32_t>> next;
    };
    std::vector<Node> nodes{1};
    std::array<bool, 256> first{};  // bytes a token can start with: the scan skips the others
    bool empty() const { return nodes.size() == 1; }
    void insert(std::string_view s, int32_t token);
    // Index of the longest token that starts at text[pos], and its length; -1 when none.
    int32_t longest(std::string_view text, size_t pos, size_t* len) const;
  };
  std::vector<AddedToken> tokens_;
  Trie raw_, normalized_;
};

}  // namespace kvad::tok
