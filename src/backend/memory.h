// The engine-wide memory of a model: one kind per layer, shared by every sequence.
//   Attention  paged keys and values: fixed-size blocks from one pool; a sequence's positions are
//              found through its block table (runtime/block_manager.h hands blocks out).
//   Latent     (MLA, DeepSeek) one compressed vector per position, paged like keys: K-only pages
//              (the attention reads its values from the same rows), so it is rewound, shared and
//              copied like Attention.
//   Recurrent  (linear attention / DeltaNet) a fixed-size state per sequence that has absorbed
//              every token it has seen: it can be dropped but not rewound.
// Every kind answers what it truly stores per position, and whether a sequence can rewind.
// Recurrent states live in slots (runtime/block_manager.h hands them out): a sequence's working
// state, and snapshots of a state as it stood at the end of a block, from which a sequence that
// rewinds (or a new one with the same prefix) starts again instead of from nothing.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/huge_pages.h"
#include "kernels/attention.h"

namespace kvad {

enum class MemoryKind : uint8_t { Attention, Latent, Recurrent };

struct LayerMemorySpec {
  MemoryKind kind = MemoryKind::Attention;
  int64_t kv_heads = 0, head_dim = 0;  // Attention: K and V of kv_heads x head_dim per position
  int64_t latent_width = 0;            // Latent: one row of latent_width values per position
  int64_t state_floats = 0;            // Recurrent: the state of one sequence (f32)
};

struct MemorySpec {
  std::vector<LayerMemorySpec> layers;
  kernels::KvType kv_type = kernels::KvType::F32;  // what attention layers store per position (--kv-type)

  static MemorySpec attention(int64_t n_layers, int64_t kv_heads, int64_t head_dim);
  static MemorySpec latent(int64_t n_layers, int64_t latent_width);
  static LayerMemorySpec attention_layer(int64_t kv_heads, int64_t head_dim);
  static LayerMemorySpec recurrent_layer(int64_t state_floats);
  // Bytes one more position costs, over every layer that stores per position.
  size_t bytes_per_token() const;
  // False when any layer keeps a recurrent state (truncate lands at 0 or at a snapshot).
  bool rewindable() const;
  // Bytes of one state slot: every recurrent layer's state of one sequence (0 without any).
  size_t state_bytes() const;
  // What bytes_per_token() counts, in words: "8 attention layers x 2 KV heads x K,V x 64 x 4 B;
  // 24 recurrent layers: none" (the dashboard's and kvad bench's account of the cache).
  std::string describe_per_token() const;
};

// The storage: n_blocks blocks of block_size positions, each holding every attention and latent
// layer's rows of its positions (block-major, in huge pages where the kernel gives them); per
// recurrent layer, n_states slots of its state. Both are reserved whole up front (untouched pages
// cost no physical memory until written), so block ids, slot ids and the pointers into them never
// move.
class Memory {
 public:
  Memory(MemorySpec spec, int64_t n_blocks, int64_t block_size, int64_t n_states = 0);
  virtual ~Memory() = default;
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  const MemorySpec& spec() const { return spec_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return block_size_; }
  size_t bytes_per_block() const { return spec_.bytes_per_token() * (size_t)block_size_; }
  size_t capacity_bytes() const { return bytes_per_block() * (size_t)n_blocks_; }
  // A latent layer's pages have v == k: its values are the first columns of its rows.
  kernels::KvPages pages(int64_t layer) const;
  // Copies the first `positions` positions of block src into block dst, in every layer
  // (copy-on-write of a shared or cached block before a sequence writes into it); keys stored by
  // dimension are copied whole, the rest of dst's block being unwritten positions.
  virtual void copy_block(int32_t src, int32_t dst, int64_t positions);

  int64_t n_states() const { return n_states_; }
  // A recurrent layer's state in `slot` (state_floats of the layer's spec).
  float* state(int64_t layer, int32_t slot) const;
  // Every recurrent layer's state of slot src into slot dst (a snapshot taken or restored).
  virtual void copy_state(int32_t src, int32_t dst);
  // The state a sequence starts from: zeros.
  virtual void clear_state(int32_t slot);

 protected:
  // For a backend whose pages live elsewhere (a GPU's memory): the same shape and checks, no host
  // pages; that backend overrides the copies, and pages() / state() refuse.
  struct ElsewhereTag {};
  Memory(MemorySpec spec, int64_t n_blocks, int64_t block_size, int64_t n_states, ElsewhereTag);

 private:
  void check_shape() const;
  struct Free {
    void operator()(uint8_t* p) const;
  };
  static constexpr size_t kNone = ~size_t{0};
  MemorySpec spec_;
  int64_t n_blocks_, block_size_, n_states_;
  HugePageBuffer blocks_;  // n_blocks_ x block_bytes_, block-major (see the constructor)
  size_t block_bytes_ = 0;
  std::vector<size_t> k_off_, v_off_;  // per layer, within a block (kNone for a recurrent layer)
  std::vector<std::unique_ptr<uint8_t[], Free>> states_;  // per layer (null but for a recurrent one)
};

}  // namespace kvad
