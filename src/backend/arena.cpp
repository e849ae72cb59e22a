#include "backend/arena.h"

#include <algorithm>
#include <new>

namespace kvad {

Arena::Chunk Arena::make_chunk(size_t floats) {
  void* p = std::aligned_alloc(64, floats * sizeof(float));  // floats is a multiple of 16: a multiple of 64 bytes
  if (!p) throw std::bad_alloc();
  return Chunk{std::unique_ptr<float[], Free>(static_cast<float*>(p)), floats};
}

float* Arena::floats(size_t n) {
  n = (n + 15) & ~size_t{15};  // whole 64-byte lines: every block starts aligned like the chunk
  // The next chunk that holds n (a chunk's unused tail is left for this forward).
  while (chunk_ < chunks_.size() && used_ + n > chunks_[chunk_].size) chunk_++, used_ = 0;
  if (chunk_ == chunks_.size()) {
    const size_t size = std::max<size_t>({n, capacity_bytes() / sizeof(float), size_t{1} << 16});
    chunks_.push_back(make_chunk(size));
    used_ = 0;
  }
  float* p = chunks_[chunk_].mem.get() + used_;
  used_ += n;
  return p;
}

size_t Arena::capacity_bytes() const {
  size_t b = 0;
  for (const Chunk& c : chunks_) b += c.size * sizeof(float);
  return b;
}

}  // namespace kvad
