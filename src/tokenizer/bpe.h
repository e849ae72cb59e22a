// The BPE model of tokenizer.json ("model": {"type": "BPE", vocab, merges, ...}). A word starts as
// one symbol per character and adjacent symbols are merged by merge rank (lowest first, leftmost
// first on ties) until no listed merge applies — the result HF's BPE gives. Two kinds of files:
//   byte-level (GPT-2, Llama 3, Qwen: the pre-tokenizer ends in ByteLevel): a character is a byte,
//     spelled in GPT-2's alphabet (Ġ for space ...), which is undone once when loading;
//   SentencePiece-style (Llama 2, Mistral, Gemma): a character is a Unicode code point; one not in
//     the vocabulary becomes its UTF-8 bytes as <0xXX> tokens (byte_fallback) or the unk token
//     (consecutive ones fused into one with fuse_unk).
// ignore_merges: a word that is itself a vocabulary entry is that token, merges or not.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tokenizer/bpe_tables.h"
#include "tokenizer/model.h"
#include "tokenizer/tokenizer_json.h"

namespace kvad::tok {

class BpeModel : public Model {
 public:
  // `model` is tokenizer.json's "model" value, `f` names it in errors. `byte_level`: the
  // pre-tokenizer ends in ByteLevel, so pieces are in GPT-2's byte alphabet. `read_aside`: the
  // vocab and merges the parser took out of `model` (BpeTablesReader), consumed here.
  BpeModel(const Json& model, const Field& f, bool byte_level, BpeTables* read_aside = nullptr);

  void encode(std::string_view word, std::vector<int32_t>& out) const override;

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  // (a, b) -> its merge in an open-addressing table at most 2/3 full: the 280k merges of a 150k
  // vocabulary were as many unordered_map nodes, a tenth of loading the tokenizer.
  struct MergeSlot {
    uint64_t key;  // kNoPair: empty
    Merge merge;
  };
  static constexpr uint64_t kNoPair = ~uint64_t{0};  // ids are below 2^24: no pair's key
  static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
  size_t merge_slot(uint64_t key) const {
    const size_t mask = merge_slots_.size() - 1;
    size_t s = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
    while (merge_slots_[s].key != key && merge_slots_[s].key != kNoPair) s = (s + 1) & mask;
    return s;
  }
  const Merge* find_merge(int32_t a, int32_t b) const {
    if (merge_slots_.empty()) return nullptr;
    const MergeSlot& slot = merge_slots_[merge_slot(pair_key(a, b))];
    return slot.key == kNoPair ? nullptr : &slot.merge;
  }
  void read_options(const Json& model, const Field& f);
  void use_vocab(PieceTable&& vocab);
  void init_byte_level_symbols(bool byte_fallback);
  void init_char_symbols();
  void init_metaspace_split();
  void resolve_merges(const BpeTables& t, const Field& f);
  void encode_piece(std::string_view word, std::vector<int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  template <typename Add, typename Unknown>
  void seed_chars(std::string_view word, Add&& add, Unknown&& unknown) const;

  bool byte_level_;
  PieceTable bytes_to_id_;  // byte-level: entries whose piece is all alphabet, by raw bytes
  std::vector<MergeSlot> merge_slots_;
  // Starting symbols of a byte (byte-level) or of an ASCII character (SentencePiece-style): its own
  // token, or with byte_fallback its <0xXX> tokens; empty when it has no token.
  std::array<std::vector<int32_t>, 256> byte_symbols_;
  std::array<int32_t, 256> fallback_id_;  // <0xXX> token of each byte, -1 when none (or no byte_fallback)
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  // SentencePiece-style vocabularies rarely hold a piece with "▁" after another character, so no
  // merge can join a word to the "▁" that starts the next: the text may be cut there (HF runs
  // Llama 2's whole text as one word). Characters that do precede "▁" inside some piece are kept.
  bool split_at_metaspace_ = false;
  std::unordered_set<uint32_t> glue_before_metaspace_;

  WordCache cache_;
};

}  // namespace kvad::tok
