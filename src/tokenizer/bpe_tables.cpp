#include "tokenizer/bpe_tables.h"

namespace kvad::tok {

namespace {

[[noreturn]] void fail_merge_shape(const Field& merges_field, size_t index, const std::string& got) {
  merges_field.at(index).fail("expected \"a b\" or [\"a\", \"b\"], got {}", got);
}

}  // namespace

std::pair<std::string_view, std::string_view> BpeTables::merge(size_t k) const {
  const size_t start = k == 0 ? 0 : ends_[2 * k - 1], mid = ends_[2 * k], end = ends_[2 * k + 1];
  std::string_view bytes(merge_bytes);
  return {bytes.substr(start, mid - start), bytes.substr(mid, end - mid)};
}

void BpeTables::add_vocab(std::string_view piece, const Json& id, const Field& vocab_field) {
  int32_t v = valid_id_or_negative(id);
  if (v < 0) v = read_id(id, vocab_field.at(piece));  // fails, naming the member
  vocab.assign(piece, v);
}

void BpeTables::add_merge(std::string_view a, std::string_view b, size_t index) {
  merge_bytes.append(a);
  ends_.push_back((uint32_t)merge_bytes.size());
  merge_bytes.append(b);
  ends_.push_back((uint32_t)merge_bytes.size());
  index_.push_back((uint32_t)index);
}

void BpeTables::add_merge_text(std::string_view s, size_t index, const Field& merges_field) {
  if (s.substr(0, 8) == "#version") return;  // a merges.txt header that slipped in
  // Exactly two parts around one space.
  size_t sp = s.find(' ');
  if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos)
    merges_field.at(index).fail("expected two tokens separated by one space, got '{}'", s);
  add_merge(s.substr(0, sp), s.substr(sp + 1), index);
}

void BpeTables::read_vocab(const Json& v, const Field& f) {
  vocab.reserve(v.size(), 8 * v.size());
  for (auto it = v.begin(); it != v.end(); ++it) add_vocab(it.key(), it.value(), f);
}

void BpeTables::read_merges(const Json& merges, const Field& f) {
  index_.reserve(merges.size());
  ends_.reserve(2 * merges.size());
  for (size_t i = 0; i < merges.size(); i++) {
    const Json& m = merges[i];
    if (m.is_string()) {
      add_merge_text(m.get_ref<const std::string&>(), i, f);
    } else if (m.is_array() && m.size() == 2) {
      const std::string& a = string_ref(m[0], [&] { return f.at(i).at(size_t{0}); });
      const std::string& b = string_ref(m[1], [&] { return f.at(i).at(size_t{1}); });
      add_merge(a, b, i);
    } else {
      fail_merge_shape(f, i, m.is_array() ? "an array of " + std::to_string(m.size()) : json_type(m));
    }
  }
}

bool BpeTablesReader::take(std::span<const std::string_view> keys, bool array) {
  if (keys.size() != 2 || keys[0] != "model") return false;
  if (keys[1] == "vocab" && !array) {
    table_ = Table::Vocab;
    t_.vocab = PieceTable();  // a key listed twice: the last value, as the DOM keeps
    t_.has_vocab = true;
  } else if (keys[1] == "merges" && array) {
    table_ = Table::Merges;
    t_.clear_merges();  // a key listed twice: the last value, as the DOM keeps
    t_.has_merges = true;
    index_ = 0;
  } else {
    return false;
  }
  depth_ = 1;
  return true;
}

void BpeTablesReader::start(bool array) {
  if (++depth_ == 2) return value(nullptr, nullptr, array);
  if (depth_ == 3 && table_ == Table::Merges) {  // a container as an element of a pair
    Json bad = array ? Json::array() : Json::object();
    value(&bad, nullptr, array);
  }
}

void BpeTablesReader::end() {
  if (depth_ == 2 && table_ == Table::Merges) end_pair();
  if (--depth_ == 0) table_ = Table::None;
}

void BpeTablesReader::key(std::string& k) {
  if (depth_ == 1) key_.assign(k);
}

void BpeTablesReader::string(std::string& s) {
  if (depth_ <= 2) value(nullptr, &s, false);
}

void BpeTablesReader::scalar(const Json& v) {
  if (depth_ <= 2) value(&v, nullptr, false);
}

// Exactly one of: `scalar` (a number, true/false, null, or at depth 3 a container element),
// `text` (a string), neither (a container opening at depth 2, `array` says which).
void BpeTablesReader::value(const Json* scalar, std::string* text, bool array) {
  if (table_ == Table::Vocab) {
    if (scalar) return t_.add_vocab(key_, *scalar, vocab_field());
    t_.add_vocab(key_, text ? Json(*text) : array ? Json::array() : Json::object(), vocab_field());  // fails
    return;
  }
  if (depth_ == 1 || (depth_ == 2 && !scalar && !text)) {  // an element of merges
    if (text) return t_.add_merge_text(*text, index_++, merges_field());
    if (scalar) fail_merge_shape(merges_field(), index_, json_type(*scalar));
    if (!array) fail_merge_shape(merges_field(), index_, "object");
    pair_size_ = 0;  // a pair opens
    bad_element_type_ = nullptr;
    return;
  }
  // An element of a pair (depth 2 for a scalar or string, 3 for a container).
  if (pair_size_ < 2) {
    if (text) pair_[pair_size_] = *text;
    else if (!bad_element_type_) bad_element_type_ = json_type(*scalar), bad_element_ = pair_size_;
  }
  pair_size_++;
}

void BpeTablesReader::end_pair() {
  const size_t index = index_++;
  if (pair_size_ != 2) fail_merge_shape(merges_field(), index, "an array of " + std::to_string(pair_size_));
  if (bad_element_type_) merges_field().at(index).at(bad_element_).fail("expected a string, got {}", bad_element_type_);
  t_.add_merge(pair_[0], pair_[1], index);
}

}  // namespace kvad::tok
