#include "backend/memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "core/error.h"

namespace kvad {

MemorySpec MemorySpec::attention(int64_t n_layers, int64_t kv_heads, int64_t head_dim) {
  MemorySpec s;
  s.layers.assign((size_t)n_layers, LayerMemorySpec{MemoryKind::Attention, kv_heads, head_dim, 0});
  return s;
}

LayerMemorySpec MemorySpec::attention_layer(int64_t kv_heads, int64_t head_dim) {
  return LayerMemorySpec{MemoryKind::Attention, kv_heads, head_dim, 0, 0};
}

LayerMemorySpec MemorySpec::recurrent_layer(int64_t state_floats) {
  return LayerMemorySpec{MemoryKind::Recurrent, 0, 0, 0, state_floats};
}

MemorySpec MemorySpec::latent(int64_t n_layers, int64_t latent_width) {
  MemorySpec s;
  LayerMemorySpec l;
  l.kind = MemoryKind::Latent;
  l.latent_width = latent_width;
  s.layers.assign((size_t)n_layers, l);
  return s;
}

namespace {
// The rows one position of a layer stores in each of its K and V pages (V: none for a latent layer).
int64_t rows_per_position(const LayerMemorySpec& l) { return l.kind == MemoryKind::Latent ? 1 : l.kv_heads; }
int64_t row_width(const LayerMemorySpec& l) { return l.kind == MemoryKind::Latent ? l.latent_width : l.head_dim; }
}  // namespace

size_t MemorySpec::bytes_per_token() const {
  size_t b = 0;
  for (const LayerMemorySpec& l : layers)
    if (l.kind == MemoryKind::Attention) b += (size_t)(2 * l.kv_heads * kernels::kv_row_bytes(kv_type, l.head_dim));
    else if (l.kind == MemoryKind::Latent) b += (size_t)kernels::kv_row_bytes(kv_type, l.latent_width);
  return b;
}

bool MemorySpec::rewindable() const {
  for (const LayerMemorySpec& l : layers)
    if (l.kind == MemoryKind::Recurrent) return false;
  return true;
}

size_t MemorySpec::state_bytes() const {
  size_t b = 0;
  for (const LayerMemorySpec& l : layers)
    if (l.kind == MemoryKind::Recurrent) b += (size_t)l.state_floats * sizeof(float);
  return b;
}

std::string MemorySpec::describe_per_token() const {
  // Runs of layers of one kind and shape, in order of first appearance.
  std::vector<std::pair<LayerMemorySpec, int64_t>> groups;
  for (const LayerMemorySpec& l : layers) {
    auto same = [&](const auto& g) {
      return g.first.kind == l.kind && g.first.kv_heads == l.kv_heads && g.first.head_dim == l.head_dim &&
             g.first.latent_width == l.latent_width;
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end()) groups.push_back({l, 1});
    else it->second++;
  }
  std::string out;
  for (const auto& [l, n] : groups) {
    if (!out.empty()) out += "; ";
    if (l.kind == MemoryKind::Attention)
      out += fmt::format("{} attention layers x {} KV heads x K,V x {} values ({} B)", n, l.kv_heads, l.head_dim,
                         kernels::kv_row_bytes(kv_type, l.head_dim));
    else if (l.kind == MemoryKind::Latent)
      out += fmt::format("{} latent layers x one row of {} values ({} B)", n, l.latent_width,
                         kernels::kv_row_bytes(kv_type, l.latent_width));
    else
      out += fmt::format("{} recurrent layers: none (a fixed state per sequence)", n);
  }
  return out;
}

void Memory::Free::operator()(uint8_t* p) const {
  // The size is not known here; pages were mapped with the size recorded in the header in front
  // (see map_bytes).
  size_t* base = reinterpret_cast<size_t*>(p - 64);
  ::munmap(base, base[0]);
}

namespace {
// Anonymous mapping: zero pages on first touch, so a pool sized for the whole budget costs only
// what is written. 64 bytes in front hold the mapping's length for the deleter.
uint8_t* map_bytes(size_t n) {
  size_t len = n + 64;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  static_cast<size_t*>(p)[0] = len;
  return static_cast<uint8_t*>(p) + 64;
}
}  // namespace

void Memory::check_shape() const {
  if (n_blocks_ <= 0 || block_size_ <= 0) fail("KV memory: {} blocks of {} positions is empty", n_blocks_, block_size_);
  if (!spec_.rewindable() && n_states_ <= 0) fail("KV memory: recurrent layers need state slots, none were given");
  for (const LayerMemorySpec& l : spec_.layers)
    if (l.kind == MemoryKind::Recurrent && l.state_floats <= 0) fail("KV memory: a recurrent layer with an empty state");
}

Memory::Memory(MemorySpec spec, int64_t n_blocks, int64_t block_size, int64_t n_states, ElsewhereTag)
    : spec_(std::move(spec)), n_blocks_(n_blocks), block_size_(block_size), n_states_(n_states) {
  check_shape();
}

// Block-major: block b holds every layer's K and V rows of its positions, layer after layer
// (k_off_ / v_off_), so a decode step's attention, which reads each layer's blocks in turn, finds
// a block's layers within one huge page (about five blocks of Qwen2.5-0.5B's 393 KB to a page),
// and a sequence's first block costs one 2 MB page, not one page per layer and side. Per layer,
// in 4 KB pages, every 4 KB block of a head was a page of its own: at 2,048 positions of context
// 12,288 translations a token; decode attention there 98 -> 78 us a layer, at 4,096 216 -> 151
// (docs/kv-cache.md, "Block-major, in huge pages").
Memory::Memory(MemorySpec spec, int64_t n_blocks, int64_t block_size, int64_t n_states)
    : spec_(std::move(spec)), n_blocks_(n_blocks), block_size_(block_size), n_states_(n_states) {
  check_shape();
  size_t at = 0;
  for (const LayerMemorySpec& l : spec_.layers) {
    if (l.kind == MemoryKind::Recurrent) {
      k_off_.push_back(kNone);
      v_off_.push_back(kNone);
      states_.emplace_back(map_bytes((size_t)(n_states * l.state_floats) * sizeof(float)));
      continue;
    }
    states_.emplace_back(nullptr);
    const size_t side = (size_t)(rows_per_position(l) * block_size * kernels::kv_row_bytes(spec_.kv_type, row_width(l)));
    k_off_.push_back(at);
    at += side;
    if (l.kind == MemoryKind::Latent) {
      v_off_.push_back(k_off_.back());  // K-only: the values are the rows' first columns
    } else {
      v_off_.push_back(at);
      at += side;
    }
  }
  block_bytes_ = at;
  // Untouched blocks cost nothing; the kernel gives a 2 MB page at a block's first write.
  blocks_ = HugePageBuffer(block_bytes_ * (size_t)n_blocks_, HugePageBuffer::Commit::OnTouch);
}

kernels::KvPages Memory::pages(int64_t layer) const {
  if (!blocks_.data() || (size_t)layer >= k_off_.size() || k_off_[(size_t)layer] == kNone)
    fail("KV memory: layer {} has no host pages (its pages live on a device, or it keeps a state)", layer);
  uint8_t* base = blocks_.data();
  return {base + k_off_[(size_t)layer], base + v_off_[(size_t)layer], block_size_, spec_.kv_type,
          (int64_t)block_bytes_};
}

void Memory::copy_block(int32_t src, int32_t dst, int64_t positions) {
  for (size_t l = 0; l < spec_.layers.size(); l++) {
    const LayerMemorySpec& s = spec_.layers[l];
    if (s.kind == MemoryKind::Recurrent) continue;  // nothing per position
    const kernels::KvPages kv = pages((int64_t)l);
    const int64_t heads = rows_per_position(s), row = kernels::kv_row_bytes(spec_.kv_type, row_width(s));
    for (uint8_t* side : {kv.k, kv.v}) {
      // Keys by dimension spread a position over the head's whole block (kernels/attention.h).
      const int64_t bytes = (side == kv.k && kv.keys_by_dimension() ? block_size_ : positions) * row;
      for (int64_t h = 0; h < heads; h++)
        std::memcpy(kernels::kv_block_rows(side, kv, dst, h, heads, row),
                    kernels::kv_block_rows(side, kv, src, h, heads, row), (size_t)bytes);
      if (s.kind == MemoryKind::Latent) break;  // K only
    }
  }
}

float* Memory::state(int64_t layer, int32_t slot) const {
  const LayerMemorySpec& l = spec_.layers.at((size_t)layer);
  if (l.kind != MemoryKind::Recurrent || slot < 0 || slot >= n_states_ || (size_t)layer >= states_.size())
    fail("KV memory: no state slot {} in layer {} ({} slots)", slot, layer, n_states_);
  return reinterpret_cast<float*>(states_[(size_t)layer].get()) + (size_t)slot * (size_t)l.state_floats;
}

void Memory::copy_state(int32_t src, int32_t dst) {
  for (size_t l = 0; l < spec_.layers.size(); l++)
    if (spec_.layers[l].kind == MemoryKind::Recurrent)
      std::memcpy(state((int64_t)l, dst), state((int64_t)l, src), (size_t)spec_.layers[l].state_floats * sizeof(float));
}

void Memory::clear_state(int32_t slot) {
  for (size_t l = 0; l < spec_.layers.size(); l++)
    if (spec_.layers[l].kind == MemoryKind::Recurrent)
      std::memset(state((int64_t)l, slot), 0, (size_t)spec_.layers[l].state_floats * sizeof(float));
}

}  // namespace kvad
