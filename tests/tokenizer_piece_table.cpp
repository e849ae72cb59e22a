// The tokenizer's flat piece -> id table (src/tokenizer/piece_table.h) against std::unordered_map
// on random vocabularies: the same answers for every lookup, present or not, through growth,
// repeated pieces (insert keeps the first id, assign takes the last, as BPE and Unigram loading
// need), and pieces that are prefixes of one another, empty, or hold zero bytes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/piece_table.h"

namespace kvad::tok {
namespace {

std::string random_piece(std::mt19937& rng) {
  // Short pieces from a small alphabet, so that repeats and shared prefixes are common.
  std::uniform_int_distribution<int> len(0, 12), byte(0, 5);
  std::string s(len(rng), '\0');
  for (char& c : s) c = "ab\0\xC4\xA0z"[byte(rng)];
  return s;
}

TEST(PieceTable, AnswersAsAnUnorderedMapOnRandomVocabularies) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    PieceTable table;
    std::unordered_map<std::string, int32_t> first, last;
    std::vector<std::string> order;  // each distinct piece, in the order first seen
    if (seed == 2) table.reserve(5000, 20000);  // one run with the index sized up front
    for (int32_t id = 0; id < 20000; id++) {
      std::string p = random_piece(rng);
      bool added = seed == 3 ? (table.assign(p, id), !last.count(p)) : table.insert(p, id);
      EXPECT_EQ(added, !first.count(p)) << "seed " << seed << " id " << id;
      if (!first.count(p)) first[p] = id, order.push_back(p);
      last[p] = id;
    }
    const auto& want = seed == 3 ? last : first;
    ASSERT_EQ(table.size(), want.size());
    for (const auto& [p, id] : want) {
      const int32_t* got = table.find(p);
      ASSERT_NE(got, nullptr) << "seed " << seed;
      EXPECT_EQ(*got, id);
    }
    for (int i = 0; i < 2000; i++) {  // lookups of pieces that may or may not be there
      std::string p = random_piece(rng) + random_piece(rng);
      EXPECT_EQ(table.contains(p), want.count(p) == 1) << "seed " << seed;
    }
    size_t i = 0;
    for (const auto& [piece, id] : table) {  // insertion order, each piece once
      ASSERT_LT(i, order.size());
      EXPECT_EQ(piece, order[i]);
      EXPECT_EQ(id, want.at(order[i]));
      i++;
    }
    EXPECT_EQ(i, order.size());
  }
}

TEST(PieceTable, AnEmptyTableFindsNothing) {
  PieceTable table;
  EXPECT_EQ(table.find(""), nullptr);
  EXPECT_EQ(table.find("a"), nullptr);
  EXPECT_TRUE(table.empty());
  EXPECT_FALSE(table.begin() != table.end());
}

}  // namespace
}  // namespace kvad::tok
