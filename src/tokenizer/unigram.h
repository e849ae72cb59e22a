// The Unigram model of tokenizer.json ("model": {"type": "Unigram", "vocab": [[piece, score], ...],
// "unk_id", "byte_fallback"}), SentencePiece's: a word is cut into the vocabulary pieces whose
// scores (log probabilities) add up to the most (Viterbi over every piece that matches at every
// character). A character no piece starts with is the unk token, scored 10 below the lowest piece,
// and a run of them is one unk; with byte_fallback the run becomes its <0xXX> byte tokens instead.
// Ties go to the path whose last piece starts earliest, as in HF.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/model.h"
#include "tokenizer/tokenizer_json.h"

namespace kvad::tok {

class UnigramModel : public Model {
 public:
  UnigramModel(const Json& model, const Field& f);
  void encode(std::string_view word, std::vector<int32_t>& out) const override;

 private:
  // A byte trie of the pieces; a node's children are consecutive nodes, sorted by label.
  struct TrieNode {
    int32_t token = -1;  // the piece ending here
    uint32_t first_child = 0, n_children = 0;
  };
  void read_vocab(const Json& vocab, const Field& f);
  void build_trie();
  int32_t child(int32_t node, unsigned char byte) const;
  void best_segmentation(std::string_view word, std::vector<int32_t>& out) const;
  void emit_unknown(std::string_view text, std::vector<int32_t>& out) const;

  std::vector<TrieNode> nodes_;
  std::vector<unsigned char> labels_;  // labels_[i]: the byte leading to nodes_[i]
  std::vector<double> scores_;         // by id
  int32_t unk_id_ = -1;
  double unk_score_ = 0;
  bool byte_fallback_ = false;
  std::array<int32_t, 256> fallback_id_;  // <0xXX> token of each byte, -1 when none
  WordCache cache_;
};

}  // namespace kvad::tok
