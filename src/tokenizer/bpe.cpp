#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/unicode_chars.h"

namespace kvad::tok {

namespace {
constexpr std::string_view kMetaspace = "\u2581";  // SentencePiece's word-start mark
}  // namespace

BpeModel::BpeModel(const Json& model, const Field& f, bool byte_level, BpeTables* read_aside) : byte_level_(byte_level) {
  require_object(model, f);
  const Json* type = find_field(model, "type");
  if (type) {
    std::string t = read_string(*type, f.at("type"));
    if (t != "BPE") f.at("type").fail("model type '{}' is not supported (only BPE and Unigram)", t);
  }
  BpeTables from_dom;
  BpeTables& t = read_aside ? *read_aside : from_dom;
  const Json* vocab = t.has_vocab ? nullptr : find_field(model, "vocab");
  const Json* merges = t.has_merges ? nullptr : find_field(model, "merges");
  if (!t.has_vocab && !vocab) f.at("vocab").fail("missing");
  if (!t.has_merges && !merges) f.at("merges").fail("missing");
  if (vocab && !vocab->is_object()) f.at("vocab").fail("expected an object of piece -> id, got {}", json_type(*vocab));
  if (merges && !merges->is_array()) f.at("merges").fail("expected an array, got {}", json_type(*merges));
  read_options(model, f);
  if (vocab) t.read_vocab(*vocab, f.at("vocab"));
  use_vocab(std::move(t.vocab));

  std::string unk = read_string_or(model, "unk_token", "", f);
  if (!unk.empty()) {
    // HF only complains about a missing unk token when it needs one, which byte-level input with a
    // complete byte alphabet never does: no unk then.
    if (const int32_t* id = piece_to_id_.find(unk)) unk_id_ = *id;
  }
  bool byte_fallback = read_bool(model, "byte_fallback", false, f);
  fallback_id_.fill(-1);
  for (int b = 0; byte_fallback && b < 256; b++)
    if (const int32_t* id = piece_to_id_.find(fmt::format("<0x{:02X}>", b))) fallback_id_[b] = *id;
  if (byte_level_) init_byte_level_symbols(byte_fallback);
  else init_char_symbols();
  if (merges) t.read_merges(*merges, f.at("merges"));
  resolve_merges(t, f.at("merges"));
  init_metaspace_split();
}

void BpeModel::read_options(const Json& model, const Field& f) {
  // Options that change the algorithm in ways none of the supported families use: refuse rather
  // than silently tokenise differently from HF.
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!read_string_or(model, key, "", f).empty()) f.at(key).fail("is not supported (no supported family uses one)");
  if (const Json* d = find_field(model, "dropout")) {
    if (!d->is_number()) f.at("dropout").fail("expected a number, got {}", json_type(*d));
    if (d->get<double>() != 0.0) f.at("dropout").fail("BPE dropout is not supported");
  }
  fuse_unk_ = read_bool(model, "fuse_unk", false, f);
  ignore_merges_ = read_bool(model, "ignore_merges", false, f);
}

void BpeModel::use_vocab(PieceTable&& vocab) {
  piece_to_id_ = std::move(vocab);
  if (!byte_level_) return;
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  bytes_to_id_.reserve(piece_to_id_.size(), 8 * piece_to_id_.size());
  for (const auto& [piece, id] : piece_to_id_)
    if (auto bytes = alphabet.decode(piece)) bytes_to_id_.insert(*bytes, id);
}

// Byte-level: each byte is its alphabet character's token. With byte_fallback a missing one is
// the <0xXX> tokens of that character's UTF-8 (what HF does with the alphabet string it sees).
void BpeModel::init_byte_level_symbols(bool byte_fallback) {
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; b++) {
    std::string piece;
    append_utf8(piece, alphabet.byte_to_cp[b]);
    if (const int32_t* id = piece_to_id_.find(piece)) {
      byte_symbols_[b] = {*id};
    } else if (byte_fallback) {
      std::vector<int32_t> ids;
      for (unsigned char c : piece)
        if (fallback_id_[c] >= 0) ids.push_back(fallback_id_[c]);
      if (ids.size() == piece.size()) byte_symbols_[b] = std::move(ids);
    }
  }
}

// SentencePiece-style: the table covers ASCII; other characters are looked up as they come.
void BpeModel::init_char_symbols() {
  for (int c = 0; c < 0x80; c++) {
    char ch = (char)c;
    if (const int32_t* id = piece_to_id_.find(std::string_view(&ch, 1))) byte_symbols_[c] = {*id};
    else if (fallback_id_[c] >= 0) byte_symbols_[c] = {fallback_id_[c]};
  }
}

void BpeModel::init_metaspace_split() {
  if (byte_level_ || ignore_merges_ || !piece_to_id_.contains(kMetaspace)) return;
  // (ignore_merges looks the whole word up in the vocabulary: cutting it would change that.)
  for (const auto& [piece, id] : piece_to_id_) {
    for (size_t pos = piece.find(kMetaspace, 1); pos != std::string::npos; pos = piece.find(kMetaspace, pos + 1)) {
      size_t prev = prev_char_start(piece, pos);
      uint32_t c = next_codepoint(piece, prev);
      if (c != 0x2581) glue_before_metaspace_.insert(c);
    }
  }
  split_at_metaspace_ = true;
}

void BpeModel::resolve_merges(const BpeTables& t, const Field& f) {
  size_t slots = 16;
  while (2 * slots < 3 * t.merge_count()) slots *= 2;  // at most 2/3 full
  merge_slots_.assign(slots, MergeSlot{kNoPair, {}});
  std::string joined;  // a + b, reused: one allocation for the whole list
  for (size_t k = 0; k < t.merge_count(); k++) {
    auto [a, b] = t.merge(k);
    joined.assign(a).append(b);
    const int32_t* ia = piece_to_id_.find(a);
    const int32_t* ib = piece_to_id_.find(b);
    const int32_t* inew = piece_to_id_.find(joined);
    if (!ia) f.at(t.merge_index(k)).fail("token '{}' is not in the vocab", a);
    if (!ib) f.at(t.merge_index(k)).fail("token '{}' is not in the vocab", b);
    if (!inew) f.at(t.merge_index(k)).fail("token '{}' is not in the vocab", joined);
    // A pair listed twice keeps its last rank, as in HF (the later map insert wins).
    const uint64_t key = pair_key(*ia, *ib);
    merge_slots_[merge_slot(key)] = MergeSlot{key, Merge{(uint32_t)k, *inew}};
  }
}

void BpeModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    // Llama 3: a pre-token that is itself a vocabulary entry is that token, merges or not.
    const PieceTable& whole = byte_level_ ? bytes_to_id_ : piece_to_id_;
    if (const int32_t* id = whole.find(word)) return out.push_back(*id);
  }
  if (!split_at_metaspace_) return encode_piece(word, out);
  // Cut before each "▁" that no merge can join to what precedes it (see split_at_metaspace_):
  // the same ids as merging the whole word, and short pieces the cache can keep.
  size_t start = 0;
  for (size_t pos = word.find(kMetaspace, 1); pos != std::string_view::npos; pos = word.find(kMetaspace, pos + 1)) {
    size_t prev = prev_char_start(word, pos);
    uint32_t c = next_codepoint(word, prev);
    if (c == 0x2581 || glue_before_metaspace_.count(c)) continue;
    encode_piece(word.substr(start, pos - start), out);
    start = pos;
  }
  encode_piece(word.substr(start), out);
}

void BpeModel::encode_piece(std::string_view word, std::vector<int32_t>& out) const {
  encode_cached(cache_, word, out, [this](std::string_view w, std::vector<int32_t>& o) { merge_word(w, o); });
}

// Calls add(ids, n) with the starting symbols of each character of `word`, or unknown() for one
// that has none.
template <typename Add, typename Unknown>
void BpeModel::seed_chars(std::string_view word, Add&& add, Unknown&& unknown) const {
  for (size_t i = 0; i < word.size();) {
    unsigned char lead = (unsigned char)word[i];
    if (lead < 0x80) {
      const auto& ids = byte_symbols_[lead];
      ids.empty() ? unknown() : add(ids.data(), ids.size());
      i++;
      continue;
    }
    size_t n = std::min(utf8_char_len(lead), word.size() - i);
    std::string_view ch = word.substr(i, n);
    i += n;
    if (const int32_t* id = piece_to_id_.find(ch)) {
      add(id, 1);
      continue;
    }
    int32_t bytes[4];
    size_t k = 0;
    for (unsigned char c : ch)
      if (fallback_id_[c] >= 0) bytes[k++] = fallback_id_[c];
    k == n ? add(bytes, k) : unknown();
  }
}

namespace {
struct Symbol {
  int32_t id;
  int32_t prev, next;  // neighbours in the word, -1 at the ends
  bool alive;
};
struct Candidate {
  uint32_t rank;
  uint32_t pos;  // index of the left symbol
  int32_t new_id;
  // std heap functions keep the largest on top: "larger" = lower rank, then further left.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};
}  // namespace

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> syms;
  thread_local std::vector<Candidate> heap;
  syms.clear();
  heap.clear();

  // One symbol per character. Characters with no token become the unk token (fused if asked) or
  // vanish, as HF does; neither happens with a complete byte-level vocabulary.
  bool pending_unk = false;
  auto add = [&](int32_t id) { syms.push_back({id, (int32_t)syms.size() - 1, (int32_t)syms.size() + 1, true}); };
  auto known = [&](const int32_t* ids, size_t n) {
    if (pending_unk) add(unk_id_), pending_unk = false;
    for (size_t k = 0; k < n; k++) add(ids[k]);
  };
  auto unknown = [&] {
    if (unk_id_ < 0) return;
    if (pending_unk && !fuse_unk_) add(unk_id_);
    pending_unk = true;
  };
  if (byte_level_) {
    for (unsigned char c : word) {
      const auto& ids = byte_symbols_[c];
      ids.empty() ? unknown() : known(ids.data(), ids.size());
    }
  } else {
    seed_chars(word, known, unknown);
  }
  if (pending_unk) add(unk_id_);
  if (syms.empty()) return;
  syms.back().next = -1;

  auto consider = [&](int32_t left) {
    int32_t right = syms[left].next;
    if (right < 0) return;
    if (const Merge* m = find_merge(syms[left].id, syms[right].id)) {
      heap.push_back({m->rank, (uint32_t)left, m->new_id});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t i = 0; i + 1 < (int32_t)syms.size(); i++) consider(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    // Skip stale candidates: the pair at this position has changed since it was queued.
    const Merge* m = find_merge(left.id, syms[left.next].id);
    if (!m || m->new_id != top.new_id) continue;
    Symbol& right = syms[left.next];
    left.id = top.new_id;
    left.next = right.next;
    right.alive = false;
    if (left.next >= 0) syms[left.next].prev = (int32_t)top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider((int32_t)top.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
  if (syms.capacity() > (1u << 16)) {  // one huge word must not pin its buffers to the thread
    std::vector<Symbol>().swap(syms);
    std::vector<Candidate>().swap(heap);
  }
}

}  // namespace kvad::tok
