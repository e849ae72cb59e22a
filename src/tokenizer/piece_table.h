// A vocabulary's piece -> id map in three flat arrays: every piece's bytes in one string, an offset
// and an id per entry, and an open-addressing index of entry numbers. Qwen's 151,643 pieces as an
// unordered_map<string, int> were ~300k heap nodes and strings built one by one, and loading its
// tokenizer.json was most of a small model's start-up (docs/tokenizer.md has the figures).
// Iteration is in insertion order, so whatever walks the vocabulary is deterministic.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvad::tok {

class PieceTable {
 public:
  struct Item {
    std::string_view piece;
    int32_t id;
  };

  void reserve(size_t entries, size_t piece_bytes = 0);
  // Adds piece -> id unless the piece is there (then it keeps its id); true when added.
  bool insert(std::string_view piece, int32_t id);
  // Adds piece -> id, or gives an existing piece this id.
  void assign(std::string_view piece, int32_t id);
  // The piece's id, nullptr when absent (valid until the next insert or assign).
  const int32_t* find(std::string_view piece) const;
  bool contains(std::string_view piece) const { return find(piece) != nullptr; }
  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }

  class Iterator {
   public:
    Iterator(const PieceTable* t, size_t i) : t_(t), i_(i) {}
    Item operator*() const { return {t_->piece(i_), t_->ids_[i_]}; }
    Iterator& operator++() { return ++i_, *this; }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const PieceTable* t_;
    size_t i_;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, ids_.size()}; }

 private:
  std::string_view piece(size_t entry) const {
    return std::string_view(bytes_).substr(offsets_[entry], offsets_[entry + 1] - offsets_[entry]);
  }
  // The index slot holding `piece`, or the empty slot where it would go.
  size_t slot_of(std::string_view piece, uint32_t hash) const;
  void grow();

  std::string bytes_;                   // every piece, back to back
  std::vector<uint32_t> offsets_{0};    // entry i is bytes_[offsets_[i], offsets_[i + 1])
  std::vector<int32_t> ids_;            // entry i's id
  // Power-of-two open-addressing index, at most half full: (hash, entry + 1); entry + 1 == 0 is empty.
  struct Slot {
    uint32_t hash;
    uint32_t entry_plus_one;
  };
  std::vector<Slot> index_;
};

}  // namespace kvad::tok
