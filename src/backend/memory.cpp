#include "backend/memory.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "core/error.h"

namespace kvad {

MemorySpec MemorySpec::attention(int64_t n_layers, int64_t kv_heads, int64_t head_dim) {
  MemorySpec s;
  s.layers.assign((size_t)n_layers, LayerMemorySpec{MemoryKind::Attention, kv_heads, head_dim, 0});
  return s;
}

size_t MemorySpec::bytes_per_token() const {
  size_t b = 0;
  for (const LayerMemorySpec& l : layers)
    if (l.kind == MemoryKind::Attention) b += (size_t)(2 * l.kv_heads * l.head_dim) * sizeof(float);
  return b;
}

bool MemorySpec::rewindable() const {
  for (const LayerMemorySpec& l : layers)
    if (l.kind == MemoryKind::Recurrent) return false;
  return true;
}

void Memory::Free::operator()(float* p) const {
  // The size is not known here; pages were mapped with the size recorded in the first float's
  // header word (see map_floats).
  size_t* base = reinterpret_cast<size_t*>(p) - 8;
  ::munmap(base, base[0]);
}

namespace {
// Anonymous mapping: zero pages on first touch, so a pool sized for the whole budget costs only
// what is written. 64 bytes in front hold the mapping's length for the deleter.
float* map_floats(size_t n) {
  size_t len = n * sizeof(float) + 64;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  static_cast<size_t*>(p)[0] = len;
  return reinterpret_cast<float*>(static_cast<char*>(p) + 64);
}
}  // namespace

Memory::Memory(MemorySpec spec, int64_t n_blocks, int64_t block_size)
    : spec_(std::move(spec)), n_blocks_(n_blocks), block_size_(block_size) {
  if (n_blocks <= 0 || block_size <= 0) fail("KV memory: {} blocks of {} positions is empty", n_blocks, block_size);
  for (const LayerMemorySpec& l : spec_.layers) {
    if (l.kind != MemoryKind::Attention) fail("KV memory: only attention layers are implemented");
    size_t n = (size_t)(n_blocks * l.kv_heads * block_size * l.head_dim);
    k_.emplace_back(map_floats(n));
    v_.emplace_back(map_floats(n));
  }
}

kernels::KvPages Memory::pages(int64_t layer) const {
  return {k_[(size_t)layer].get(), v_[(size_t)layer].get(), block_size_};
}

void Memory::copy_block(int32_t src, int32_t dst, int64_t positions) {
  for (size_t l = 0; l < spec_.layers.size(); l++) {
    const LayerMemorySpec& s = spec_.layers[l];
    size_t block = (size_t)(s.kv_heads * block_size_ * s.head_dim);
    for (float* base : {k_[l].get(), v_[l].get()})
      for (int64_t h = 0; h < s.kv_heads; h++) {
        size_t off = (size_t)(h * block_size_ * s.head_dim);
        std::memcpy(base + (size_t)dst * block + off, base + (size_t)src * block + off,
                    (size_t)(positions * s.head_dim) * sizeof(float));
      }
  }
}

}  // namespace kvad
