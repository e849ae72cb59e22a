#include "runtime/block_manager.h"

#include <algorithm>

#include "core/error.h"

namespace kvad {

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size, StatePlan states)
    : block_size_(block_size), plan_(states) {
  if (n_blocks <= 0 || n_blocks > INT32_MAX || block_size <= 0) fail("block manager: {} blocks of {}", n_blocks, block_size);
  if (states.working < 0 || states.snapshots < 0 || states.slots() > INT32_MAX || states.snapshot_every < 0 ||
      (states.snapshots > 0 && (states.working == 0 || states.snapshot_every == 0)))
    fail("block manager: state plan of {} working + {} snapshot slots every {} blocks", states.working,
         states.snapshots, states.snapshot_every);
  blocks_.resize((size_t)n_blocks);
  for (int32_t b = 0; b < (int32_t)n_blocks; b++) push_back(b);
  available_ = n_blocks;
  // Popped from the back: the lowest slots first.
  for (int64_t i = states.working - 1; i >= 0; i--) free_working_.push_back((int32_t)i);
  for (int64_t i = states.slots() - 1; i >= states.working; i--) free_snapshots_.push_back((int32_t)i);
  snapshot_of_block_.assign((size_t)n_blocks, -1);
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
  free_snapshot(b);
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
  if (k.registered) {
    push_back(b);  // keeps its contents (and snapshot) for a later hit; evicted when it is oldest
  } else {
    push_front(b);  // nothing worth keeping: reused first
    free_snapshot(b);
  }
  available_++;
}

void BlockManager::free_snapshot(int32_t b) {
  int32_t& slot = snapshot_of_block_[(size_t)b];
  if (slot < 0) return;
  free_snapshots_.push_back(slot);
  slot = -1;
}

int32_t BlockManager::take_snapshot_slot(const BlockTable& t, int64_t before) {
  if (free_snapshots_.empty())
    for (int32_t b = head_; b >= 0; b = blocks_[(size_t)b].next)  // oldest unreferenced first
      if (snapshot_of_block_[(size_t)b] >= 0) {
        free_snapshot(b);
        break;
      }
  if (free_snapshots_.empty()) thin_snapshots(t, before);
  if (free_snapshots_.empty()) return -1;  // every snapshot belongs to another sequence
  int32_t slot = free_snapshots_.back();
  free_snapshots_.pop_back();
  return slot;
}

void BlockManager::thin_snapshots(const BlockTable& t, int64_t before) {
  // Block i's snapshot is worth the gap its removal would leave (from the snapshot before it to the
  // one after, or to the new one at `before`), relative to its distance from the new one: dropping
  // the cheapest keeps the gaps growing with age, roughly geometrically (the latest positions
  // densely, the start sparsely), so a few slots still cover a rewind of any depth.
  auto has = [&](int64_t i) { return snapshot_of_block_[(size_t)t.blocks[(size_t)i]] >= 0; };
  int64_t prev = -1, cur = -1, victim = -1;
  double best = 0;
  for (int64_t next = 0; next <= before; next++) {
    if (next < before && !has(next)) continue;
    if (cur >= 0) {
      const double score = (double)(next - prev) / (double)(before - cur);
      if (victim < 0 || score < best) victim = cur, best = score;
    }
    prev = cur;
    cur = next;
  }
  if (victim >= 0) free_snapshot(t.blocks[(size_t)victim]);
}

void BlockManager::plan_snapshots(const BlockTable& t, int64_t write_from, int64_t n) {
  if (!plan_.snapshots) return;
  const int64_t bs = block_size_, every = plan_.snapshot_every;
  for (int64_t end = (write_from / bs + 1) * bs; end <= n; end += bs) {
    const int64_t i = end / bs - 1;
    if ((i + 1) % every) continue;
    int32_t b = t.blocks[(size_t)i];
    if (snapshot_of_block_[(size_t)b] < 0) snapshot_of_block_[(size_t)b] = take_snapshot_slot(t, i);
  }
}

int64_t BlockManager::match_prefix(BlockTable& t, std::span<const int32_t> tokens, int64_t limit, Memory& memory) {
  if (t.hashes.size() != t.blocks.size()) fail("block manager: match_prefix after a partial block");
  const size_t had = t.blocks.size();
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
  if (recurrent() && t.blocks.size() > had) {
    // A state exists only where a snapshot was kept: give back the matched blocks after the last one.
    while (t.blocks.size() > had && snapshot_of_block_[(size_t)t.blocks.back()] < 0) {
      drop(t.blocks.back());
      t.blocks.pop_back();
      t.hashes.pop_back();
    }
    if (t.blocks.size() > had && !state_available(t)) truncate(t, (int64_t)had * bs);
    if (t.blocks.size() > had) {
      if (t.state < 0) {
        t.state = free_working_.back();
        free_working_.pop_back();
      }
      memory.copy_state(snapshot_of_block_[(size_t)t.blocks.back()], t.state);
    }
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
  if (blocks_needed(t, write_from, n) > available_ || !state_available(t)) return false;
  if (recurrent() && t.state < 0) {
    t.state = free_working_.back();
    free_working_.pop_back();
    memory.clear_state(t.state);
  }
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
  plan_snapshots(t, write_from, n);
  return true;
}

void BlockManager::fork(const BlockTable& src, BlockTable& dst, Memory& memory) {
  if (!dst.blocks.empty() || dst.state >= 0) fail("block manager: fork into a table that holds blocks");
  if (recurrent() && src.state >= 0) {
    if (free_working_.empty()) fail("block manager: no recurrent state slot free for another choice");
    dst.state = free_working_.back();
    free_working_.pop_back();
    memory.copy_state(src.state, dst.state);
  }
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

int64_t BlockManager::rewind(BlockTable& t, int64_t held, int64_t n, Memory& memory) {
  n = std::clamp<int64_t>(n, 0, held);
  if (n == held) return held;
  if (!recurrent()) {
    truncate(t, n);
    return n;
  }
  const int64_t bs = block_size_;
  int64_t k = n / bs * bs;
  while (k > 0 && snapshot_of_block_[(size_t)t.blocks[(size_t)(k / bs - 1)]] < 0) k -= bs;
  truncate(t, k);
  if (t.state >= 0) {
    if (k > 0) memory.copy_state(snapshot_of_block_[(size_t)t.blocks[(size_t)(k / bs - 1)]], t.state);
    else memory.clear_state(t.state);
  }
  return k;
}

void BlockManager::release(BlockTable& t) {
  truncate(t, 0);
  if (t.state >= 0) free_working_.push_back(t.state);
  t.state = -1;
}

BlockStats BlockManager::stats() const {
  BlockStats s;
  s.states_used = plan_.working - (int64_t)free_working_.size();
  s.snapshots_held = plan_.snapshots - (int64_t)free_snapshots_.size();
  s.total = (int64_t)blocks_.size();
  for (const Block& k : blocks_) {
    if (k.ref > 0) s.used++;
    else if (k.registered) s.cached++;
    else s.free++;
  }
  return s;
}

}  // namespace kvad
