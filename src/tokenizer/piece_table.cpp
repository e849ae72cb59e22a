#include "tokenizer/piece_table.h"

#include <functional>
#include <stdexcept>

namespace kvad::tok {

namespace {
uint32_t hash_of(std::string_view piece) {
  uint64_t h = std::hash<std::string_view>{}(piece);
  return (uint32_t)(h ^ (h >> 32));
}
}  // namespace

void PieceTable::reserve(size_t entries, size_t piece_bytes) {
  offsets_.reserve(entries + 1);
  ids_.reserve(entries);
  if (piece_bytes) bytes_.reserve(piece_bytes);
  size_t want = 16;
  while (want < 2 * entries) want *= 2;
  if (want > index_.size()) {
    index_.assign(want, Slot{0, 0});
    for (size_t e = 0; e < ids_.size(); e++) {
      uint32_t h = hash_of(piece(e));
      index_[slot_of(piece(e), h)] = Slot{h, (uint32_t)e + 1};
    }
  }
}

size_t PieceTable::slot_of(std::string_view p, uint32_t hash) const {
  size_t mask = index_.size() - 1;
  for (size_t s = hash & mask;; s = (s + 1) & mask) {
    const Slot& slot = index_[s];
    if (slot.entry_plus_one == 0) return s;
    if (slot.hash == hash && piece(slot.entry_plus_one - 1) == p) return s;
  }
}

// Doubling: a vocabulary read as the parser goes (no count up front) is rehashed 7 times on the
// way to 128k pieces, not 13.
void PieceTable::grow() { reserve(2 * ids_.size() + 8); }

bool PieceTable::insert(std::string_view p, int32_t id) {
  if (2 * (ids_.size() + 1) > index_.size()) grow();
  uint32_t h = hash_of(p);
  size_t s = slot_of(p, h);
  if (index_[s].entry_plus_one != 0) return false;
  if (ids_.size() >= UINT32_MAX - 1 || bytes_.size() + p.size() > UINT32_MAX)
    throw std::length_error("a vocabulary past 4 GiB of pieces");  // offsets are 32-bit
  bytes_.append(p);
  offsets_.push_back((uint32_t)bytes_.size());
  ids_.push_back(id);
  index_[s] = Slot{h, (uint32_t)ids_.size()};
  return true;
}

void PieceTable::assign(std::string_view p, int32_t id) {
  if (insert(p, id)) return;
  size_t s = slot_of(p, hash_of(p));
  ids_[index_[s].entry_plus_one - 1] = id;
}

const int32_t* PieceTable::find(std::string_view p) const {
  if (index_.empty()) return nullptr;
  const Slot& slot = index_[slot_of(p, hash_of(p))];
  return slot.entry_plus_one ? &ids_[slot.entry_plus_one - 1] : nullptr;
}

}  // namespace kvad::tok
