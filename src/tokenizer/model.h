// The model part of tokenizer.json ("model": {"type": "BPE" | "Unigram", ...}): turns one
// pre-token into ids. The tokenizer holds one through this interface; bpe.h and unigram.h are the
// two kinds kvad reads.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/piece_table.h"

namespace kvad::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-token (UTF-8 bytes). Thread-safe.
  virtual void encode(std::string_view word, std::vector<int32_t>& out) const = 0;
  // The vocabulary as written in tokenizer.json, piece -> id.
  const PieceTable& vocab() const { return piece_to_id_; }

 protected:
  PieceTable piece_to_id_;
};

// Words seen before (most pre-tokens of real text repeat) -> their ids. Bounded: long words are
// not kept and the table is dropped when full.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;
  static constexpr size_t kMaxEntries = 1 << 16;

  static bool cacheable(std::string_view word) { return word.size() <= kMaxWordBytes; }
  // Appends the cached ids of `word` to `out`; false when it is not cached.
  bool append(std::string_view word, std::vector<int32_t>& out) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(word);
    if (it == map_.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(std::string_view word, std::vector<int32_t> ids) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= kMaxEntries) map_.clear();  // crude, but keeps memory bounded
    map_.emplace(std::string(word), std::move(ids));
  }

 private:
  mutable std::mutex mu_;
  mutable StringMap<std::vector<int32_t>> map_;
};

// Encodes `word` through `cache`: a cached word is copied, any other is computed by `compute`
// (appending to the vector it is given) and remembered when short enough.
template <typename Compute>
void encode_cached(const WordCache& cache, std::string_view word, std::vector<int32_t>& out, Compute&& compute) {
  bool cacheable = WordCache::cacheable(word);
  if (cacheable && cache.append(word, out)) return;
  size_t first = out.size();
  compute(word, out);
  if (cacheable) cache.put(word, std::vector<int32_t>(out.begin() + (ptrdiff_t)first, out.end()));
}

}  // namespace kvad::tok
