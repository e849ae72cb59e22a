// The block manager alone: reference counts, prefix sharing by chained hash, LRU eviction that
// keeps contents, copy-on-write, and a pool that always returns to empty.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "runtime/block_manager.h"

using namespace kvad;

namespace {

std::vector<int32_t> seq(int32_t from, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; i++) v.push_back(from + i);
  return v;
}

struct Pool {
  // bf16 keys are stored by dimension, [2][4] a block (kernels/attention.h): a copy that kept only
  // a position's first bytes would lose its second element.
  Memory mem{bf16(MemorySpec::attention(1, 1, 2)), 8, 4};
  BlockManager bm{8, 4};
  static MemorySpec bf16(MemorySpec spec) {
    spec.kv_type = kernels::KvType::BF16;
    return spec;
  }
  // Element d of position p's key.
  uint16_t& key(const BlockTable& t, int64_t p, int d) {
    const kernels::KvPages kv = mem.pages(0);
    return reinterpret_cast<uint16_t*>(kernels::kv_block_rows(kv.k, kv, t.blocks[(size_t)(p / 4)], 0, 1, 4))[d * 4 + p % 4];
  }
  // Writes position p's key as (tag, p) so copies can be checked (small integers: exact in bf16).
  void write(const BlockTable& t, int64_t p, float tag) {
    key(t, p, 0) = f32_to_bf16(tag);
    key(t, p, 1) = f32_to_bf16((float)p);
  }
  // The tag, when the whole key is there (NaN otherwise: a copy that kept part of a position).
  float tag(const BlockTable& t, int64_t p) { return bf16_to_f32(key(t, p, 1)) == (float)p ? bf16_to_f32(key(t, p, 0)) : NAN; }
};

}  // namespace

TEST(BlockManager, SharesRegisteredFullBlocksAndCountsReferences) {
  Pool p;
  std::vector<int32_t> a = seq(100, 10);
  BlockTable ta;
  ASSERT_TRUE(p.bm.prepare(ta, 0, 10, p.mem));
  EXPECT_EQ(ta.blocks.size(), 3u);  // 10 positions in blocks of 4
  p.bm.register_full(ta, a, 10);
  EXPECT_EQ(ta.hashes.size(), 2u);  // only full blocks are registered
  // Another sequence with the same first 9 tokens takes the two full blocks, not the partial one.
  std::vector<int32_t> b = a;
  b[9] = 7;
  BlockTable tb;
  EXPECT_EQ(p.bm.match_prefix(tb, b, (int64_t)b.size() - 1, p.mem), 8);
  EXPECT_EQ(tb.blocks[0], ta.blocks[0]);
  EXPECT_EQ(tb.blocks[1], ta.blocks[1]);
  EXPECT_EQ(p.bm.refs(ta.blocks[0]), 2);
  // A different first block: nothing matches, even if later blocks hold the same tokens.
  std::vector<int32_t> c = a;
  c[0] = 5;
  BlockTable tc;
  EXPECT_EQ(p.bm.match_prefix(tc, c, 9, p.mem), 0);
  // At most `limit` tokens: the last prompt token is always computed.
  BlockTable td;
  EXPECT_EQ(p.bm.match_prefix(td, seq(100, 8), 7, p.mem), 4);
  p.bm.release(td);
  // A different salt sees nothing.
  BlockTable ts;
  ts.salt = 42;
  EXPECT_EQ(p.bm.match_prefix(ts, a, 9, p.mem), 0);
  p.bm.release(ta);
  p.bm.release(tb);
  BlockStats st = p.bm.stats();
  EXPECT_EQ(st.used, 0);
  EXPECT_EQ(st.cached, 2);  // the registered blocks keep their contents
  EXPECT_EQ(st.free, 6);
  EXPECT_EQ(p.bm.available(), 8);
}

TEST(BlockManager, FreedBlocksStayReusableUntilEvictedLeastRecentlyUsedFirst) {
  Pool p;
  BlockTable t1, t2;
  std::vector<int32_t> s1 = seq(1, 8), s2 = seq(50, 8);
  ASSERT_TRUE(p.bm.prepare(t1, 0, 8, p.mem));
  p.bm.register_full(t1, s1, 8);
  ASSERT_TRUE(p.bm.prepare(t2, 0, 8, p.mem));
  p.bm.register_full(t2, s2, 8);
  p.bm.release(t1);  // s1 freed first: the older
  p.bm.release(t2);
  // Taking the 4 never-used blocks evicts nothing.
  BlockTable fill;
  ASSERT_TRUE(p.bm.prepare(fill, 0, 16, p.mem));
  BlockTable m1, m2;
  EXPECT_EQ(p.bm.match_prefix(m1, s1, 8, p.mem), 8);
  p.bm.release(m1);
  // s1 was just used again, so s2's blocks are the least recently used: one more block evicts
  // s2's last block first (the longest chain), then its first.
  BlockTable more;
  ASSERT_TRUE(p.bm.prepare(more, 0, 4, p.mem));
  EXPECT_EQ(p.bm.match_prefix(m2, s2, 8, p.mem), 4);  // its first block survived
  p.bm.release(m2);
  BlockTable m3;
  EXPECT_EQ(p.bm.match_prefix(m3, s1, 8, p.mem), 8);  // s1 untouched
  p.bm.release(m3);
  p.bm.release(more);
  p.bm.release(fill);
  EXPECT_EQ(p.bm.stats().used, 0);
  EXPECT_EQ(p.bm.available(), 8);
}

TEST(BlockManager, WritingIntoASharedOrRegisteredBlockCopiesItFirst) {
  Pool p;
  std::vector<int32_t> a = seq(10, 8);
  BlockTable ta;
  ASSERT_TRUE(p.bm.prepare(ta, 0, 8, p.mem));
  for (int64_t i = 0; i < 8; i++) p.write(ta, i, 1.0f);
  p.bm.register_full(ta, a, 8);
  // Truncate into the second (registered) block and write there: a private copy of its first two
  // positions, the registered block untouched.
  int32_t old = ta.blocks[1];
  p.bm.truncate(ta, 6);
  EXPECT_EQ(ta.hashes.size(), 1u);
  ASSERT_TRUE(p.bm.prepare(ta, 6, 8, p.mem));
  EXPECT_NE(ta.blocks[1], old);
  EXPECT_EQ(p.tag(ta, 4), 1.0f);
  EXPECT_EQ(p.tag(ta, 5), 1.0f);
  p.write(ta, 6, 2.0f);
  BlockTable tb;
  EXPECT_EQ(p.bm.match_prefix(tb, a, 8, p.mem), 8);
  EXPECT_EQ(tb.blocks[1], old);
  EXPECT_EQ(p.tag(tb, 6), 1.0f);  // the cached copy still holds what a's tokens computed
  // A fork shares every block, the partial last one too; its first write copies that one.
  BlockTable src, fork;
  ASSERT_TRUE(p.bm.prepare(src, 0, 3, p.mem));
  for (int64_t i = 0; i < 3; i++) p.write(src, i, 3.0f);
  p.bm.fork(src, fork, p.mem);
  EXPECT_EQ(fork.blocks, src.blocks);
  EXPECT_EQ(p.bm.refs(src.blocks[0]), 2);
  EXPECT_EQ(p.bm.blocks_needed(fork, 3, 4), 1);
  ASSERT_TRUE(p.bm.prepare(fork, 3, 4, p.mem));
  EXPECT_NE(fork.blocks[0], src.blocks[0]);
  EXPECT_EQ(p.tag(fork, 2), 3.0f);
  p.write(fork, 3, 4.0f);
  EXPECT_EQ(p.bm.refs(src.blocks[0]), 1);
  p.bm.release(fork);
  p.bm.release(ta);
  p.bm.release(tb);
  p.bm.release(src);
  EXPECT_EQ(p.bm.stats().used, 0);
}

TEST(BlockManager, RefusesWhenThePoolCannotSupplyAndChangesNothing) {
  Pool p;
  BlockTable big;
  EXPECT_FALSE(p.bm.prepare(big, 0, 33, p.mem));  // 9 blocks > 8
  EXPECT_TRUE(big.blocks.empty());
  EXPECT_EQ(p.bm.available(), 8);
  ASSERT_TRUE(p.bm.prepare(big, 0, 32, p.mem));
  BlockTable other;
  EXPECT_FALSE(p.bm.prepare(other, 0, 1, p.mem));
  EXPECT_THROW(p.bm.match_prefix(big, seq(0, 32), 31, p.mem), Error);  // a table with unregistered blocks
  p.bm.release(big);
  EXPECT_EQ(p.bm.available(), 8);
}

TEST(BlockManager, ABlockDifferingInItsLastTokenDoesNotMatch) {
  Pool p;
  BlockTable t;
  std::vector<int32_t> a = seq(0, 4);
  ASSERT_TRUE(p.bm.prepare(t, 0, 4, p.mem));
  p.bm.register_full(t, a, 4);
  BlockTable u;
  std::vector<int32_t> b = {0, 1, 2, 4};
  EXPECT_EQ(p.bm.match_prefix(u, b, 4, p.mem), 0);
  p.bm.release(t);
}

// Every (layer, side, block, KV head) of the engine's memory is its own bytes inside the mapping,
// for blocks smaller and larger than a huge page, with a recurrent layer's state between
// attention layers: the kernels find them through KvPages alone (block-major: backend/memory.h).
TEST(KvMemory, EveryLayersBlockIsItsOwnBytes) {
  struct Shape {
    int64_t layers, heads, dim, blocks, block_size;
  };
  for (Shape sh : {Shape{3, 2, 8, 11, 4}, Shape{2, 2, 64, 5, 2048}}) {  // 1.3 KB blocks; 4 MB ones
    MemorySpec spec = MemorySpec::attention(sh.layers, sh.heads, sh.dim);
    spec.layers.push_back(MemorySpec::recurrent_layer(16));  // a state between attention layers owns no block bytes
    spec.layers.push_back(MemorySpec::attention_layer(1, 24));
    Memory mem(spec, sh.blocks, sh.block_size, 2);
    std::vector<std::pair<const uint8_t*, const uint8_t*>> spans;
    for (int64_t l = 0; l < (int64_t)spec.layers.size(); l++) {
      const LayerMemorySpec& ls = spec.layers[(size_t)l];
      if (ls.kind == MemoryKind::Recurrent) {
        EXPECT_THROW(mem.pages(l), Error);
        continue;
      }
      const kernels::KvPages kv = mem.pages(l);
      const int64_t row = kernels::kv_row_bytes(kv.type, ls.head_dim), bytes = sh.block_size * row;
      for (const uint8_t* side : {kv.k, kv.v})
        for (int64_t b = 0; b < sh.blocks; b++)
          for (int64_t h = 0; h < ls.kv_heads; h++) {
            const uint8_t* p = kernels::kv_block_rows(side, kv, b, h, ls.kv_heads, row);
            spans.push_back({p, p + bytes});
          }
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); i++) ASSERT_LE(spans[i - 1].second, spans[i].first) << "overlap at " << i;
    // Written through at the last byte of each (the mapping holds them all) and read back.
    for (size_t i = 0; i < spans.size(); i++) const_cast<uint8_t*>(spans[i].second)[-1] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < spans.size(); i++) ASSERT_EQ(spans[i].second[-1], (uint8_t)(i * 7 + 1));
  }
}
