// BlockManager: hands out the KV pool's fixed-size blocks to sequences and shares them.
//   - Each sequence has a block table (position p lives in blocks[p / block_size]).
//   - Blocks carry reference counts: two sequences that share a prefix point at the same blocks.
//   - A full block is identified by a chained hash (its parent block's hash and its own tokens,
//     with the sequence's cache salt entering the first block), registered once its keys and
//     values are written. A later sequence whose tokens start the same way takes those blocks
//     instead of computing them: across ALL requests, not a few kept sessions.
//   - A block whose last user lets go keeps its contents and hash ("cached") and goes to the tail
//     of an LRU list; the pool takes blocks from the head when it needs room, evicting the least
//     recently used. Blocks never hashed go to the head: they are reused first.
//   - Registered blocks are immutable: a sequence about to write into a block that is shared or
//     registered (after truncating into it, or a fork's partial last block) gets a private copy
//     first (copy-on-write).
// Only the engine thread calls it.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/memory.h"

namespace kvad {

struct BlockTable {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;  // of the leading blocks that are registered or were matched
  uint64_t salt = 0;             // reuse only among sequences with the same salt
};

struct BlockStats {
  int64_t total = 0, used = 0, cached = 0, free = 0;  // used: referenced; cached: unreferenced, hash kept
};

class BlockManager {
 public:
  BlockManager(int64_t n_blocks, int64_t block_size);
  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return (int64_t)blocks_.size(); }

  // Extends a table of whole, hashed blocks (an empty one, typically) with the longest run of
  // registered blocks that continues `tokens`, covering at most `limit` tokens. Returns the
  // positions the table now covers (a multiple of the block size).
  int64_t match_prefix(BlockTable& t, std::span<const int32_t> tokens, int64_t limit);
  // Makes t cover positions [0, n) where positions from `write_from` on are about to be written:
  // appends blocks, and copies a shared or registered block among the written ones first. Returns
  // false, changing nothing, when the pool cannot supply the blocks.
  bool prepare(BlockTable& t, int64_t write_from, int64_t n, Memory& memory);
  // Blocks prepare() would need (for admission decisions).
  int64_t blocks_needed(const BlockTable& t, int64_t write_from, int64_t n) const;
  // dst (empty) shares every block of src, the partial last one too (n > 1 choices of one prompt);
  // the first write into a shared block copies it.
  void fork(const BlockTable& src, BlockTable& dst);
  // After positions [0, n) hold tokens[0, n): registers the blocks that became full.
  void register_full(BlockTable& t, std::span<const int32_t> tokens, int64_t n);
  // Keeps positions [0, n): blocks past them go back to the pool.
  void truncate(BlockTable& t, int64_t n);
  void release(BlockTable& t) { truncate(t, 0); }
  // Blocks a new allocation can take (free + cached).
  int64_t available() const { return available_; }
  BlockStats stats() const;
  // Tokens of a registered block (tests and the collision guard).
  int32_t refs(int32_t block) const { return blocks_[(size_t)block].ref; }

 private:
  struct Block {
    int32_t ref = 0;
    bool registered = false;
    uint64_t hash = 0;
    int32_t prev = -1, next = -1;  // LRU list of unreferenced blocks
    std::vector<int32_t> tokens;   // of a registered block: a hash hit must match them too
  };
  uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens) const;
  int32_t take();                 // from the head of the list, evicting a registered block
  void acquire(int32_t b);        // ref++ (out of the list when it was 0)
  void drop(int32_t b);           // ref--; at 0 into the list
  void unlink(int32_t b);
  void push_front(int32_t b);
  void push_back(int32_t b);
  bool must_copy(int32_t b) const { return blocks_[(size_t)b].ref > 1 || blocks_[(size_t)b].registered; }

  int64_t block_size_;
  std::vector<Block> blocks_;
  int32_t head_ = -1, tail_ = -1;
  int64_t available_ = 0;
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

}  // namespace kvad
