#include "tokenizer/unigram.h"

#include <algorithm>
#include <deque>

#include "tokenizer/unicode_chars.h"

namespace kvad::tok {

namespace {
constexpr double kUnkPenalty = 10.0;  // SentencePiece's (and HF's) unk score: lowest piece minus this
}  // namespace

UnigramModel::UnigramModel(const Json& model, const Field& f) {
  require_object(model, f);
  const Json* vocab = find_field(model, "vocab");
  if (!vocab) f.at("vocab").fail("missing");
  if (!vocab->is_array()) f.at("vocab").fail("expected an array of [piece, score], got {}", json_type(*vocab));
  read_vocab(*vocab, f.at("vocab"));
  const Json* unk = find_field(model, "unk_id");
  // HF would fail on the first character outside the vocabulary; kvad refuses the file up front.
  if (!unk) f.at("unk_id").fail("missing (a Unigram model needs an unk token for characters outside its pieces)");
  unk_id_ = read_id(*unk, f.at("unk_id"));
  if ((size_t)unk_id_ >= scores_.size()) f.at("unk_id").fail("{} is not in the vocab ({} pieces)", unk_id_, scores_.size());
  unk_score_ = *std::min_element(scores_.begin(), scores_.end()) - kUnkPenalty;
  scores_[unk_id_] = unk_score_;  // the unk piece itself, when the text spells it, scores as unk
  byte_fallback_ = read_bool(model, "byte_fallback", false, f);
  fallback_id_.fill(-1);
  for (int b = 0; byte_fallback_ && b < 256; b++)
    if (const int32_t* id = piece_to_id_.find(fmt::format("<0x{:02X}>", b))) fallback_id_[b] = *id;
  build_trie();
}

void UnigramModel::read_vocab(const Json& vocab, const Field& f) {
  if (vocab.empty()) f.fail("is empty");
  if ((int64_t)vocab.size() > kMaxTokenId + 1) f.fail("has {} pieces (at most {})", vocab.size(), kMaxTokenId + 1);
  scores_.reserve(vocab.size());
  piece_to_id_.reserve(vocab.size(), 8 * vocab.size());
  for (size_t i = 0; i < vocab.size(); i++) {
    const Json& e = vocab[i];
    auto ef = [&] { return f.at(i); };  // built only for an error
    if (!e.is_array() || e.size() != 2) ef().fail("expected [piece, score]");
    const std::string& piece = string_ref(e[0], [&] { return ef().at(size_t{0}); });
    if (!e[1].is_number()) ef().at(1).fail("expected a number, got {}", json_type(e[1]));
    scores_.push_back(e[1].get<double>());
    piece_to_id_.assign(piece, (int32_t)i);  // a piece listed twice: the last id, as HF
  }
}

// Breadth first over the sorted pieces, so each node's children are appended together.
void UnigramModel::build_trie() {
  std::vector<std::pair<std::string_view, int32_t>> sorted;
  sorted.reserve(piece_to_id_.size());
  for (const auto& [piece, id] : piece_to_id_)
    if (!piece.empty()) sorted.emplace_back(piece, id);
  std::sort(sorted.begin(), sorted.end());
  struct Range {
    uint32_t node;
    size_t lo, hi, depth;  // the pieces in [lo, hi) share their first `depth` bytes
  };
  nodes_.assign(1, TrieNode{});
  labels_.assign(1, 0);
  std::deque<Range> queue{{0, 0, sorted.size(), 0}};
  while (!queue.empty()) {
    Range r = queue.front();
    queue.pop_front();
    if (r.lo < r.hi && sorted[r.lo].first.size() == r.depth) nodes_[r.node].token = sorted[r.lo++].second;
    nodes_[r.node].first_child = (uint32_t)nodes_.size();
    for (size_t lo = r.lo; lo < r.hi;) {
      unsigned char b = (unsigned char)sorted[lo].first[r.depth];
      size_t hi = lo;
      while (hi < r.hi && (unsigned char)sorted[hi].first[r.depth] == b) hi++;
      queue.push_back({(uint32_t)nodes_.size(), lo, hi, r.depth + 1});
      nodes_.emplace_back();
      labels_.push_back(b);
      nodes_[r.node].n_children++;
      lo = hi;
    }
  }
}

int32_t UnigramModel::child(int32_t node, unsigned char byte) const {
  const TrieNode& n = nodes_[node];
  auto first = labels_.begin() + n.first_child, last = first + n.n_children;
  auto it = std::lower_bound(first, last, byte);
  return it != last && *it == byte ? (int32_t)(it - labels_.begin()) : -1;
}

void UnigramModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  encode_cached(cache_, word, out, [this](std::string_view w, std::vector<int32_t>& o) { best_segmentation(w, o); });
}

namespace {
// The best path ending at a character boundary: its score and its last piece.
struct BestEnd {
  double score = 0;
  uint32_t start = 0;  // byte offset where the last piece starts
  int32_t token = -1;  // -1: not reached yet
};
}  // namespace

void UnigramModel::best_segmentation(std::string_view word, std::vector<int32_t>& out) const {
  thread_local std::vector<BestEnd> best;  // by byte offset (only character starts are used)
  best.assign(word.size() + 1, BestEnd{});
  best[0].token = unk_id_;  // reached, by the empty path
  auto offer = [&](size_t start, size_t end, int32_t token, double score) {
    double s = best[start].score + score;
    // Strictly better only: of equal paths the one whose last piece starts earliest stays.
    if (best[end].token < 0 || s > best[end].score) best[end] = {s, (uint32_t)start, token};
  };
  for (size_t start = 0; start < word.size(); start += utf8_char_len((unsigned char)word[start])) {
    size_t char_end = std::min(word.size(), start + utf8_char_len((unsigned char)word[start]));
    bool single_char_piece = false;
    int32_t node = 0;
    for (size_t i = start; i < word.size() && (node = child(node, (unsigned char)word[i])) >= 0; i++) {
      int32_t token = nodes_[node].token;
      if (token < 0) continue;
      offer(start, i + 1, token, scores_[token]);
      single_char_piece |= i + 1 == char_end;
    }
    if (!single_char_piece) offer(start, char_end, unk_id_, unk_score_);
  }
  // Back from the end, then out in order, a run of unk pieces as one.
  thread_local std::vector<std::pair<uint32_t, int32_t>> path;  // (start, token)
  path.clear();
  for (size_t end = word.size(); end > 0; end = best[end].start) path.emplace_back(best[end].start, best[end].token);
  std::reverse(path.begin(), path.end());
  for (size_t i = 0; i < path.size(); i++) {
    if (path[i].second != unk_id_) {
      out.push_back(path[i].second);
      continue;
    }
    size_t j = i;
    while (j + 1 < path.size() && path[j + 1].second == unk_id_) j++;
    size_t end = j + 1 < path.size() ? path[j + 1].first : word.size();
    emit_unknown(word.substr(path[i].first, end - path[i].first), out);
    i = j;
  }
  if (best.capacity() > (1u << 20)) std::vector<BestEnd>().swap(best);  // one huge word must not pin it
}

// A run of characters no piece covers: unk, or with byte_fallback its bytes when all have a token.
void UnigramModel::emit_unknown(std::string_view text, std::vector<int32_t>& out) const {
  if (byte_fallback_) {
    if (const int32_t* id = piece_to_id_.find(text)) return out.push_back(*id);
    bool all = std::all_of(text.begin(), text.end(), [&](char c) { return fallback_id_[(unsigned char)c] >= 0; });
    if (all) {
      for (unsigned char c : text) out.push_back(fallback_id_[c]);
      return;
    }
  }
  out.push_back(unk_id_);
}

}  // namespace kvad::tok
