#include "runtime/block_manager.h"

#include <algorithm>

#include "core/error.h"

namespace kvad {

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size) : block_size_(block_size) {
  if (n_blocks <= 0 || n_blocks > INT32_MAX || block_size <= 0) fail("block manager: {} blocks of {}", n_blocks, block_size);
  blocks_.resize((size_t)n_blocks);
  for (int32_t b = 0; b < (int32_t)n_blocks; b++) push_back(b);
  available_ = n_blocks;
}

uint64_t BlockManager::chain_hash(uint64_t parent, std::span<const int32_t> tokens) const {
  // A 64-bit multiply-xorshift chain (splitmix64's finaliser per token). Collisions are guarded
  // by comparing the tokens, so the hash only has to spread well, not resist an adversary.
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
  for (int32_t t : tokens) {
    h ^= (uint64_t)(uint32_t)t + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h;
}

void BlockManager::unlink(int32_t b) {
  Block& k = blocks_[(size_t)b];
  if (k.prev >= 0) blocks_[(size_t)k.prev].next = k.next;
  else head_ = k.next;
  if (k.next >= 0) blocks_[(size_t)k.next].prev = k.prev;
  else tail_ = k.prev;
  k.prev = k.next = -1;
}

void BlockManager::push_front(int32_t b) {
  Block& k = blocks_[(size_t)b];
  k.prev = -1;
  k.next = head_;
  if (head_ >= 0) blocks_[(size_t)head_].prev = b;
  head_ = b;
  if (tail_ < 0) tail_ = b;
}

void BlockManager::push_back(int32_t b) {
  Block& k = blocks_[(size_t)b];
  k.next = -1;
  k.prev = tail_;
  if (tail_ >= 0) blocks_[(size_t)tail_].next = b;
  tail_ = b;
  if (head_ < 0) head_ = b;
}

int32_t BlockManager::take() {
  int32_t b = head_;
  if (b < 0) fail("block manager: the KV pool is exhausted");
  unlink(b);
  Block& k = blocks_[(size_t)b];
  if (k.registered) {  // eviction: the least recently used cached block
    auto it = by_hash_.find(k.hash);
    if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
    k.registered = false;
    k.tokens.clear();
  }
  k.ref = 1;
  available_--;
  return b;
}

void BlockManager::acquire(int32_t b) {
  Block& k = blocks_[(size_t)b];
  if (k.ref++ == 0) {
    unlink(b);
    available_--;
  }
}

void BlockManager::drop(int32_t b) {
  Block& k = blocks_[(size_t)b];
  if (--k.ref > 0) return;
  if (k.registered) push_back(b);  // keeps its contents for a later hit; evicted when it is oldest
  else push_front(b);              // nothing worth keeping: reused first
  available_++;
}

int64_t BlockManager::match_prefix(BlockTable& t, std::span<const int32_t> tokens, int64_t limit) {
  if (t.hashes.size() != t.blocks.size()) fail("block manager: match_prefix after a partial block");
  const int64_t bs = block_size_;
  limit = std::min<int64_t>(limit, (int64_t)tokens.size());
  uint64_t parent = t.hashes.empty() ? t.salt : t.hashes.back();
  for (int64_t i = (int64_t)t.blocks.size(); (i + 1) * bs <= limit; i++) {
    std::span<const int32_t> chunk = tokens.subspan((size_t)(i * bs), (size_t)bs);
    uint64_t h = chain_hash(parent, chunk);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    const Block& k = blocks_[(size_t)it->second];
    if (!std::equal(chunk.begin(), chunk.end(), k.tokens.begin(), k.tokens.end())) break;  // a collision
    acquire(it->second);
    t.blocks.push_back(it->second);
    t.hashes.push_back(h);
    parent = h;
  }
  return (int64_t)t.blocks.size() * bs;
}

int64_t BlockManager::blocks_needed(const BlockTable& t, int64_t write_from, int64_t n) const {
  const int64_t bs = block_size_, have = (int64_t)t.blocks.size();
  int64_t need = std::max<int64_t>(0, (n + bs - 1) / bs - have);
  for (int64_t i = write_from / bs; i < have && i * bs < n; i++) need += must_copy(t.blocks[(size_t)i]);
  return need;
}

bool BlockManager::prepare(BlockTable& t, int64_t write_from, int64_t n, Memory& memory) {
  if (blocks_needed(t, write_from, n) > available_) return false;
  const int64_t bs = block_size_, have = (int64_t)t.blocks.size();
  for (int64_t i = write_from / bs; i < have && i * bs < n; i++) {
    int32_t old = t.blocks[(size_t)i];
    if (!must_copy(old)) continue;
    int32_t fresh = take();
    int64_t valid = std::clamp<int64_t>(write_from - i * bs, 0, bs);
    if (valid > 0) memory.copy_block(old, fresh, valid);
    drop(old);
    t.blocks[(size_t)i] = fresh;
    if ((int64_t)t.hashes.size() > i) t.hashes.resize((size_t)i);  // this block and later ones are being rewritten
  }
  while ((int64_t)t.blocks.size() * bs < n) t.blocks.push_back(take());
  return true;
}

void BlockManager::fork(const BlockTable& src, BlockTable& dst) {
  if (!dst.blocks.empty()) fail("block manager: fork into a table that holds blocks");
  for (int32_t b : src.blocks) acquire(b);
  dst.blocks = src.blocks;
  dst.hashes = src.hashes;
  dst.salt = src.salt;
}

void BlockManager::register_full(BlockTable& t, std::span<const int32_t> tokens, int64_t n) {
  const int64_t bs = block_size_;
  n = std::min<int64_t>(n, (int64_t)tokens.size());
  for (int64_t i = (int64_t)t.hashes.size(); (i + 1) * bs <= n && i < (int64_t)t.blocks.size(); i++) {
    std::span<const int32_t> chunk = tokens.subspan((size_t)(i * bs), (size_t)bs);
    uint64_t h = chain_hash(i == 0 ? t.salt : t.hashes.back(), chunk);
    int32_t b = t.blocks[(size_t)i];
    Block& k = blocks_[(size_t)b];
    if (!k.registered && by_hash_.find(h) == by_hash_.end()) {  // a duplicate of a registered block stays private
      by_hash_.emplace(h, b);
      k.registered = true;
      k.hash = h;
      k.tokens.assign(chunk.begin(), chunk.end());
    }
    t.hashes.push_back(h);
  }
}

void BlockManager::truncate(BlockTable& t, int64_t n) {
  const int64_t bs = block_size_;
  size_t keep = (size_t)std::max<int64_t>(0, (n + bs - 1) / bs);
  // Release in reverse: the last block (the longest chain, least reusable) is evicted first.
  while (t.blocks.size() > keep) {
    drop(t.blocks.back());
    t.blocks.pop_back();
  }
  size_t full = (size_t)std::max<int64_t>(0, n / bs);
  if (t.hashes.size() > full) t.hashes.resize(full);
}

BlockStats BlockManager::stats() const {
  BlockStats s;
  s.total = (int64_t)blocks_.size();
  for (const Block& k : blocks_) {
    if (k.ref > 0) s.used++;
    else if (k.registered) s.cached++;
    else s.free++;
  }
  return s;
}

}  // namespace kvad
