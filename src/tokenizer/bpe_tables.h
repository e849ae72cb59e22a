// A BPE model's vocabulary and merges as tokenizer.json lists them, before the model resolves the
// merges to ids: read from the parser's events while the file is parsed (BpeTablesReader), so no
// DOM of 150k vocabulary members and as many merges is built and freed, or from a DOM (a GGUF's
// tokenizer, Tokenizer::from_json). Both go through the same add_* functions, with the same errors.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json.h"
#include "tokenizer/piece_table.h"
#include "tokenizer/tokenizer_json.h"

namespace kvad::tok {

struct BpeTables {
  bool has_vocab = false;   // vocab / merges were read aside (the DOM holds null there)
  bool has_merges = false;
  PieceTable vocab;         // piece -> id; a piece listed twice keeps its last id (HF's map insert)
  // Merge k joins a = merge_bytes[start, mid) and b = [mid, end), with start = ends_[2k - 1] (0 for
  // k = 0), mid = ends_[2k], end = ends_[2k + 1]; index_[k] is its place in the file's list.
  std::string merge_bytes;

  size_t merge_count() const { return index_.size(); }
  std::pair<std::string_view, std::string_view> merge(size_t k) const;
  // Its element number in "merges" (for errors: a "#version" line before it is not a merge).
  size_t merge_index(size_t k) const { return index_[k]; }

  // One vocabulary member; `vocab_field` names the "vocab" object (the error names the member).
  void add_vocab(std::string_view piece, const Json& id, const Field& vocab_field);
  // Element `index` of "merges": a pair, or a legacy "a b" string (merges.txt lines).
  void add_merge(std::string_view a, std::string_view b, size_t index);
  void add_merge_text(std::string_view text, size_t index, const Field& merges_field);
  void clear_merges() {
    merge_bytes.clear();
    ends_.clear();
    index_.clear();
  }
  // From a DOM's "vocab" object and "merges" array.
  void read_vocab(const Json& vocab, const Field& f);
  void read_merges(const Json& merges, const Field& f);

 private:
  std::vector<uint32_t> ends_;
  std::vector<uint32_t> index_;
};

// Takes tokenizer.json's model.vocab (when an object: BPE's; Unigram's is an array and stays in the
// DOM) and model.merges (an array) into `tables` as the file is parsed. Errors name the entry.
class BpeTablesReader : public JsonSideReader {
 public:
  BpeTablesReader(BpeTables& tables, const std::string& file) : t_(tables), file_(file) {}

  bool take(std::span<const std::string_view> keys, bool array) override;
  void start(bool array) override;
  void end() override;
  void key(std::string& k) override;
  void string(std::string& s) override;
  void scalar(const Json& v) override;

 private:
  Field vocab_field() const { return Field{file_, "model.vocab"}; }
  Field merges_field() const { return Field{file_, "model.merges"}; }
  // A value at depth 1 (a vocabulary member's id, a merge) or 2 (an element of a merge's pair).
  void value(const Json* scalar, std::string* text, bool array);
  void end_pair();

  enum class Table { None, Vocab, Merges } table_ = Table::None;
  BpeTables& t_;
  const std::string& file_;
  size_t depth_ = 0;        // 1: the table's own members
  std::string key_;         // the vocabulary member being read
  size_t index_ = 0;        // the merges element being read
  // A ["a", "b"] pair being read: its element count, its first two strings, and the first element
  // that is not a string (HF's shape check, an array of two, comes before the strings' check).
  size_t pair_size_ = 0;
  std::string pair_[2];
  const char* bad_element_type_ = nullptr;
  size_t bad_element_ = 0;
};

}  // namespace kvad::tok
