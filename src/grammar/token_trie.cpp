#include "grammar/token_trie.h"

#include <algorithm>
#include <numeric>

namespace kvad::grammar {

// Sorted byte strings are a trie's preorder: each string shares its longest common prefix with
// the previous one, so the path is popped back to that prefix and the rest pushed as new nodes.
TokenTrie TokenTrie::build(const std::vector<std::string>& bytes, std::vector<int32_t> eos) {
  TokenTrie t;
  t.vocab_size = (int32_t)bytes.size();
  t.eos_ids = std::move(eos);
  t.offset.push_back(0);
  for (const std::string& b : bytes) {
    if (b.size() <= UINT16_MAX) t.blob += b;
    t.offset.push_back((uint32_t)t.blob.size());
  }
  std::vector<int32_t> order;
  for (int32_t id = 0; id < (int32_t)bytes.size(); id++)
    if (!bytes[(size_t)id].empty() && bytes[(size_t)id].size() <= UINT16_MAX) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes[(size_t)a] < bytes[(size_t)b] || (bytes[(size_t)a] == bytes[(size_t)b] && a < b);
  });
  t.nodes.push_back({0, 0, 0, 0, 0});
  std::vector<int32_t> path = {0};  // node index at each depth of the current string
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes[(size_t)id];
    size_t common = 0;
    if (prev) while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) common++;
    while (path.size() > common + 1) {
      t.nodes[(size_t)path.back()].skip = (int32_t)t.nodes.size();
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); d++) {
      int32_t here = (int32_t)t.token_ids.size();
      t.nodes.push_back({(uint8_t)s[d], (uint16_t)(d + 1), 0, here, here});
      path.push_back((int32_t)t.nodes.size() - 1);
    }
    Node& end = t.nodes[(size_t)path.back()];
    if (end.tok_begin == end.tok_end) end.tok_begin = end.tok_end = (int32_t)t.token_ids.size();
    t.token_ids.push_back(id);
    end.tok_end = (int32_t)t.token_ids.size();
    t.max_depth = std::max<uint16_t>(t.max_depth, (uint16_t)s.size());
    prev = &s;
  }
  while (!path.empty()) {
    t.nodes[(size_t)path.back()].skip = (int32_t)t.nodes.size();
    path.pop_back();
  }
  return t;
}

}  // namespace kvad::grammar
