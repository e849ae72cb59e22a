// The vocabulary as a trie of token byte strings, flattened in preorder: a mask is one linear scan
// in which a token's shared prefix with the previous tokens is matched once, and a subtree whose
// prefix the grammar refuses is skipped whole (Node::skip).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvad::grammar {

struct TokenTrie {
  struct Node {
    uint8_t byte;
    uint16_t depth;       // bytes from the root (the root is depth 0)
    int32_t skip;         // index of the first node after this one's subtree
    int32_t tok_begin, tok_end;  // the tokens spelled by exactly this path: token_ids[begin, end)
  };
  std::vector<Node> nodes;        // nodes[0] is the root
  std::vector<int32_t> token_ids;
  int32_t vocab_size = 0;
  std::vector<int32_t> eos_ids;   // allowed only when the grammar accepts
  uint16_t max_depth = 0;
  std::string blob;              // every token's bytes, token t at [offset[t], offset[t + 1])
  std::vector<uint32_t> offset;

  // bytes[id] = what token id writes; "" = never allowed under a grammar (special tokens, and
  // tokens longer than 65535 bytes). eos: the end-of-sequence ids.
  static TokenTrie build(const std::vector<std::string>& bytes, std::vector<int32_t> eos);
};

}  // namespace kvad::grammar
