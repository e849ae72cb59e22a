// The byte-level BPE model of tokenizer.json ("model": {"type": "BPE", vocab, merges, ...}).
// A pre-token's bytes start as one symbol per byte and adjacent symbols are merged by merge rank
// (lowest first, leftmost first on ties) until no listed merge applies — the result HF's BPE gives.
// Works on raw bytes: the byte-level alphabet (Ġ for space ...) is undone once when loading.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer_json.h"

namespace kvad::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" value, `f` names it in errors.
  BpeModel(const Json& model, const Field& f);

  // Appends the ids of one pre-token (raw UTF-8 bytes). Thread-safe.
  void encode(std::string_view word, std::vector<int32_t>& out) const;

  // The vocabulary as written in tokenizer.json (byte-level alphabet), piece -> id.
  const StringMap<int32_t>& vocab() const { return piece_to_id_; }

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
  const Merge* find_merge(int32_t a, int32_t b) const {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }
  void read_merges(const Json& merges, const Field& f);
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  StringMap<int32_t> piece_to_id_;
  StringMap<int32_t> bytes_to_id_;  // entries whose piece is all byte-level alphabet, by raw bytes
  std::unordered_map<uint64_t, Merge> merges_;
  // Starting symbols for each byte: its own token, or with byte_fallback the <0xXX> tokens of its
  // alphabet character; empty when the byte is not in the vocabulary.
  std::array<std::vector<int32_t>, 256> byte_symbols_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;

  // Words seen before (most pre-tokens of real text repeat): raw bytes -> ids.
  static constexpr size_t kCacheMaxWordBytes = 256;
  static constexpr size_t kCacheMaxEntries = 1 << 16;
  mutable std::mutex cache_mu_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace kvad::tok
