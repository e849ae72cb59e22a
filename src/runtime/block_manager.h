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
//   - Recurrent layers (backend/memory.h) keep a state per sequence instead of per position: each
//     table holds a working state slot. Such a state cannot rewind, so every `snapshot_every`-th
//     block also gets a snapshot slot that the forward fills with the state as it stood after the
//     block's last position. Rewinding (rewind) and prefix reuse (match_prefix) land on the last
//     block at or before the wanted position that has a snapshot, restore it, and report where
//     they landed; with none they land at 0 and clear the state. A snapshot lives and dies with
//     its block: kept while the block is cached, freed when the block is reused, and taken from
//     the least recently used cached block when every snapshot slot is in use, else thinned out of
//     the sequence's own (gaps growing with distance from its end).
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
  int32_t state = -1;            // the working recurrent state slot (models with recurrent layers)
};

// Recurrent state slots: `working` for sequences (each table takes one), `snapshots` kept at
// block ends, one every `snapshot_every` blocks (0: none). Memory's slots are working first.
struct StatePlan {
  int64_t working = 0, snapshots = 0, snapshot_every = 0;
  int64_t slots() const { return working + snapshots; }
};

struct BlockStats {
  int64_t total = 0, used = 0, cached = 0, free = 0;  // used: referenced; cached: unreferenced, hash kept
  int64_t states_used = 0, snapshots_held = 0;         // recurrent state slots in use
};

class BlockManager {
 public:
  BlockManager(int64_t n_blocks, int64_t block_size, StatePlan states = {});
  int64_t block_size() const { return block_size_; }
  bool recurrent() const { return plan_.working > 0; }
  const StatePlan& state_plan() const { return plan_; }
  // Per block id, its snapshot slot or -1 (what BatchSpan::snapshot_of_block points at); null
  // when no snapshots are kept.
  const int32_t* snapshot_of_block() const { return plan_.snapshots ? snapshot_of_block_.data() : nullptr; }
  // False when t would need a working state slot and none is free.
  bool state_available(const BlockTable& t) const { return !recurrent() || t.state >= 0 || !free_working_.empty(); }
  int64_t n_blocks() const { return (int64_t)blocks_.size(); }

  // Extends a table of whole, hashed blocks (an empty one, typically) with the longest run of
  // registered blocks that continues `tokens`, covering at most `limit` tokens. Returns the
  // positions the table now covers (a multiple of the block size). Recurrent: only up to the last
  // new block with a snapshot, which is restored into t's working state.
  int64_t match_prefix(BlockTable& t, std::span<const int32_t> tokens, int64_t limit, Memory& memory);
  // Makes t cover positions [0, n) where positions from `write_from` on are about to be written:
  // appends blocks, and copies a shared or registered block among the written ones first.
  // Recurrent: takes t's working state slot (cleared) if it has none, and snapshot slots for the
  // blocks this write completes that keep one. Returns false, changing nothing, when the pool
  // cannot supply the blocks or the working slot.
  bool prepare(BlockTable& t, int64_t write_from, int64_t n, Memory& memory);
  // Blocks prepare() would need (for admission decisions).
  int64_t blocks_needed(const BlockTable& t, int64_t write_from, int64_t n) const;
  // dst (empty) shares every block of src, the partial last one too (n > 1 choices of one prompt);
  // the first write into a shared block copies it. Recurrent: dst's working state is a copy of src's.
  void fork(const BlockTable& src, BlockTable& dst, Memory& memory);
  // After positions [0, n) hold tokens[0, n): registers the blocks that became full.
  void register_full(BlockTable& t, std::span<const int32_t> tokens, int64_t n);
  // Keeps positions [0, n): blocks past them go back to the pool (the working state is untouched:
  // for a recurrent model use rewind).
  void truncate(BlockTable& t, int64_t n);
  // A table holding `held` positions goes back to n <= held where its memory can: returns where it
  // landed (n, or for recurrent layers the last snapshot at or before n, or 0), state restored.
  int64_t rewind(BlockTable& t, int64_t held, int64_t n, Memory& memory);
  // Every block and the working state slot back to the pool.
  void release(BlockTable& t);
  // Blocks a new allocation can take (free + cached).
  int64_t available() const { return available_; }
  BlockStats stats() const;
  // Tokens of a registered block (tests and the collision guard).
  int32_t refs(int32_t block) const { return blocks_[(size_t)block].ref; }

 private:
  struct Block {
    int32_t ref = 0;  // (its snapshot slot: snapshot_of_block_[id])
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
  void free_snapshot(int32_t b);
  // A free slot, else the least recently used cached block's, else one of t's own blocks before
  // block `before` (thin_snapshots); -1: none.
  int32_t take_snapshot_slot(const BlockTable& t, int64_t before);
  // Frees the snapshot of t's blocks before `before` that is cheapest to lose.
  void thin_snapshots(const BlockTable& t, int64_t before);
  // Snapshot slots for the blocks of t whose end lies in (write_from, n] and that keep one.
  void plan_snapshots(const BlockTable& t, int64_t write_from, int64_t n);

  int64_t block_size_;
  std::vector<Block> blocks_;
  int32_t head_ = -1, tail_ = -1;
  int64_t available_ = 0;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  StatePlan plan_;
  std::vector<int32_t> free_working_, free_snapshots_;
  std::vector<int32_t> snapshot_of_block_;
};

}  // namespace kvad
