#include "tokenizer/added_vocab.h"

#include <utf8proc.h>

#include <algorithm>

#include "core/utf8.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/unicode_chars.h"

namespace kvad::tok {

namespace {

// The regex crate's Unicode \w (used by HF for single_word): letters, marks, decimal digits,
// connector punctuation, joiners. Letter numbers count as Alphabetic.
bool is_word_char(uint32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

uint32_t char_before(std::string_view text, size_t end) {
  size_t i = prev_char_start(text, end);
  return next_codepoint(text, i);
}

uint32_t char_at(std::string_view text, size_t pos) { return next_codepoint(text, pos); }

}  // namespace

void AddedVocab::Trie::insert(std::string_view s, int32_t token) {
  int32_t node = 0;
  for (unsigned char c : s) {
    auto& kids = nodes[node].next;
    auto it = std::find_if(kids.begin(), kids.end(), [&](auto& e) { return e.first == c; });
    if (it != kids.end()) {
      node = it->second;
    } else {
      int32_t child = (int32_t)nodes.size();
      nodes[node].next.push_back({c, child});  // re-index: push_back may move `nodes`
      nodes.emplace_back();
      node = child;
    }
  }
  nodes[node].token = token;  // a later token with the same text replaces the earlier one
  first[(unsigned char)s[0]] = true;
}

int32_t AddedVocab::Trie::longest(std::string_view text, size_t pos, size_t* len) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); i++) {
    const auto& kids = nodes[node].next;
    auto it = std::find_if(kids.begin(), kids.end(), [&](auto& e) { return e.first == (unsigned char)text[i]; });
    if (it == kids.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) best = nodes[node].token, *len = i + 1 - pos;
  }
  return best;
}

void AddedVocab::build(std::vector<AddedToken> tokens, const Normalizer& normalizer) {
  tokens_ = std::move(tokens);
  for (size_t i = 0; i < tokens_.size(); i++) {
    const AddedToken& t = tokens_[i];
    if (t.content.empty()) continue;  // HF ignores empty added tokens
    if (t.normalized) {
      // Matched against normalised text, so the pattern is the normalised content.
      std::string pat = normalizer.active() ? normalizer.apply(t.content) : t.content;
      if (!pat.empty()) normalized_.insert(pat, (int32_t)i);
    } else {
      raw_.insert(t.content, (int32_t)i);
    }
  }
}

void AddedVocab::split(std::string_view text, bool normalized_kind, bool parse_special, std::vector<Span>& out) const {
  const Trie& trie = normalized_kind ? normalized_ : raw_;
  if (trie.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0;  // end of what has been handed out so far
  size_t pos = 0;           // where the scan for the next match resumes
  while (pos < text.size()) {
    if (!trie.first[(unsigned char)text[pos]]) {
      pos++;
      continue;
    }
    size_t len = 0;
    int32_t ti = trie.longest(text, pos, &len);
    if (ti < 0) {
      pos++;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // like HF's match iterator, the scan goes on after this match even if it is discarded
    const AddedToken& t = tokens_[ti];
    if (t.special && !parse_special) continue;
    if (t.single_word) {
      bool word_before = start > 0 && is_word_char(char_before(text, start));
      bool word_after = stop < text.size() && is_word_char(char_at(text, stop));
      if (word_before || word_after) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t p = prev_char_start(text, s);
        if (!is_white_space(char_at(text, p))) break;
        s = p;
      }
      start = std::max(s, start_offset);  // spaces an earlier match already took stay with it
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t q = stop;
        if (!is_white_space(next_codepoint(text, q))) break;
        stop = q;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace kvad::tok
