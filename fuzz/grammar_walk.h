// Shared by the grammar fuzz targets: runs a compiled grammar's matcher over a small synthetic
// vocabulary for a few steps (masks, accepts, EOS), with small limits so that one input stays
// fast. The matcher may refuse with kvad::Error (a limit reached); anything else is a bug.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace kvad::fuzz {

inline std::shared_ptr<const grammar::TokenTrie> small_vocab() {
  static const auto v = [] {
    std::vector<std::string> bytes;
    for (int b = 1; b < 256; b++) bytes.push_back(std::string(1, (char)b));  // every byte: partial UTF-8 too
    for (const char* t : {"{\"", "\":", "\", \"", "true", "null", "12", "ab", "\xc3\xa9", "\xe6\x97\xa5", " \n", "\"}"})
      bytes.push_back(t);
    bytes.push_back("");  // a special token: never allowed
    int32_t eos = (int32_t)bytes.size() - 1;
    return std::make_shared<const grammar::TokenTrie>(grammar::TokenTrie::build(bytes, {eos}));
  }();
  return v;
}

// Walks `steps` tokens, each chosen from the mask by the fuzzer's bytes.
inline void walk(const grammar::Constraint& c, const uint8_t* pick, size_t n, int steps) {
  grammar::MatcherLimits lim;
  lim.max_states = 4096;
  lim.max_stacks = 1 << 16;
  lim.max_cached_masks = 16;
  lim.max_steps_per_call = 1 << 18;
  lim.max_steps = 1 << 20;
  grammar::GrammarMatcher m(c.grammar, small_vocab(), lim);
  for (int i = 0; i < steps && !m.finished(); i++) {
    const std::vector<uint64_t>& bits = m.allowed();
    std::vector<int32_t> open;
    for (int32_t t = 0; t < small_vocab()->vocab_size; t++)
      if ((bits[(size_t)t >> 6] >> (t & 63)) & 1) open.push_back(t);
    if (open.empty()) break;
    int32_t t = open[(n ? pick[(size_t)i % n] : 0) % open.size()];
    if (!m.accept(t)) __builtin_trap();  // the mask allowed it
  }
}

}  // namespace kvad::fuzz
